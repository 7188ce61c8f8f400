#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Packed sub-byte dtypes (F4, F6_*) and __metadata__ through diff, apply, squash and a publish/pull
# on file://: the patch applies bit for bit, carries the result's metadata (in place when the header
# fits, rewritten whole when it grows), format 3 patches still apply (keeping the target's metadata),
# and a patch whose metadata was altered is refused.
set -u
P=${PULSE_BIN:?}
SRC=${PULSE_SRC:?}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0; n=0
ok()  { n=$((n+1)); timeout 120 "$@" >"$T/out" 2>"$T/err"; local rc=$?
        if [ $rc -ne 0 ]; then echo "FAIL (exit $rc): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
bad() { n=$((n+1)); if timeout 120 "$@" >"$T/out" 2>"$T/err"; then echo "FAIL (succeeded): $*"; fails=$((fails+1));
        elif ! grep -q "^pulse " "$T/err"; then echo "FAIL (no error line): $*"; cat "$T/err"; fails=$((fails+1)); fi; }
check() { n=$((n+1)); if ! eval "$1"; then echo "FAIL: $1"; fails=$((fails+1)); fi; }
meta() { python3 - "$1" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
print(json.dumps(json.loads(b[8:8 + n]).get("__metadata__", {}), sort_keys=True))
PY
}
same() { [ "$("$P" hash "$1")" = "$("$P" hash "$2")" ] && [ "$(meta "$1")" = "$(meta "$2")" ]; }

cd "$T"
for s in 0 1 2 3; do python3 "$SRC/tests/patch/mkckpt.py" c$s.safetensors 7 $s packed; done

# --- diff / apply: bit for bit (same header length: the metadata is rewritten in place) ---
ok "$P" diff c0.safetensors c1.safetensors -o p01
ok "$P" apply c0.safetensors p01 -o r1.safetensors
check "cmp -s r1.safetensors c1.safetensors"
cp c0.safetensors w.safetensors
ok "$P" apply --in-place w.safetensors p01
check "cmp -s w.safetensors c1.safetensors"
# The header grows (a long note): the file is rewritten whole, with room to spare.
ok "$P" diff c1.safetensors c2.safetensors -o p12
ok "$P" apply --in-place w.safetensors p12
check "same w.safetensors c2.safetensors"
size2=$(stat -c %s w.safetensors)
ok "$P" diff c2.safetensors c3.safetensors -o p23
ok "$P" apply --in-place w.safetensors p23
check "same w.safetensors c3.safetensors"
check "[ $(stat -c %s w.safetensors) = $size2 ]"   # the next change fitted in place
ok "$P" apply c1.safetensors p12 -o r2.safetensors
check "same r2.safetensors c2.safetensors"

# --- squash: the last patch's metadata ---
ok "$P" squash p01 p12 p23 --base c0.safetensors -o sq
ok "$P" apply c0.safetensors sq -o rs.safetensors
check "same rs.safetensors c3.safetensors"

# --- sharded: the metadata goes to the first shard (where the reader takes it from) ---
python3 - <<'PY'
import json, os, struct, sys
sys.path.insert(0, os.path.join(os.environ["PULSE_SRC"], "tests", "patch"))
from mkckpt import write_safetensors
for s in (0, 2):
    b = open("c%d.safetensors" % s, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__")
    blobs = [(k, v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()]
    os.mkdir("s%d" % s)
    split = {"a.safetensors": blobs[:3], "b.safetensors": blobs[3:]}
    for f, part in split.items():
        write_safetensors("s%d/%s" % (s, f), part, meta if f == "a.safetensors" else None)
    json.dump({"metadata": {}, "weight_map": {k: f for f, part in split.items() for k, *_ in part}},
              open("s%d/model.safetensors.index.json" % s, "w"))
PY
ok "$P" diff s0 s2 -o ps
ok "$P" apply s0 ps -o rsh
check "same rsh/a.safetensors s2/a.safetensors && cmp -s rsh/b.safetensors s2/b.safetensors"
check "[ \"\$($P hash rsh)\" = \"\$($P hash s2)\" ]"

# --- format 3 (no metadata section) still applies; the target keeps its own metadata ---
python3 - p01 p01.v3 <<'PY'
import hashlib, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
tl = struct.unpack_from("<Q", b, 88)[0]
ml = None
# The metadata section ends the table: u32 length, then the text.
for cut in range(4, tl):
    if struct.unpack_from("<I", b, 104 + tl - cut)[0] == cut - 4:
        ml = cut
        break
table = b[104:104 + tl - ml]
hdr = bytearray(b[:104])
struct.pack_into("<I", hdr, 8, 3)
struct.pack_into("<Q", hdr, 88, len(table))
head = bytes(hdr) + bytes(table)
open(sys.argv[2], "wb").write(head + hashlib.sha256(head).digest() + b[104 + tl + 32:])
PY
ok "$P" inspect p01.v3
check "grep -q 'format 3,' out"
ok "$P" apply c0.safetensors p01.v3 -o r3.safetensors
check "[ \"\$($P hash r3.safetensors)\" = \"\$($P hash c1.safetensors)\" ] && [ \"\$(meta r3.safetensors)\" = \"\$(meta c0.safetensors)\" ]"

# --- altered metadata: refused by the header digest, the target untouched ---
python3 - p01 p01.bad <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
i = b.rindex(b'"step":"1"')
open(sys.argv[2], "wb").write(b[:i] + b'"step":"9"' + b[i + 10:])
PY
cp c0.safetensors t.safetensors
bad "$P" apply --in-place t.safetensors p01.bad
check "grep -q 'digest' err"
check "cmp -s t.safetensors c0.safetensors"

# Metadata that is not the compact object form (here a space added), its digest sealed again:
# refused at open, whatever the digest says.
python3 - p01 p01.loose <<'PY'
import hashlib, struct, sys
b = open(sys.argv[1], "rb").read()
tl = struct.unpack_from("<Q", b, 88)[0]
i = b.rindex(b'{"format"', 0, 104 + tl)
ml = struct.unpack_from("<I", b, i - 4)[0]
m = b[i:i + ml].replace(b'":"', b'": "', 1)
table = b[104:i - 4] + struct.pack("<I", len(m)) + m
hdr = bytearray(b[:104])
struct.pack_into("<Q", hdr, 88, len(table))
head = bytes(hdr) + table
open(sys.argv[2], "wb").write(head + hashlib.sha256(head).digest() + b[104 + tl + 32:])
PY
bad "$P" apply c0.safetensors p01.loose -o r-loose.safetensors
check "grep -q 'not in compact form' err && [ ! -e r-loose.safetensors ]"

# --- misaligned elements: a tensor of odd byte length ahead of BF16 and F32 tensors (as a packed
# one leaves them) is diffed, applied and squashed through aligned copies, abs and ulp alike ---
python3 - <<'PY'
import os, random, struct, sys
sys.path.insert(0, os.path.join(os.environ["PULSE_SRC"], "tests", "patch"))
from mkckpt import write_safetensors
r = random.Random(5)
w = [r.getrandbits(16) for _ in range(3001)]
f = [r.getrandbits(32) for _ in range(1001)]
for s in range(3):
    for v in (w, f):
        for i in range(len(v)):
            if s and r.random() < 0.2:
                v[i] = (v[i] + r.choice((1, -1, 7))) & (0xffff if v is w else 0xffffffff)
    write_safetensors("m%d.safetensors" % s, [("a.odd", "U8", [3], bytes([s, 1, 2])),
                                             ("b.bf16", "BF16", [3001], struct.pack("<3001H", *w)),
                                             ("c.odd", "U8", [1], bytes([7])),
                                             ("d.f32", "F32", [1001], struct.pack("<1001I", *f))])
PY
for v in abs ulp; do
  ok "$P" diff m0.safetensors m1.safetensors -o m01.$v --values $v --chunk 1K
  ok "$P" diff m1.safetensors m2.safetensors -o m12.$v --values $v --chunk 1K
  ok "$P" apply m0.safetensors m01.$v -o mr1.$v.safetensors
  check "cmp -s mr1.$v.safetensors m1.safetensors"
  cp m1.safetensors mw.$v.safetensors
  ok "$P" apply --in-place mw.$v.safetensors m12.$v
  check "cmp -s mw.$v.safetensors m2.safetensors"
  ok "$P" squash m01.$v m12.$v --base m0.safetensors -o msq.$v
  ok "$P" apply m0.safetensors msq.$v -o mrs.$v.safetensors
  check "cmp -s mrs.$v.safetensors m2.safetensors"
done
ok "$P" squash m01.abs m12.abs -o msq.nobase
ok "$P" apply m0.safetensors msq.nobase -o mrn.safetensors
check "cmp -s mrn.safetensors m2.safetensors"

# --- publish / pull on file://: the follower applies patches, not only the keyframe ---
ok "$P" keygen tr
store="file://$T/store"
pub() { ok "$P" publish --store "$store" --run r --key tr.key --state st --json "$@"; }
pull() { ok "$P" pull --store "$store" --run r --trust tr.pub --state fs --weights fw.safetensors --json; }
pub c0.safetensors
pull
check "cmp -s fw.safetensors c0.safetensors"
for s in 1 2 3; do
  pub c$s.safetensors
  check "grep -q '\"kind\":\"sync-patch\"' out || grep -q '\"kind\": \"sync-patch\"' out"
  pull
  check "grep -q '\"kind\":\"sync-patch\"' out"   # applied as a patch, not a keyframe
  check "same fw.safetensors c$s.safetensors"
done
check "grep -q '\"step\":3' out || grep -q '\"step\": 3' out"
# A patch object altered in the store (metadata changed, its header digest sealed again) is
# refused: the signed record names the object's SHA-256.
python3 "$SRC/tests/patch/mkckpt.py" c4.safetensors 7 4 packed
pub c4.safetensors
python3 - "$T/store" <<'PY'
import hashlib, os, struct, sys
newest = None
for d, _, fs in os.walk(sys.argv[1]):
    for f in fs:
        p = os.path.join(d, f)
        b = open(p, "rb").read()
        # The patch, not its head (the "patch-index" object, which starts the same way).
        if b[:8] == b"PULSEPCH" and b'"step":"4"' in b and (newest is None or len(b) > os.path.getsize(newest)):
            newest = p
b = bytearray(open(newest, "rb").read())
i = bytes(b).rindex(b'"step":"4"')
b[i:i + 10] = b'"step":"8"'
tl = struct.unpack_from("<Q", b, 88)[0]
b[104 + tl:104 + tl + 32] = hashlib.sha256(bytes(b[:104 + tl])).digest()
os.chmod(newest, 0o644)
open(newest, "wb").write(bytes(b))
PY
bad "$P" pull --store "$store" --run r --trust tr.pub --state fs --weights fw.safetensors
check "grep -q 'SHA-256 does not match' err"
check "same fw.safetensors c3.safetensors"

echo "packed_meta: $n checks, $fails failed"
[ "$fails" -eq 0 ]
