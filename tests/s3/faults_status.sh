#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Injected 500 / 503 / SlowDown before success: pulse store get and put retry and give the exact bytes.
# shellcheck source=tests/s3/lib.sh disable=SC2154  # work, bucket, prefix come from lib.sh
. "$(dirname "$0")/lib.sh"
start_proxy

head -c 300000 /dev/urandom >"$work/small"
s3 PUT "/$bucket/$prefix/small" -d "$work/small" >/dev/null

set_rules "1 GET /$bucket/$prefix/small 503" "1 GET /$bucket/$prefix/small 500" \
          "1 GET /$bucket/$prefix/small slowdown"
via_proxy pulse_store get "s3://$bucket/$prefix/small" -o "$work/got" 2>"$work/get.err" \
  || fail "get after 500/503: $(cat "$work/get.err")"
cmp "$work/small" "$work/got" || fail "get after 500/503: bytes differ"
[ "$(injected 503)" = 1 ] && [ "$(injected 500)" = 1 ] && [ "$(injected slowdown)" = 1 ] \
  || fail "the proxy did not inject the three faults"
# The retry counter behind pulse_store_retries (and the follower's pulse_store_retries_total).
grep -qx "pulse store: 3 retries after transient errors" "$work/get.err" \
  || fail "get: wanted the 3 retries reported, got: $(cat "$work/get.err")"
ok "GET: 503, 500, SlowDown, then exact bytes; 3 retries counted"

set_rules "2 PUT /$bucket/$prefix/put 503" "1 PUT /$bucket/$prefix/put 500"
via_proxy pulse_store put "s3://$bucket/$prefix/put" "$work/small" 2>"$work/put.err" \
  || fail "put after 500/503: $(cat "$work/put.err")"
[ "$(injected 503)" = 2 ] && [ "$(injected 500)" = 1 ] || fail "the proxy did not inject on PUT"
grep -qx "pulse store: 3 retries after transient errors" "$work/put.err" \
  || fail "put: wanted the 3 retries reported, got: $(cat "$work/put.err")"
s3 GET "/$bucket/$prefix/put" -o "$work/put.back" | grep -qx 200 || fail "put object missing"
cmp "$work/small" "$work/put.back" || fail "put after 500/503: stored bytes differ"
ok "PUT: 503, 503, 500, then the server holds the exact bytes"

# A large object: multipart upload and parallel ranged GETs, with faults on some parts.
export PULSE_S3_MULTIPART_THRESHOLD=8M PULSE_S3_PART_SIZE=5M
head -c 12000000 /dev/urandom >"$work/big"
set_rules "2 PUT /$bucket/$prefix/big 503" "1 POST /$bucket/$prefix/big 500"
via_proxy pulse_store put "s3://$bucket/$prefix/big" "$work/big" || fail "multipart put with faults"
[ $(( $(injected 503) + $(injected 500) )) -ge 2 ] || fail "no faults injected on the multipart put"
s3 GET "/$bucket/$prefix/big" -o "$work/big.back" | grep -qx 200 || fail "multipart object missing"
cmp "$work/big" "$work/big.back" || fail "multipart put with faults: stored bytes differ"
ok "multipart PUT with 503/500 on parts: exact bytes stored"

set_rules "2 GET /$bucket/$prefix/big 503" "1 GET /$bucket/$prefix/big slowdown"
via_proxy pulse_store get "s3://$bucket/$prefix/big" -o "$work/big.got" || fail "large get with faults"
cmp "$work/big" "$work/big.got" || fail "large get with faults: bytes differ"
[ "$(injected 503)" = 2 ] || fail "the proxy did not inject on the large GET"
ok "large GET with 503/SlowDown: exact bytes"

for k in small put big; do s3 DELETE "/$bucket/$prefix/$k" >/dev/null || true; done
