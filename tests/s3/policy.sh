#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Least privilege on a real RGW (docs/deploy.md): separate users for the trainer and two followers,
# the policy of scripts/bucket-policy.py on a bucket of their own; the run works end to end, and a
# follower's credentials cannot delete or overwrite the trainer's keys or another follower's receipts.
#
# The refusals are real checks (policy_lib.sh): with PULSE_POLICY_OPEN=1 24 of the 26 fail (not the
# outsider's reads), with PULSE_POLICY_NO_DENY=1 the 5 made while the ACL is public-read-write fail.
# shellcheck source=tests/s3/policy_lib.sh disable=SC2154  # work, root, store helpers come from it
. "$(dirname "$0")/policy_lib.sh"
users pulse-trainer pulse-follower-a pulse-follower-b pulse-outsider
pb="pulse-policy-$$"
run=r

# The keys, the checkpoints (steps 0..5), the bucket and its policy.
for k in trainer fa fb; do P keygen --comment "$k" "$k" >/dev/null || fail "keygen $k"; done
T=$(node_of trainer) FA=$(node_of fa) FB=$(node_of fb)
P synth --out ckpt --params 1M --steps 5 --seed 7 >/dev/null || fail "pulse synth"
ckpt() { printf 'ckpt/step-%06d.safetensors' "$1"; }
make_bucket "$pb" pulse-trainer pulse-follower-a pulse-follower-b -- --run "$run" \
  --trainer "pulse-trainer=$T" --follower "pulse-follower-a=$FA" --follower "pulse-follower-b=$FB"

store="s3://$pb"
# trainer_once: a trainer node with the trainer's credentials publishes what is in watch/ and exits;
# a keyframe every 2 steps and one kept, so its retention deletes records and objects.
mkdir watch
release() { cp "$(ckpt "$1")" watch/.in.tmp && mv watch/.in.tmp "watch/$(basename "$(ckpt "$1")")"; }
trainer_once() {
  as pulse-trainer P node trainer --store "$store" --run "$run" --key trainer.key --state tstate \
    --watch watch --once --poll-ms 50 --keyframe-every 2 --keep-keyframes 1 --log json 2>>trainer.log \
    || fail "the trainer node failed: $(tail -n 5 trainer.log)"
  ! grep -q '"event":"error"' trainer.log || fail "the trainer logged an error: $(grep '"error"' trainer.log)"
}
for s in 0 1 2 3; do release "$s"; done
trainer_once
grep -q '"event":"published","step":3,' trainer.log || fail "the trainer did not publish step 3: $(cat trainer.log)"
grep -q '"event":"retained"' trainer.log || fail "no retention pass deleted anything: $(cat trainer.log)"
ok "the trainer published steps 0..3 and its retention deleted old records and objects"
# Objects of 64 MiB and more go up in parts (initiate, parts, complete: s3:PutObject for each): the
# same with a low threshold, then removed as retention would.
head -c 12000000 /dev/urandom >big
big_key="$run/objects/$(sha256sum big | cut -c1-64)"
as pulse-trainer timeout 60 env PULSE_S3_MULTIPART_THRESHOLD=8M PULSE_S3_PART_SIZE=5M \
  "$PULSE_BIN" store put "$store/$big_key" big --if-absent 2>err || fail "multipart put as the trainer: $(cat err)"
as pulse-trainer pulse_store rm "$store/$big_key" 2>err || fail "the trainer's delete of an object: $(cat err)"
ok "the trainer uploads a multipart object and deletes it"

# A follower (its own credentials) pulls bit-identically, and its node writes its receipts.
as pulse-follower-a P pull --store "$store" --run "$run" --trust trainer.pub --state pa \
  --weights pa.safetensors >pull.log 2>&1 || fail "follower A's pull: $(cat pull.log)"
cmp -s "$(ckpt 3)" pa.safetensors || fail "follower A's pulled weights differ from step 3"
follow_once() {  # follow_once USER KEY DIR
  as "$1" P node follow --store "$store" --run "$run" --trust trainer.pub --state "$3" \
    --weights "$3.safetensors" --key "$2.key" --once --log json 2>>"$3.log" \
    || fail "$1's follower node failed: $(tail -n 5 "$3.log")"
  ! grep -q '"event":"receipt-failed"' "$3.log" || fail "$1: receipt-failed: $(cat "$3.log")"
}
follow_once pulse-follower-a fa fa
follow_once pulse-follower-b fb fb
cmp -s "$(ckpt 3)" fa.safetensors && cmp -s "$(ckpt 3)" fb.safetensors \
  || fail "the followers' weights differ from step 3"
receipt() { printf '%s/receipts/%s/%012d' "$run" "$1" "$2"; }
for n in "$FA" "$FB"; do
  as pulse-follower-a pulse_store head "$store/$(receipt "$n" 3)" >/dev/null 2>&1 \
    || fail "no receipt of step 3 at $(receipt "$n" 3)"
done
as pulse-follower-a P status --store "$store" --run "$run" --trust trainer.pub >status.out 2>&1 \
  || fail "pulse status with a follower's credentials: $(cat status.out)"
for n in "$FA" "$FB"; do
  grep -q "${n:0:12}" status.out || fail "pulse status does not show follower ${n:0:12}: $(cat status.out)"
done
# A key that is not there yet reads as missing (404), not as refused: pulse relies on it (a head
# before the first publish, a LoCo plan not yet written).
rc=0
as pulse-follower-a pulse_store get "$store/$run/heads/sync/$FA" -o nothing 2>err || rc=$?
[ "$rc" != 0 ] && grep -q 'no such key' err || fail "a missing key, as a follower: $(cat err)"
ok "followers pull bit-identically, write their receipts and read the status with their own keys"

# What a follower may not do. Every key of the run, as the trainer sees it, before and after.
snapshot() { as pulse-trainer pulse_store ls -l "$store/$run/" | sort; }
snapshot >before || fail "listing the run as the trainer"
obj=$(awk '$3 ~ /\/objects\// {print $3; exit}' before)
rec=$(awk '$3 ~ /\/records\// {print $3; exit}' before)
[ -n "$obj" ] && [ -n "$rec" ] || fail "no object or record to aim at: $(cat before)"
printf 'not a pulse file\n' >evil
ua=pulse-follower-a
refused $ua "delete the trainer's record" pulse_store rm "$store/$rec"
refused $ua "delete the trainer's head" pulse_store rm "$store/$run/heads/sync/$T"
refused $ua "delete an object" pulse_store rm "$store/$obj"
refused $ua "overwrite the trainer's head" pulse_store put "$store/$run/heads/sync/$T" evil
refused $ua "overwrite an object" pulse_store put "$store/$obj" evil
refused $ua "create an object" pulse_store put "$store/$run/objects/$(sha256sum evil | cut -c1-64)" evil --if-absent
refused $ua "write a record in the trainer's name" \
  pulse_store put "$store/$run/records/sync-patch/000000000009/$T" evil --if-absent
refused $ua "write a record in its own name" \
  pulse_store put "$store/$run/records/sync-patch/000000000009/$FA" evil --if-absent
refused $ua "write into follower B's receipts" pulse_store put "$store/$(receipt "$FB" 9)" evil --if-absent
refused $ua "overwrite follower B's receipt" pulse_store put "$store/$(receipt "$FB" 3)" evil
refused $ua "delete follower B's receipt" pulse_store rm "$store/$(receipt "$FB" 3)"
refused $ua "delete its own receipt" pulse_store rm "$store/$(receipt "$FA" 3)"
refused $ua "write outside the run" pulse_store put "$store/other/x" evil
refused pulse-follower-b "write into follower A's receipts" pulse_store put "$store/$(receipt "$FA" 9)" evil
refused pulse-follower-b "overwrite follower A's receipt" pulse_store put "$store/$(receipt "$FA" 3)" evil
refused pulse-follower-b "overwrite the trainer's head" pulse_store put "$store/$run/heads/sync/$T" evil
refused pulse-trainer "write a follower's receipt" pulse_store put "$store/$(receipt "$FA" 9)" evil
refused pulse-outsider "read the run" pulse_store get "$store/$run/heads/sync/$T" -o got
refused pulse-outsider "list the run" pulse_store ls "$store/$run/"
# A refused HEAD has no body to name AccessDenied: a bare 403, which still means the policy.
refused pulse-outsider "head the run's head" pulse_store head "$store/$run/heads/sync/$T"
# A node's keys cannot rewrite the policy (here: one giving the follower everything).
sed "s/\"Sid\": \"ReadRun\"/\"Sid\": \"Grab\"/; s/\"s3:GetObject\"/\"s3:*\"/" "$pb.json" >grab.json
for u in $ua pulse-trainer; do
  tried=$((tried + 1))
  code=$(as "$u" s3 PUT "/$pb" -q policy -d grab.json -o body) || true
  if [ "$code" = 403 ]; then
    echo "ok   $u cannot replace the bucket policy: HTTP 403"
  else
    missed+=("$u could replace the bucket policy (HTTP $code)")
  fi
done
# A bucket ACL opened by mistake (public-read-write) lets anyone write by the ACL; the policy's Deny
# statements still keep the run's keys to their writers.
code=$(as pulse-owner s3 PUT "/$pb" -q acl -H 'x-amz-acl: public-read-write' -o body) || true
[ "$code" = 200 ] || fail "the owner could not set the bucket ACL (HTTP $code)"
refused $ua "overwrite the trainer's head under an open ACL" pulse_store put "$store/$run/heads/sync/$T" evil
refused $ua "delete the trainer's record under an open ACL" pulse_store rm "$store/$rec"
refused $ua "write into follower B's receipts under an open ACL" \
  pulse_store put "$store/$(receipt "$FB" 9)" evil
refused pulse-outsider "overwrite the trainer's head under an open ACL" \
  pulse_store put "$store/$run/heads/sync/$T" evil
refused pulse-outsider "delete an object under an open ACL" pulse_store rm "$store/$obj"
code=$(as pulse-owner s3 PUT "/$pb" -q acl -H 'x-amz-acl: private' -o body) || true
[ "$code" = 200 ] || fail "the owner could not reset the bucket ACL (HTTP $code)"

snapshot >after || fail "listing the run as the trainer, after"
check_refused
diff before after >keys.diff || fail "the run's keys changed: $(cat keys.diff)"
ok "refused with 403 and nothing changed: follower deletes/overwrites of records, heads, objects, other receipts"

# The run goes on: two more steps (a keyframe at 4), follower A catches up and writes its receipt.
release 4
release 5
trainer_once
grep -q '"event":"published","step":5,' trainer.log || fail "the trainer did not publish step 5: $(cat trainer.log)"
follow_once pulse-follower-a fa fa
cmp -s "$(ckpt 5)" fa.safetensors || fail "follower A's weights differ from step 5"
as pulse-follower-a pulse_store head "$store/$(receipt "$FA" 5)" >/dev/null 2>&1 || fail "no receipt of step 5"
ok "the run goes on under the policy: steps 4..5 published, pruned, followed, receipted"
as pulse-follower-a P manifest audit --store "$store" --run "$run" --trust trainer.pub >audit.out 2>&1 \
  || fail "pulse manifest audit with a follower's credentials: $(cat audit.out)"
ok "pulse manifest audit passes with a follower's (read-only) credentials"

