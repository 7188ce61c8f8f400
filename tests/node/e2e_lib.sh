#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Shared helpers for the node e2e tests against the real RGW: start trainer and follower nodes in
# the background (all killed on exit), release checkpoints to the trainer, bounded waits, and read a
# follower's index and the store independently of the code under test.  Source it after PULSE_BIN is set.
# shellcheck disable=SC2034  # the variables set here are for the sourcing tests
node_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/s3/lib.sh disable=SC2154  # work, bucket, prefix come from lib.sh
. "$node_dir/../s3/lib.sh"

if { "$PULSE_BIN" node --help 2>&1 || true; } | grep -qi "not built"; then
  echo "SKIP: pulse node is not built yet"
  exit 77
fi

store="s3://$bucket/$prefix"

# The fault proxy stays up 900 s, not lib.sh's 300: on a loaded machine a node test can outlast
# 300 s, and followers must not lose their proxy before the test ends.
proxy_time_limit=900
run=r1
bg_pids=()          # every background node, killed by node_cleanup
declare -A node_pid # name -> pid of the running node of that name

# On exit: TERM every node still running (KILL after 5 s), then lib.sh's cleanup (proxy, $work).
node_cleanup() {
  local rc=$? pid
  for pid in "${bg_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    local alive=0
    for pid in "${bg_pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for pid in "${bg_pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
    local f
    for f in "$work"/*.log; do
      if [ ! -f "$f" ] || [ "$(basename "$f")" = proxy.log ]; then continue; fi
      echo "----- $(basename "$f") (tail) -----" >&2
      tail -n 15 "$f" >&2
    done
  fi
  cleanup
}
trap node_cleanup EXIT

# wait_until SECONDS WHAT CMD...: runs CMD every 0.2 s until it succeeds; fails the test after SECONDS.
wait_until() {
  local limit=$1 what=$2 end
  shift 2
  end=$((SECONDS + limit))
  until "$@"; do
    [ "$SECONDS" -lt "$end" ] || fail "timed out after ${limit} s waiting for: $what"
    sleep 0.2
  done
}

# make_trajectory STEPS: $work/ckpt/step-NNNNNN.safetensors for 0..STEPS (1M params, fixed seed).
make_trajectory() {
  "$PULSE_BIN" synth --out "$work/ckpt" --params 1M --steps "$1" --seed 11 >/dev/null \
    || fail "pulse synth failed"
  mkdir -p "$work/watch"
}
ckpt() { printf '%s/ckpt/step-%06d.safetensors' "$work" "$1"; }

# release K: step K appears in the watched directory the way a trainer writes it: copied under a
# temporary name, then renamed (the trainer node must only take complete files).
release() {
  local name
  name=$(basename "$(ckpt "$1")")
  cp "$(ckpt "$1")" "$work/watch/.incoming.tmp"
  mv "$work/watch/.incoming.tmp" "$work/watch/$name"
}

# start_node NAME ARGS...: `pulse node ARGS` in the background, log in $work/NAME.log (appended, so
# a restarted node keeps one log).
start_node() {
  local name=$1
  shift
  "$PULSE_BIN" node "$@" >>"$work/$name.log" 2>&1 &
  node_pid[$name]=$!
  bg_pids+=("$!")
}

# start_trainer NAME ARGS...: a trainer node straight to RGW, watching $work/watch.
start_trainer() {
  local name=$1
  shift
  start_node "$name" trainer --store "$store" --run "$run" --key "$work/trainer.key" \
    --state "$work/$name.state" --watch "$work/watch" --poll-ms 50 --log json "$@"
}

# start_follower NAME ARGS...: a follower node through the fault proxy, weights $work/NAME.safetensors.
start_follower() {
  local name=$1
  shift
  AWS_ENDPOINT_URL=$proxy_url start_node "$name" follow --store "$store" --run "$run" \
    --trust "$work/trainer.pub" --state "$work/$name.state" --weights "$work/$name.safetensors" \
    --poll-ms 100 --log json "$@"
}

# stop_node NAME: SIGTERM, then the node must exit 0 within 20 s.
stop_node() {
  local pid=${node_pid[$1]} rc=0
  kill -TERM "$pid" 2>/dev/null || fail "$1 was no longer running before SIGTERM"
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -0 "$pid" 2>/dev/null && fail "$1 did not exit within 20 s of SIGTERM"
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] || fail "$1 exited $rc after SIGTERM (want 0)"
}

# published K: the store holds a record of step K (a sync-patch or a keyframe) of the run.
published() {
  "$PULSE_BIN" store ls "$store/$run/records/" 2>/dev/null | grep -q "/$(printf '%012d' "$1")/"
}

# same_as K FILE: FILE holds exactly the bytes of checkpoint K.
same_as() { cmp -s "$(ckpt "$1")" "$2"; }

# applied_steps STATE_DIR: "STEP COUNT" per step in the follower's index (table `applied`), read with
# python's sqlite3, not through pulse. It reads a copy (with its -wal), made after the node stopped:
# a read-only open of a WAL database whose -shm needs rebuilding can wait forever.
applied_steps() {
  rm -rf "$work/dbcopy" && mkdir "$work/dbcopy" && cp "$1"/index.db* "$work/dbcopy/" || return 1
  timeout 30 python3 - "$work/dbcopy/index.db" "$run" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
for step, n in db.execute("SELECT step, count(*) FROM applied WHERE run = ? GROUP BY step ORDER BY step",
                          (sys.argv[2],)):
    print(step, n)
EOF
}

# check_applied_once NAME FIRST LAST: the index of node NAME shows steps FIRST..LAST applied, each once.
check_applied_once() {
  local name=$1 first=$2 last=$3 want got
  want=$(seq "$first" "$last" | sed 's/$/ 1/')
  got=$(applied_steps "$work/$name.state") || fail "$name: cannot read its index"
  [ "$got" = "$want" ] || fail "$name: applied steps (step count) are $(echo "$got" | tr '\n' ',') want $first..$last once each"
}
