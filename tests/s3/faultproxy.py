#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# A loopback HTTP proxy between an S3 client and the test RGW that injects faults (error statuses,
# resets, truncated bodies, stalls) on a schedule, so the e2e tests can show that retries give exact
# bytes or a clear error, never wrong bytes or a hang.
"""
Rules, one per line in --control FILE (re-read whenever it changes; counts restart) or ';'-separated
in --schedule:  COUNT METHOD PATH-PREFIX ACTION      e.g.  "2 GET /pulse-test/obj 503"
  COUNT        how many matching requests get ACTION (then the rule is spent); '*' = every one
  METHOD       GET, PUT, HEAD, POST, DELETE or '*'
  PATH-PREFIX  matched against the request path (before '?'); '/' matches all
  ACTION       pass | 500 | 503 | slowdown (503 with S3's SlowDown XML) |
               reset      forward, send the response head and half the body, then TCP RST |
               drop       TCP RST at once; the request never reaches the server |
               truncate   forward, send the head (original Content-Length) and half the body, close |
               stall:S    send nothing for S seconds, then close (the server never sees it) |
               stallbody:S  forward, send the head and half the body, wait S seconds, close |
               delay:S    wait S seconds, then pass
The first unspent rule that matches wins; no match = pass.  Headers (Host included) and bodies are
forwarded byte for byte, so SigV4 signatures made for the proxy's address still verify upstream.
Each request is logged as one line "N METHOD PATH ACTION STATUS" to --log (default stderr).
The proxy listens on 127.0.0.1 only and exits by itself after --time-limit seconds or once it has
accepted --max-conns connections and they have finished.
"""
import argparse
import os
import socket
import struct
import sys
import threading
import time
import urllib.parse

CHUNK = 65536


class Rule:
    def __init__(self, text):
        parts = text.split()
        if len(parts) != 4:
            raise ValueError(f"rule needs COUNT METHOD PATH-PREFIX ACTION: {text!r}")
        count, self.method, self.prefix, action = parts
        self.count = None if count == "*" else int(count)
        name, _, arg = action.partition(":")
        if name not in ("pass", "500", "503", "slowdown", "reset", "drop", "truncate",
                        "stall", "stallbody", "delay"):
            raise ValueError(f"unknown action {action!r}")
        if name in ("stall", "stallbody", "delay"):
            self.seconds = float(arg)
            if not 0 <= self.seconds <= 600:
                raise ValueError(f"seconds out of range in {action!r}")
        self.action, self.text = name, action

    def matches(self, method, path):
        return ((self.count is None or self.count > 0)
                and self.method in ("*", method) and path.startswith(self.prefix))


class Schedule:
    def __init__(self, text, control):
        self.lock = threading.Lock()
        self.control, self.mtime = control, None
        self.rules = self._parse(text or "")

    @staticmethod
    def _parse(text):
        lines = [ln.split("#")[0].strip() for ln in text.replace(";", "\n").splitlines()]
        return [Rule(ln) for ln in lines if ln]

    def pick(self, method, path):
        with self.lock:
            if self.control:
                try:
                    st = os.stat(self.control)
                    key = (st.st_mtime_ns, st.st_size, st.st_ino)
                    if key != self.mtime:
                        self.mtime = key
                        with open(self.control) as f:
                            self.rules = self._parse(f.read())
                except FileNotFoundError:
                    pass
            for r in self.rules:
                if r.matches(method, path):
                    if r.count is not None:
                        r.count -= 1
                    return r
            return None


class Proxy:
    def __init__(self, args):
        self.args = args
        u = urllib.parse.urlsplit(args.upstream if "//" in args.upstream
                                  else "http://" + args.upstream)
        self.up = (u.hostname, u.port or 80)
        if self.up[0] not in ("127.0.0.1", "localhost", "::1"):
            raise SystemExit("faultproxy: upstream must be on loopback")
        self.schedule = Schedule(args.schedule, args.control)
        self.log_lock = threading.Lock()
        self.log = open(args.log, "a", buffering=1) if args.log else sys.stderr
        self.n = 0
        self.deadline = time.monotonic() + args.time_limit

    def note(self, *fields):
        with self.log_lock:
            print(*fields, file=self.log, flush=True)

    # ---- small HTTP reading helpers (both directions) ----
    @staticmethod
    def read_head(f):
        lines = []
        total = 0
        while True:
            line = f.readline(65537)
            if not line:
                if lines:
                    raise ConnectionError("connection closed inside a header")
                return None
            total += len(line)
            if total > 1 << 20:
                raise ConnectionError("header too large")
            lines.append(line)
            if line in (b"\r\n", b"\n"):
                if len(lines) == 1:      # stray CRLF between requests
                    lines = []
                    continue
                return b"".join(lines)

    @staticmethod
    def headers_of(head):
        out = {}
        for line in head.split(b"\r\n")[1:]:
            if b":" in line:
                k, v = line.split(b":", 1)
                out[k.strip().lower().decode("latin-1")] = v.strip().decode("latin-1")
        return out

    @staticmethod
    def copy_exact(src, dst, n):
        while n > 0:
            b = src.read(min(CHUNK, n))
            if not b:
                raise ConnectionError("peer closed inside a body")
            if dst is not None:
                dst.sendall(b)
            n -= len(b)

    @staticmethod
    def read_chunked_raw(src):
        """Returns a chunked body with its framing, byte for byte (only small bodies use chunks)."""
        out = []
        size_total = 0
        while True:
            line = src.readline(1024)
            if not line:
                raise ConnectionError("peer closed inside a chunked body")
            out.append(line)
            size = int(line.split(b";")[0].strip() or b"0", 16)
            size_total += size
            if size_total > 1 << 30:
                raise ConnectionError("chunked body too large")
            if size == 0:
                while True:
                    t = src.readline(65537)
                    if not t:
                        raise ConnectionError("peer closed inside chunk trailers")
                    out.append(t)
                    if t in (b"\r\n", b"\n"):
                        return b"".join(out)
            data = src.read(size + 2)
            if len(data) != size + 2:
                raise ConnectionError("peer closed inside a chunk")
            out.append(data)

    def forward_body(self, hdrs, src, dst):
        if "chunked" in hdrs.get("transfer-encoding", "").lower():
            raw = self.read_chunked_raw(src)
            if dst is not None:
                dst.sendall(raw)
        else:
            self.copy_exact(src, dst, int(hdrs.get("content-length", "0") or 0))

    @staticmethod
    def rst(sock):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        sock.close()

    @staticmethod
    def lingering_close(sock, rfile):
        """Close without an RST even if the client is still sending a body we did not read."""
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(2)
            end = time.monotonic() + 2
            while time.monotonic() < end and rfile.read1(CHUNK):
                pass
        except OSError:
            pass
        sock.close()

    def sleep(self, seconds):
        time.sleep(max(0.0, min(seconds, self.deadline - time.monotonic())))

    def error_response(self, status):
        if status == "slowdown":
            code, reason = 503, "Slow Down"
            xml = "<Error><Code>SlowDown</Code><Message>Please reduce your request rate." \
                  "</Message></Error>"
        elif status == "500":
            code, reason = 500, "Internal Server Error"
            xml = "<Error><Code>InternalError</Code><Message>injected</Message></Error>"
        else:
            code, reason = 503, "Service Unavailable"
            xml = "<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>"
        body = ('<?xml version="1.0" encoding="UTF-8"?>' + xml).encode()
        return (f"HTTP/1.1 {code} {reason}\r\nContent-Type: application/xml\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body, code

    # ---- one client connection ----
    def serve(self, client):
        up = upf = None
        cf = client.makefile("rb")
        try:
            client.settimeout(self.args.idle_timeout)
            while time.monotonic() < self.deadline:
                head = self.read_head(cf)
                if head is None:
                    return
                req_line = head.split(b"\r\n", 1)[0].decode("latin-1")
                try:
                    method, target, _ = req_line.split(" ", 2)
                except ValueError:
                    raise ConnectionError(f"bad request line {req_line!r}")
                path = target.split("?", 1)[0]
                hdrs = self.headers_of(head)
                with self.log_lock:
                    self.n += 1
                    n = self.n
                rule = self.schedule.pick(method, path)
                action = rule.action if rule else "pass"
                label = rule.text if rule else "pass"

                if action == "drop":
                    self.note(n, method, target, label, "-")
                    self.rst(client)
                    return
                if action == "stall":
                    self.note(n, method, target, label, "-")
                    self.sleep(rule.seconds)
                    self.lingering_close(client, cf)
                    return
                if action in ("500", "503", "slowdown"):
                    if "100-continue" not in hdrs.get("expect", "").lower():
                        self.forward_body(hdrs, cf, None)
                    resp, code = self.error_response(action)
                    client.sendall(resp)
                    self.note(n, method, target, label, code)
                    self.lingering_close(client, cf)
                    return
                if action == "delay":
                    self.sleep(rule.seconds)

                if up is None:
                    up = socket.create_connection(self.up, timeout=self.args.idle_timeout)
                    upf = up.makefile("rb")
                up.sendall(head)
                expect = "100-continue" in hdrs.get("expect", "").lower()
                body_sent = not expect
                if not expect:
                    self.forward_body(hdrs, cf, up)
                while True:
                    rhead = self.read_head(upf)
                    if rhead is None:
                        raise ConnectionError("upstream closed before answering")
                    status = int(rhead.split(b" ", 2)[1])
                    if 100 <= status < 200:
                        client.sendall(rhead)
                        if status == 100 and not body_sent:
                            self.forward_body(hdrs, cf, up)
                            body_sent = True
                        continue
                    break
                rhdrs = self.headers_of(rhead)
                no_body = method == "HEAD" or status in (204, 304)
                chunked = "chunked" in rhdrs.get("transfer-encoding", "").lower()
                length = 0 if no_body or chunked else int(rhdrs.get("content-length", "0") or 0)
                self.note(n, method, target, label, status)

                if action in ("reset", "truncate", "stallbody"):
                    if chunked:
                        raw = self.read_chunked_raw(upf)
                        client.sendall(rhead)
                        client.sendall(raw[:len(raw) // 2])
                    elif length == 0 and action == "reset":
                        pass            # nothing to cut: the reset comes before the head
                    else:
                        client.sendall(rhead)
                        self.copy_exact(upf, client, length // 2)
                    if action == "reset":
                        self.rst(client)
                    else:
                        if action == "stallbody":
                            self.sleep(rule.seconds)
                        client.close()
                    return

                client.sendall(rhead)
                if not no_body:
                    if chunked:
                        client.sendall(self.read_chunked_raw(upf))
                    elif "content-length" in rhdrs:
                        self.copy_exact(upf, client, length)
                    else:               # body runs to the close
                        while True:
                            b = upf.read1(CHUNK)
                            if not b:
                                break
                            client.sendall(b)
                        return
                if not body_sent:
                    return              # the server answered without taking the body
                if "close" in rhdrs.get("connection", "").lower() or \
                        "close" in hdrs.get("connection", "").lower():
                    return
        except (OSError, ConnectionError, ValueError) as e:
            self.note("-", "connection ended:", type(e).__name__, e)
        finally:
            for s in (up, client):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass

    def run(self):
        ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.args.port))
        ls.listen(64)
        port = ls.getsockname()[1]
        if self.args.port_file:
            tmp = self.args.port_file + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{port}\n")
            os.rename(tmp, self.args.port_file)
        else:
            print(port, flush=True)
        threads = []
        accepted = 0
        while accepted < self.args.max_conns:
            left = self.deadline - time.monotonic()
            if left <= 0:
                break
            ls.settimeout(min(left, 1.0))
            try:
                c, _ = ls.accept()
            except socket.timeout:
                continue
            accepted += 1
            t = threading.Thread(target=self.serve, args=(c,), daemon=True)
            t.start()
            threads.append(t)
        ls.close()
        for t in threads:
            t.join(max(0.0, self.deadline - time.monotonic()))
        self.note("-", f"exiting after {accepted} connections")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--upstream", default=os.environ.get("AWS_ENDPOINT_URL"),
                    help="http://127.0.0.1:PORT of the real server (default $AWS_ENDPOINT_URL)")
    ap.add_argument("--port", type=int, default=0, help="listen port (default: any free one)")
    ap.add_argument("--port-file", help="write the listen port here (else print it)")
    ap.add_argument("--schedule", help="rules separated by ';'")
    ap.add_argument("--control", help="rules file, re-read when it changes")
    ap.add_argument("--log", help="append one line per request here (default stderr)")
    ap.add_argument("--time-limit", type=float, default=120, help="exit after this many seconds")
    ap.add_argument("--max-conns", type=int, default=1000, help="exit after this many connections")
    ap.add_argument("--idle-timeout", type=float, default=30, help="socket timeout in seconds")
    a = ap.parse_args()
    if not a.upstream:
        ap.error("--upstream or AWS_ENDPOINT_URL is required")
    if not 0 < a.time_limit <= 3600:
        ap.error("--time-limit must be in (0, 3600]")
    Proxy(a).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
