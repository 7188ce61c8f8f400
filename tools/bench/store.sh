#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): put and get of one large object against RGW on loopback with
# `pulse store` (single stream and parallel parts) beside plain curl in the same run; prints MB/s.
#
#   tools/bench/store.sh [SIZE_MIB]       # default 1024 (1 GiB)
# Uses the RGW named by PULSE_RGW_ENV (or the AWS_* environment); otherwise starts one with
# tests/s3/rgw.sh in a temporary directory and stops it at the end.  PULSE_BIN defaults to
# build/tools/pulse.  PULSE_BENCH_CONCURRENCY (default 16) and PULSE_BENCH_PART (default 16M) set
# the parallel run.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
size_mib=${1:-1024}
case "$size_mib" in ''|*[!0-9]*) echo "store.sh: SIZE_MIB must be a number" >&2; exit 2 ;; esac
pulse=${PULSE_BIN:-$root/build/tools/pulse}
conc=${PULSE_BENCH_CONCURRENCY:-16}
part=${PULSE_BENCH_PART:-16M}

work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-bench.XXXXXX")
rgw_dir=""
cleanup() {
  if [ -n "$rgw_dir" ]; then "$root/tests/s3/rgw.sh" stop "$rgw_dir" || true; rm -rf "$rgw_dir"; fi
  rm -rf "$work"
}
trap cleanup EXIT

if [ -n "${PULSE_RGW_ENV:-}" ]; then
  # shellcheck disable=SC1090
  . "$PULSE_RGW_ENV"
fi
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  rgw_dir="$work/rgw"
  "$root/tests/s3/rgw.sh" start "$rgw_dir"
  # shellcheck disable=SC1091
  . "$rgw_dir/env"
fi
bucket=${PULSE_TEST_BUCKET:?PULSE_TEST_BUCKET must name a bucket}
key="bench-$$"
url="$AWS_ENDPOINT_URL/$bucket/$key"

have_pulse=1
if [ ! -x "$pulse" ] || { "$pulse" store --help 2>&1 || true; } | grep -q "not built yet"; then
  echo "store.sh: $pulse has no working 'store' verb: measuring curl only" >&2
  have_pulse=0
fi

echo "store.sh: writing a ${size_mib} MiB random file" >&2
head -c $((size_mib * 1048576)) /dev/urandom >"$work/src"
bytes=$((size_mib * 1048576))

now() { date +%s.%N; }
# CPU pressure (Linux PSI): share of the run during which some runnable task waited for a CPU.
# Near 100% means the server, the client and everything else on the machine queue for cores, so
# more streams cannot go faster.
psi_cpu() { sed -n 's/^some .*total=\([0-9]*\).*/\1/p' /proc/pressure/cpu 2>/dev/null || true; }
psi0=$(psi_cpu)
run0=$(now)
results=()
# timed LABEL CMD...: runs CMD, records "LABEL seconds".
timed() {
  local label=$1; shift
  local t0 t1
  sync
  t0=$(now)
  "$@" || { echo "store.sh: '$label' failed" >&2; exit 1; }
  t1=$(now)
  results+=("$label $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')")
  echo "store.sh: $label done" >&2
}

# curl's SigV4 does not add x-amz-content-sha256, which RGW requires: send it unsigned-payload
# (so curl does no hashing; pulse hashes every byte, which makes this comparison conservative).
curl_s3() {
  curl -sS --fail --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

# RGW frees the space of overwritten and deleted objects only at garbage collection, hours
# later by default: on the test server's 4 GiB OSD a few 1 GiB puts would fill it (and then
# every write blocks).  Before each put after the first: delete the object and collect the
# garbage now, when the RGW is ours (PULSE_RGW_DIR from tests/s3/rgw.sh).  Not timed.
reclaim() {
  curl_s3 -o /dev/null -X DELETE "$url" || true
  if [ -n "${PULSE_RGW_DIR:-}" ] && [ -f "$PULSE_RGW_DIR/ceph.conf" ] && command -v radosgw-admin >/dev/null; then
    (cd "$PULSE_RGW_DIR" && timeout 120 radosgw-admin -c ceph.conf -n client.rgw.pulse --admin-socket= \
      gc process --include-all >/dev/null 2>&1) || echo "store.sh: gc process failed" >&2
  fi
}

timed "put curl"         curl_s3 -o /dev/null -T "$work/src" "$url"
# The cost of integrity with curl: sha256sum first, then the same upload with the real payload
# hash (RGW then checks it, as it does for pulse).  Not the baseline: the ratio is to plain curl.
curl_sha_put() {
  local h
  h=$(sha256sum "$work/src" | cut -d' ' -f1)
  curl -sS --fail --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" \
    --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" -H "x-amz-content-sha256: $h" \
    -o /dev/null -T "$work/src" "$url"
}
reclaim
timed "put curl+sha256"  curl_sha_put
timed "get curl"         curl_s3 -o "$work/dst" "$url"
cmp "$work/src" "$work/dst" || { echo "store.sh: curl got different bytes" >&2; exit 1; }
rm -f "$work/dst"
if [ "$have_pulse" = 1 ]; then
  s3url="s3://$bucket/$key"
  one() {
    PULSE_S3_CONCURRENCY=1 PULSE_S3_MULTIPART_THRESHOLD=$((bytes + 1)) PULSE_S3_PART_SIZE=$((bytes + 1)) \
      "$pulse" store "$@"
  }
  many() {
    PULSE_S3_CONCURRENCY=$conc PULSE_S3_MULTIPART_THRESHOLD=$part PULSE_S3_PART_SIZE=$part \
      "$pulse" store "$@"
  }
  reclaim
  timed "put pulse-1"      one put "$s3url" "$work/src"
  timed "get pulse-1"      one get "$s3url" -o "$work/dst"
  cmp "$work/src" "$work/dst" || { echo "store.sh: pulse got different bytes" >&2; exit 1; }
  rm -f "$work/dst"
  reclaim
  timed "put pulse-$conc"  many put "$s3url" "$work/src"
  timed "get pulse-$conc"  many get "$s3url" -o "$work/dst"
  cmp "$work/src" "$work/dst" || { echo "store.sh: pulse got different bytes" >&2; exit 1; }
  "$pulse" store rm "$s3url" >/dev/null 2>&1 || true
else
  curl_s3 -o /dev/null -X DELETE "$url" || true
fi

psi1=$(psi_cpu)
run1=$(now)
pressure="n/a"
if [ -n "$psi0" ] && [ -n "$psi1" ]; then
  pressure=$(awk -v a="$psi0" -v b="$psi1" -v t0="$run0" -v t1="$run1" \
    'BEGIN { printf "%.0f%%", (b - a) / 1e6 / (t1 - t0) * 100 }')
fi
printf '\n%s MiB object, RGW at %s (%s); %s, %s cores; load average at the end:%s\n' \
  "$size_mib" "$AWS_ENDPOINT_URL" "$(date -u +%F)" \
  "$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)" "$(nproc)" \
  "$(cut -d' ' -f1-3 /proc/loadavg | sed 's/^/ /')"
printf 'CPU pressure during the run (PSI some): %s\n' "$pressure"
printf '%-6s %-16s %9s %9s %10s\n' op tool seconds MB/s "x curl"
for op in put get; do
  base=""
  for r in "${results[@]}"; do
    read -r rop rtool rsec <<<"$r"
    [ "$rop" = "$op" ] || continue
    mbs=$(awk -v n="$bytes" -v s="$rsec" 'BEGIN { printf "%.3f", n / s / 1e6 }')
    [ -n "$base" ] || base=$mbs
    printf '%-6s %-16s %9.2f %9.1f %10.2f\n' "$rop" "$rtool" "$rsec" "$mbs" \
      "$(awk -v a="$mbs" -v b="$base" 'BEGIN { printf "%.3f", a / b }')"
  done
done
