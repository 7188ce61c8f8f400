#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What a follower holds must come from a key trusted now: a revoked trainer key, and a journal
# planted in the state directory with no record behind it (file:// store).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"
unset MALLOC_PERTURB_

P synth --params 1M --steps 6 --out ckpt >/dev/null
P keygen --comment trainer2 trainer2 >/dev/null
publish 0 3
mkdir f
follow f --once 2>f0.log || fail "first catch-up: $(cat f0.log)"
cmp -s "$(ckpt 3)" f/w.safetensors || fail "follower not at step 3"
cp -a f g
cp -a f k
nodeA=$(ls store/r/records/keyframe/000000000000/)

# 1. Revocation: key A taken out of the trust set, key B's keyframe in the store. The follower
# says so and goes back to B's newest keyframe; with --keep-untrusted it only warns.
P publish --store "$store" --run r --key trainer2.key --state t2state "$(ckpt 5)" >/dev/null || fail "B's keyframe"
asB() { "$PULSE_BIN" node follow --store "$store" --run r --trust trainer2.pub --state "$1/state" \
  --weights "$1/w.safetensors" --once "${@:2}"; }
asB k --keep-untrusted --metrics-file k.prom 2>k.log || fail "--keep-untrusted: $(cat k.log)"
grep -q 'untrusted-state step=3 .*action=kept' k.log || fail "no untrusted-state line: $(cat k.log)"
[ "$(metric k.prom pulse_untrusted_state)" = 1 ] || fail "pulse_untrusted_state is not 1: $(cat k.prom)"
cmp -s "$(ckpt 3)" k/w.safetensors || fail "--keep-untrusted replaced the weights"
asB f --metrics-file f1.prom 2>f1.log || fail "follow trusting only B: $(cat f1.log)"
grep -q 'untrusted-state step=3 .*action=keyframe' f1.log || fail "no untrusted-state line: $(cat f1.log)"
cmp -s "$(ckpt 5)" f/w.safetensors || fail "the weights are not B's keyframe: $(cat f1.log)"
[ "$(metric f1.prom pulse_held_step)" = 0 ] || fail "held step is not B's keyframe step 0: $(cat f1.prom)"
[ "$(metric f1.prom pulse_untrusted_state)" = 0 ] || fail "pulse_untrusted_state stays 1 after the keyframe"
asB f 2>f2.log || fail "again trusting only B: $(cat f2.log)"
grep -q untrusted-state f2.log && fail "B's keyframe state called untrusted: $(cat f2.log)"
ok "a revoked key's state: untrusted-state logged, B's newest keyframe applied (or kept with --keep-untrusted)"

# 2. A journal planted in the state directory: an absolute patch from the held state to another
# checkpoint, naming a record that does not exist, then one naming the held step's own record.
plant() {
  P diff "$(ckpt 3)" "$(ckpt 6)" --values abs -o g/state/journal.patch >/dev/null || fail "pulse diff"
  printf 'pulse-journal 1\nphase applying\nkind sync-patch\nstep %s\nbase %s\nresult %s\nrecord records/sync-patch/%012d/%s\n' \
    "$1" "$(P hash "$(ckpt 3)")" "$(P hash "$(ckpt 6)")" "$1" "$nodeA" >g/state/journal
}
for s in 4 3; do
  plant $s
  follow g --once --metrics-file g$s.prom 2>g$s.log || fail "pull after a planted journal ($s): $(cat g$s.log)"
  cmp -s "$(ckpt 3)" g/w.safetensors || fail "a planted journal naming step $s was applied: $(cat g$s.log)"
  grep -q 'journal-refused step='$s g$s.log || fail "no journal-refused line: $(cat g$s.log)"
  [ ! -e g/state/journal ] && [ ! -e g/state/journal.patch ] || fail "the planted journal was left"
  [ "$(metric g$s.prom pulse_held_step)" = 3 ] || fail "held step is not 3: $(cat g$s.prom)"
done
ok "a planted journal (no record, or a record with another result) is refused, weights kept at step 3"
