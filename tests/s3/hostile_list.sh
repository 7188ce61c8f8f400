#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `pulse store ls` against tests/s3/fakes3.py's broken and hostile list answers: each ends in bounded time with one clear line.
set -euo pipefail
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
s3_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-hostile.XXXXXX")
server_pid=""

stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap 'stop_server; rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# start_server MODE: fakes3.py in MODE on a free port; sets AWS_ENDPOINT_URL to it.
start_server() {
  stop_server
  rm -f "$work/port"
  : >"$work/log"
  python3 "$s3_dir/fakes3.py" --mode "$1" --port-file "$work/port" --log "$work/log" --time-limit 300 &
  server_pid=$!
  for _ in $(seq 1 600); do
    [ -s "$work/port" ] && break
    kill -0 "$server_pid" 2>/dev/null || fail "fakes3.py exited at start"
    sleep 0.05
  done
  [ -s "$work/port" ] || fail "fakes3.py did not start"
  export AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$work/port")"
}

# No profile files, fixed keys (the fake checks no signature), short retries.
export AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE=/dev/null
export AWS_ACCESS_KEY_ID=fake AWS_SECRET_ACCESS_KEY=fake AWS_REGION=us-east-1
unset AWS_ENDPOINT_URL_S3 AWS_PROFILE AWS_SESSION_TOKEN
export PULSE_S3_RETRIES=1 PULSE_S3_BACKOFF_MS=10 PULSE_S3_TIMEOUT=3
export PULSE_S3_LIST_MAX_KEYS=5000

# refused MODE WANT [first]: `pulse store ls` fails (exit non-zero, not killed by the 60 s bound)
# with one line on stderr holding WANT; with `first` (the first page is refused), having listed
# nothing: a refused page hands no key on.
refused() {
  local mode=$1 want=$2 first=${3:-} rc=0
  start_server "$mode"
  timeout 60 "$PULSE_BIN" store ls "s3://bucket/run/" >"$work/out" 2>"$work/err" || rc=$?
  [ "$rc" != 124 ] || fail "$mode: pulse store ls hung (killed after 60 s; $(wc -l <"$work/log") requests)"
  [ "$rc" != 0 ] || fail "$mode: pulse store ls succeeded ($(wc -l <"$work/out") keys listed)"
  [ "$(wc -l <"$work/err")" = 1 ] || fail "$mode: expected a one-line error, got: $(head -c 2000 "$work/err")"
  grep -qF -- "$want" "$work/err" || fail "$mode: error lacks '$want': $(cat "$work/err")"
  [ -z "$first" ] || [ ! -s "$work/out" ] || fail "$mode: listed keys of a refused page: $(head -c 200 "$work/out")"
  echo "ok   $mode: exit $rc, $(wc -l <"$work/log") requests: $(cat "$work/err")"
}

# The honest fake lists its four keys: the checks refuse nothing S3 sends.
start_server ok
timeout 60 "$PULSE_BIN" store ls "s3://bucket/" >"$work/out" || fail "ok: pulse store ls failed"
[ "$(tr '\n' ' ' <"$work/out")" = "k000 k001 k002 k003 " ] || fail "ok: listed $(cat "$work/out")"
echo "ok   ok: four keys over two pages"

refused alternate "a second time"
refused endless "after 6 pages"
refused endless-keys "more than 5000 keys"
refused random "bytes that are not XML, starting" first
refused html "not a ListBucketResult but markup starting \"<!DOCTYPE html>" first
refused error200 "not a ListBucketResult but a <Error> document (Code InternalError)" first
refused cut "the answer is cut" first
refused notoken "truncated answer without a continuation token" first
refused backwards "'run/k001' comes after 'run/k003'"
refused repeat "'run/k000' comes after 'run/k001'"
# 2 KB/s stays below PULSE_S3_LOW_SPEED (8 KiB/s by default) for PULSE_S3_TIMEOUT: cut, retried, cut.
refused trickle "Operation too slow"
# With no speed floor, the request limit still ends each attempt.
PULSE_S3_LOW_SPEED=0 PULSE_S3_REQUEST_TIMEOUT=3 refused trickle "Operation timed out after"

# The errors name the store and the endpoint.
start_server html
"$PULSE_BIN" store ls "s3://bucket/run/" 2>"$work/err" && fail "html: listed"
grep -qF "s3://bucket/run/ at $AWS_ENDPOINT_URL" "$work/err" || fail "html: no URL in: $(cat "$work/err")"
echo "ok   the error names s3://bucket/run/ and $AWS_ENDPOINT_URL"
