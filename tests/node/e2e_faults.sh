#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End to end against the real RGW: one trainer node and three follower nodes over 20 steps, the
# followers behind the fault proxy (500/503/SlowDown/resets on a changing schedule) and one of them
# killed with -9 at random moments and restarted: every follower ends bit-identical to the trainer's
# last checkpoint and its index shows every step applied exactly once.
# shellcheck source=tests/node/e2e_lib.sh disable=SC2154  # work, run, node_pid... come from it
. "$(dirname "$0")/e2e_lib.sh"

steps=20
kills_wanted=5
# A random schedule of kills, printed so a failure can be replayed (PULSE_E2E_SEED=N).
seed=${PULSE_E2E_SEED:-$$}
RANDOM=$seed
echo "seed $seed"

"$PULSE_BIN" keygen "$work/trainer" >/dev/null
for f in f1 f2 f3; do "$PULSE_BIN" keygen "$work/$f" >/dev/null; done
make_trajectory "$steps"
start_proxy

# Faults change with the step, so they hit polls, object fetches and receipt uploads all through the
# run. Each rule is spent after COUNT requests; a schedule replaces the last one (counts restart).
# The log is never cleared: at the end it proves what was injected.
schedule() {
  case $(($1 % 4)) in
    0) printf '%s\n' "2 GET / 503" "1 GET / reset" ;;
    1) printf '%s\n' "1 GET / 500" "1 GET / slowdown" "1 PUT / 503" ;;
    2) printf '%s\n' "1 GET /$bucket/$prefix/$run/objects/ reset" "1 GET / 503" ;;
    3) printf '%s\n' "1 * / reset" "1 GET / 500" ;;
  esac >"$work/rules.tmp"
  mv "$work/rules.tmp" "$work/rules"
}

start_trainer trainer --keyframe-every 1000
# f3 runs a slow hook, so some kills land between apply and receipt; all keep the default retries.
start_follower f1 --key "$work/f1.key"
start_follower f2 --key "$work/f2.key"
f3_args=(--key "$work/f3.key" --on-update "sleep 0.2")
start_follower f3 "${f3_args[@]}"

kills=0
for k in $(seq 0 "$steps"); do
  schedule "$k"
  release "$k"
  # Kill f3 at a random moment (0-700 ms) after a release, on a random ~third of the steps, and
  # make sure the test kills at least $kills_wanted times.
  left=$((steps - k + 1))
  if [ "$k" -gt 0 ] && { [ $((RANDOM % 3)) = 0 ] || [ $((kills_wanted - kills)) -ge "$left" ]; }; then
    sleep "0.$(printf '%03d' $((RANDOM % 700)))"
    kill -9 "${node_pid[f3]}" 2>/dev/null || fail "f3 died by itself before kill $((kills + 1))"
    wait "${node_pid[f3]}" 2>/dev/null || true
    kills=$((kills + 1))
    echo "killed f3 with -9 after step $k (kill $kills)"
    start_follower f3 "${f3_args[@]}"
  fi
  wait_until 60 "the trainer to publish step $k" published "$k"
done
[ "$kills" -ge "$kills_wanted" ] || fail "only $kills kills"
ok "trainer published steps 0..$steps; f3 killed $kills times"

last=$(ckpt "$steps")
for f in f1 f2 f3; do
  wait_until 120 "$f to reach step $steps" same_as "$steps" "$work/$f.safetensors"
  ok "$f holds step $steps bit for bit"
done

# Stop everyone cleanly (SIGTERM: exit 0), then read the indexes.
for f in f1 f2 f3 trainer; do stop_node "$f"; done
for f in f1 f2 f3; do
  cmp "$last" "$work/$f.safetensors" || fail "$f changed after the stop"
  check_applied_once "$f" 0 "$steps"
  ok "$f: index shows steps 0..$steps applied exactly once each"
done

# The faults really happened.
for a in 503 500 slowdown reset; do
  n=$(injected "$a")
  [ "$n" -ge 1 ] || fail "the proxy injected no $a"
  echo "injected $a: $n"
done
# No fault may ever look like a bad publication, and every kill was followed by a restart.
events() { grep -c "\"event\":\"$2\"" "$work/$1.log" || true; }
for f in f1 f2 f3; do
  [ "$(events $f refused)" = 0 ] || fail "$f refused a record: $(grep -m1 '"refused"' "$work/$f.log")"
  echo "$f events: started $(events $f started), recovered $(events $f recovered)," \
    "applied $(events $f applied), store errors $(events $f store-error), step failures $(events $f step-failed)"
done
[ "$(events f3 started)" = $((kills + 1)) ] || fail "f3 was not restarted after every kill"
# The mapped fetch's temporary has no name once it is made: no kill leaves one behind.
left=$(find "$work/f3.state" -name 'fetch.tmp.*' | wc -l)
[ "$left" = 0 ] || fail "f3's state directory holds $left fetched temporaries"
# A fetch knows its object's size from the record: one GET each, no HEAD first (f3 fetches every
# step to a file, where a HEAD for the size would show).
object_requests() { awk -v m="$1" '$1 ~ /^[0-9]+$/ && $2 == m && index($3, "/objects/")' "$work/proxy.log" | wc -l; }
[ "$(object_requests GET)" -ge $((3 * steps)) ] || fail "only $(object_requests GET) object GETs in the log"
[ "$(object_requests HEAD)" = 0 ] || fail "$(object_requests HEAD) HEAD requests for objects"
ok "every follower bit-identical after $(awk '$4 != "pass"' "$work/proxy.log" | wc -l) injected faults and $kills kills"
