#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A store that stops showing new records (a frozen replica) while the trainer goes on: without
# --max-staleness the follower derives a bound from the run's cadence, logs `stale` and sets
# pulse_stale; no bound over a run's first records; --max-staleness N wins, 0 turns it off.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"

P synth --params 1M --steps 9 --out ckpt >/dev/null
frozen="file://$work/frozen"

# 1. A run's first records give no bound: three records, no pulse_staleness_bound_seconds.
publish 0 2
mkdir a
follow a --once --metrics-file a.prom 2>a.log || fail "first pull: $(cat a.log)"
[ "$(metric a.prom pulse_staleness_bound_seconds)" = 0 ] || fail "a bound after 3 records: $(cat a.prom)"
ok "no staleness bound over a run's first 3 records"

# 2. Steps 3..5 (six records, about a second apart or less: the bound is the 10 s floor, or 4
# median intervals on a slow machine). The store the follower sees then freezes at step 5 while
# the trainer publishes steps 6..8.
publish 3 5
cp -a store frozen
mkdir f
"$PULSE_BIN" node follow --store "$frozen" --run r --trust trainer.pub --state f/state --weights f/w.safetensors \
  --poll-ms 200 --metrics-file f.prom --log json 2>>f.log &
bg=$!
held5() { [ "$(metric f.prom pulse_held_step)" = 5 ]; }
wait_until 60 held5 || fail "the follower did not reach step 5: $(cat f.log)"
publish 6 8
bound=$(metric f.prom pulse_staleness_bound_seconds)
[ "$bound" -ge 10 ] && [ "$bound" -le 60 ] || fail "the derived bound is $bound s: $(cat f.prom)"
stale1() { [ "$(metric f.prom pulse_stale)" = 1 ]; }
wait_until 60 stale1 || fail "a store frozen for over 10 s read as fresh: $(cat f.log f.prom)"
grep -q "\"event\":\"stale\".*\"max_staleness_s\":$bound,\"bound\":\"cadence\"" f.log || fail "no stale line: $(cat f.log)"
[ "$(metric f.prom pulse_lag_steps)" = 0 ] || fail "lag is not 0 on the frozen store"
ok "a frozen store: stale logged and pulse_stale 1 after the derived bound ($bound s) with no option"

# 3. The store shows the newer records again: the follower applies them and logs fresh.
publish 9 9
cp -a store/. frozen/
fresh() { [ "$(metric f.prom pulse_held_step)" = 9 ] && [ "$(metric f.prom pulse_stale)" = 0 ]; }
wait_until 60 fresh || fail "not fresh after the store thawed: $(cat f.log f.prom)"
grep -q '"event":"fresh"' f.log || fail "no fresh line: $(cat f.log)"
kill -TERM "$bg"; wait "$bg" || fail "follower exit after SIGTERM: $(cat f.log)"; bg=""
ok "the store shows the new steps again: applied, fresh"

# 4. A follower started at the head reads enough of the newest records for a bound; once step 9
# is older than it, stale again. --max-staleness N wins over it; 0 turns it off.
stale_once() { follow f --once --metrics-file g.prom 2>g.log && [ "$(metric g.prom pulse_stale)" = 1 ]; }
wait_until 60 stale_once || fail "the derived bound did not come back: $(cat g.log g.prom)"
follow f --once --max-staleness 100000 --metrics-file h.prom 2>h.log || fail "--max-staleness 100000: $(cat h.log)"
[ "$(metric h.prom pulse_stale)" = 0 ] && [ "$(metric h.prom pulse_staleness_bound_seconds)" = 100000 ] \
  || fail "--max-staleness did not win: $(cat h.prom)"
follow f --once --max-staleness 0 --metrics-file z.prom 2>z.log || fail "--max-staleness 0: $(cat z.log)"
[ "$(metric z.prom pulse_stale)" = 0 ] && [ "$(metric z.prom pulse_staleness_bound_seconds)" = 0 ] \
  || fail "--max-staleness 0 did not turn the bound off: $(cat z.prom)"
grep -q stale z.log && fail "--max-staleness 0 logged stale: $(cat z.log)"
ok "--max-staleness 100000 wins over the derived bound, --max-staleness 0 turns it off"
