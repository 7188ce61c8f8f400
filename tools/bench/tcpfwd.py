#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# A byte-for-byte TCP forwarder (TCP or unix socket on either side) that can hold every byte a fixed
# time in each direction: tools/bench/wan.sh's round trip, since this kernel has no netem.
"""
usage: tcpfwd.py --listen HOST:PORT|unix:PATH --connect HOST:PORT|unix:PATH [--delay-ms D]
                 [--time-limit S]
Every accepted connection gets its own upstream connection; bytes are copied both ways unchanged
(HTTP Host headers included, so SigV4 signatures still verify). With --delay-ms each byte leaves
D ms after it arrived, in both directions, so a request and its answer take 2D ms more: a round
trip of 2D over a link whose rate the caller shapes (tc tbf). Exits after --time-limit seconds.
"""
import argparse
import collections
import os
import socket
import sys
import threading
import time


def address(text):
    if text.startswith("unix:"):
        return socket.AF_UNIX, text[5:]
    host, _, port = text.rpartition(":")
    return socket.AF_INET, (host, int(port))


def shut(*socks):
    """Both ways of each socket closed: a side that ended ends its peer too."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def pump(src, dst):
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        shut(src, dst)


def delayed_pump(src, dst, delay):
    """As pump, each block sent DELAY seconds after it was received (a reader and a sender thread,
    so the reader keeps draining while blocks wait: the delay adds latency, not a rate cap)."""
    q = collections.deque()
    cv = threading.Condition()

    def sender():
        try:
            while True:
                with cv:
                    while not q:
                        cv.wait()
                    due, data = q.popleft()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                if data is None:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            shut(src, dst)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    try:
        while True:
            data = src.recv(1 << 18)
            with cv:
                q.append((time.monotonic() + delay, data or None))
                cv.notify()
            if not data:
                break
    except OSError:
        with cv:
            q.append((time.monotonic() + delay, None))
            cv.notify()
    t.join()


def nodelay(s):
    # Small HTTP heads must not wait for Nagle + delayed ACK (40 ms a request).
    if s.family == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def serve(conn, target, delay):
    family, addr = target
    up = socket.socket(family, socket.SOCK_STREAM)
    nodelay(conn)
    nodelay(up)
    try:
        up.connect(addr)
    except OSError:
        conn.close()
        return
    if delay > 0:
        threads = [threading.Thread(target=delayed_pump, args=(conn, up, delay), daemon=True),
                   threading.Thread(target=delayed_pump, args=(up, conn, delay), daemon=True)]
    else:
        threads = [threading.Thread(target=pump, args=(conn, up), daemon=True),
                   threading.Thread(target=pump, args=(up, conn), daemon=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conn.close()
    up.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True)
    ap.add_argument("--connect", required=True)
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--time-limit", type=float, default=3600)
    a = ap.parse_args()
    family, addr = address(a.listen)
    ls = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_UNIX:
        if os.path.exists(addr):
            os.unlink(addr)
    else:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(addr)
    ls.listen(64)
    target = address(a.connect)
    deadline = time.monotonic() + a.time_limit
    ls.settimeout(1.0)
    print("listening", flush=True)
    while time.monotonic() < deadline:
        try:
            conn, _ = ls.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(conn, target, a.delay_ms / 1e3), daemon=True).start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
