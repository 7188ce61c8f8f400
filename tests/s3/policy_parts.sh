#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Least privilege for a trainer in parts on a real RGW (docs/deploy.md, docs/sync.md): two part hosts
# with users of their own (one of them committing, and keeping the run and its part runs by
# retention) publish steps 0..3 under the policy of `scripts/bucket-policy.py --parts 2`; a follower
# pulls bit-identically and can touch no part run's keys.
#
# The refusals are real checks (policy_lib.sh): with PULSE_POLICY_OPEN=1 all 5 fail.
# shellcheck source=tests/s3/policy_lib.sh disable=SC2154  # work, root, store helpers come from it
. "$(dirname "$0")/policy_lib.sh"
users pulse-part-0 pulse-part-1 pulse-follower-a
pb="pulse-policy-parts-$$"
printf 'not a pulse file\n' >evil
for k in tr fa; do P keygen --comment "$k" "$k" >/dev/null || fail "keygen $k"; done
T=$(node_of tr) FA=$(node_of fa)
P synth --out ckpt --params 1M --steps 3 --seed 5 >/dev/null || fail "pulse synth"
for s in 0 1 2 3; do
  python3 "$root/tests/sync/shard.py" "ckpt/step-00000$s.safetensors" 2 "sh$s" || fail "shard.py step $s"
done
make_bucket "$pb" pulse-part-0 pulse-part-1 pulse-follower-a -- --run r --parts 2 \
  --trainer "pulse-part-0=$T" --trainer "pulse-part-1=$T" --follower "pulse-follower-a=$FA"
store="s3://$pb"

# The part hosts: each a node watching its own shards; host 1 commits, keeps one keyframe (a
# keyframe every 2 steps), so its retention deletes the run's and the part runs' old records.
for i in 0 1; do
  mkdir -p "w$i"
  for s in 0 1 2 3; do cp "sh$s/model-0000$((i + 1))-of-00002.safetensors" "w$i/part-step$s.safetensors"; done
done
for i in 0 1; do
  extra=(); [ "$i" = 1 ] && extra=(--commit --commit-wait 60 --keep-keyframes 1)
  as "pulse-part-$i" P node trainer --store "$store" --run r --key tr.key --state "st$i" --watch "w$i" \
    --pattern 'part-step{N}.safetensors' --part "$i/2" --once --poll-ms 100 --keyframe-every 2 "${extra[@]}" \
    --log json 2>"node$i.log" &
done
wait
for i in 0 1; do
  ! grep -q '"event":"error"' "node$i.log" || fail "part host $i logged an error: $(grep '"error"' "node$i.log")"
done
grep -q '"event":"committed","step":3,' node1.log || fail "host 1 did not commit step 3: $(cat node1.log)"
grep -q '"event":"retained"' node1.log || fail "no retention pass over the run in parts: $(cat node1.log)"
ok "two part hosts with their own users published steps 0..3, one committed them and kept the run by retention"

as pulse-follower-a P pull --store "$store" --run r --trust tr.pub --state fst --weights w.safetensors >pull.log 2>&1 \
  || fail "the follower's pull: $(cat pull.log)"
[ "$(P hash w.safetensors)" = "$(P hash sh3)" ] || fail "the follower does not hold step 3 of the sharded checkpoint"
ok "the follower holds step 3 (pulse hash of the sharded directory)"
as pulse-follower-a P pull --store "$store" --run r.part-0-of-2 --trust tr.pub --state fst0 --weights p0.safetensors \
  >pull0.log 2>&1 || fail "the follower's pull of a part run: $(cat pull0.log)"
ok "the follower reads a part run (a host holding one part follows it)"

snapshot() { as pulse-part-1 pulse_store ls -l "$store/" | sort; }
snapshot >before || fail "listing $pb as part host 1"
prec=$(awk '$3 ~ /^r\.part-0-of-2\/records\// {print $3; exit}' before)
[ -n "$prec" ] || fail "no part record to aim at: $(cat before)"
refused pulse-follower-a "overwrite a part's head" pulse_store put "$store/r.part-0-of-2/heads/sync/$T" evil
refused pulse-follower-a "delete a part's record" pulse_store rm "$store/$prec"
refused pulse-follower-a "publish into a part run" \
  pulse_store put "$store/r.part-1-of-2/records/sync-patch/000000000009/$T" evil --if-absent
refused pulse-part-0 "write a part record under the follower's node id" \
  pulse_store put "$store/r.part-0-of-2/records/sync-patch/000000000009/$FA" evil --if-absent
refused pulse-part-0 "write a part run of another split" \
  pulse_store put "$store/r.part-0-of-3/records/sync-patch/000000000009/$T" evil --if-absent
snapshot >after || fail "listing $pb as part host 1, after"
check_refused
diff before after >keys.diff || fail "the bucket's keys changed: $(cat keys.diff)"
ok "the follower cannot touch the part runs, nor a part host another node's keys or another split"
