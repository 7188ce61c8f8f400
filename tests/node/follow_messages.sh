#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A follower with nothing to start from says which mistake it looks like, and a node logs a failure when it starts or changes, not at every poll.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/follow_lib.sh"
unset MALLOC_PERTURB_

P synth --params 1M --steps 2 --out ckpt >/dev/null
P keygen --comment other other >/dev/null
pull() { P pull --store "$store" --run "$1" --trust "$2" --state "$3/state" --weights "$3/w.safetensors"; }

# 1. Nothing under the run at all: a wrong URL, prefix or run name.
rc=0; pull r trainer.pub e1 2>e1.log || rc=$?
[ "$rc" = 1 ] || fail "empty store: exit $rc"
grep -qF "no records under $store/r/ (check the store URL" e1.log || fail "empty store: $(cat e1.log)"
ok "empty store: $(cat e1.log)"

# 2. Records of a key that is not trusted: which nodes were found.
P publish --store "$store" --run r --key other.key --state ostate "$(ckpt 0)" >/dev/null || fail "publish as other"
node=$(ls store/r/records/keyframe/000000000000/)
rc=0; pull r trainer.pub e2 2>e2.log || rc=$?
[ "$rc" = 1 ] || fail "untrusted: exit $rc"
grep -qF "records exist under $store/r/ but none signed by a trusted key (found: ${node:0:16})" e2.log ||
  fail "untrusted: $(cat e2.log)"
ok "records of an untrusted key: $(cat e2.log)"

# 3. Keys under records/ that are no record's key.
mkdir -p store/j/records/keyframe
echo junk >store/j/records/keyframe/nonsense
rc=0; pull j trainer.pub e3 2>e3.log || rc=$?
[ "$rc" = 1 ] || fail "junk keys: exit $rc"
grep -qF "no records under $store/j/: 1 keys under records/, none a record key" e3.log || fail "junk keys: $(cat e3.log)"
ok "junk only: $(cat e3.log)"

# 4. A node polling a run with no trusted keyframe logs the failure once, then its end once.
: >n.log
"$PULSE_BIN" node follow --store "$store" --run q --trust trainer.pub --state n/state --weights n/w.safetensors \
  --poll-ms 20 2>>n.log &
bg=$!
wait_until 60 grep -q catch-up-failed n.log || fail "no catch-up-failed line: $(cat n.log)"
sleep 1   # ~50 more polls meeting the same failure
P publish --store "$store" --run q --key trainer.key --state qstate "$(ckpt 0)" >/dev/null || fail "publish q"
wait_until 60 grep -q catch-up-ok n.log || fail "no catch-up-ok line: $(cat n.log)"
kill "$bg"; wait "$bg" 2>/dev/null || true; bg=""
[ "$(grep -c catch-up-failed n.log)" = 1 ] || fail "catch-up-failed logged $(grep -c catch-up-failed n.log) times: $(cat n.log)"
cmp -s "$(ckpt 0)" n/w.safetensors || fail "the node did not apply the keyframe once published"
ok "a node logs catch-up-failed once over many polls, and catch-up-ok when it ends"
