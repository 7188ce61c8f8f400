#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `pulse node trainer` and `pulse status` on a file:// store, over a 1M-parameter synthetic trajectory.
#
# usage: trainer.sh WRITE_RECEIPT   (tests/node/write_receipt, signs a follower's receipt)
# 1. --once over a directory with steps 0..6, a *.tmp, a file still being written and a
#    malformed checkpoint: 0..6 published in order with keyframes at 0, 3, 6; the others never;
#    the malformed one logged as an error; a fresh pull is bit-identical to step 6. A re-run
#    publishes nothing.
# 2. Retention with --keep-keyframes 1 (keyframe every 4): exactly the records before the
#    keyframe at 4 (and the patch into it) are gone, the objects left are exactly those the
#    records left name, the audit passes, a fresh pull still reaches step 6 bit for bit.
# 3. The node in the background, checkpoints dropped in by rename (and a directory completed by
#    its .done marker), SIGTERM: exit 0, all published.
# 4. `pulse status`: the trainer's head, followers' receipts with lag and state match, trust marks.
set -euo pipefail

helper=${1:?usage: trainer.sh WRITE_RECEIPT}
helper=$(cd "$(dirname "$helper")" && pwd)/$(basename "$helper")
: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-node.XXXXXX")
bgpid=
cleanup() {
  [ -n "$bgpid" ] && kill "$bgpid" 2>/dev/null || true
  [ -n "${writer:-}" ] && kill "$writer" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"

P synth --params 1M --steps 6 --out ck --threads 2 >/dev/null
P keygen tr >/dev/null
P keygen fo >/dev/null
P keygen fo2 >/dev/null
node=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' tr.pub)
[ ${#node} -eq 64 ] || fail "cannot read the node id from tr.pub"
store="file://$work/store"
count_records() { find "store/$1/records" -type f 2>/dev/null | wc -l; }

# --- 1. --once: order, keyframes, ignored files, a malformed checkpoint -----------------------
mkdir w1
cp ck/step-00000[0-6].safetensors w1/
cp ck/step-000006.safetensors w1/step-000007.safetensors.tmp       # not renamed yet
head -c 5000 /dev/urandom > w1/bad-000003.safetensors              # malformed
( while :; do head -c 4096 /dev/urandom >> w1/step-000009.safetensors; sleep 0.05; done ) &
writer=$!
P node trainer --store "$store" --run r1 --key tr.key --state st1 --watch w1 --keyframe-every 3 \
  --keep-keyframes 0 --poll-ms 700 --once 2> once.log || { cat once.log; fail "trainer --once failed"; }
kill "$writer"; wait "$writer" 2>/dev/null || true; writer=
cat once.log
steps=$(sed -n 's/.* published step=\([0-9]*\) .*/\1/p' once.log | tr '\n' ' ')
[ "$steps" = "0 1 2 3 4 5 6 " ] || fail "published steps '$steps', want 0..6 in order"
grep -q ' published step=0 kind=keyframe ' once.log || fail "step 0 is not a keyframe"
grep -q ' published step=3 kind=sync-patch+keyframe ' once.log || fail "step 3 has no keyframe"
grep -q ' published step=6 kind=sync-patch+keyframe ' once.log || fail "step 6 has no keyframe"
grep -q ' published step=4 kind=sync-patch ' once.log || fail "step 4 is not a plain patch"
for s in 0 3 6; do
  [ -f "store/r1/records/keyframe/$(printf %012d $s)/$node" ] || fail "no keyframe record for step $s"
done
for s in 1 2 3 4 5 6; do
  [ -f "store/r1/records/sync-patch/$(printf %012d $s)/$node" ] || fail "no patch record for step $s"
done
[ "$(count_records r1)" -eq 9 ] || fail "$(count_records r1) records, want 9"
ok "steps 0..6 published in order, keyframes at 0, 3, 6"
if grep -v ' ignored name=' once.log | grep -E 'step-000009|step-000007|\.tmp'; then fail "a file still changing or a *.tmp was touched"; fi
grep -q ' ignored name=step-000007.safetensors.tmp reason="a temporary name' once.log || fail "the *.tmp was not logged as ignored"
[ ! -e "store/r1/records/sync-patch/000000000007" ] && [ ! -e "store/r1/records/sync-patch/000000000009" ] \
  || fail "a record for an unfinished file"
ok "*.tmp and a file still being written are not published"
grep -q ' error what=publish file=bad-000003.safetensors message=' once.log || fail "no error line for the malformed file"
ok "a malformed checkpoint is logged as an error and the rest still publish"
P pull --store "$store" --run r1 --trust tr.pub --state f1 --weights f1.safetensors >/dev/null
cmp f1.safetensors ck/step-000006.safetensors || fail "pulled weights differ from step 6"
ok "a fresh pull is bit-identical to step 6"
rm -f w1/step-000009.safetensors
P node trainer --store "$store" --run r1 --key tr.key --state st1 --watch w1 --keyframe-every 3 \
  --keep-keyframes 0 --poll-ms 50 --once 2> again.log
if grep -q ' published step=' again.log; then cat again.log; fail "a re-run published again"; fi
grep -q ' skipped step=2 .*reason="older than the last published step"' again.log || fail "no skip line for an old step"
grep -q ' skipped step=6 .*reason="state already published"' again.log || fail "no 'already' line for the last step"
if grep -q ' error ' again.log; then cat again.log; fail "a re-run logged an error"; fi
[ "$(count_records r1)" -eq 9 ] || fail "a re-run changed the records"
ok "a re-run publishes nothing and logs the skips"

# A store failure is not the checkpoint's fault: the step is tried again, nothing after it is
# published meanwhile, and --once says it failed. (objects/ as a file makes every upload fail.)
mkdir -p store/r5 && echo x > store/r5/objects
if P node trainer --store "$store" --run r5 --key tr.key --state st5 --watch ck --poll-ms 50 --once 2> r5.log; then
  fail "--once exited 0 with the store failing"
fi
[ "$(grep -c ' error what=publish file=step-000000.safetensors' r5.log)" -eq 1 ] || { cat r5.log; fail "want one error, for step 0"; }
if grep -q ' published step=\| error what=publish file=step-000001' r5.log; then fail "went on past a store failure"; fi
rm store/r5/objects
P node trainer --store "$store" --run r5 --key tr.key --state st5 --watch ck --poll-ms 50 --once 2> r5b.log
[ "$(grep -c ' published step=' r5b.log)" -eq 7 ] || { cat r5b.log; fail "steps 0..6 not published once the store works"; }
ok "a store failure keeps the step for the next poll and publishes nothing after it"

# --- 2. Retention -------------------------------------------------------------------------------
P node trainer --store "$store" --run r2 --key tr.key --state st2 --watch ck --keyframe-every 4 \
  --keep-keyframes 1 --poll-ms 50 --once 2> ret.log || { cat ret.log; fail "trainer (retention) failed"; }
left=$(cd store/r2/records && find . -type f | sort | tr '\n' ' ')
want="./keyframe/000000000004/$node ./sync-patch/000000000005/$node ./sync-patch/000000000006/$node "
[ "$left" = "$want" ] || fail "records left: '$left', want '$want'"
named=$(for k in $(cd store/r2 && find records -type f); do
          P manifest show --store "$store" --run r2 --json "$k"; done |
        grep -o '"digest":"[0-9a-f]*"' | cut -d'"' -f4 | sort -u)
objs=$(ls store/r2/objects | sort)
[ -n "$objs" ] && [ "$named" = "$objs" ] || fail "objects left are not exactly those the records name"
P manifest audit --store "$store" --run r2 --trust tr.pub >/dev/null 2>audit.err || { cat audit.err; fail "audit after retention"; }
ok "retention keeps the keyframe at 4 and the chain after it; objects exactly those named"
P pull --store "$store" --run r2 --trust tr.pub --state f2 --weights f2.safetensors >/dev/null
cmp f2.safetensors ck/step-000006.safetensors || fail "pull after retention differs from step 6"
ok "a fresh pull after retention is bit-identical to step 6"

# Another node's records and the objects they name are never touched: tr2 publishes the same
# checkpoints (same objects, by content) into r4 first, then tr with --keep-keyframes 1.
P keygen tr2 >/dev/null
P node trainer --store "$store" --run r4 --key tr2.key --state st4b --watch ck --keyframe-every 4 \
  --keep-keyframes 0 --poll-ms 50 --once 2> ret4b.log || { cat ret4b.log; fail "trainer tr2 failed"; }
n_tr2=$(count_records r4)
objs_before=$(ls store/r4/objects | sort)
P node trainer --store "$store" --run r4 --key tr.key --state st4 --watch ck --keyframe-every 4 \
  --keep-keyframes 1 --poll-ms 50 --once 2> ret4.log || { cat ret4.log; fail "trainer (r4) failed"; }
grep -q ' retained ' ret4.log || fail "no retention pass in r4"
[ "$(count_records r4)" -eq $((n_tr2 + 3)) ] || fail "r4 holds $(count_records r4) records, want tr2's $n_tr2 + 3"
[ "$(ls store/r4/objects | sort)" = "$objs_before" ] || fail "retention deleted an object another node's record names"
P manifest audit --store "$store" --run r4 --trust tr.pub --trust tr2.pub >/dev/null 2>audit4.err \
  || { cat audit4.err; fail "audit of r4 after retention"; }
ok "retention leaves other nodes' records and every object they name"

# --- 3. In the background: files dropped in by rename, then SIGTERM ---------------------------
mkdir w3
"$PULSE_BIN" node trainer --store "$store" --run r3 --key tr.key --state st3 --watch w3 \
  --poll-ms 100 --log json 2> bg.log &
bgpid=$!
for s in 0 1 2; do
  f=$(printf step-%06d.safetensors $s)
  cp "ck/$f" "w3/$f.tmp" && mv "w3/$f.tmp" "w3/$f"
done
# A directory checkpoint counts once its .done marker exists (written after the directory).
mkdir w3/.tmp-dir && cp ck/step-000003.safetensors w3/.tmp-dir/model.safetensors
mv w3/.tmp-dir w3/step-000003
head_file="store/r3/heads/sync/$node"
wait_head() {
  for _ in $(seq 300); do   # an upper bound, not a timing: the test fails only if it never happens
    [ -f "$head_file" ] && grep -q "/$1/" "$head_file" && return 0
    sleep 0.1
  done
  return 1
}
wait_head 000000000002 || { cat bg.log; fail "steps 0..2 not published"; }
grep -Eq '"step":3[,}]' bg.log && fail "a directory without its .done marker was published"
touch w3/step-000003.done
wait_head 000000000003 || { cat bg.log; fail "the directory checkpoint was not published"; }
kill -TERM "$bgpid"
rc=0; wait "$bgpid" || rc=$?
bgpid=
[ "$rc" -eq 0 ] || { cat bg.log; fail "trainer exited $rc after SIGTERM"; }
[ "$(grep -c '"event":"published"' bg.log)" -eq 4 ] || { cat bg.log; fail "background trainer did not publish 4 steps"; }
grep -q '"event":"stopped"' bg.log || fail "no stopped line"
ok "background trainer publishes renamed files and a .done directory, exits 0 on SIGTERM"

# A checkpoint renamed into the directory is taken when it appears (inotify), not at the next
# scan: with scans an hour apart, steps 4 and 5 are still published (each within the bound).
"$PULSE_BIN" node trainer --store "$store" --run r3 --key tr.key --state st3 --watch w3 --keep-keyframes 0 \
  --poll-ms 3600000 --log json 2> bg2.log &
bgpid=$!
for _ in $(seq 300); do grep -q '"event":"started"' bg2.log && break; sleep 0.1; done
for s in 4 5; do
  f=$(printf step-%06d.safetensors $s)
  cp "ck/$f" "w3/$f.tmp" && mv "w3/$f.tmp" "w3/$f"
  wait_head "00000000000$s" || { cat bg2.log; fail "step $s renamed in was not published before the next scan"; }
done
kill -TERM "$bgpid"
rc=0; wait "$bgpid" || rc=$?
bgpid=
[ "$rc" -eq 0 ] || { cat bg2.log; fail "trainer exited $rc after SIGTERM"; }
ok "checkpoints renamed in are published as they appear, scans an hour apart"

# --- 4. pulse status ----------------------------------------------------------------------------
P status --store "$store" --run r1 > st0.out
grep -q "^${node:0:16}  trainer .* 6  " st0.out || { cat st0.out; fail "status does not show the trainer at 6"; }
state5=$(P hash ck/step-000005.safetensors)
"$helper" "$store" r1 fo.key 5 "$state5" >/dev/null
"$helper" "$store" r1 fo2.key 6 "$state5" >/dev/null      # claims step 6 with step 5's state
P status --store "$store" --run r1 --trust tr.pub > st1.out
cat st1.out
fo=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' fo.pub)
fo2=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' fo2.pub)
grep -q "^${node:0:16}  trainer   trusted .* 6  " st1.out || fail "trainer not trusted at 6"
grep -Eq "^${fo:0:16}  follower  untrusted .* 5  ${state5:0:16} .* 1 +[0-9]+  yes" st1.out \
  || fail "follower fo: want step 5, lag 1, match yes, untrusted"
grep -Eq "^${fo2:0:16}  follower  untrusted .* 6  .* 0 +0  no" st1.out || fail "follower fo2: want lag 0, match no"
# A real follower (pulse node follow --once --key) writes its receipt after catching up.
P keygen fo3 >/dev/null
fo3=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' fo3.pub)
P node follow --store "$store" --run r1 --trust tr.pub --state fs3 --weights fw3.safetensors --key fo3.key \
  --once 2> follow.log || { cat follow.log; fail "pulse node follow --once failed"; }
P status --store "$store" --run r1 --trust tr.pub --trust fo3.pub > st5.out
grep -Eq "^${fo3:0:16}  follower  trusted .* 6  .* 0 +0  yes" st5.out || { cat st5.out; fail "follower fo3: want step 6, lag 0, match yes, trusted"; }
P status --store "$store" --run r1 --trust tr.pub --trust fo.pub --json > st2.json
grep -q "\"node\":\"$fo\",\"role\":\"follower\",\"signer\":\"trusted\",\"step\":5" st2.json || { cat st2.json; fail "json: fo"; }
grep -q '"newest_step":6' st2.json || fail "json: newest step"
# A receipt whose signature does not verify is marked.
rf=$(find "store/r1/receipts/$fo" -type f)
# Flip one bit of the signature's last byte (writing a fixed byte would leave it valid 1 time in 256).
last=$(( $(stat -c %s "$rf") - 1 ))
byte=$(od -An -tu1 -j "$last" -N1 "$rf" | tr -d ' ')
printf "\\$(printf '%03o' $(( byte ^ 1 )))" | dd of="$rf" bs=1 seek="$last" conv=notrunc status=none
P status --store "$store" --run r1 > st3.out
grep -q "^${fo:0:16}  follower  bad-signature" st3.out || { cat st3.out; fail "a forged receipt is not marked"; }
ok "status: trainer head, follower lag and state match, trust and signature marks"
P status --store "$store" --run nothing-here > st4.out
grep -q "0 nodes" st4.out || fail "status of an empty run"
P status --store "$store" 2>/dev/null && fail "status without --run succeeded"
echo "all ok"
