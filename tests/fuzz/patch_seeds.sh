#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates the multi-dtype seeds of tests/fuzz/corpus/patch: patch_seeds.sh PULSE_BIN OUTDIR.
# One pair of small checkpoints whose tensors take every coding path: BF16 at +-1 ulp (2-bit
# symbols), at +-2..6 (4-bit) and at +-120 (8-bit), F32, F16, F8_E4M3, an I64 table (OPAQUE,
# whole-chunk replace) and an unchanged tensor, all in 1K-element chunks; then the ulp and abs
# patches, and the squash of the abs patch with a second step.
set -eu
P=$1 OUT=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
python3 - "$T" <<'PY'
import json, random, struct, sys
d = sys.argv[1]
random.seed(5)
def write(path, tensors):
    hdr, data = {}, b""
    for name, dt, shape, b in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
u16 = lambda v: b"".join(struct.pack("<H", x & 0xffff) for x in v)
u32 = lambda v: b"".join(struct.pack("<I", x) for x in v)
n = 3000
base = [random.randrange(0x3c00, 0x4000) for _ in range(n)]
small = [v + random.choice([1, -1]) if random.random() < 0.05 else v for v in base]
mid = [v + random.choice([3, -4, 5, -6, 2]) if random.random() < 0.2 else v for v in base]
big = [v + random.randrange(-120, 120) if random.random() < 0.5 else v for v in base]
f32 = [random.getrandbits(32) for _ in range(600)]
f32n = [x ^ (1 << random.randrange(32)) if random.random() < 0.1 else x for x in f32]
f8 = bytes(random.getrandbits(8) for _ in range(500))
f8n = bytes((b + 1) & 0xff if random.random() < 0.3 else b for b in f8)
i64 = bytes(random.getrandbits(8) for _ in range(800))
i64n = bytearray(i64); i64n[17] ^= 1; i64n[500] ^= 0x80
f16 = [random.randrange(0x3000, 0x3c00) for _ in range(700)]
f16n = [v + 1 if random.random() < 0.02 else v for v in f16]
def ckpt(a, b, c, f, e, i, g):
    return [("a.small", "BF16", [n], u16(a)), ("b.mid", "BF16", [n], u16(b)), ("c.big", "BF16", [n], u16(c)),
            ("d.f32", "F32", [600], u32(f)), ("e.f8", "F8_E4M3", [500], e), ("f.i64", "I64", [100], bytes(i)),
            ("g.f16", "F16", [700], u16(g)), ("h.same", "BF16", [10], u16(base[:10]))]
write(d + "/old.safetensors", ckpt(base, base, base, f32, f8, i64, f16))
write(d + "/new.safetensors", ckpt(small, mid, big, f32n, f8n, i64n, f16n))
random.seed(9)
small2 = [v + 1 if random.random() < 0.03 else v for v in small]
write(d + "/new2.safetensors", ckpt(small2, mid, big, f32n, f8n, i64n, f16n))
PY
"$P" diff "$T/old.safetensors" "$T/new.safetensors" -o "$OUT/multi-ulp.patch" --chunk 1K
"$P" diff "$T/old.safetensors" "$T/new.safetensors" -o "$OUT/multi-abs.patch" --values abs --chunk 1K
"$P" diff "$T/new.safetensors" "$T/new2.safetensors" -o "$T/step2-abs.patch" --values abs --chunk 1K
"$P" squash "$OUT/multi-abs.patch" "$T/step2-abs.patch" -o "$OUT/squashed-multi.patch"
