#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A follower started late (15 steps, a keyframe every 5) catches up through the newest keyframe,
# fetching fewer bytes than the whole chain; one far behind with a broken chain does too.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"

P synth --params 1M --steps 15 --out ckpt >/dev/null
publish 0 15 5

mkdir late
follow late --once --metrics-file late.prom 2>late.log || fail "late follower: $(cat late.log)"
cmp -s "$(ckpt 15)" late/w.safetensors || fail "late follower's weights differ from step 15"
grep -q 'catch-up path=keyframe reason=no-weights .* to_step=15' late.log || fail "no keyframe path: $(cat late.log)"
# The whole chain: keyframe 0 and every patch (bytes of their objects, from the manifest).
chain=$(P manifest ls --store "$store" --run r --trust trainer.pub |
  awk '$2 == "sync-patch" || ($2 == "keyframe" && $1 == 0) { s += $6 } END { print s }')
fetched=$(metric late.prom pulse_bytes_fetched_total)
[ "$fetched" -lt "$chain" ] || fail "late follower fetched $fetched bytes, the whole chain is $chain"
[ "$("$check" applied late/state/index.db r | cut -d' ' -f1 | tr '\n' ' ')" = "15 " ] \
  || fail "late follower applied: $("$check" applied late/state/index.db r)"
ok "late follower took keyframe 15: $fetched bytes fetched, whole chain $chain"

# A follower at step 9 whose chain is broken (patch 11 gone: retention, a lost upload) takes
# keyframe 15 rather than stopping at step 10.
mkdir mid
cp "$(ckpt 9)" mid/w.safetensors
P store rm "$store/r/records/sync-patch/000000000011/$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' trainer.pub)" >/dev/null
follow mid --once --on-update 'sleep 60' --hook-timeout-ms 300 --metrics-file mid.prom 2>mid.log \
  || fail "broken-chain follower: $(cat mid.log)"
grep -q 'catch-up path=keyframe reason=chain-broken' mid.log || fail "no chain-broken keyframe path: $(cat mid.log)"
cmp -s "$(ckpt 15)" mid/w.safetensors || fail "broken-chain follower's weights differ from step 15"
grep -q 'hook-failed step=15 reason="timeout after 300 ms"' mid.log || fail "hanging hook not reported: $(cat mid.log)"
[ "$(metric mid.prom pulse_hook_failures_total)" = 1 ] || fail "hook timeout not counted: $(cat mid.prom)"
ok "broken chain at step 11: keyframe path to step 15; a hanging hook was killed after its timeout"
