#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# End to end against the real RGW: catch-up takes the cheaper path by bytes. With a keyframe every 5
# steps and 17 steps published, a follower started late (no weights) comes in through the newest
# keyframe (15) and fetches fewer bytes than the whole chain; a follower that was at step 2 takes the
# patch chain, which is cheaper than that keyframe. Bytes are counted from the proxy's log of what
# each follower really GOT, priced by the object sizes RGW lists, not by the follower's own report.
# shellcheck source=tests/node/e2e_lib.sh disable=SC2154  # work, run, node_pid... come from it
. "$(dirname "$0")/e2e_lib.sh"

steps=17
"$PULSE_BIN" keygen "$work/trainer" >/dev/null
make_trajectory "$steps"
start_proxy

# follow_once NAME: one catch-up run of a follower through the proxy (no faults), bounded.
follow_once() {
  local rc=0
  AWS_ENDPOINT_URL=$proxy_url timeout 120 "$PULSE_BIN" node follow --store "$store" --run "$run" \
    --trust "$work/trainer.pub" --state "$work/$1.state" --weights "$work/$1.safetensors" \
    --metrics-file "$work/$1.prom" --once --log json >>"$work/$1.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || fail "$1: follow --once exited $rc"
}

# fetched_bytes: bytes of objects GET in the proxy log since the last set_rules, each GET priced at
# the whole object's size from `pulse store ls -l` (a repeated or partial GET counts in full, so
# this never under-counts).
fetched_bytes() {
  "$PULSE_BIN" store ls "$store/$run/objects/" -l >"$work/objects.ls" || fail "store ls failed"
  awk -v b="/$bucket/" -v objs="/$bucket/$prefix/$run/objects/" '
    NR == FNR { size[$3] = $1; next }
    $2 == "GET" && index($3, objs) == 1 && $5 ~ /^20[06]$/ { k = substr($3, length(b) + 1)
      sub(/\?.*/, "", k); if (k in size) sum += size[k]; else missing++ }
    END { if (missing) { print "unpriced " missing; exit 1 } print sum + 0 }' \
    "$work/objects.ls" "$work/proxy.log"
}

# Keyframes at 0, 5, 10, 15; keep them all, so the whole chain is still there to compare with.
start_trainer trainer --keyframe-every 5 --keep-keyframes 0
for k in $(seq 0 "$steps"); do
  release "$k"
  wait_until 60 "the trainer to publish step $k" published "$k"
  if [ "$k" = 2 ]; then
    follow_once mid   # "mid" holds step 2, then goes offline
    same_as 2 "$work/mid.safetensors" || fail "mid does not hold step 2"
  fi
done
stop_node trainer
ok "trainer published steps 0..$steps with keyframes every 5"

# What the two paths cost, from the signed records (patch_bytes = sum of a record's object sizes).
"$PULSE_BIN" manifest ls --store "$store" --run "$run" --trust "$work/trainer.pub" --json >"$work/records.json" \
  || fail "manifest ls failed"
read -r chain_all keyframe_path chain_from_2 < <(python3 - "$work/records.json" "$steps" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
last = int(sys.argv[2])
kf = {r["step"]: r["patch_bytes"] for r in recs if r["kind"] == "keyframe"}
sp = {r["step"]: r["patch_bytes"] for r in recs if r["kind"] == "sync-patch"}
assert sorted(kf) == [0, 5, 10, 15], sorted(kf)
assert sorted(sp) == list(range(1, last + 1)), sorted(sp)
print(kf[0] + sum(sp.values()), kf[15] + sp[16] + sp[17], sum(sp[s] for s in range(3, last + 1)))
EOF
) || fail "records do not have the expected shape"
echo "whole chain (keyframe 0 + patches 1..$steps): $chain_all bytes; keyframe 15 + patches 16..17: $keyframe_path bytes; patches 3..$steps: $chain_from_2 bytes"

# The late follower: no weights at all.
set_rules ""
follow_once late
same_as "$steps" "$work/late.safetensors" || fail "late does not hold step $steps"
late=$(fetched_bytes) || fail "late fetched objects the store does not list: $late"
check_applied_once late 15 "$steps"
[ "$late" -lt "$chain_all" ] || fail "late fetched $late bytes, not fewer than the whole chain ($chain_all)"
[ "$late" -le $((keyframe_path + keyframe_path / 10)) ] \
  || fail "late fetched $late bytes, more than keyframe 15 and two patches ($keyframe_path) allow"
ok "late follower: keyframe 15 + patches 16..17, fetched $late bytes < whole chain $chain_all ($((100 * late / chain_all))%)"

# The follower that was at step 2: 15 patches behind, and the chain costs less than the keyframe.
[ "$chain_from_2" -lt "$keyframe_path" ] || fail "test data: the chain from 2 is not the cheaper path"
set_rules ""
follow_once mid
same_as "$steps" "$work/mid.safetensors" || fail "mid does not hold step $steps"
mid=$(fetched_bytes) || fail "mid fetched objects the store does not list: $mid"
check_applied_once mid 0 "$steps"
[ "$mid" -lt "$keyframe_path" ] || fail "mid fetched $mid bytes, not fewer than the keyframe path ($keyframe_path)"
ok "mid follower (at step 2): patches 3..$steps, fetched $mid bytes < keyframe path $keyframe_path"
grep -q '^pulse_bytes_fetched_total [1-9]' "$work/late.prom" || fail "late's metrics count no bytes fetched"
