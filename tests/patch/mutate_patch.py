#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes malformed variants of a patch whose digests are made right again (each chunk's and the header's), for the in-place refusal test.
# usage: mutate_patch.py PATCH OUTDIR COUNT SEED  -> OUTDIR/v0000.patch ... (docs/patch-format.md)
import hashlib, os, random, struct, sys

HDR = 104


def parse(b):
    """The table's coded chunk entries: (entry offset in b, data offset, pos_len, val_len)."""
    chunk = struct.unpack_from("<I", b, 16)[0]
    ntens = struct.unpack_from("<I", b, 20)[0]
    at = HDR
    chunks = []
    for _ in range(ntens):
        nl = struct.unpack_from("<H", b, at)[0]
        at += 2 + nl
        dcode, esize, dnl = b[at], b[at + 1], b[at + 2]
        at += 3 + dnl
        ndim = b[at]
        at += 1
        dims = struct.unpack_from("<%dQ" % ndim, b, at)
        at += 8 * ndim
        changes = struct.unpack_from("<Q", b, at)[0]
        at += 8
        if not changes:
            continue
        n = 1
        for d in dims:
            n *= d
        units = n * esize if dcode == 0 else n
        for _ in range((units + chunk - 1) // chunk):
            k = struct.unpack_from("<I", b, at)[0]
            if k == 0:
                at += 4
                continue
            off, pl, vl = struct.unpack_from("<QII", b, at + 4)
            chunks.append((at, off, pl, vl))
            at += 52
    return chunks


def reseal(b, table_len, chunks):
    data0 = HDR + table_len + 32
    for (e, off, pl, vl) in chunks:
        b[e + 20:e + 52] = hashlib.sha256(bytes(b[data0 + off:data0 + off + pl + vl])).digest()
    b[HDR + table_len:HDR + table_len + 32] = hashlib.sha256(bytes(b[:HDR + table_len])).digest()


def main():
    src, out, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    orig = open(src, "rb").read()
    table_len = struct.unpack_from("<Q", orig, 88)[0]
    chunks = parse(orig)
    data0 = HDR + table_len + 32
    rng = random.Random(seed)
    os.makedirs(out, exist_ok=True)
    for i in range(count):
        b = bytearray(orig)
        kind = rng.random()
        if kind < 0.55 and chunks:
            # Bits of one chunk's streams (zstd frames, Rice planes, ulp symbols, escapes).
            e, off, pl, vl = rng.choice(chunks)
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                j = data0 + off + rng.randrange(pl + vl)
                b[j] ^= 1 << rng.randrange(8)
        elif kind < 0.7:
            # The result id: every chunk intact, the result not what the header says.
            b[56 + rng.randrange(32)] ^= 1 << rng.randrange(8)
        elif kind < 0.8:
            b[24 + rng.randrange(32)] ^= 1 << rng.randrange(8)   # the base id
        else:
            # Any byte of the table (counts, lengths, offsets, dims, names), outside the digests.
            while True:
                j = HDR + rng.randrange(table_len)
                if not any(e + 20 <= j < e + 52 for (e, _, _, _) in chunks):
                    break
            b[j] ^= 1 << rng.randrange(8)
        reseal(b, table_len, chunks)
        with open(os.path.join(out, "v%04d.patch" % i), "wb") as f:
            f.write(b)


if __name__ == "__main__":
    main()
