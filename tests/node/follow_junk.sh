#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A follower in a bucket anyone can write: junk records, misnamed keys, replays, forged heads,
# 20,000 junk keys, an older snapshot of the store and a trainer gone quiet (file:// store).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"
unset MALLOC_PERTURB_   # ~20 follower runs; the codec's buffers need not be filled each time

P synth --params 1M --steps 8 --out ckpt >/dev/null
publish 0 3
node=$(ls store/r/records/keyframe/000000000000/)
[ ${#node} = 64 ] || fail "no trainer node id under the keyframe: $node"
rec() { printf 'store/r/records/sync-patch/%012d/%s' "$1" "$node"; }
cp -a store snap3   # the bucket as it was at step 3
mkdir f
follow f --once 2>f0.log || fail "first catch-up: $(cat f0.log)"

# 1. Junk a follower must skip: an unsigned far-future record, a good record under a key with
# junk after the node id, an old record copied to a newer step; then good steps 4..6.
mkdir -p "$(dirname "$(rec 999999999999)")" "$(dirname "$(rec 100)")" "$(dirname "$(rec 7)")"
head -c 300 /dev/urandom >"$(rec 999999999999)"
cp "$(rec 2)" "$(rec 7)x"
cp "$(rec 1)" "$(rec 100)"
publish 4 6
follow f --once --metrics-file f1.prom 2>f1.log || fail "pull with junk in the bucket failed: $(cat f1.log)"
cmp -s "$(ckpt 6)" f/w.safetensors || fail "the good steps after the junk were not applied: $(cat f1.log)"
[ "$(metric f1.prom pulse_held_step)" = 6 ] || fail "held step is not 6: $(cat f1.prom)"
[ "$(metric f1.prom pulse_lag_steps)" = 0 ] || fail "junk at step 999999999999 moved pulse_lag_steps: $(cat f1.prom)"
grep -q "refused record=records/sync-patch/999999999999/" f1.log || fail "the junk record was not logged: $(cat f1.log)"
grep -q "refused record=records/sync-patch/000000000100/" f1.log || fail "the replayed record was not logged"
grep -q "${node}x" f1.log && fail "a key with junk after the node id was fetched: $(cat f1.log)"
[ "$(metric f1.prom pulse_verify_failures_total)" = 2 ] || fail "verify failures are not 2: $(cat f1.prom)"
ok "junk far-future record, misnamed key and replayed record skipped; steps 4..6 applied; lag 0"

# 2. The refusals are remembered: logged once, not counted again, not fetched again.
follow f --once --metrics-file f2.prom 2>f2.log || fail "second pull: $(cat f2.log)"
grep -q refused f2.log && fail "a refused record was logged again: $(cat f2.log)"
[ "$(metric f2.prom pulse_verify_failures_total)" = 0 ] || fail "refusals counted again: $(cat f2.prom)"
[ "$(sqlite3 f/state/index.db 'SELECT count(*) FROM refusals')" = 2 ] || fail "refusals table is not 2 rows"
[ "$(sqlite3 f/state/index.db "SELECT count(*) FROM records WHERE key LIKE '%999999999999%'")" = 0 ] \
  || fail "the junk record's bytes were stored in the index"
[ "$(sqlite3 f/state/index.db "SELECT count(*) FROM records WHERE key LIKE '%000000000100%'")" = 0 ] \
  || fail "the replayed record's bytes were stored in the index"
ok "refusals kept as verdict rows: logged once, not counted again"

# 3. A forged head naming a far step does not move the lag figures of a running follower.
mkdir -p store/r/heads/sync
printf 'records/sync-patch/999999999999/%s\n' "$node" >"store/r/heads/sync/$node"
start_follow f3.log f --poll-ms 20 --metrics-file f3.prom
held6() { [ "$(metric f3.prom pulse_held_step)" = 6 ]; }
wait_until 60 held6 || fail "the follower wrote no metrics: $(cat f3.log)"
sleep 1   # some polls of the head (every 20 ms)
[ "$(metric f3.prom pulse_lag_steps)" = 0 ] || fail "a forged head moved pulse_lag_steps: $(cat f3.prom)"
kill -TERM "$bg"; wait "$bg" || fail "follower exit after SIGTERM: $(cat f3.log)"; bg=""
cmp -s "$(ckpt 6)" f/w.safetensors || fail "the forged head changed the weights"
ok "a forged head at step 999999999999 leaves pulse_lag_steps at 0"

# 4. 20,000 one-byte junk keys under the trainer's prefix: skipped, one small row each.
python3 - "$node" <<'PY'
import os, sys
node = sys.argv[1]
for s in range(1000000, 1020000):
    d = "store/r/records/sync-patch/%012d" % s
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, node), "wb") as f:
        f.write(b"x")
PY
publish 7 7
before=$(stat -c %s f/state/index.db)
follow f --once --metrics-file f4.prom 2>f4.log || fail "pull with 20000 junk keys: $(tail -3 f4.log)"
cmp -s "$(ckpt 7)" f/w.safetensors || fail "step 7 was not applied past 20000 junk keys"
[ "$(metric f4.prom pulse_lag_steps)" = 0 ] || fail "junk keys moved pulse_lag_steps"
[ "$(sqlite3 f/state/index.db 'SELECT count(*) FROM refusals')" = 20002 ] || fail "not one refusal row per junk key"
[ "$(grep -c '^.*refused record=' f4.log)" -le 16 ] || fail "more than 16 refusal lines in one pull"
grep -q 'refused-more count=19984' f4.log || fail "no summary of the unlogged refusals: $(tail -3 f4.log)"
wal=$(stat -c %s f/state/index.db-wal 2>/dev/null || echo 0)
after=$(( $(stat -c %s f/state/index.db) + wal ))
[ $((after - before)) -lt $((20000 * 512)) ] || fail "the index grew by $((after - before)) bytes for 20000 junk keys"
follow f --once --metrics-file f5.prom 2>f5.log || fail "pull after the junk keys: $(tail -3 f5.log)"
grep -q refused f5.log && fail "junk keys logged again"
[ "$(metric f5.prom pulse_verify_failures_total)" = 0 ] || fail "junk keys counted again"
ok "20000 one-byte junk keys: step 7 applied, one row each ($((after - before)) bytes), not logged again"

# 5. A store rolled back to an older snapshot: noticed, nothing rolled back.
rm -rf snapdir && cp -a snap3 snapdir
"$PULSE_BIN" node follow --store "file://$work/snapdir" --run r --trust trainer.pub --state f/state \
  --weights f/w.safetensors --once --metrics-file f6.prom 2>f6.log || fail "pull from the old snapshot: $(cat f6.log)"
grep -q 'store-behind held=7 newest=3' f6.log || fail "no store-behind line: $(cat f6.log)"
[ "$(metric f6.prom pulse_store_behind)" = 1 ] || fail "pulse_store_behind is not 1: $(cat f6.prom)"
[ "$(metric f6.prom pulse_held_step)" = 7 ] || fail "held step moved from 7"
cmp -s "$(ckpt 7)" f/w.safetensors || fail "the weights were rolled back"
follow f --once --metrics-file f7.prom 2>f7.log || fail "pull from the live store: $(cat f7.log)"
[ "$(metric f7.prom pulse_store_behind)" = 0 ] || fail "pulse_store_behind stays 1 on the live store"
ok "an older snapshot of the store: store-behind logged and counted, weights kept at step 7"

# 6. Freshness: the newest verified record's age, and --max-staleness (the bound a follower
# derives without it: follow_frozen.sh).
age=$(metric f7.prom pulse_newest_record_age_seconds)
awk -v a="$age" 'BEGIN { exit !(a >= 0 && a < 100000) }' || fail "pulse_newest_record_age_seconds is $age"
follow f --once --max-staleness 100000 --metrics-file f8.prom 2>f8.log || fail "--max-staleness: $(cat f8.log)"
[ "$(metric f8.prom pulse_stale)" = 0 ] || fail "stale under a day's bound"
sleep 2.2
follow f --once --max-staleness 1 --metrics-file f9.prom 2>f9.log || fail "--max-staleness 1: $(cat f9.log)"
[ "$(metric f9.prom pulse_stale)" = 1 ] || fail "pulse_stale is not 1 past the bound: $(cat f9.prom)"
[ "$(grep -c 'stale newest_age_s=' f9.log)" = 1 ] || fail "not one stale line: $(cat f9.log)"
follow f --once --max-staleness 0 --metrics-file f10.prom 2>f10.log || fail "--max-staleness 0: $(cat f10.log)"
[ "$(metric f10.prom pulse_stale)" = 0 ] || fail "pulse_stale with --max-staleness 0: $(cat f10.prom)"
ok "pulse_newest_record_age_seconds and pulse_stale follow --max-staleness"
