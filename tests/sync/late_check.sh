#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The result check made after the write (docs/trust.md, "What is checked when"): a follower node
# whose base is its own last write writes a trusted publisher's patch that does not give its
# record's result; the late check finds it, logs result-mismatch, refuses the step for good, and
# the weights are replaced from the keyframe; the node stays at the last good step.
# usage: late_check.sh FOLLOW_CHECK FORGE
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
forge=${2:?usage: late_check.sh FOLLOW_CHECK FORGE}
forge=$(cd "$(dirname "$forge")" && pwd)/$(basename "$forge")
. "$here/../node/follow_lib.sh"

P synth --params 1M --steps 3 --out ckpt >/dev/null
publish 0 2
start_follow f.log f --poll-ms 50
at_step() { grep -q "applied step=$1 " f.log; }
wait_until 60 at_step 2 || fail "the follower did not reach step 2: $(cat f.log)"
cmp -s f/w.safetensors "$(ckpt 2)" || fail "step 2 is not bit-identical"

# Step 3 as a faulty trusted publisher makes it: the real patch from step 2 to step 3, its header
# saying step 1's state is the result (its digest made again), in a record signed by the trainer
# that says the same; the head moved to it.
P diff "$(ckpt 2)" "$(ckpt 3)" -o p3 >/dev/null
id1=$(P hash "$(ckpt 1)")
python3 - p3 "$id1" <<'PY'
import hashlib, struct, sys
path, result = sys.argv[1], bytes.fromhex(sys.argv[2])
b = bytearray(open(path, "rb").read())
table = struct.unpack_from("<Q", b, 88)[0]
b[56:88] = result
b[104 + table:104 + table + 32] = hashlib.sha256(b[:104 + table]).digest()
open(path, "wb").write(b)
PY
rec() { (cd store/r && ls records/sync-patch/"$(printf '%012d' "$1")"/*); }
r1=$(rec 1); r2=$(rec 2)
"$forge" sign trainer.key "$store" r "$r2" 3 --base-of "$r2" --result-of "$r1" --patch p3 --head >forged \
  || fail "forging step 3"

mismatch() { grep -q 'result-mismatch step=3' f.log; }
wait_until 60 mismatch || fail "no result-mismatch for step 3: $(tail -5 f.log)"
restored() { grep -q 'catch-up path=keyframe' f.log && at_step 2 && [ "$(grep -c 'applied step=2 ' f.log)" -ge 2 ]; }
wait_until 60 restored || fail "not restored from the keyframe to step 2: $(tail -8 f.log)"
sleep 1   # several polls: the refused step is not taken again
grep -q "refused record=$(cat forged) reason=.*did not give its result" f.log \
  || fail "the step was not refused by name: $(grep refused f.log)"
[ "$(grep -c 'result-mismatch' f.log)" = 1 ] || fail "the bad step was taken again: $(grep -c result-mismatch f.log)"
# one keyframe restore at the start (no weights), one after the mismatch
[ "$(grep -c 'catch-up path=keyframe' f.log)" = 2 ] || fail "not exactly one keyframe restore after the mismatch: $(cat f.log)"
cmp -s f/w.safetensors "$(ckpt 2)" || fail "the weights are not step 2 after the restore"
kill -TERM "$bg"; wait "$bg" || fail "SIGTERM: exit $?"; bg=""
ok "a patch that does not give its record's result: written, found by the late check, refused, weights back at step 2 from the keyframe"
