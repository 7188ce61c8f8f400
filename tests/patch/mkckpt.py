#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes a small safetensors checkpoint for the CLI tests: mkckpt.py OUT SEED STEP [LAYOUT]
# (a BF16 matrix with ~5% of elements moved by +-1 ulp per step, an F32 vector, an I64 table).
# write_safetensors is also imported by tests/fuzz/patch_seeds.py.
import json, random, struct, sys


def write_safetensors(path, blobs):
    """blobs: (name, dtype, shape, bytes) in file order; the header padded to 8 bytes."""
    hdr, data = {}, b""
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
    write_safetensors(out, [("emb.weight", "BF16", [rows, 50], struct.pack("<%dH" % len(w), *w)),
                            ("ids", "I64", [6], struct.pack("<6q", *ids)),
                            ("norm.weight", "F32", [17], struct.pack("<17f", *f))])


if __name__ == "__main__":
    main()
