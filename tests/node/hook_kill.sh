#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The on-update command dies with its follower: killed -9 mid-hook and restarted at once, the old hook and its children never read the weights the new process rewrites.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"
# The hook: records its start (step, its shell's and its child's pids), sleeps in a child, then
# hashes the weights and records its end. A hook of step 1 still alive when a later hook starts
# is recorded by that one.
cat >hook.sh <<'HOOK'
#!/bin/sh
log=$HOOK_DIR/hook.log
for f in "$HOOK_DIR"/sleep.*; do
  [ -e "$f" ] || continue
  st=$(sed 's/.*) //' "/proc/$(cat "$f")/stat" 2>/dev/null | cut -c1)
  if [ -n "$st" ] && [ "$st" != Z ]; then echo "old-alive $PULSE_STEP $(basename "$f")" >>"$log"; fi
done
rm -f "$HOOK_DIR"/sleep.*
echo "start $PULSE_STEP $$" >>"$log"
if [ -e "$HOOK_DIR/slow" ]; then
  sleep 30 &
  echo "$!" >"$HOOK_DIR/sleep.$PULSE_STEP"
  echo "$$" >"$HOOK_DIR/shell.$PULSE_STEP"
  wait "$!"
fi
echo "end $PULSE_STEP $$ $(sha256sum "$PULSE_WEIGHTS" | cut -c1-16)" >>"$log"
HOOK
chmod +x hook.sh
export HOOK_DIR=$work
# gone PID: no such process, or a zombie (killed; its parent died and nobody reaped it yet).
gone() { st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1); [ -z "$st" ] || [ "$st" = Z ]; }

P synth --params 100K --steps 3 --out ckpt >/dev/null
publish 0 0
mkdir k
start_follow k.log k --poll-ms 100 --hook-timeout-ms 600000 --on-update "$work/hook.sh"
old=$bg
wait_until 120 grep -q '^end 0 ' hook.log || fail "the hook of step 0 did not run: $(cat k.log)"
touch slow
publish 1 1
wait_until 120 test -s shell.1 || fail "the hook of step 1 did not start: $(cat k.log)"
[ -s k/state/hook.pgid ] || fail "no hook.pgid while the hook runs"
shell1=$(cat shell.1)
sleep1=$(cat sleep.1)
# A new step is there, the follower is killed in its hook and restarted at once.
publish 2 2
kill -9 "$old"
wait "$old" 2>/dev/null || true
bg=""
rm slow
follow k --once --hook-timeout-ms 600000 --on-update "$work/hook.sh" 2>k2.log &
new=$!
bg=$new
# Either way, wait until the old hook's shell and sleep are gone (killed, or after their 30 s).
# Either way, wait until the old hook's shell and sleep are gone (killed, or after their 30 s),
# and the restarted follower is done (it redoes step 1's hook, then applies step 2).
wait_until 120 gone "$sleep1" || fail "the old hook's sleep outlived 120 s"
wait_until 120 gone "$shell1" || fail "the old hook's shell outlived 120 s"
wait "$new" || fail "the restarted follower failed: $(cat k2.log)"
bg=""
grep -q 'applied step=2' k2.log || fail "step 2 not applied: $(cat k2.log)"
if grep -q "^end 1 $shell1 " hook.log; then
  fail "the old hook of step 1 ran on after its follower died and read the weights: $(cat hook.log)"
fi
if grep -q '^old-alive' hook.log; then fail "the old hook was still alive when the new one ran: $(cat hook.log)"; fi
[ ! -e k/state/hook.pgid ] || fail "a stale hook.pgid is left: $(cat k/state/hook.pgid)"
ok "killed -9 in its hook and restarted at once: the old hook and its child are killed before step 2 is applied"

# A hook leaving a child in its group, ended normally, leaves no hook.pgid behind.
mkdir q
follow q --once --on-update 'true' 2>q.log || fail "follow with a plain hook: $(cat q.log)"
[ ! -e q/state/hook.pgid ] || fail "hook.pgid left after the hook ended"
ok "hook.pgid is removed when the hook ends"
