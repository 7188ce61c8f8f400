#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Least privilege for PULSELoCo on a real RGW (docs/deploy.md): two LoCo trainers with their own
# users finish a reduce-scatter round under the policy of scripts/bucket-policy.py, the designated
# one publishes the view for a follower, and neither can touch the other's records or the serving run.
#
# The refusals are real checks (policy_lib.sh): with PULSE_POLICY_OPEN=1 all 9 fail.
# shellcheck source=tests/s3/policy_lib.sh disable=SC2154  # work, root, store helpers come from it
. "$(dirname "$0")/policy_lib.sh"
users pulse-loco-1 pulse-loco-2 pulse-follower-a
pb2="pulse-policy-loco-$$"
printf 'not a pulse file\n' >evil
P keygen --comment fa fa >/dev/null || fail "keygen fa"
FA=$(node_of fa)

# LoCo trainers (docs/loco.md) in a bucket of their own: run L holds their shards and rounds, and
# loco-1, the designated trainer, publishes the round's view as step 1 of run serve for followers.
for k in l1 l2; do P keygen --comment "$k" "$k" >/dev/null || fail "keygen $k"; done
N1=$(node_of l1) N2=$(node_of l2)
make_bucket "$pb2" pulse-loco-1 pulse-loco-2 pulse-follower-a -- --run serve --trainer "pulse-loco-1=$N1" \
  --follower "pulse-follower-a=$FA" --loco-run L --loco "pulse-loco-1=$N1" --loco "pulse-loco-2=$N2"
locogen=$root/tests/loco/locogen.py
python3 "$locogen" init theta0.safetensors 7 || fail "locogen init"
for k in 1 2; do P loco init --state "s$k" --global theta0.safetensors >/dev/null || fail "loco init $k"; done
python3 "$locogen" local s1/theta-000000000000.safetensors 0 1e-6 8 l1.safetensors l2.safetensors \
  || fail "locogen local"
store2="s3://$pb2"
as pulse-loco-1 P loco round --store "$store2" --run L --key l1.key --trainers l2.pub --state s1 \
  --local l1.safetensors -o new1 --shard-elems 3000 --deadline 60 --reduce-scatter --publish-run serve >loco1.out 2>&1 &
loco1=$!
rc=0
as pulse-loco-2 P loco round --store "$store2" --run L --key l2.key --trainers l1.pub --state s2 \
  --local l2.safetensors -o new2 --shard-elems 3000 --deadline 60 --reduce-scatter >loco2.out 2>&1 || rc=$?
wait "$loco1" || rc=1
[ "$rc" = 0 ] || fail "a LoCo round under the policy failed: $(cat loco1.out loco2.out)"
cmp -s new1 new2 || fail "the LoCo trainers ended with different theta_1"
as pulse-follower-a P pull --store "$store2" --run serve --trust l1.pub --state pserve \
  --weights serve.safetensors >pull2.log 2>&1 || fail "follower A's pull of run serve: $(cat pull2.log)"
cmp -s s1/view-000000000001.safetensors serve.safetensors || fail "run serve's step 1 is not the round's view"
ok "two LoCo trainers (reduce-scatter) finish a round with their own keys; a follower pulls its view"

snapshot2() { as pulse-loco-1 pulse_store ls -l "$store2/" | sort; }
snapshot2 >before2 || fail "listing $pb2 as loco-1"
lobj=$(awk '$3 ~ /^L\/objects\// {print $3; exit}' before2)
[ -n "$lobj" ] || fail "no LoCo object to aim at: $(cat before2)"
shard1=L/records/loco-shard/000000000000/$N1
refused pulse-loco-2 "overwrite loco-1's shard record" pulse_store put "$store2/$shard1" evil
refused pulse-loco-2 "delete loco-1's shard record" pulse_store rm "$store2/$shard1"
refused pulse-loco-2 "overwrite loco-1's reduced sums" pulse_store put "$store2/L/loco-rs/000000000000/00/$N1" evil
refused pulse-loco-2 "delete a round's plan" pulse_store rm "$store2/L/loco-rs/000000000000/00/plan"
refused pulse-loco-2 "delete a shard object" pulse_store rm "$store2/$lobj"
refused pulse-loco-2 "overwrite the serving run's head" pulse_store put "$store2/serve/heads/sync/$N1" evil
refused pulse-loco-2 "publish into the serving run" \
  pulse_store put "$store2/serve/records/keyframe/000000000002/$N2" evil --if-absent
refused pulse-follower-a "write a plan of the next round" \
  pulse_store put "$store2/L/loco-rs/000000000001/00/plan" evil --if-absent
refused pulse-follower-a "read the LoCo run" pulse_store get "$store2/$shard1" -o got
snapshot2 >after2 || fail "listing $pb2 as loco-1, after"
check_refused
diff before2 after2 >keys2.diff || fail "the LoCo bucket's keys changed: $(cat keys2.diff)"
ok "refused with 403 and nothing changed: a LoCo trainer cannot touch another's records or the serving run"
