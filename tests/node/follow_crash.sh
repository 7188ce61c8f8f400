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
follow t --once 2>t2.log || fail "recovery: $(cat t2.log)"
grep -q 'recovered step=4 phase=applying' t2.log || fail "no recovery logged: $(cat t2.log)"
cmp -s t/w.safetensors "$(ckpt 4)" || fail "recovered weights differ from step 4"
[ ! -e t/state/journal ] || fail "journal left behind"
[ "$("$check" applied t/state/index.db r | cut -d' ' -f1 | tr '\n' ' ')" = "0 1 2 3 4 " ] \
  || fail "applied rows after recovery: $("$check" applied t/state/index.db r)"
ok "a torn step is finished from the journal's absolute patch; step 4 applied once"

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
