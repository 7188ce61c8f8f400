# SPDX-License-Identifier: Apache-2.0
# Shared helpers for the e2e shell tests: find the test RGW (or skip), run `pulse store` with a time
# bound, and put the fault proxy between pulse and RGW.  Source it; it sets -euo pipefail.
# shellcheck disable=SC2034  # the variables set here are for the sourcing tests
set -euo pipefail

s3_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ -n "${PULSE_RGW_ENV:-}" ] && [ -f "$PULSE_RGW_ENV" ]; then
  # shellcheck disable=SC1090
  . "$PULSE_RGW_ENV"
fi
if [ -z "${AWS_ENDPOINT_URL:-}" ] || [ -z "${AWS_ACCESS_KEY_ID:-}" ] || [ -z "${PULSE_TEST_BUCKET:-}" ]; then
  echo "SKIP: no RGW (run scripts/test.sh)"
  exit 77
fi
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
if { "$PULSE_BIN" store --help 2>&1 || true; } | grep -q "not built yet"; then
  echo "SKIP: pulse store is still a placeholder"
  exit 77
fi

rgw_endpoint=$AWS_ENDPOINT_URL
bucket=$PULSE_TEST_BUCKET
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-e2e.XXXXXX")
# Every object a test makes lives under this prefix, so tests never see each other's keys.
prefix="e2e-$(basename "$0" .sh)-$$"
proxy_pid=""

cleanup() {
  if [ -n "$proxy_pid" ]; then
    kill "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  if [ -s "$work/proxy.log" ]; then
    echo "----- proxy log -----" >&2
    tail -n 30 "$work/proxy.log" >&2
  fi
  exit 1
}

ok() { echo "ok   $*"; }

# Quick retries so a test that exhausts its budget stays short; tests override per call.
export PULSE_S3_RETRIES=${PULSE_S3_RETRIES:-4}
export PULSE_S3_TIMEOUT=${PULSE_S3_TIMEOUT:-5}
export PULSE_S3_BACKOFF_MS=${PULSE_S3_BACKOFF_MS:-20}

# pulse_store ARGS...: `pulse store` bounded to 60 s; a timeout is a hang and fails the test.
pulse_store() {
  local rc=0
  timeout 60 "$PULSE_BIN" store "$@" || rc=$?
  [ "$rc" != 124 ] || fail "pulse store $1 hung (killed after 60 s)"
  return "$rc"
}

# s3 METHOD /bucket/key [s3req.py args]: a direct signed request to RGW, bypassing pulse and the proxy.
s3() { AWS_ENDPOINT_URL=$rgw_endpoint python3 "$s3_dir/s3req.py" "$@"; }

# start_proxy: the fault proxy in front of RGW; rules come from $work/rules (see set_rules). It
# exits by itself after $proxy_time_limit seconds (default 300; the node tests need longer).
start_proxy() {
  : >"$work/rules"
  python3 "$s3_dir/faultproxy.py" --upstream "$rgw_endpoint" --control "$work/rules" \
    --port-file "$work/proxy.port" --log "$work/proxy.log" --time-limit "${proxy_time_limit:-300}" &
  proxy_pid=$!

  # Up to 30 s: python's start alone takes seconds on a loaded machine.
  for _ in $(seq 1 600); do
    [ -s "$work/proxy.port" ] && break
    kill -0 "$proxy_pid" 2>/dev/null || fail "fault proxy exited at start"
    sleep 0.05
  done
  [ -s "$work/proxy.port" ] || fail "fault proxy did not start"
  proxy_url="http://127.0.0.1:$(cat "$work/proxy.port")"
}

# set_rules 'RULE' ...: replaces the proxy schedule (one rule per argument) and clears its log.
set_rules() {
  printf '%s\n' "$@" >"$work/rules.tmp"
  mv "$work/rules.tmp" "$work/rules"
  : >"$work/proxy.log"
}

# via_proxy CMD...: runs CMD with pulse pointed at the proxy instead of RGW.
via_proxy() { AWS_ENDPOINT_URL=$proxy_url "$@"; }

# injected ACTION: how many requests the proxy answered with ACTION since the last set_rules.
injected() { awk -v a="$1" '$4 == a' "$work/proxy.log" | wc -l; }

# one_line_error FILE: stderr of a failed command is exactly one non-empty line.
one_line_error() {
  [ "$(wc -l <"$1")" = 1 ] && [ -n "$(head -c 1 "$1")" ] \
    || fail "expected a one-line error, got: $(cat "$1")"
}
