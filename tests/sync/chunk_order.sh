#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A step whose patch has its coded chunks in the data section out of table order (as a committer
# that merges parts' heads writes it, docs/patch-format.md "Tensor table"): a follower fetches it
# as ranges, stages each chunk when its bytes are in (node/sync/fetch_stage.c) and writes the step
# bit for bit. The record is the trainer's step 3 signed again over that patch.
# usage: chunk_order.sh FOLLOW_CHECK FORGE
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
forge=${2:?usage: chunk_order.sh FOLLOW_CHECK FORGE}
forge=$(cd "$(dirname "$forge")" && pwd)/$(basename "$forge")
. "$here/../node/follow_lib.sh"

P synth --params 1M --steps 3 --out ckpt >/dev/null
publish 0 2
start_follow f.log f --poll-ms 50
at_step() { grep -q "applied step=$1 " f.log; }
wait_until 60 at_step 2 || fail "the follower did not reach step 2: $(cat f.log)"
kill -TERM "$bg"; wait "$bg" || fail "SIGTERM: exit $?"; bg=""

# Step 3 published, then its record signed again naming the same step's patch with its chunks'
# bytes reversed (each offset rewritten, the header digest made again), put over the record.
publish 3 3
P diff "$(ckpt 2)" "$(ckpt 3)" -o p3 >/dev/null
python3 - p3 <<'PY'
import hashlib, struct, sys
path = sys.argv[1]
b = bytearray(open(path, "rb").read())
chunk, ntensors = struct.unpack_from("<II", b, 16)
table, data_len = struct.unpack_from("<QQ", b, 88)
head = 104 + table + 32
at, entries = 104, []
for _ in range(ntensors):
    at += 2 + struct.unpack_from("<H", b, at)[0]
    code, esize = b[at], b[at + 1]
    at += 2
    at += 1 + b[at]
    ndim = b[at]; at += 1
    units = esize if code == 0 else 1
    for _ in range(ndim):
        units *= struct.unpack_from("<Q", b, at)[0]; at += 8
    changes = struct.unpack_from("<Q", b, at)[0]; at += 8
    for _ in range((units + chunk - 1) // chunk if changes else 0):
        count = struct.unpack_from("<I", b, at)[0]; at += 4
        if count:
            off, pl, vl = struct.unpack_from("<QII", b, at)
            entries.append((at, off, pl + vl))
            at += 48
assert len(entries) > 2 and sum(e[2] for e in entries) == data_len
data, new, pos = bytes(b[head:]), bytearray(), 0
for (e, off, n) in reversed(entries):
    new += data[off:off + n]
    struct.pack_into("<Q", b, e, pos)
    pos += n
b[head:] = new
b[104 + table:head] = hashlib.sha256(b[:104 + table]).digest()
open(path, "wb").write(b)
PY
rec() { (cd store/r && ls records/sync-patch/"$(printf '%012d' "$1")"/*); }
r3=$(rec 3)
"$forge" sign trainer.key "$store" r "$r3" 3 --patch p3 --put-as "$r3" >/dev/null || fail "signing step 3 again"

start_follow f.log f --poll-ms 50
wait_until 60 at_step 3 || fail "the follower did not apply step 3: $(tail -5 f.log)"
cmp -s f/w.safetensors "$(ckpt 3)" || fail "step 3 is not bit-identical"
grep "applied step=3 " f.log | grep -q "kind=sync-patch .*journal_ms=" || fail "step 3 was not staged from its patch: $(grep 'step=3' f.log)"
kill -TERM "$bg"; wait "$bg" || fail "SIGTERM: exit $?"; bg=""
ok "a patch whose chunks lie out of table order: fetched as ranges, staged, step 3 bit-identical"
