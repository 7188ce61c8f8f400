# SPDX-License-Identifier: Apache-2.0
# A fake S3 server on 127.0.0.1 whose answers are broken or hostile in one chosen way (answers RGW
# would never give); every request is logged, one line each.
"""Usage: fakes3.py --mode MODE --port-file F [--log F] [--time-limit S] [--headers-log F]
                  [--tls-cert PEM --tls-key PEM]

--headers-log F: each request's method, path and headers, one JSON object a line.
--tls-cert/--tls-key: serve HTTPS; each connection is logged to --log as "TLS ok" or
                      "TLS failed REASON" (a client that refuses the certificate sends no request).

Modes (GET on a bucket = ListObjectsV2, keys under the prefix asked for; anything else: 404):
  ok          two honest pages (keys PREFIXk000..k003), then the end
  alternate   empty truncated pages whose tokens alternate A, B, A, ... (a loop)
  endless     empty truncated pages, a new token each time (never ends)
  endless-keys  full truncated pages of new, increasing keys, a new token each time
  random      200 with random bytes
  html        200 with an HTML page
  error200    200 with an S3 <Error> document
  cut         200 with a listing cut inside <Contents> (Content-Length matches the cut body)
  notoken     IsTruncated true without NextContinuationToken
  backwards   page 1 lists k002, k003 (truncated), page 2 lists k001
  repeat      page 2 is page 1 again, under a new token
  trickle     an honest page of ~400 KB sent at 2 KB/s
  503         always HTTP 503 SlowDown
  norange     a GET or HEAD of any key answers 200 with the same 1000-byte object, Range or not
              (a server that ignores Range); lists as in "ok"
  wrongrange  a ranged GET of any key answers 206 with as many bytes as asked, but from byte 0 of
              that object (Content-Range says so); lists as in "ok"
"""
import argparse
import json
import os
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit


def entry(key, size=1):
    return ("<Contents><Key>%s</Key><LastModified>2026-12-01T20:33:00.000Z</LastModified>"
            "<ETag>&quot;0123abcd&quot;</ETag><Size>%d</Size></Contents>" % (key, size))


def page(keys, truncated, token=None):
    body = ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>'
            "<Prefix></Prefix><MaxKeys>1000</MaxKeys><IsTruncated>%s</IsTruncated>"
            % ("true" if truncated else "false"))
    if token is not None:
        body += "<NextContinuationToken>%s</NextContinuationToken>" % token
    body += "".join(entry(k) for k in keys)
    return (body + "</ListBucketResult>").encode()


# The one object of mode "norange": bytes 0, 1, ..., 255, 0, 1, ... (1000 of them).
OBJECT = bytes(i % 256 for i in range(1000))


class State:
    lock = threading.Lock()
    pages = 0


def answer(mode, query):
    """(status, body, seconds per 200 bytes or 0) for one ListObjectsV2 request."""
    token = query.get("continuation-token", [None])[0]
    prefix = query.get("prefix", [""])[0]

    def listing(keys, truncated, token=None):
        return page([prefix + k for k in keys], truncated, token)

    with State.lock:
        State.pages += 1
        n = State.pages
    if mode in ("ok", "norange", "wrongrange"):
        if token is None:
            return 200, listing(["k000", "k001"], True, "page2"), 0
        return 200, listing(["k002", "k003"], False), 0
    if mode == "alternate":
        return 200, listing([], True, "B" if token == "A" else "A"), 0
    if mode == "endless":
        return 200, listing([], True, "t%d" % n), 0
    if mode == "endless-keys":
        return 200, listing(["k%09d-%03d" % (n, i) for i in range(1000)], True, "t%d" % n), 0
    if mode == "random":
        # Never '<' first: random bytes that happened to open a tag would be refused as cut XML,
        # not as "not XML", and the test checks the wording.
        return 200, bytes([0x80 | os.urandom(1)[0]]) + os.urandom(4095), 0
    if mode == "html":
        return 200, b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>portal</body></html>\n", 0
    if mode == "error200":
        return 200, (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
                     b"<Message>We encountered an internal error.</Message></Error>"), 0
    if mode == "cut":
        body = listing(["k000", "k001", "k002"], False)
        return 200, body[:body.index(b"k002</Key>") + 2], 0
    if mode == "notoken":
        return 200, listing(["k000"], True), 0
    if mode == "backwards":
        if token is None:
            return 200, listing(["k002", "k003"], True, "page2"), 0
        return 200, listing(["k001"], False), 0
    if mode == "repeat":
        return 200, listing(["k000", "k001"], True, "t%d" % n), 0
    if mode == "trickle":
        return 200, listing(["k%06d" % i for i in range(2500)], False), 0.1
    if mode == "503":
        return 503, b"<Error><Code>SlowDown</Code></Error>", 0
    raise ValueError(mode)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", default=os.devnull)
    ap.add_argument("--time-limit", type=float, default=300)
    ap.add_argument("--headers-log", default=None)
    ap.add_argument("--tls-cert", default=None)
    ap.add_argument("--tls-key", default=None)
    args = ap.parse_args()
    answer(args.mode, {})  # an unknown mode fails here, at start
    State.pages = 0
    log = open(args.log, "a", buffering=1)
    hlog = open(args.headers_log, "a", buffering=1) if args.headers_log else None
    log_lock = threading.Lock()

    def record(handler):
        log.write("%s %s\n" % (handler.command, handler.path))
        if hlog:
            with log_lock:
                hlog.write(json.dumps({"method": handler.command, "path": handler.path,
                                       "headers": dict(handler.headers.items())}) + "\n")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):
            pass

        def handle(self):
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (or was killed): nothing to answer

        def do_GET(self):
            u = urlsplit(self.path)
            q = parse_qs(u.query)
            record(self)
            if "list-type" not in q:
                if args.mode == "norange":
                    return self.send(200, OBJECT)
                if args.mode == "wrongrange":
                    first, _, last = self.headers.get("Range", "bytes=0-").partition("=")[2].partition("-")
                    n = min(len(OBJECT), int(last) + 1 if last else len(OBJECT)) - int(first)
                    n = max(n, 1)
                    return self.send(206, OBJECT[:n],
                                     headers={"Content-Range": "bytes 0-%d/%d" % (n - 1, len(OBJECT))})
                return self.send(404, b"<Error><Code>NoSuchKey</Code></Error>")
            status, body, pace = answer(args.mode, q)
            self.send(status, body, pace)

        def do_HEAD(self):
            record(self)
            if args.mode == "norange":
                return self.send(200, OBJECT, head=True)
            self.send(404, b"")

        def send(self, status, body, pace=0, head=False, headers=None):
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if head:
                return
            try:
                if not pace:
                    self.wfile.write(body)
                    return
                for i in range(0, len(body), 200):  # 200 bytes each `pace` seconds
                    self.wfile.write(body[i:i + 200])
                    self.wfile.flush()
                    time.sleep(pace)
            except (BrokenPipeError, ConnectionResetError):
                pass

    class Server(ThreadingHTTPServer):
        tls = None

        def finish_request(self, request, client_address):
            if self.tls:
                # The handshake runs here, in the connection's thread: one that fails is
                # logged (a client that rejects the certificate never sends a request).
                try:
                    request = self.tls.wrap_socket(request, server_side=True)
                except (ssl.SSLError, OSError) as e:
                    log.write("TLS failed %s\n" % getattr(e, "reason", e))
                    return
                log.write("TLS ok\n")
            super().finish_request(request, client_address)

    srv = Server(("127.0.0.1", 0), Handler)
    if args.tls_cert:
        srv.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        srv.tls.load_cert_chain(args.tls_cert, args.tls_key)
    srv.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.replace(tmp, args.port_file)
    # Never outlive a test that died without stopping it.
    threading.Timer(args.time_limit, lambda: os._exit(0)).start()
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
