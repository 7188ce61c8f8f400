#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# A byte-for-byte TCP forwarder between a TCP address and a unix socket (either way round), so that
# tools/bench/sync.sh can reach the loopback RGW from inside a network namespace: namespaces do not
# share 127.0.0.1, but they do share the file system a unix socket lives in.
"""
usage: tcpfwd.py --listen HOST:PORT|unix:PATH --connect HOST:PORT|unix:PATH [--time-limit S]
Every accepted connection gets its own upstream connection; bytes are copied both ways unchanged
(HTTP Host headers included, so SigV4 signatures still verify). Exits after --time-limit seconds.
"""
import argparse
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
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def nodelay(s):
    # Small HTTP heads must not wait for Nagle + delayed ACK (40 ms a request).
    if s.family == socket.AF_INET:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def serve(conn, target):
    family, addr = target
    up = socket.socket(family, socket.SOCK_STREAM)
    nodelay(conn)
    nodelay(up)
    try:
        up.connect(addr)
    except OSError:
        conn.close()
        return
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
        threading.Thread(target=serve, args=(conn, target), daemon=True).start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
