#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Least privilege on a real RGW (docs/deploy.md): separate users for the trainer and two followers,
# the policy of scripts/bucket-policy.py on a bucket of their own; the run works end to end, and a
# follower's credentials cannot delete or overwrite the trainer's keys or another follower's receipts.
#
# The refusals are real checks: PULSE_POLICY_OPEN=1 applies instead a policy letting every node write
# the whole bucket (what a shared key amounts to), and 21 of them fail; PULSE_POLICY_NO_DENY=1 drops
# the policy's Deny statements, and the 5 made while the bucket's ACL is public-read-write fail.
# shellcheck source=tests/s3/lib.sh disable=SC2154  # work, bucket, s3_dir come from lib.sh
. "$(dirname "$0")/lib.sh"

if [ -z "${PULSE_RGW_DIR:-}" ] || [ ! -s "$PULSE_RGW_DIR/ceph.conf" ]; then
  echo "SKIP: PULSE_RGW_DIR (the test RGW's directory, for radosgw-admin) is not set"
  exit 77
fi
root=$(cd "$s3_dir/../.." && pwd)
pb="pulse-policy-$$"          # a bucket of this test's own: its policy touches no other test
run=r

policy_cleanup() {
  timeout 120 radosgw-admin -c "$PULSE_RGW_DIR/ceph.conf" bucket rm --bucket "$pb" --purge-objects \
    >/dev/null 2>&1 || true
  cleanup
}
trap policy_cleanup EXIT

bash "$s3_dir/rgw_users.sh" create "$PULSE_RGW_DIR" pulse-owner pulse-trainer pulse-follower-a \
  pulse-follower-b pulse-outsider >/dev/null || fail "could not create the RGW users"

# as UID CMD...: CMD with that user's credentials, and only those.
as() {
  local u=$1
  shift
  (
    unset AWS_SESSION_TOKEN AWS_PROFILE
    # shellcheck disable=SC1090
    . "$PULSE_RGW_DIR/users/$u.env"
    "$@"
  )
}
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"

# The keys, the checkpoints (steps 0..5), the bucket (owned by an administrator that runs no node).
for k in trainer fa fb; do P keygen --comment "$k" "$k" >/dev/null || fail "keygen $k"; done
node_of() { awk '{print $2}' "$1.pub"; }
T=$(node_of trainer) FA=$(node_of fa) FB=$(node_of fb)
P synth --out ckpt --params 1M --steps 5 --seed 7 >/dev/null || fail "pulse synth"
ckpt() { printf 'ckpt/step-%06d.safetensors' "$1"; }
[ "$(as pulse-owner s3 PUT "/$pb" | head -n 1)" = 200 ] || fail "the owner could not create bucket $pb"

if [ "${PULSE_POLICY_OPEN:-0}" = 1 ]; then
  echo "PULSE_POLICY_OPEN=1: every node may write the whole bucket (the refusals below must fail)"
  cat >policy.json <<EOF
{"Version": "2012-10-17", "Statement": [{"Sid": "Open", "Effect": "Allow",
  "Principal": {"AWS": ["arn:aws:iam:::user/pulse-trainer", "arn:aws:iam:::user/pulse-follower-a",
                        "arn:aws:iam:::user/pulse-follower-b"]},
  "Action": ["s3:*"], "Resource": ["arn:aws:s3:::$pb", "arn:aws:s3:::$pb/*"]}]}
EOF
else
  python3 "$root/scripts/bucket-policy.py" --bucket "$pb" --run "$run" \
    --trainer "pulse-trainer=$T" --follower "pulse-follower-a=$FA" --follower "pulse-follower-b=$FB" \
    >policy.json || fail "scripts/bucket-policy.py failed"
  if [ "${PULSE_POLICY_NO_DENY:-0}" = 1 ]; then
    echo "PULSE_POLICY_NO_DENY=1: the Allow statements only (the refusals under an open ACL must fail)"
    python3 -c 'import json, sys; p = json.load(open(sys.argv[1]))
p["Statement"] = [s for s in p["Statement"] if s["Effect"] == "Allow"]
json.dump(p, open(sys.argv[1], "w"))' policy.json
  fi
fi
code=$(as pulse-owner s3 PUT "/$pb" -q policy -d policy.json | head -n 1)
[ "$code" = 204 ] || [ "$code" = 200 ] || fail "PUT ?policy answered $code"
ok "bucket $pb made by pulse-owner, policy applied"

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
grep -q '"event":"published".*"step":"3"\|"event":"published","step":3' trainer.log \
  || grep -q 'published.*step.*3' trainer.log || fail "the trainer did not publish step 3: $(cat trainer.log)"
grep -q '"event":"retained"' trainer.log || fail "no retention pass deleted anything: $(cat trainer.log)"
ok "the trainer published steps 0..3 and its retention deleted old records and objects"

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
ok "followers pull bit-identically, write their receipts and read the status with their own keys"

# What a follower may not do. Every key of the run, as the trainer sees it, before and after.
snapshot() { as pulse-trainer pulse_store ls -l "$store/$run/" | sort; }
snapshot >before || fail "listing the run as the trainer"
obj=$(awk '$3 ~ /\/objects\// {print $3; exit}' before)
rec=$(awk '$3 ~ /\/records\// {print $3; exit}' before)
[ -n "$obj" ] && [ -n "$rec" ] || fail "no object or record to aim at: $(cat before)"
printf 'not a pulse file\n' >evil
# refused USER WHAT CMD...: CMD with USER's credentials must exit non-zero with one line naming HTTP
# 403. Every case runs; the ones that were not refused are listed together at the end.
missed=()
tried=0
refused() {
  local u=$1 what=$2 rc=0
  shift 2
  tried=$((tried + 1))
  as "$u" "$@" >out 2>err || rc=$?
  if [ "$rc" = 0 ]; then
    missed+=("$u could $what")
  elif ! grep -q 'access refused (HTTP 403' err || [ "$(wc -l <err)" != 1 ]; then
    missed+=("$u: $what failed, but not with one line naming HTTP 403: $(cat err)")
  else
    echo "ok   $u cannot $what: $(cat err)"
  fi
}
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
refused $ua "list the whole bucket" pulse_store ls "$store/"
refused $ua "list another prefix" pulse_store ls "$store/other/"
refused pulse-follower-b "write into follower A's receipts" pulse_store put "$store/$(receipt "$FA" 9)" evil
refused pulse-follower-b "overwrite follower A's receipt" pulse_store put "$store/$(receipt "$FA" 3)" evil
refused pulse-follower-b "overwrite the trainer's head" pulse_store put "$store/$run/heads/sync/$T" evil
refused pulse-trainer "write a follower's receipt" pulse_store put "$store/$(receipt "$FA" 9)" evil
refused pulse-outsider "read the run" pulse_store get "$store/$run/heads/sync/$T" -o got
refused pulse-outsider "list the run" pulse_store ls "$store/$run/"
# A node's keys cannot rewrite the policy (here: one giving the follower everything).
sed "s/\"Sid\": \"ReadRun\"/\"Sid\": \"Grab\"/; s/\"s3:GetObject\"/\"s3:*\"/" policy.json >grab.json
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
if [ "${#missed[@]}" != 0 ]; then
  printf '  %s\n' "${missed[@]}" >&2
  fail "${#missed[@]} of $tried refusals did not happen (listed above)"
fi
diff before after >keys.diff || fail "the run's keys changed: $(cat keys.diff)"
ok "refused with 403 and nothing changed: follower deletes/overwrites of records, heads, objects, other receipts"

# The run goes on: two more steps (a keyframe at 4), follower A catches up and writes its receipt.
release 4
release 5
trainer_once
follow_once pulse-follower-a fa fa
cmp -s "$(ckpt 5)" fa.safetensors || fail "follower A's weights differ from step 5"
as pulse-follower-a pulse_store head "$store/$(receipt "$FA" 5)" >/dev/null 2>&1 || fail "no receipt of step 5"
ok "the run goes on under the policy: steps 4..5 published, pruned, followed, receipted"
