#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Crash safety of pulse node follow: a torn in-place apply is finished from the journal, and a
# follower killed with -9 at random moments many times ends bit-identical, each step applied once.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"

P synth --params 1M --steps 7 --out ckpt >/dev/null
publish 0 3

# 1. A torn step, made by hand exactly as a crash mid-apply leaves it: the journal (absolute
#    patch + "applying") and weights holding step 4's bytes up to some offset, step 3's after it.
mkdir t
follow t --once 2>t.log || fail "follow --once to step 3: $(cat t.log)"
publish 4 4
node=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' trainer.pub)
P diff "$(ckpt 3)" "$(ckpt 4)" --values abs -o t/state/journal.patch >/dev/null
printf 'pulse-journal 1\nphase applying\nkind sync-patch\nstep 4\nbase %s\nresult %s\nrecord records/sync-patch/000000000004/%s\n' \
  "$(P hash "$(ckpt 3)")" "$(P hash "$(ckpt 4)")" "$node" >t/state/journal
size=$(stat -c %s "$(ckpt 4)")
cut=$((size / 2 + 1))
{ head -c "$cut" "$(ckpt 4)"; tail -c +$((cut + 1)) "$(ckpt 3)"; } >t/w.safetensors
cmp -s t/w.safetensors "$(ckpt 4)" && fail "the torn file is not torn"
cmp -s t/w.safetensors "$(ckpt 3)" && fail "the torn file is not torn"
# and the temporary a process killed mid-squash left behind; and the last step's directions
# and their temporaries, which builds that took patches by direction (format 6) kept
head -c 4096 /dev/urandom >t/state/journal.patch.tmp.Zq81xA
head -c 4096 /dev/urandom >t/state/directions
head -c 4096 /dev/urandom >t/state/directions.tmp.Qw3rT9
head -c 4096 /dev/urandom >t/state/directions.Er5tY7
follow t --once 2>t2.log || fail "recovery: $(cat t2.log)"
[ ! -e t/state/journal.patch.tmp.Zq81xA ] || fail "a killed squash's temporary left behind"
for d in directions directions.tmp.Qw3rT9 directions.Er5tY7; do
  [ ! -e "t/state/$d" ] || fail "an old state directory's $d left behind"
done
grep -q direction t2.log && fail "the directions files were removed aloud: $(cat t2.log)"
grep -q 'recovered step=4 phase=applying' t2.log || fail "no recovery logged: $(cat t2.log)"
cmp -s t/w.safetensors "$(ckpt 4)" || fail "recovered weights differ from step 4"
[ ! -e t/state/journal ] || fail "journal left behind"
[ "$("$check" applied t/state/index.db r | cut -d' ' -f1 | tr '\n' ' ')" = "0 1 2 3 4 " ] \
  || fail "applied rows after recovery: $("$check" applied t/state/index.db r)"
ok "a torn step is finished from the journal's absolute patch; step 4 applied once; a killed squash's temporary and old directions files removed"

# 2. kill -9 at random moments (listing, fetch, squash, apply, hook, receipt), restart each time.
publish 5 7
mkdir k
kills=0
for round in $(seq 1 8); do
  start_follow k.log k --once --key follower.key --on-update true
  pid=$bg
  sleep "0.$(printf '%03d' $((RANDOM % 400)))"
  if kill -9 "$pid" 2>/dev/null; then kills=$((kills + 1)); fi
  wait "$pid" 2>/dev/null || true
  bg=""
  # Whatever moment it died at, the weights hold a whole verified state or a journalled step.
done
follow k --once --key follower.key 2>>k.log || fail "final run after $kills kills: $(tail -5 k.log)"
cmp -s "$(ckpt 7)" k/w.safetensors || fail "weights after $kills kills differ from step 7"
[ ! -e k/state/unsynced ] || fail "a clean exit left the unsynced note: $(cat k/state/unsynced)"
left=$(ls k/state | grep '^journal\.patch\.tmp\.' || true)
[ -z "$left" ] || fail "temporaries left after $kills kills: $left"
rows=$("$check" applied k/state/index.db r | cut -d' ' -f1 | tr '\n' ' ')
first=${rows%% *}
want=$(seq "$first" 7 | tr '\n' ' ')
[ "$rows" = "$want" ] || fail "applied rows after $kills kills: '$rows', wanted '$want'"
recovered=$(grep -c 'recovered step=' k.log || true)
ok "killed -9 $kills times ($recovered journal recoveries): bit-identical to step 7, steps $first..7 applied once each"

# 3. SIGTERM at random moments of a catch-up: exit 0, and the weights hold a whole published state.
mkdir s
declare -A known
for i in $(seq 0 7); do known[$(P hash "$(ckpt "$i")")]=$i; done
for round in 1 2 3; do
  start_follow "s$round.log" s --poll-ms 50
  started() { grep -q ' started ' "s$round.log"; }
  wait_until 60 started || fail "follower did not start: $(cat "s$round.log")"
  sleep "0.$(printf '%03d' $((RANDOM % 300)))"
  kill -TERM "$bg"
  rc=0
  wait "$bg" || rc=$?
  bg=""
  [ "$rc" = 0 ] || fail "SIGTERM round $round: exit $rc: $(tail -3 "s$round.log")"
  grep -q ' stopped ' "s$round.log" || fail "SIGTERM round $round: no stopped event"
  if [ -e s/w.safetensors ] && [ ! -e s/state/journal ]; then
    h=$(P hash s/w.safetensors)
    [ -n "${known[$h]:-}" ] || fail "SIGTERM round $round left weights in no published state"
  fi
done
follow s --once 2>>s.log || fail "run after SIGTERMs: $(tail -3 s.log)"
cmp -s "$(ckpt 7)" s/w.safetensors || fail "weights after SIGTERMs differ from step 7"
ok "SIGTERM at random moments: exit 0 each time, a published state held, then caught up to step 7"

# 4. Steps are not synced one by one (docs/node.md): a running follower's state directory holds
#    a note naming this boot; a clean stop syncs the weights and removes it; --durable writes none.
boot=$(cat /proc/sys/kernel/random/boot_id)
mkdir u
start_follow u.log u --poll-ms 50
at_step7() { grep -q 'applied step=7' u.log; }
wait_until 60 at_step7 || fail "follower did not reach step 7: $(tail -3 u.log)"
[ "$(cat u/state/unsynced)" = "pulse-unsynced 1 boot $boot" ] \
  || fail "running follower's note: '$(cat u/state/unsynced 2>&1)', boot $boot"
kill -TERM "$bg"; wait "$bg" || fail "SIGTERM: exit $?"; bg=""
[ ! -e u/state/unsynced ] || fail "stop left the unsynced note"
cmp -s u/w.safetensors "$(ckpt 7)" || fail "weights at stop differ from step 7"
mkdir d
start_follow d.log d --poll-ms 50 --durable
at_step7d() { grep -q 'applied step=7' d.log; }
wait_until 60 at_step7d || fail "--durable follower did not reach step 7: $(tail -3 d.log)"
[ ! -e d/state/unsynced ] || fail "--durable wrote an unsynced note"
kill -TERM "$bg"; wait "$bg" || fail "SIGTERM --durable: exit $?"; bg=""
cmp -s d/w.safetensors "$(ckpt 7)" || fail "--durable weights differ from step 7"
ok "unsynced note while running (this boot), gone after SIGTERM; none with --durable"

# 5. A restart of the machine, made by hand as it leaves things: the note names another boot,
#    and the disk kept some of the last steps' pages (step 7's first half, step 5's second half).
tear() {   # tear DIR: DIR's weights as a lost write-back leaves them
  size=$(stat -c %s "$(ckpt 7)")
  cut=$(( (size / 4096 / 2) * 4096 ))
  { head -c "$cut" "$(ckpt 7)"; tail -c +$((cut + 1)) "$(ckpt 5)"; } >"$1/w.safetensors"
  cp "$1/w.safetensors" "$1/torn"
}
other="pulse-unsynced 1 boot 00000000-0000-4000-8000-00000000dead"
tear u
printf '%s\n' "$other" >u/state/unsynced
follow u --once 2>u2.log || fail "after a lost write-back: $(tail -3 u2.log)"
grep -q 'weights-lost .*reason=no-state' u2.log || fail "no weights-lost event: $(cat u2.log)"
grep -q 'catch-up path=keyframe' u2.log || fail "not restored from the keyframe: $(cat u2.log)"
cmp -s u/w.safetensors "$(ckpt 7)" || fail "weights after a lost write-back differ from step 7"
[ ! -e u/state/unsynced ] || fail "the other boot's note was left after the keyframe restore"
ok "weights torn by a lost write-back (note from another boot): replaced from the keyframe, step 7"

#    The same torn file without the note (or with this boot's) is no one's state: refused, untouched.
tear u
if follow u --once 2>u3.log; then fail "torn weights without a note were accepted"; fi
grep -q 'which no trusted record of run r produces' u3.log || fail "refusal not named: $(cat u3.log)"
cmp -s u/w.safetensors u/torn || fail "refused weights were changed"
printf 'pulse-unsynced 1 boot %s\n' "$boot" >u/state/unsynced
if follow u --once 2>u4.log; then fail "torn weights with this boot's note were accepted"; fi
cmp -s u/w.safetensors u/torn || fail "refused weights were changed (this boot's note)"
rm -f u/state/unsynced
ok "the same torn file without a note, or with this boot's, is refused and left as it was"

#    A journalled step at the restart: torn beyond that one step, the journal cannot mend it, so
#    the keyframe does; torn within it, the journal does, and the note goes.
P diff "$(ckpt 6)" "$(ckpt 7)" --values abs -o u/state/journal.patch >/dev/null
jtext=$(printf 'pulse-journal 1\nphase applying\nkind sync-patch\nstep 7\nbase %s\nresult %s\nrecord records/sync-patch/000000000007/%s\n' \
  "$(P hash "$(ckpt 6)")" "$(P hash "$(ckpt 7)")" "$node")
printf '%s' "$jtext" >u/state/journal
tear u
printf '%s\n' "$other" >u/state/unsynced
follow u --once 2>u5.log || fail "journal + lost write-back: $(tail -3 u5.log)"
grep -q 'weights-lost .*reason=journal-recovery-failed' u5.log || fail "no weights-lost event: $(cat u5.log)"
cmp -s u/w.safetensors "$(ckpt 7)" || fail "weights after journal + lost write-back differ from step 7"
[ ! -e u/state/journal ] && [ ! -e u/state/unsynced ] || fail "journal or note left behind"
P diff "$(ckpt 6)" "$(ckpt 7)" --values abs -o u/state/journal.patch >/dev/null
printf '%s' "$jtext" >u/state/journal
{ head -c "$cut" "$(ckpt 7)"; tail -c +$((cut + 1)) "$(ckpt 6)"; } >u/w.safetensors
printf '%s\n' "$other" >u/state/unsynced
follow u --once 2>u6.log || fail "journal, torn within the step: $(tail -3 u6.log)"
grep -q 'recovered step=7 phase=applying' u6.log || fail "no journal recovery: $(cat u6.log)"
grep -q 'weights-lost' u6.log && fail "weights lost although the journal mended them: $(cat u6.log)"
cmp -s u/w.safetensors "$(ckpt 7)" || fail "weights after the journal's recovery differ from step 7"
[ ! -e u/state/unsynced ] || fail "the note was left after the journal's recovery"
#    A journal whose patch is gone (fsynced, but a disk can still lose it): after a restart of the
#    machine that reads as torn weights too.
printf '%s' "$jtext" >u/state/journal
rm -f u/state/journal.patch
{ head -c "$cut" "$(ckpt 7)"; tail -c +$((cut + 1)) "$(ckpt 6)"; } >u/w.safetensors
printf '%s\n' "$other" >u/state/unsynced
follow u --once 2>u8.log || fail "journal without its patch + lost write-back: $(tail -3 u8.log)"
grep -q 'weights-lost .*reason=journal-recovery-failed' u8.log || fail "no weights-lost event: $(cat u8.log)"
cmp -s u/w.safetensors "$(ckpt 7)" || fail "weights after a lost journal patch differ from step 7"
#    The same without the note (a process crash, the patch removed by hand): an error naming it.
printf '%s' "$jtext" >u/state/journal
{ head -c "$cut" "$(ckpt 7)"; tail -c +$((cut + 1)) "$(ckpt 6)"; } >u/w.safetensors
if follow u --once 2>u9.log; then fail "a journal without its patch was accepted without a note"; fi
grep -q 'recovery of step 7 from the journal' u9.log || fail "the refusal does not name the recovery: $(cat u9.log)"
rm -f u/state/journal
cp "$(ckpt 7)" u/w.safetensors
#    A step journalled "applied" (its hook not yet run) at the restart, the weights torn: the hook
#    never sees them; they are replaced from the keyframe first.
printf '%s' "$jtext" | sed 's/^phase applying$/phase applied/' >u/state/journal
tear u
printf '%s\n' "$other" >u/state/unsynced
follow u --once --on-update 'cmp -s "$PULSE_WEIGHTS" "'"$work"'/ckpt/step-$(printf %06d "$PULSE_STEP").safetensors" || echo "$PULSE_STEP" >>'"$work"'/hook-saw' 2>u7.log \
  || fail "journal applied + lost write-back: $(tail -3 u7.log)"
grep -q 'weights-lost .*reason=no-state' u7.log || fail "no weights-lost event: $(cat u7.log)"
[ ! -e hook-saw ] || fail "the hook ran over weights not at its step: $(cat hook-saw)"
grep -q 'hook step=7 status=ok' u7.log || fail "the hook did not run for step 7: $(cat u7.log)"
cmp -s u/w.safetensors "$(ckpt 7)" || fail "weights after journal applied + lost write-back differ from step 7"
[ ! -e u/state/journal ] && [ ! -e u/state/unsynced ] || fail "journal or note left behind (applied)"
ok "a journalled step at the restart: torn beyond it, the keyframe mends it; torn within it, the journal; journalled applied, the hook never sees torn weights"

# 6. The publisher's copy of the last published state (the next diff's base) is not synced after
#    each publish either: `pulse publish` syncs it before it returns (no note left). After a restart
#    made by hand (a note from another boot, the copy holding step 1's second half), the copy is
#    found not to hold its state, removed, and the next step goes out as a keyframe.
pub2() { P publish --store "$store" --run r2 --key trainer.key --state t2 "$(ckpt "$1")" 2>>pub2.log; }
for i in 0 1 2; do pub2 "$i" >/dev/null || fail "publish r2 step $i: $(cat pub2.log)"; done
[ ! -e t2/unsynced ] || fail "pulse publish left the unsynced note"
copy=$(ls t2/last-*.safetensors)
[ "$copy" = "t2/last-$(P hash "$(ckpt 2)").safetensors" ] || fail "the copy is not step 2's: $copy"
{ head -c "$cut" "$(ckpt 2)"; tail -c +$((cut + 1)) "$(ckpt 1)"; } >"$copy"
printf '%s\n' "$other" >t2/unsynced
out=$(pub2 3) || fail "publish r2 step 3 after the restart: $(cat pub2.log)"
grep -q 'no longer holds its state' pub2.log || fail "the torn copy was not named: $(cat pub2.log)"
ls store/r2/records/keyframe/ | grep -q '^0*3$' || fail "step 3 was not published as a keyframe: $(ls -R store/r2/records)"
[ ! -e t2/unsynced ] || fail "the other boot's note was left"
"$PULSE_BIN" pull --store "$store" --run r2 --trust trainer.pub --state p2 --weights p2.safetensors >/dev/null \
  || fail "pull of r2"
cmp -s p2.safetensors "$(ckpt 3)" || fail "r2 pulled after the restart differs from step 3"
ok "a publisher's copy torn by a restart is dropped and the next step is a keyframe; followers reach it"
