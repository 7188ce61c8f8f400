#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): time to weights. A trainer node beside the bucket publishes each step of a
# synthetic run; follower nodes across a shaped link with a round trip apply it. Per step: the time
# from the checkpoint's rename into the watched directory until every follower holds it, against the
# wire floor (the bytes a follower fetched / the link rate + one round trip) and a dense put + get of
# the same checkpoint; whether every follower is bit-identical; and where the time went, from the
# nodes' own events.
#
#   sudo tools/bench/wan.sh [PARAMS (100M)] [STEPS (3)] [FOLLOWERS (1)]
#
# Environment: PULSE_BENCH_RATE (tc rate, default 1gbit), PULSE_BENCH_RTT_MS (default 50),
# PULSE_BENCH_LR (default 3e-6), PULSE_BENCH_POLL_MS (both nodes' poll, default 20),
# PULSE_BENCH_GAP_S (seconds between one step held and the next released, default 0; 40 lets the
# kernel write the weights' pages back between steps, as at a real run's cadence),
# PULSE_BENCH_DENSE=0 (skip the dense copies), PULSE_BENCH_PARTS=N (a trainer in N parts: each step
# split into N shards, N trainer nodes with --part, the first also --commit; docs/sync.md),
# PULSE_BENCH_KEEP=1 (keep the work directory and its
# logs, named on exit), PULSE_BIN (the pulse under test) and
# PULSE_BIN_BEFORE (another pulse binary run on the same checkpoints in the same invocation, first,
# for a before/after table), PULSE_RGW_ENV (an RGW to use; else one is started).
#
# The link: a veth pair with a tbf of RATE on both ends, its far end in a network namespace that
# exists only while this runs; the followers run there. In the root namespace the trainer node talks
# to RGW on 127.0.0.1 directly, and tools/bench/tcpfwd.py forwards the followers' connections to it,
# holding every byte RTT/2 each way (this kernel has no netem). Everything made is removed on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
params=${1:-100M}
steps=${2:-3}
nf=${3:-1}
rate=${PULSE_BENCH_RATE:-1gbit}
rtt_ms=${PULSE_BENCH_RTT_MS:-50}
lr=${PULSE_BENCH_LR:-3e-6}
poll=${PULSE_BENCH_POLL_MS:-20}
gap=${PULSE_BENCH_GAP_S:-0}
pulse=${PULSE_BIN:-$root/build/tools/pulse}
parts=${PULSE_BENCH_PARTS:-0}
before=${PULSE_BIN_BEFORE:-}
case "$steps$nf$rtt_ms$poll$gap$parts" in *[!0-9]*) echo "wan.sh: STEPS, FOLLOWERS, RTT, poll and gap must be whole numbers" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "wan.sh: needs root (network namespaces and tc)" >&2; exit 2; }
for b in "$pulse" ${before:+"$before"}; do
  [ -x "$b" ] || { echo "wan.sh: no pulse binary at $b" >&2; exit 2; }
done
rate_bps=$(python3 -c 'import re,sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1].lower())
print(int(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]) if m else "")' "$rate")
[ -n "$rate_bps" ] || { echo "wan.sh: PULSE_BENCH_RATE must look like 100mbit or 1gbit" >&2; exit 2; }

ns="pulse-wan-$$" veth_h="pwh$$" veth_c="pwc$$"
# a /30 of its own (from the pid), so a run left behind by a kill does not take this one's route
net="10.205.$(($$ % 250))"
host_ip="$net.1" ns_ip="$net.2"
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-wan.XXXXXX")
rgw_dir="" pids=() fwd_pid=""
stop_pids() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
# The run's objects: removed at exit from an RGW that outlives this run (PULSE_RGW_ENV).
clear_objects() {
  [ -n "${bucket:-}" ] || return 0
  "$pulse" store ls "s3://$bucket/wan-$$/" 2>/dev/null | while read -r k; do
    "$pulse" store rm "s3://$bucket/$k" >/dev/null 2>&1 || true
  done
}
cleanup() {
  stop_pids
  if [ -n "$fwd_pid" ]; then kill "$fwd_pid" 2>/dev/null || true; wait "$fwd_pid" 2>/dev/null || true; fi
  ip netns del "$ns" 2>/dev/null || true   # the veth pair goes with it
  if [ -n "$rgw_dir" ]; then "$root/tests/s3/rgw.sh" stop "$rgw_dir" || true; else clear_objects; fi
  if [ "${PULSE_BENCH_KEEP:-0}" = 1 ]; then echo "wan.sh: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${PULSE_RGW_ENV:-}" ]; then
  # shellcheck disable=SC1090
  . "$PULSE_RGW_ENV"
fi
if [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  rgw_dir="$work/rgw"
  # room for two runs' keyframes and steps at 1B (a sparse file: only what is written takes disk)
  PULSE_RGW_BLOCK_BYTES=${PULSE_RGW_BLOCK_BYTES:-$((32 << 30))} "$root/tests/s3/rgw.sh" start "$rgw_dir"
  # shellcheck disable=SC1091
  . "$rgw_dir/env"
fi
bucket=${PULSE_TEST_BUCKET:?PULSE_TEST_BUCKET must name a bucket}
rgw_hostport=${AWS_ENDPOINT_URL#http://}

# --- the link ---
if ip -br addr | grep -q " $host_ip/"; then
  echo "wan.sh: $host_ip is taken by another interface (a run left behind? ip netns list)" >&2
  exit 1
fi
ip netns add "$ns"
ip link add "$veth_h" type veth peer name "$veth_c"
ip link set "$veth_c" netns "$ns"
ip addr add $host_ip/30 dev "$veth_h"
ip -n "$ns" addr add $ns_ip/30 dev "$veth_c"
ip -n "$ns" link set lo up
ip link set "$veth_h" up
ip -n "$ns" link set "$veth_c" up
# Both directions shaped (egress of each end); burst above one GSO segment, or tbf drops them.
tc qdisc add dev "$veth_h" root tbf rate "$rate" burst 512kb latency 100ms
ip netns exec "$ns" tc qdisc add dev "$veth_c" root tbf rate "$rate" burst 512kb latency 100ms
python3 "$root/tools/bench/tcpfwd.py" --listen $host_ip:8000 --connect "$rgw_hostport" \
  --delay-ms "$(awk -v r="$rtt_ms" 'BEGIN { print r / 2 }')" >/dev/null &
fwd_pid=$!
c_env=(ip netns exec "$ns" env AWS_ENDPOINT_URL=http://$host_ip:8000)
for _ in $(seq 1 100); do
  "${c_env[@]}" "$pulse" store ls "s3://$bucket/none-$$" >/dev/null 2>&1 && break
  sleep 0.1
done
"${c_env[@]}" "$pulse" store ls "s3://$bucket/none-$$" >/dev/null || { echo "wan.sh: the link does not reach RGW" >&2; exit 1; }

echo "wan.sh: synthetic trajectory, $params params, lr $lr, $steps steps" >&2
"$pulse" synth --out "$work/ckpt" --params "$params" --steps "$steps" --lr "$lr" >"$work/synth.log"
ckpt() { printf '%s/ckpt/step-%06d.safetensors' "$work" "$1"; }
dense=$(stat -c %s "$(ckpt 0)")
if [ "$parts" -gt 0 ]; then
  for k in $(seq 0 "$steps"); do
    python3 "$root/tests/sync/shard.py" "$(ckpt "$k")" "$parts" "$work/shards/$k"
    for i in $(seq 0 $((parts - 1))); do
      mv "$work/shards/$k/$(printf 'model-%05d-of-%05d.safetensors' $((i + 1)) "$parts")" "$work/shards/$k/part$i.safetensors"
    done
  done
fi

# --- dense: one put beside the bucket, then every follower gets it across the link ---
declare -A t_dense
if [ "${PULSE_BENCH_DENSE:-1}" != 0 ]; then
  for k in $(seq 1 "$steps"); do
    t0=$(date +%s.%N)
    "$pulse" store put "s3://$bucket/wan-$$/dense/$k" "$(ckpt "$k")" >/dev/null
    gp=()
    for f in $(seq 1 "$nf"); do
      "${c_env[@]}" "$pulse" store get "s3://$bucket/wan-$$/dense/$k" -o "$work/dense-$f" &
      gp+=($!)
    done
    for p in "${gp[@]}"; do wait "$p"; done
    t_dense[$k]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
    cmp -s "$work/dense-1" "$(ckpt "$k")" || { echo "wan.sh: the dense copy differs" >&2; exit 1; }
    rm -f "$work"/dense-*
    "$pulse" store rm "s3://$bucket/wan-$$/dense/$k" >/dev/null
    echo "dense step $k: ${t_dense[$k]} s" >&2
  done
fi

# release K WATCH FILES...: hard-links step K into WATCH under its own name (a rename, as a trainer
# writes; with parts, part I's shard into WATCH-I as part-step<K>), then waits until every metrics
# file says the step is held; prints the seconds between.
release() {
  python3 - "$@" <<'PY'
import os, re, sys, time
k, watch, files = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
parts = int(os.environ.get("PARTS", "0"))
if parts:
    moves = [(os.path.join(os.environ["SHARD_DIR"], str(k), "part%d.safetensors" % i),
              os.path.join("%s-%d" % (watch, i), "part-step%d.safetensors" % k)) for i in range(parts)]
else:
    src = os.path.join(os.environ["CKPT_DIR"], "step-%06d.safetensors" % k)
    moves = [(src, os.path.join(watch, os.path.basename(src)))]
for i, (src, dst) in enumerate(moves):
    os.link(src, os.path.join(os.path.dirname(dst), ".incoming"))
t0 = time.time()
for src, dst in moves:
    os.rename(os.path.join(os.path.dirname(dst), ".incoming"), dst)
def held(path):
    try:
        m = re.search(r"^pulse_held_step (-?\d+)$", open(path).read(), re.M)
        return int(m.group(1)) if m else -1
    except OSError:
        return -1
while not all(held(f) >= k for f in files):
    if time.time() - t0 > 900:
        sys.exit("wan.sh: step %d did not reach every follower in 900 s" % k)
    time.sleep(0.002)
print("%.3f" % (time.time() - t0))
PY
}
export CKPT_DIR="$work/ckpt" SHARD_DIR="$work/shards" PARTS="$parts"

# run LABEL BIN: a trainer node and NF follower nodes of BIN through the link; fills t_<label>[k],
# bytes_<label>[k] (what follower 1 fetched) and phases_<label>[k].
run_nodes() {
  local label=$1 bin=$2 d="$work/$1" f k
  mkdir -p "$d/watch"
  local store="s3://$bucket/wan-$$/$label"
  "$bin" keygen "$d/trainer" >/dev/null
  local tpids=()
  if [ "$parts" -gt 0 ]; then
    for i in $(seq 0 $((parts - 1))); do
      mkdir -p "$d/watch-$i"
      local extra=(); [ "$i" = 0 ] && extra=(--commit)
      "$bin" node trainer --store "$store" --run bench --key "$d/trainer.key" --state "$d/trainer$i.state" \
        --watch "$d/watch-$i" --pattern 'part-step{N}.safetensors' --part "$i/$parts" "${extra[@]}" \
        --poll-ms "$poll" --keep-keyframes 0 --log json 2>"$d/trainer$i.log" &
      pids+=($!) tpids+=($!)
    done
  else
    "$bin" node trainer --store "$store" --run bench --key "$d/trainer.key" --state "$d/trainer.state" \
      --watch "$d/watch" --poll-ms "$poll" --keep-keyframes 0 --log json 2>"$d/trainer.log" &
    pids+=($!) tpids+=($!)
  fi
  local mfiles=()
  for f in $(seq 1 "$nf"); do
    "${c_env[@]}" "$bin" node follow --store "$store" --run bench --trust "$d/trainer.pub" --state "$d/f$f.state" \
      --weights "$d/f$f.safetensors" --poll-ms "$poll" --metrics-file "$d/f$f.prom" --log json 2>"$d/f$f.log" &
    pids+=($!)
    mfiles+=("$d/f$f.prom")
  done
  local t
  t=$(release 0 "$d/watch" "${mfiles[@]}")
  echo "$label keyframe (step 0, not compared): $t s" >&2
  for k in $(seq 1 "$steps"); do
    sleep "$gap"
    t=$(release "$k" "$d/watch" "${mfiles[@]}")
    eval "t_${label}[$k]=$t"
    local same=yes
    for f in $(seq 1 "$nf"); do
      if [ "$parts" -gt 0 ]; then   # rebuilt from a sharded keyframe: the same state, its own layout
        [ "$("$bin" hash "$d/f$f.safetensors")" = "$("$bin" hash "$(ckpt "$k")")" ] || same=no
      else
        cmp -s "$d/f$f.safetensors" "$(ckpt "$k")" || same=no
      fi
    done
    eval "same_${label}[$k]=$same"
    echo "$label step $k: $t s, bit-identical: $same" >&2
  done
  local p
  for p in "${tpids[@]}"; do   # peak resident memory of each publisher node (its maps included)
    echo "$label trainer node $p: peak $(awk '/^VmHWM/ {print $2}' "/proc/$p/status") kB, model $((dense / 1024)) kB" >&2
  done
  stop_pids
  [ "$parts" -gt 0 ] && cp "$d/trainer0.log" "$d/trainer.log"
  clear_objects   # the next run's keyframe needs the room
  for k in $(seq 1 "$steps"); do
    local line
    line=$(python3 - "$k" "$d/trainer.log" "$d/f1.log" "$d" <<'PY'
import json, os, sys
k = str(sys.argv[1])
def event(path, name):
    for l in open(path):
        try:
            e = json.loads(l)
        except ValueError:
            continue
        if e.get("event") == name and str(e.get("step")) == k:
            return e
    return {}
pub, app = event(sys.argv[2], "published"), event(sys.argv[3], "applied")
def ms(e):
    return "total=%s " % e.get("ms", "-") + " ".join("%s=%s" % (key[:-3], v) for key, v in e.items() if key.endswith("_ms"))
com = event(sys.argv[2], "committed")
parts = int(os.environ.get("PARTS", "0"))
each = [event(os.path.join(sys.argv[4], "trainer%d.log" % i), "published") for i in range(parts)]
per = ("| parts: objects " + "/".join(str(e.get("objects", "-")) for e in each) + " B, ms " +
       "/".join(str(e.get("ms", "-")) for e in each)) if parts else ""
print(app.get("bytes", "0"), "| trainer:", ms(pub), ("| commit: " + ms(com)) if com else "", per, "| follower:", ms(app))
PY
)
    eval "bytes_${label}[$k]=${line%% *}"
    eval "phases_${label}[$k]=\"\${line#* }\""
  done
}

declare -A t_before same_before bytes_before phases_before t_after same_after bytes_after phases_after
[ -n "$before" ] && run_nodes before "$before"
run_nodes after "$pulse"

# --- the table ---
floor() { awk -v b="$1" -v r="$rate_bps" -v t="$rtt_ms" 'BEGIN { printf "%.3f", b * 8 / r + t / 1e3 }'; }
echo
echo "time to weights over $rate + ${rtt_ms} ms RTT: $params params ($(awk -v b="$dense" 'BEGIN { printf "%.1f", b / 1e6 }') MB BF16)," \
  "lr $lr, 1 trainer beside the bucket + $nf follower(s) across the link, poll $poll ms, RGW, $(nproc) cores, $(date -u +%Y-%m-%d)"
printf '%-5s %-7s %10s %9s %9s %8s %9s %s\n' step binary fetched_MB floor_s pulse_s x_floor dense_s bit-identical
for k in $(seq 1 "$steps"); do
  for label in ${before:+before} after; do
    eval "t=\${t_${label}[$k]} b=\${bytes_${label}[$k]} same=\${same_${label}[$k]}"
    fl=$(floor "$b")
    printf '%-5s %-7s %10s %9s %9s %7sx %9s %s\n' "$k" "$label" "$(awk -v b="$b" 'BEGIN { printf "%.1f", b / 1e6 }')" \
      "$fl" "$t" "$(awk -v t="$t" -v f="$fl" 'BEGIN { printf "%.2f", t / f }')" "${t_dense[$k]:--}" "$same"
  done
done
echo
echo "where the time went (ms, from the nodes' published and applied events):"
for k in $(seq 1 "$steps"); do
  for label in ${before:+before} after; do
    eval "p=\${phases_${label}[$k]}"
    echo "  step $k $label: $p"
  done
done
echo "(pulse_s: checkpoint renamed into the watched directory until every follower's metrics say it"
echo " holds the step; floor: the bytes follower 1 fetched / the link rate + one round trip; dense: one"
echo " put beside the bucket + a parallel get by every follower across the link.)"
