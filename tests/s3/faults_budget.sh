#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Faults on every attempt exhaust the retry budget: one-line error, non-zero exit, no output file,
# exactly 1 + PULSE_S3_RETRIES attempts; 4xx other than 429 are not retried.
# shellcheck source=tests/s3/lib.sh disable=SC2154  # work, bucket, prefix come from lib.sh
. "$(dirname "$0")/lib.sh"
start_proxy
export PULSE_S3_RETRIES=3

head -c 200000 /dev/urandom >"$work/obj"
s3 PUT "/$bucket/$prefix/obj" -d "$work/obj" >/dev/null

for action in 503 500 slowdown reset truncate drop; do
  set_rules "* GET /$bucket/$prefix/obj $action"
  rm -f "$work/got"
  rc=0
  via_proxy pulse_store get "s3://$bucket/$prefix/obj" -o "$work/got" 2>"$work/err" || rc=$?
  [ "$rc" != 0 ] || fail "$action on every GET: exit 0"
  one_line_error "$work/err"
  [ ! -e "$work/got" ] || fail "$action on every GET: output file left behind"
  # libcurl itself re-sends a request once when a reused connection dies before any answer (it
  # takes it for a stale keep-alive), so a drop may be seen up to twice per attempt.
  n=$(injected "$action")
  if [ "$action" = drop ]; then
    [ "$n" -ge 4 ] && [ "$n" -le 8 ] || fail "drop: expected 4 attempts (<= 8 sends), saw $n"
  else
    [ "$n" = 4 ] || fail "$action: expected 4 attempts, saw $n"
  fi
  ! grep -q "$AWS_SECRET_ACCESS_KEY" "$work/err" || fail "the secret appears in an error message"
  ok "$action on every GET: exit $rc after 4 attempts: $(cat "$work/err")"
done

set_rules "* PUT /$bucket/$prefix/put 503"
rc=0
via_proxy pulse_store put "s3://$bucket/$prefix/put" "$work/obj" 2>"$work/err" || rc=$?
[ "$rc" != 0 ] || fail "503 on every PUT: exit 0"
one_line_error "$work/err"
[ "$(injected 503)" = 4 ] || fail "PUT: expected 4 attempts, saw $(injected 503)"
[ "$(s3 HEAD "/$bucket/$prefix/put" | head -n 1)" = 404 ] || fail "a failed put left an object"
ok "503 on every PUT: exit $rc, no object: $(cat "$work/err")"

# A wrong secret is a 403: no retries, clear error.
set_rules
rc=0
AWS_SECRET_ACCESS_KEY=wrong-secret via_proxy pulse_store get "s3://$bucket/$prefix/obj" \
  -o "$work/got" 2>"$work/err" || rc=$?
[ "$rc" != 0 ] || fail "wrong secret: exit 0"
one_line_error "$work/err"
[ ! -e "$work/got" ] || fail "wrong secret: output file left behind"
# One request in all (pulse may HEAD before it GETs), answered 403 and not retried.
[ "$(awk '$1 ~ /^[0-9]+$/' "$work/proxy.log" | wc -l)" = 1 ] || fail "a 403 was retried"
grep -q " 403$" "$work/proxy.log" || fail "the server did not answer 403"
ok "wrong secret: exit $rc, not retried: $(cat "$work/err")"

s3 DELETE "/$bucket/$prefix/obj" >/dev/null || true
