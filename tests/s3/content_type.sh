#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Against RGW: a multipart put stores the same Content-Type as a single put (not the XML type of the completion's body).
# shellcheck source=tests/s3/lib.sh
. "$(dirname "$0")/lib.sh"

# content_type KEY: the Content-Type and ETag that a HEAD of KEY (straight to RGW) answers.
content_type() {
  python3 - "$s3_dir" "/$bucket/$1" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from s3req import S3
status, headers, _ = S3.from_env().request("HEAD", sys.argv[2])
print(status, headers.get("content-type", "(none)"), headers.get("etag", ""))
PY
}

head -c 1000 /dev/urandom >"$work/small"
head -c $((6 << 20)) /dev/urandom >"$work/big"
pulse_store put "s3://$bucket/$prefix/single" "$work/small" || fail "single put failed"
# Parts of 5 MiB (RGW's smallest): the 6 MiB file goes up in two parts.
PULSE_S3_MULTIPART_THRESHOLD=$((5 << 20)) PULSE_S3_PART_SIZE=$((5 << 20)) \
  pulse_store put "s3://$bucket/$prefix/multi" "$work/big" || fail "multipart put failed"
read -r st1 ct1 _ < <(content_type "$prefix/single")
read -r st2 ct2 etag2 < <(content_type "$prefix/multi")
[ "$st1" = 200 ] && [ "$st2" = 200 ] || fail "HEAD answered $st1 / $st2"
case "$etag2" in *-2\"|*-2) ;; *) fail "the 6 MiB put was no 2-part multipart upload (ETag $etag2)" ;; esac
[ "$ct2" = "$ct1" ] || fail "multipart put stored Content-Type $ct2, a single put $ct1"
ok "single and multipart puts both stored Content-Type $ct1 (multipart ETag $etag2)"
pulse_store get "s3://$bucket/$prefix/multi" -o "$work/back" || fail "get failed"
cmp -s "$work/big" "$work/back" || fail "multipart object read back differs"
pulse_store rm "s3://$bucket/$prefix/single" && pulse_store rm "s3://$bucket/$prefix/multi" || fail "rm failed"
ok "read back the same bytes"
