#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Checks that faultproxy.py injects each fault it claims (seen from a plain client) and passes signed
# requests through untouched, so the store e2e tests really exercise what they say they do.
import atexit
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

here = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, here)
from s3req import S3  # noqa: E402
from rgwenv import load_rgw_env  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures += 1


def attempt(s3, *args, **kw):
    """One request; returns (status, body) or (exception class name, None)."""
    try:
        st, _, data = s3.request(*args, **kw)
        return st, data
    except (OSError, http.client.HTTPException) as e:
        return type(e).__name__, None


def main():
    load_rgw_env()
    bucket = os.environ["PULSE_TEST_BUCKET"]
    key = f"/{bucket}/proxycheck-{uuid.uuid4().hex[:8]}"
    body = os.urandom(300_000)
    direct = S3.from_env()
    st, _, _ = direct.request("PUT", key, body=body)
    check(st == 200, f"direct PUT -> 200 (got {st})")

    tmp = tempfile.mkdtemp(prefix="pulse-proxy-")
    atexit.register(shutil.rmtree, tmp, True)
    control = os.path.join(tmp, "rules")
    portfile = os.path.join(tmp, "port")
    log = os.path.join(tmp, "log")
    open(control, "w").close()
    proxy = subprocess.Popen([sys.executable, os.path.join(here, "faultproxy.py"),
                              "--control", control, "--port-file", portfile, "--log", log,
                              "--time-limit", "60"])
    try:
        for _ in range(600):        # python's start takes seconds on a loaded machine
            if os.path.exists(portfile) or proxy.poll() is not None:
                break
            time.sleep(0.05)
        port = int(open(portfile).read())
        via = S3(f"http://127.0.0.1:{port}", os.environ["AWS_ACCESS_KEY_ID"],
                 os.environ["AWS_SECRET_ACCESS_KEY"], timeout=3)

        def rules(text):
            # A new file (new inode) each time, so the proxy sees the change whatever the clock.
            with open(control + ".tmp", "w") as f:
                f.write(text + "\n")
            os.rename(control + ".tmp", control)

        st, data = attempt(via, "GET", key)
        check(st == 200 and data == body, f"pass: signed GET through the proxy verifies (got {st})")
        st, _ = attempt(via, "PUT", key + ".2", body=b"hello")
        check(st == 200, f"pass: signed PUT through the proxy verifies (got {st})")

        rules(f"1 GET {key} 503\n1 GET {key} 500\n1 GET {key} slowdown")
        st, _ = attempt(via, "GET", key)
        check(st == 503, f"503 injected (got {st})")
        st, _ = attempt(via, "GET", key)
        check(st == 500, f"500 injected (got {st})")
        st, data = attempt(via, "GET", key)
        check(st == 503 and b"SlowDown" in data, f"SlowDown injected (got {st})")
        st, data = attempt(via, "GET", key)
        check(st == 200 and data == body, "rules spent: next GET passes with exact bytes")

        rules(f"1 PUT {key}.3 503")
        st, _ = attempt(via, "PUT", key + ".3", body=os.urandom(2_000_000),
                        headers={"Expect": "100-continue"})
        check(st == 503, f"503 on a PUT with Expect: 100-continue (got {st})")

        rules(f"1 GET {key} reset")
        st, _ = attempt(via, "GET", key)
        check(st in ("ConnectionResetError", "IncompleteRead"), f"reset mid-body (got {st})")

        rules(f"1 GET {key} truncate")
        st, _ = attempt(via, "GET", key)
        check(st == "IncompleteRead", f"truncated body (got {st})")

        rules(f"1 GET {key} drop")
        st, _ = attempt(via, "GET", key)
        check(st in ("ConnectionResetError", "RemoteDisconnected"), f"drop (got {st})")

        rules(f"1 GET {key} stall:5")
        st, _ = attempt(via, "GET", key)
        check(st in ("timeout", "TimeoutError"), f"stall past a 3 s client timeout (got {st})")

        rules(f"1 GET {key} stallbody:5")
        st, _ = attempt(via, "GET", key)
        check(st in ("timeout", "TimeoutError"), f"stall mid-body (got {st})")

        rules(f"1 GET {key} delay:1")
        st, data = attempt(via, "GET", key)
        check(st == 200 and data == body, f"delay then pass (got {st})")

        rules(f"* HEAD / 503")
        st, _ = attempt(via, "HEAD", key)
        st2, _ = attempt(via, "HEAD", key)
        check(st == 503 and st2 == 503, f"'*' count applies to every match (got {st}, {st2})")
        st, data = attempt(via, "GET", key)
        check(st == 200 and data == body, "other methods unaffected")

        with open(log) as f:
            lines = f.read().splitlines()
        check(any(" 503 503" in ln for ln in lines), "the log names injected faults")
    finally:
        proxy.terminate()
        proxy.wait(10)
        direct.request("DELETE", key)
        direct.request("DELETE", key + ".2")

    # The proxy must end by itself when its time is up (subprocess.run's timeout catches a hang).
    p = subprocess.run([sys.executable, os.path.join(here, "faultproxy.py"), "--port-file",
                        portfile + "2", "--time-limit", "1"], timeout=20,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    check(p.returncode == 0, "the proxy exits after --time-limit")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
