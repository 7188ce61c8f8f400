#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# pulse pull says on stderr what it skipped (records that do not verify, keys that are no record
# key) and a store older than the state held, every time, and still exits 0 (file:// store).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"

pull() {
  "$PULSE_BIN" pull --store "${STORE:-$store}" --run r --trust trainer.pub --state p/state --weights p/w.safetensors
}

P synth --params 1M --steps 5 --out ckpt >/dev/null
publish 0 3
node=$(ls store/r/records/keyframe/000000000000/)
rec() { printf 'store/r/records/sync-patch/%012d/%s' "$1" "$node"; }
cp -a store snap3   # the bucket as it was at step 3
mkdir p
pull >p0.out 2>p0.err || fail "first pull: $(cat p0.err)"
[ ! -s p0.err ] || fail "a clean pull wrote on stderr: $(cat p0.err)"

# 1. Junk: 300 random bytes under a record key at step 99999999999, a good record copied under a
# key with junk after the node id; then good steps 4 and 5.
mkdir -p "$(dirname "$(rec 99999999999)")"
head -c 300 /dev/urandom >"$(rec 99999999999)"
cp "$(rec 2)" "$(rec 2)x"
publish 4 5
pull >p1.out 2>p1.err || fail "pull with junk in the bucket: $(cat p1.err)"
cmp -s "$(ckpt 5)" p/w.safetensors || fail "the good steps were not applied: $(cat p1.err)"
grep -q "at step 5, .*(2 steps applied)" p1.out || fail "pull's last line: $(cat p1.out)"
grep -q "refused record=records/sync-patch/099999999999/$node reason=" p1.err \
  || fail "the junk record at step 99999999999 was not named: $(cat p1.err)"
grep -q "ignored key=records/sync-patch/000000000002/${node}x reason=\"not a record key\"" p1.err \
  || fail "the key with junk after the node id was not named: $(cat p1.err)"
[ "$(wc -l <p1.err)" = 2 ] || fail "not one line per skipped key: $(cat p1.err)"
ok "pull names the junk record and the misnamed key, applies steps 4 and 5, exit 0"

# 2. Said again by the next pull (the refusal is remembered, not re-fetched, but still skipped).
pull >p2.out 2>p2.err || fail "second pull: $(cat p2.err)"
grep -q "(0 steps applied)" p2.out || fail "second pull: $(cat p2.out)"
grep -q "refused record=records/sync-patch/099999999999/$node" p2.err || fail "second pull is silent: $(cat p2.err)"
grep -q "ignored key=records/sync-patch/000000000002/${node}x" p2.err || fail "second pull: $(cat p2.err)"
ok "the next pull names them again"

# 3. A store rolled back to step 3 while the weights hold step 5: said, nothing rolled back.
STORE="file://$work/snap3" pull >p3.out 2>p3.err || fail "pull from the old snapshot: $(cat p3.err)"
grep -q "store-behind held=5 newest=3" p3.err || fail "no store-behind line: $(cat p3.err)"
grep -q "at step 5, .*(0 steps applied)" p3.out || fail "pull from the old snapshot: $(cat p3.out)"
cmp -s "$(ckpt 5)" p/w.safetensors || fail "the weights were rolled back"
pull >p4.out 2>p4.err || fail "pull from the live store: $(cat p4.err)"
grep -q "store-behind" p4.err && fail "store-behind on the live store: $(cat p4.err)"
ok "a store behind the held step: store-behind held=5 newest=3, exit 0, weights kept"
