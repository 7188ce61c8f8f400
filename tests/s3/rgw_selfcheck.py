#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Checks that the test RGW behaves like the S3 the store code relies on (SigV4 enforced, If-None-Match,
# Range, ListObjectsV2 paging, multipart), so a store test failure is never the server's fault.
import hashlib
import os
import re
import sys
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3req import S3  # noqa: E402
from rgwenv import load_rgw_env  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    if cond:
        print(f"ok   {what}")
    else:
        print(f"FAIL {what}")
        failures += 1


def main():
    load_rgw_env()
    s3 = S3.from_env()
    bucket = os.environ["PULSE_TEST_BUCKET"]
    base = f"/{bucket}/selfcheck-{uuid.uuid4().hex[:8]}"
    body = os.urandom(100_000)

    st, _, _ = s3.request("PUT", f"{base}/obj", body=body)
    check(st == 200, f"PUT object -> 200 (got {st})")
    st, _, data = s3.request("GET", f"{base}/obj")
    check(st == 200 and data == body, "GET returns the exact bytes")

    bad = S3.from_env(secret="wrong-secret")
    st, _, data = bad.request("GET", f"{base}/obj")
    check(st == 403 and b"SignatureDoesNotMatch" in data,
          f"wrong secret -> 403 SignatureDoesNotMatch (got {st} {data[:80]!r})")

    st, _, data = s3.request("PUT", f"{base}/obj", headers={"If-None-Match": "*"}, body=b"x")
    check(st == 412, f"If-None-Match: * on an existing key -> 412 (got {st})")
    st, _, _ = s3.request("PUT", f"{base}/new", headers={"If-None-Match": "*"}, body=b"y")
    check(st == 200, f"If-None-Match: * on a new key -> 200 (got {st})")

    st, h, data = s3.request("GET", f"{base}/obj", headers={"Range": "bytes=1000-1999"})
    check(st == 206 and data == body[1000:2000], f"Range GET -> 206 with the slice (got {st})")

    # A lying payload hash must be refused: the server checks integrity, not just the signature.
    st, _, data = s3.request("PUT", f"{base}/liar", body=b"abc",
                             payload_hash=hashlib.sha256(b"abd").hexdigest())
    check(st == 400 and b"XAmzContentSHA256Mismatch" in data,
          f"body not matching x-amz-content-sha256 -> 400 (got {st} {data[:80]!r})")

    st, _, _ = s3.request("GET", f"{base}/obj", headers={"If-None-Match": h.get("etag", "")})
    check(st == 304, f"If-None-Match on the current ETag -> 304 (got {st})")

    for i in range(5):
        s3.request("PUT", f"{base}/page/k{i}", body=str(i).encode())
    keys, token, pages = [], None, 0
    while pages < 10:
        q = {"list-type": "2", "prefix": base[len(bucket) + 2:] + "/page/", "max-keys": "2"}
        if token:
            q["continuation-token"] = token
        st, _, data = s3.request("GET", f"/{bucket}", query=q)
        pages += 1
        keys += re.findall(rb"<Key>([^<]*)</Key>", data)
        m = re.search(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>", data)
        if not m or b"<IsTruncated>true</IsTruncated>" not in data:
            break
        token = m.group(1).decode()
    check(pages == 3 and len(keys) == 5, f"ListObjectsV2 pages of 2: 3 pages, 5 keys "
                                         f"(got {pages}, {len(keys)})")

    part1 = os.urandom(5 * 1024 * 1024)
    part2 = os.urandom(1234)
    st, _, data = s3.request("POST", f"{base}/mp", query={"uploads": ""})
    m = re.search(rb"<UploadId>([^<]*)</UploadId>", data)
    check(st == 200 and m, f"CreateMultipartUpload -> 200 with an UploadId (got {st})")
    if m:
        uid = m.group(1).decode()
        etags = []
        for n, part in ((1, part1), (2, part2)):
            st, h, _ = s3.request("PUT", f"{base}/mp",
                                  query={"partNumber": str(n), "uploadId": uid}, body=part)
            etags.append(h.get("etag", ""))
            check(st == 200, f"UploadPart {n} -> 200 (got {st})")
        xml = "<CompleteMultipartUpload>" + "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>"
            for n, e in enumerate(etags, 1)) + "</CompleteMultipartUpload>"
        st, _, _ = s3.request("POST", f"{base}/mp", query={"uploadId": uid}, body=xml.encode())
        check(st == 200, f"CompleteMultipartUpload -> 200 (got {st})")
        st, _, data = s3.request("GET", f"{base}/mp")
        check(st == 200 and data == part1 + part2, "multipart object reads back exactly")

    st, _, _ = s3.request("GET", "/no-such-bucket-pulse/x")
    check(st == 404, f"missing bucket -> 404 (got {st})")

    for k in ["obj", "new", "mp"] + [f"page/k{i}" for i in range(5)]:
        s3.request("DELETE", f"{base}/{k}")
    st, _, _ = s3.request("GET", f"{base}/obj")
    check(st == 404, f"GET after DELETE -> 404 (got {st})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
