#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pulse_store_set_deadline against tests/s3/fakes3.py: a trickle or a server that keeps failing ends at the deadline, none starts after it.
set -euo pipefail
client=${1:?usage: deadline.sh PATH/TO/deadline_client}
s3_dir=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-deadline.XXXXXX")
server_pid=""

stop_server() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap 'stop_server; rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; [ -f "$work/out" ] && cat "$work/out" >&2; exit 1; }

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

export AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_CONFIG_FILE=/dev/null
export AWS_ACCESS_KEY_ID=fake AWS_SECRET_ACCESS_KEY=fake AWS_REGION=us-east-1
unset AWS_ENDPOINT_URL_S3 AWS_PROFILE AWS_SESSION_TOKEN

# run SECONDS: the client under a 60 s bound; its output in $work/out, its exit status in $rc.
run() {
  rc=0
  timeout 60 "$client" "s3://bucket" "$1" >"$work/out" 2>&1 || rc=$?
  [ "$rc" != 124 ] || fail "the client hung (killed after 60 s; $(wc -l <"$work/log") requests)"
}

# Limits far beyond the test's bound: only the deadline can end these in time.
export PULSE_S3_TIMEOUT=120 PULSE_S3_LOW_SPEED=0 PULSE_S3_REQUEST_TIMEOUT=600

# A page trickled at 2 KB/s (over 3 minutes long): cut at the deadline, not retried.
export PULSE_S3_RETRIES=6 PULSE_S3_BACKOFF_MS=10
start_server trickle
run 3
[ "$rc" = 1 ] || fail "trickle: exit $rc"
grep -qF "the deadline of 3 s for this operation passed" "$work/out" || fail "trickle: no deadline error"
[ "$(wc -l <"$work/log")" = 1 ] || fail "trickle: $(wc -l <"$work/log") requests, want 1 (no retry after the deadline)"
echo "ok   trickle: $(tr '\n' ' ' <"$work/out")"

# A server that answers 503 to everything, with a retry budget of hours: ends by the deadline.
export PULSE_S3_RETRIES=100 PULSE_S3_BACKOFF_MS=1000
start_server 503
run 3
[ "$rc" = 1 ] || fail "503: exit $rc"
grep -qF "the deadline of 3 s for this operation pass" "$work/out" || fail "503: no deadline error"
grep -qF "HTTP 503 SlowDown" "$work/out" || fail "503: the last attempt's failure is not named"
echo "ok   503: $(wc -l <"$work/log") requests: $(tr '\n' ' ' <"$work/out")"

# A whole pull against the same server: `pulse pull --deadline 3` gives up at 3 s, the weights
# (none here) untouched; the retry budget alone would take minutes.
pulse=${PULSE_BIN:?PULSE_BIN is set by meson}
(cd "$work" && "$pulse" keygen tr >/dev/null 2>&1) || fail "keygen"
mkdir -m 700 "$work/fstate"
rc=0
timeout 60 "$pulse" pull --store s3://bucket/p --run r --trust "$work/tr.pub" --state "$work/fstate" \
  --weights "$work/w.safetensors" --deadline 3 >"$work/out" 2>&1 || rc=$?
[ "$rc" != 124 ] || fail "pull: hung past its deadline (killed after 60 s)"
[ "$rc" = 1 ] || fail "pull: exit $rc"
grep -qF "the deadline of 3 s for this operation pass" "$work/out" || fail "pull: no deadline error"
[ ! -e "$work/w.safetensors" ] || fail "pull: weights written"
echo "ok   pull --deadline 3: $(tr '\n' ' ' <"$work/out")"

# A deadline already passed: fails at once, without a request; cleared, the handle lists again.
export PULSE_S3_RETRIES=1
start_server ok
run -1
[ "$rc" = 1 ] || fail "passed: exit $rc"
grep -qF "the deadline of 0 s for this operation passed" "$work/out" || fail "passed: no deadline error"
grep -qF "after clearing: rc=0" "$work/out" || fail "passed: clearing the deadline did not help"
[ "$(wc -l <"$work/log")" = 2 ] || fail "passed: $(wc -l <"$work/log") requests, want 2 (both after clearing)"
echo "ok   passed: $(tr '\n' ' ' <"$work/out")"

# A deadline far enough away changes nothing.
run 60
[ "$rc" = 0 ] || fail "honest: exit $rc"
grep -qF "keys=4" "$work/out" || fail "honest: wrong listing"
echo "ok   honest: $(tr '\n' ' ' <"$work/out")"
