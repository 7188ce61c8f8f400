#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): time from a checkpoint written to every follower holding it, over a link
# limited to 200 Mbit/s, for pulse (a trainer node and follower nodes) against a dense upload and
# download of the same checkpoint through the same store (`pulse store put` / `get`).
#
#   sudo tools/bench/sync.sh [PARAMS (50M)] [STEPS (3)] [FOLLOWERS (2)]
#
# Needs root (ip netns, veth, tc), python3, and an RGW: the one named by PULSE_RGW_ENV, else one
# started with tests/s3/rgw.sh. The link: two network namespaces joined by a veth pair with
# addresses in 10.203.0.0/30 that exist only inside them, a tbf qdisc of RATE (default 200mbit,
# PULSE_BENCH_RATE) on both ends. Every pulse process runs in the client namespace; the server
# namespace holds a forwarder on 10.203.0.1 that reaches RGW (on the root namespace's 127.0.0.1)
# through a unix socket bridged by a second forwarder (tools/bench/tcpfwd.py). Everything made is
# removed on exit (trap), the namespaces included.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
params=${1:-50M}
steps=${2:-3}
nf=${3:-2}
rate=${PULSE_BENCH_RATE:-200mbit}
pulse=${PULSE_BIN:-$root/build/tools/pulse}
case "$steps$nf" in *[!0-9]*) echo "sync.sh: STEPS and FOLLOWERS must be numbers" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "sync.sh: needs root (network namespaces and tc)" >&2; exit 2; }
[ -x "$pulse" ] || { echo "sync.sh: no pulse binary at $pulse (set PULSE_BIN)" >&2; exit 2; }

ns_s="pulse-bench-s-$$" ns_c="pulse-bench-c-$$" veth_s="pbs$$" veth_c="pbc$$"
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-syncbench.XXXXXX")
rgw_dir="" pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  ip netns del "$ns_c" 2>/dev/null || true
  ip netns del "$ns_s" 2>/dev/null || true # the veth pair goes with it
  if [ -n "$rgw_dir" ]; then "$root/tests/s3/rgw.sh" stop "$rgw_dir" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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
rgw_hostport=${AWS_ENDPOINT_URL#http://}

# --- the link ---
ip netns add "$ns_s"
ip netns add "$ns_c"
ip link add "$veth_s" type veth peer name "$veth_c"
ip link set "$veth_s" netns "$ns_s"
ip link set "$veth_c" netns "$ns_c"
ip -n "$ns_s" addr add 10.203.0.1/30 dev "$veth_s"
ip -n "$ns_c" addr add 10.203.0.2/30 dev "$veth_c"
for ns in "$ns_s" "$ns_c"; do ip -n "$ns" link set lo up; done
ip -n "$ns_s" link set "$veth_s" up
ip -n "$ns_c" link set "$veth_c" up
# Both directions shaped (egress of each end). burst above one GSO segment, or tbf drops them.
ip netns exec "$ns_s" tc qdisc add dev "$veth_s" root tbf rate "$rate" burst 256kb latency 100ms
ip netns exec "$ns_c" tc qdisc add dev "$veth_c" root tbf rate "$rate" burst 256kb latency 100ms

python3 "$root/tools/bench/tcpfwd.py" --listen "unix:$work/rgw.sock" --connect "$rgw_hostport" >/dev/null &
pids+=($!)
ip netns exec "$ns_s" python3 "$root/tools/bench/tcpfwd.py" --listen 10.203.0.1:8000 \
  --connect "unix:$work/rgw.sock" >/dev/null &
pids+=($!)
# in_c CMD...: CMD in the client namespace, pointed at RGW through the link. Background commands
# use "${c_env[@]}" directly: ip and env both exec, so $! is the command's own pid and the trap can
# kill it (a function run with & would be a subshell, and killing it would orphan the command).
in_c() { ip netns exec "$ns_c" env AWS_ENDPOINT_URL=http://10.203.0.1:8000 "$@"; }
c_env=(ip netns exec "$ns_c" env AWS_ENDPOINT_URL=http://10.203.0.1:8000)
for _ in $(seq 1 100); do
  [ -S "$work/rgw.sock" ] && in_c "$pulse" store ls "s3://$bucket/none-$$" >/dev/null 2>&1 && break
  sleep 0.1
done
in_c "$pulse" store ls "s3://$bucket/none-$$" >/dev/null || { echo "sync.sh: the link does not reach RGW" >&2; exit 1; }

now() { date +%s.%N; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }

echo "sync.sh: synthetic trajectory, $params params, $steps steps" >&2
"$pulse" synth --out "$work/ckpt" --params "$params" --steps "$steps" >"$work/synth.log"
ckpt() { printf '%s/ckpt/step-%06d.safetensors' "$work" "$1"; }
dense=$(stat -c %s "$(ckpt 0)")

# --- dense: put once, then every follower gets it, all through the shaped link ---
declare -A t_dense
for k in $(seq 1 "$steps"); do
  t0=$(now)
  in_c "$pulse" store put "s3://$bucket/bench-sync-$$/dense/$k" "$(ckpt "$k")" >/dev/null
  gp=()
  for f in $(seq 1 "$nf"); do
    "${c_env[@]}" "$pulse" store get "s3://$bucket/bench-sync-$$/dense/$k" -o "$work/dense-$f" &
    gp+=($!)
  done
  for p in "${gp[@]}"; do wait "$p"; done
  t_dense[$k]=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
  cmp -s "$work/dense-1" "$(ckpt "$k")" || { echo "sync.sh: dense copy differs" >&2; exit 1; }
  echo "dense step $k: ${t_dense[$k]} s" >&2
done

# --- pulse: a trainer node and follower nodes, all in the client namespace ---
store="s3://$bucket/bench-sync-$$/pulse"
"$pulse" keygen "$work/trainer" >/dev/null
mkdir -p "$work/watch"
"${c_env[@]}" "$pulse" node trainer --store "$store" --run bench --key "$work/trainer.key" --state "$work/trainer.state" \
  --watch "$work/watch" --poll-ms 20 --keep-keyframes 0 --log json 2>"$work/trainer.log" &
pids+=($!)
for f in $(seq 1 "$nf"); do
  "${c_env[@]}" "$pulse" node follow --store "$store" --run bench --trust "$work/trainer.pub" --state "$work/f$f.state" \
    --weights "$work/f$f.safetensors" --poll-ms 20 --metrics-file "$work/f$f.prom" --log json 2>"$work/f$f.log" &
  pids+=($!)
done
held() { sed -n 's/^pulse_held_step \(-\?[0-9]*\)$/\1/p' "$1" 2>/dev/null || true; }
# release K: hand step K to the trainer node and wait (10 min at most) until every follower holds it;
# the seconds it took in $rel_s (not printed: $(release) would run it in a subshell).
release() {
  local k=$1 t0 f h
  t0=$(now)
  mv "$(ckpt "$k")" "$work/watch/"
  for f in $(seq 1 "$nf"); do
    until h=$(held "$work/f$f.prom") && [ -n "$h" ] && [ "$h" -ge "$k" ]; do
      awk -v a="$t0" -v b="$(now)" 'BEGIN { exit !(b - a > 600) }' && { echo "sync.sh: step $k timed out" >&2; exit 1; }
      sleep 0.01
    done
  done
  rel_s=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
}
release 0
t_key=$rel_s
echo "pulse keyframe (step 0, not compared): $t_key s" >&2
declare -A t_pulse
for k in $(seq 1 "$steps"); do
  release "$k"
  t_pulse[$k]=$rel_s
  echo "pulse step $k: ${t_pulse[$k]} s" >&2
done
for f in $(seq 1 "$nf"); do
  cmp -s "$work/f$f.safetensors" "$work/watch/$(basename "$(ckpt "$steps")")" \
    || { echo "sync.sh: follower $f differs from the last checkpoint" >&2; exit 1; }
done
"$pulse" manifest ls --store "$store" --run bench --json >"$work/records.json" \
  2>/dev/null || in_c "$pulse" manifest ls --store "$store" --run bench --json >"$work/records.json"

# --- the table ---
echo
echo "sync over a $rate link: $params params" \
  "($(mb "$dense") MB BF16 checkpoint), 1 trainer + $nf followers, RGW $(date -u +%Y-%m-%d)"
printf '%-5s %10s %12s %9s %9s %12s %12s %8s\n' step changed dense_s pulse_s speedup dense_MB pulse_MB bytes_x
for k in $(seq 1 "$steps"); do
  patch=$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["step"] == int(sys.argv[2]) and r["kind"] == "sync-patch": print(r["patch_bytes"], r["changes"], r["elements"])' \
    "$work/records.json" "$k")
  read -r pb ch el <<<"$patch"
  moved_d=$((dense * (1 + nf))) moved_p=$((pb * (1 + nf)))
  printf '%-5s %9s%% %12s %9s %8sx %12s %12s %7sx\n' "$k" "$(awk -v c="$ch" -v e="$el" 'BEGIN { printf "%.2f", 100 * c / e }')" \
    "${t_dense[$k]}" "${t_pulse[$k]}" "$(awk -v d="${t_dense[$k]}" -v p="${t_pulse[$k]}" 'BEGIN { printf "%.1f", d / p }')" \
    "$(mb "$moved_d")" "$(mb "$moved_p")" "$(awk -v d="$moved_d" -v p="$moved_p" 'BEGIN { printf "%.0f", d / p }')"
done
echo "(dense = 1 put + $nf parallel gets of the checkpoint; pulse = checkpoint renamed into the watched"
echo " directory until every follower's metrics say it holds the step: detect, diff, upload, poll, fetch,"
echo " verify, apply in place. MB = bytes crossing the link, all nodes together.)"
