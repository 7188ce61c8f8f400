#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Retention (`pulse node trainer --keep-keyframes`) counts and deletes only records that verify as the node's own.
#
# The bucket is writable by others: junk under the trainer's node id (5-byte "records" at huge
# keyframe steps, a copy of its real keyframe filed under a higher step, junk under a patch key)
# must neither push the real keyframes out of the kept window nor be deleted. Retention keeps
# exactly what it would keep without the junk, leaves the junk alone, logs each junk key once,
# and the run still audits clean and pulls bit-identical once the junk is removed.
set -euo pipefail

: "${PULSE_BIN:?PULSE_BIN must name the pulse binary (meson test sets it)}"
work=$(mktemp -d "${TMPDIR:-/tmp}/pulse-retention.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
P() { timeout 120 "$PULSE_BIN" "$@"; }
cd "$work"

P synth --params 1M --steps 7 --out ck --threads 2 >/dev/null
P keygen tr >/dev/null
node=$(sed -n 's/^pulse-ed25519-public-v1 \([0-9a-f]*\).*/\1/p' tr.pub)
[ ${#node} -eq 64 ] || fail "cannot read the node id from tr.pub"
store="file://$work/store"
recs=store/r/records
list_records() { (cd "$recs" && find . -type f | sort | tr '\n' ' '); }

# Steps 0..5 kept whole: keyframes at 0 and 4, patches 1..5.
mkdir w
cp ck/step-00000[0-5].safetensors w/
P node trainer --store "$store" --run r --key tr.key --state st --watch w --keyframe-every 4 \
  --keep-keyframes 0 --poll-ms 50 --once 2> pub.log || { cat pub.log; fail "trainer (steps 0..5) failed"; }
[ "$(find "$recs" -type f | wc -l)" -eq 7 ] || fail "want 7 records after steps 0..5"

# Junk under the trainer's node id.
mkdir -p "$recs/keyframe/099999999998" "$recs/keyframe/099999999999" "$recs/keyframe/000000000090" \
  "$recs/sync-patch/000000000000"
printf 'junk\n' > "$recs/keyframe/099999999998/$node"
printf 'junk\n' > "$recs/keyframe/099999999999/$node"
cp "$recs/keyframe/000000000004/$node" "$recs/keyframe/000000000090/$node"   # signed, wrong key
printf 'junk\n' > "$recs/sync-patch/000000000000/$node"
junk="keyframe/099999999998/$node keyframe/099999999999/$node keyframe/000000000090/$node sync-patch/000000000000/$node"
sums_before=$(cd "$recs" && md5sum $junk)

# Steps 6 and 7 with --keep-keyframes 1: two retention passes in one process.
cp ck/step-00000[67].safetensors w/
P node trainer --store "$store" --run r --key tr.key --state st --watch w --keyframe-every 4 \
  --keep-keyframes 1 --poll-ms 50 --once 2> ret.log || { cat ret.log; fail "trainer (retention) failed"; }
cat ret.log
left=$(list_records)
want="./keyframe/000000000004/$node ./keyframe/000000000090/$node ./keyframe/099999999998/$node \
./keyframe/099999999999/$node ./sync-patch/000000000000/$node ./sync-patch/000000000005/$node \
./sync-patch/000000000006/$node ./sync-patch/000000000007/$node "
[ "$left" = "$want" ] || fail "records left: '$left', want '$want'"
ok "retention kept the real keyframe at 4 and the chain after it (junk did not move the window)"
[ "$(cd "$recs" && md5sum $junk)" = "$sums_before" ] || fail "a junk record was changed"
ok "junk under the node's id is left alone, not deleted"
grep -q ' retained oldest_keyframe=4 records_deleted=5 ' ret.log || fail "no retention line deleting 5 records"
for k in $junk; do
  n=$(grep -c " skipped what=retention record=r/records/$k " ret.log || true)
  [ "$n" -eq 1 ] || fail "junk $k logged $n times over two passes, want once"
done
ok "each junk key is logged once over two passes"

# With the junk gone the run is exactly what retention alone leaves: audit clean, pull identical.
(cd "$recs" && rm $junk)
P manifest audit --store "$store" --run r --trust tr.pub >/dev/null 2>audit.err || { cat audit.err; fail "audit after retention"; }
P pull --store "$store" --run r --trust tr.pub --state f --weights f.safetensors >/dev/null
cmp f.safetensors ck/step-000007.safetensors || fail "pull after retention differs from step 7"
ok "the run audits clean and a fresh pull is bit-identical to step 7"
