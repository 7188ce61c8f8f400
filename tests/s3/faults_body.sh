#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Connection resets mid-body and truncated bodies on GET (and resets on PUT): pulse store either
# retries to the exact bytes or fails clearly; it never writes wrong bytes.
# shellcheck source=tests/s3/lib.sh disable=SC2154  # work, bucket, prefix come from lib.sh
. "$(dirname "$0")/lib.sh"
start_proxy
export PULSE_S3_MULTIPART_THRESHOLD=8M PULSE_S3_PART_SIZE=5M

head -c 3000000 /dev/urandom >"$work/obj"
head -c 12000000 /dev/urandom >"$work/big"
s3 PUT "/$bucket/$prefix/obj" -d "$work/obj" >/dev/null
via_proxy pulse_store put "s3://$bucket/$prefix/big" "$work/big" || fail "setup put of big"

for action in reset truncate; do
  for key in obj big; do
    set_rules "2 GET /$bucket/$prefix/$key $action"
    rm -f "$work/got"
    if via_proxy pulse_store get "s3://$bucket/$prefix/$key" -o "$work/got" 2>"$work/err"; then
      cmp "$work/$key" "$work/got" || fail "$action on $key: pulse returned wrong bytes"
      ok "$action x2 on GET $key: retried to the exact bytes"
    else
      one_line_error "$work/err"
      [ ! -e "$work/got" ] || fail "$action on $key: failed but left an output file"
      ok "$action x2 on GET $key: clear error ($(cat "$work/err"))"
    fi
    [ "$(injected "$action")" = 2 ] || fail "$action on $key: the proxy injected $(injected "$action"), not 2"
  done
done

# Resets on PUT: the server may or may not have stored the object; a retried put must still leave
# exactly the bytes that were sent.
set_rules "1 PUT /$bucket/$prefix/put reset" "1 PUT /$bucket/$prefix/put drop"
via_proxy pulse_store put "s3://$bucket/$prefix/put" "$work/obj" || fail "put after reset/drop"
s3 GET "/$bucket/$prefix/put" -o "$work/put.back" | grep -qx 200 || fail "put object missing"
cmp "$work/obj" "$work/put.back" || fail "put after reset/drop: stored bytes differ"
ok "PUT after a reset and a dropped connection: exact bytes stored"

for k in obj big put; do s3 DELETE "/$bucket/$prefix/$k" >/dev/null || true; done
