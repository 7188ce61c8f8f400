#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# A tiny S3 client (python3 stdlib, AWS SigV4 with the real payload SHA-256) that the e2e tests use to
# check the server and to set up objects independently of the code under test.
"""Usage as a module: S3(endpoint, access, secret, region).request(method, path, query, headers, body)
returns (status, headers, body).  As a command:
  s3req.py METHOD /bucket/key [-q k=v]... [-H 'Name: value']... [-d FILE] [-o FILE] [--secret S]
prints the HTTP status on stdout (and the body unless -o), reading AWS_* from the environment."""
import argparse
import datetime
import hashlib
import hmac
import http.client
import os
import sys
import urllib.parse


def _quote(s, safe="-_.~"):
    return urllib.parse.quote(s, safe=safe)


class S3:
    def __init__(self, endpoint, access, secret, region="us-east-1", timeout=30):
        u = urllib.parse.urlsplit(endpoint)
        if u.scheme != "http":
            raise ValueError("only http:// endpoints (loopback test servers)")
        self.host = u.hostname
        self.port = u.port or 80
        self.access, self.secret, self.region = access, secret, region
        self.timeout = timeout

    @classmethod
    def from_env(cls, secret=None):
        e = os.environ
        return cls(e["AWS_ENDPOINT_URL"], e["AWS_ACCESS_KEY_ID"],
                   secret if secret is not None else e["AWS_SECRET_ACCESS_KEY"],
                   e.get("AWS_REGION", "us-east-1"))

    def _sign(self, method, path, query, headers, payload_hash):
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date = now.strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        headers = dict(headers)
        headers["host"] = self.host if self.port == 80 else f"{self.host}:{self.port}"
        headers["x-amz-date"] = amz_date
        headers["x-amz-content-sha256"] = payload_hash
        canon_path = _quote(path, safe="/-_.~")
        canon_query = "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(query.items()))
        lower = {k.lower(): " ".join(str(v).strip().split()) for k, v in headers.items()}
        signed = ";".join(sorted(lower))
        canon_headers = "".join(f"{k}:{lower[k]}\n" for k in sorted(lower))
        creq = "\n".join([method, canon_path, canon_query, canon_headers, signed, payload_hash])
        scope = f"{day}/{self.region}/s3/aws4_request"
        sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(creq.encode()).hexdigest()])
        k = ("AWS4" + self.secret).encode()
        for part in (day, self.region, "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={self.access}/{scope}, "
                                    f"SignedHeaders={signed}, Signature={sig}")
        return headers, canon_path, canon_query

    def request(self, method, path, query=None, headers=None, body=b"", payload_hash=None):
        """payload_hash overrides the body's SHA-256 (to check that the server verifies it)."""
        query = query or {}
        headers, cpath, cquery = self._sign(method, path, query, headers or {},
                                            payload_hash or hashlib.sha256(body).hexdigest())
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request(method, cpath + ("?" + cquery if cquery else ""), body=body,
                         headers=headers)
            r = conn.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            conn.close()


def main():
    ap = argparse.ArgumentParser(description="one signed S3 request")
    ap.add_argument("method")
    ap.add_argument("path")
    ap.add_argument("-q", action="append", default=[], help="query k=v")
    ap.add_argument("-H", action="append", default=[], help="header 'Name: value'")
    ap.add_argument("-d", help="body from FILE")
    ap.add_argument("-o", help="write the body to FILE")
    ap.add_argument("--secret", help="override the secret key (to test rejection)")
    a = ap.parse_args()
    query = dict(q.split("=", 1) if "=" in q else (q, "") for q in a.q)
    headers = dict((h.split(":", 1)[0].strip(), h.split(":", 1)[1].strip()) for h in a.H)
    body = open(a.d, "rb").read() if a.d else b""
    status, _, data = S3.from_env(a.secret).request(a.method, a.path, query, headers, body)
    print(status)
    if a.o:
        with open(a.o, "wb") as f:
            f.write(data)
    else:
        sys.stdout.write(data.decode("utf-8", "replace"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
