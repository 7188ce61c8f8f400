#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes a small safetensors checkpoint for the CLI tests: mkckpt.py OUT SEED STEP [LAYOUT]
# (a BF16 matrix with ~5% of elements moved by +-1 ulp per step, an F32 vector, an I64 table;
# LAYOUT "packed" adds F4 and F6 tensors and a __metadata__ naming the step, with a long note
# from step 2 on, in the header form pulse itself writes: metadata first, names in order).
# write_safetensors is also imported by tests/fuzz/patch_seeds.py.
import json, random, struct, sys


def write_safetensors(path, blobs, meta=None):
    """blobs: (name, dtype, shape, bytes) in file order; the header padded to 8 bytes."""
    hdr, data = ({"__metadata__": meta} if meta is not None else {}), b""
    for name, dt, shape, b in blobs:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)) + h + data)


def main():
    out, seed, step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    layout = sys.argv[4] if len(sys.argv) > 4 else "std"
    rows = 40 if layout == "std" else 41
    base = random.Random(seed)
    w = [base.getrandbits(16) for _ in range(rows * 50)]
    for s in range(1, step + 1):
        r = random.Random(seed * 1000 + s)
        for i in range(len(w)):
            if r.random() < 0.05:
                w[i] = (w[i] + (1 if r.random() < 0.5 else -1)) & 0xffff
    f = [base.random() + step for _ in range(17)]
    ids = [base.getrandbits(40) + (step if i == 3 else 0) for i in range(6)]
    blobs = [("emb.weight", "BF16", [rows, 50], struct.pack("<%dH" % len(w), *w)),
             ("ids", "I64", [6], struct.pack("<6q", *ids)),
             ("norm.weight", "F32", [17], struct.pack("<17f", *f))]
    meta = None
    if layout == "packed":
        # Packed bytes: F4 two to a byte, F6 four to three bytes; a few bytes change each step.
        packed = []
        for name, dt, shape, nbytes in (("fp4.weight", "F4", [rows, 50], rows * 25),
                                        ("fp6a.weight", "F6_E2M3", [8, 12], 72),
                                        ("fp6b.weight", "F6_E3M2", [4, 4], 12)):
            b = bytearray(base.getrandbits(8) for _ in range(nbytes))
            for s in range(1, step + 1):
                r = random.Random(seed * 7000 + s * 10 + len(packed))
                for i in range(nbytes):
                    if r.random() < 0.1:
                        b[i] ^= 1 + r.getrandbits(7)
            packed.append((name, dt, shape, bytes(b)))
        blobs = sorted(blobs + packed)
        meta = {"format": "pt", "step": str(step)}
        if step >= 2:
            meta["note"] = "n" * 700
    write_safetensors(out, blobs, meta)


if __name__ == "__main__":
    main()
