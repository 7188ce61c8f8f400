#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A server that stalls past PULSE_S3_TIMEOUT (before the answer, or mid-body): pulse store retries
# or fails clearly, and never hangs (every call is bounded by `timeout 60`).
# shellcheck source=tests/s3/lib.sh disable=SC2154  # work, bucket, prefix come from lib.sh
. "$(dirname "$0")/lib.sh"
start_proxy
export PULSE_S3_TIMEOUT=2

head -c 500000 /dev/urandom >"$work/obj"
s3 PUT "/$bucket/$prefix/obj" -d "$work/obj" >/dev/null

for rule in "stall:20" "stallbody:20"; do
  set_rules "1 GET /$bucket/$prefix/obj $rule"
  rm -f "$work/got"
  if via_proxy pulse_store get "s3://$bucket/$prefix/obj" -o "$work/got" 2>"$work/err"; then
    cmp "$work/obj" "$work/got" || fail "$rule: wrong bytes"
    ok "$rule on GET: retried after the timeout, exact bytes"
  else
    one_line_error "$work/err"
    [ ! -e "$work/got" ] || fail "$rule: failed but left an output file"
    ok "$rule on GET: clear error ($(cat "$work/err"))"
  fi
  [ "$(injected "$rule")" = 1 ] || fail "$rule: not injected"
done

# Every attempt stalls: the budget runs out in bounded time with one clear line.
export PULSE_S3_RETRIES=1
set_rules "* GET /$bucket/$prefix/obj stall:30"
rm -f "$work/got"
if via_proxy pulse_store get "s3://$bucket/$prefix/obj" -o "$work/got" 2>"$work/err"; then
  fail "every attempt stalled, yet get succeeded"
fi
one_line_error "$work/err"
[ ! -e "$work/got" ] || fail "stalled get left an output file"
[ "$(injected "stall:30")" = 2 ] || fail "expected 2 attempts (1 retry), saw $(injected "stall:30")"
ok "every attempt stalls: one-line error after 2 attempts ($(cat "$work/err"))"

s3 DELETE "/$bucket/$prefix/obj" >/dev/null || true
