#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Regenerates the multi-dtype seeds of tests/fuzz/corpus/patch (and one with both position
# codings): patch_seeds.py PULSE_BIN OUTDIR;
# and format-5 patches with context-coded chunks, one of them in the value modes (centred and
# predicted) that wide weight magnitudes take, one whose value-mode bands code their direction
# bits as sign symbols (v5-value-modes-signs), one of an F16 tensor (the committed
# v5-value-modes.patch, its -2states and -counts are what earlier writers wrote of the same
# checkpoints; v6-prev.patch and v6-prev-signs.patch, format 6, what writers of patches by
# direction wrote, which this build refuses);
# patch_seeds.py --checkpoints OUTDIR writes only the checkpoints they were made from (old,
# new, new2, ctx-old, ctx-new, wide-old, wide-new, f16-old, f16-new, grow-old, grow-new
# .safetensors), which tests/patch/format2.sh and format5.sh apply the committed seeds to.
# One pair of small checkpoints whose tensors take every coding path: BF16 at +-1 ulp (2-bit
# symbols), at +-2..6 (4-bit) and at +-120 (8-bit), F32, F16, F8_E4M3, an I64 table (OPAQUE,
# whole-chunk replace) and an unchanged tensor, all in 1K-element chunks; then the ulp and abs
# patches, and the squash of the abs patch with a second step. Byte for byte the same each run.
import os, random, struct, subprocess, sys, tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "patch"))
from mkckpt import write_safetensors  # noqa: E402


def u16(v):
    return b"".join(struct.pack("<H", x & 0xffff) for x in v)


def bf16(x):
    """The BF16 pattern nearest x (round to nearest even from its FP32 value)."""
    f = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((f + 0x7fff + ((f >> 16) & 1)) >> 16) & 0xffff


def from_bf16(h):
    return struct.unpack("<f", struct.pack("<I", h << 16))[0]


def u32(v):
    return b"".join(struct.pack("<I", x) for x in v)


def main():
    pulse, out = sys.argv[1], sys.argv[2]
    only_checkpoints = pulse == "--checkpoints"
    random.seed(5)
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
    i64n = bytearray(i64)
    i64n[17] ^= 1
    i64n[500] ^= 0x80
    f16 = [random.randrange(0x3000, 0x3c00) for _ in range(700)]
    f16n = [v + 1 if random.random() < 0.02 else v for v in f16]
    random.seed(9)
    small2 = [v + 1 if random.random() < 0.03 else v for v in small]

    def ckpt(path, a, b, c, f, e, i, g):
        write_safetensors(path, [
            ("a.small", "BF16", [n], u16(a)), ("b.mid", "BF16", [n], u16(b)), ("c.big", "BF16", [n], u16(c)),
            ("d.f32", "F32", [600], u32(f)), ("e.f8", "F8_E4M3", [500], e), ("f.i64", "I64", [100], bytes(i)),
            ("g.f16", "F16", [700], u16(g)), ("h.same", "BF16", [10], u16(base[:10]))])

    with tempfile.TemporaryDirectory() as t:
        where = out if only_checkpoints else t
        old, new, new2 = (os.path.join(where, x + ".safetensors") for x in ("old", "new", "new2"))
        ckpt(old, base, base, base, f32, f8, i64, f16)
        ckpt(new, small, mid, big, f32n, f8n, i64n, f16n)
        ckpt(new2, small2, mid, big, f32n, f8n, i64n, f16n)
        if only_checkpoints:
            context_checkpoints(out)
            grow_checkpoints(out)
            return
        step2 = os.path.join(t, "step2-abs.patch")
        run = lambda *a: subprocess.run([pulse, *a], check=True)
        run("diff", old, new, "-o", os.path.join(out, "multi-ulp.patch"), "--chunk", "1K")
        run("diff", old, new, "-o", os.path.join(out, "multi-abs.patch"), "--values", "abs", "--chunk", "1K")
        run("diff", new, new2, "-o", step2, "--values", "abs", "--chunk", "1K")
        run("squash", os.path.join(out, "multi-abs.patch"), step2, "-o", os.path.join(out, "squashed-multi.patch"))
        # Both position codings in one format-3 patch: independent changes (Rice), every fourth
        # element and runs of 100 in 400 (zstd), 1K-element chunks.
        random.seed(11)
        m = 3072
        r0 = [random.randrange(0x3c00, 0x4000) for _ in range(m)]
        r1 = [v + (1 if random.random() < 0.5 else -1)
              if (i < 1024 and random.random() < 0.05) or (1024 <= i < 2048 and i % 4 == 0) or (i >= 2048 and i % 400 < 100)
              else v for i, v in enumerate(r0)]
        ra, rb = os.path.join(t, "ra.safetensors"), os.path.join(t, "rb.safetensors")
        write_safetensors(ra, [("a.runs", "BF16", [m], u16(r0))])
        write_safetensors(rb, [("a.runs", "BF16", [m], u16(r1))])
        run("diff", ra, rb, "-o", os.path.join(out, "codings-ulp.patch"), "--chunk", "1K")
        ca, cb, wa, wb, ha, hb = context_checkpoints(t)
        run("diff", ca, cb, "-o", os.path.join(out, "v5-context.patch"), "--context", "--chunk", "32K")
        ga, gb = grow_checkpoints(t)
        run("diff", ga, gb, "-o", os.path.join(out, "v5-value-modes-signs.patch"), "--context", "--chunk", "32K")
        run("diff", ha, hb, "-o", os.path.join(out, "v5-context-f16.patch"), "--context", "--chunk", "32K")


def context_checkpoints(where):
    """The pairs the format-5 seeds are made from, written to where: (ctx-old, ctx-new,
    wide-old, wide-new, f16-old, f16-new) .safetensors. Each pair has a random seed of its own, so the bytes do
    not depend on what ran before.

    Format 5: a BF16 tensor of one training-like step at two scales (so the exponent bands
    differ), dense enough that the diff keeps the context coding of its 32K-element chunk; a
    second, small chunk and an F32 tensor coded as in format 4. Then the value modes: weights
    over 20 binades, each moved by one step of 2^-14 (the bands of small steps code |d| around
    a centre, those of weights near or below the step the new value's distance from its
    prediction, old - 2^-14). Then an F16 tensor whose exponents (F16's 5 bits) spread over
    most of their range, changing more often and by more ulps the lower they are (the bands
    of the lowest in the centred value mode)."""
    random.seed(13)
    c0, c1 = [], []
    for i in range(40000):
        mag = random.randrange(0x3a00, 0x3c80) if i % 2 else random.randrange(0x3600, 0x3880)
        v = mag | (0x8000 if random.random() < 0.5 else 0)
        c0.append(v)
        c1.append(v + random.choice([1, -1, 1, -1, 2, -2, 300]) if random.random() < (0.7 if i % 2 else 0.4) else v)
    cf = [random.getrandbits(32) for _ in range(300)]
    cfn = [x ^ 1 if i % 7 == 0 else x for i, x in enumerate(cf)]
    ca, cb, wa, wb = (os.path.join(where, x + ".safetensors") for x in ("ctx-old", "ctx-new", "wide-old", "wide-new"))
    write_safetensors(ca, [("a.ctx", "BF16", [40000], u16(c0)), ("b.f32", "F32", [300], u32(cf))])
    write_safetensors(cb, [("a.ctx", "BF16", [40000], u16(c1)), ("b.f32", "F32", [300], u32(cfn))])
    random.seed(17)
    w0, w1 = [], []
    for i in range(20000):
        x = 2.0 ** (-20.0 * random.random()) * (1 if random.random() < 0.5 else -1)
        w0.append(bf16(x))
        w1.append(bf16(from_bf16(w0[-1]) - 2.0 ** -14))
    write_safetensors(wa, [("a.wide", "BF16", [20000], u16(w0))])
    write_safetensors(wb, [("a.wide", "BF16", [20000], u16(w1))])
    random.seed(19)
    h0, h1 = [], []
    for i in range(30000):
        e = random.randrange(2, 30)
        v = (random.getrandbits(1) << 15) | e << 10 | random.getrandbits(10)
        d = random.randrange(1, 2 + (1 << max(0, (29 - e) // 3)))
        h0.append(v)
        h1.append((v + random.choice([d, -d])) & 0xFFFF if random.random() < min(0.9, 0.01 * 2 ** ((29 - e) / 2)) else v)
    ha, hb = (os.path.join(where, x + ".safetensors") for x in ("f16-old", "f16-new"))
    write_safetensors(ha, [("a.f16", "F16", [30000], u16(h0))])
    write_safetensors(hb, [("a.f16", "F16", [30000], u16(h1))])
    return ca, cb, wa, wb, ha, hb


def grow_checkpoints(where):
    """Weights over 20 binades, each moved by 2^-14 away from zero nine times in ten (a step
    larger than most weights grows them), written to where as (grow-old, grow-new) .safetensors:
    the value-mode bands code their direction bits as symbols of whether they fall."""
    random.seed(29)
    g0, g1 = [], []
    for i in range(20000):
        x = 2.0 ** (-20.0 * random.random()) * (1 if random.random() < 0.5 else -1)
        away = 1 if random.random() < 0.9 else -1
        g0.append(bf16(x))
        g1.append(bf16(from_bf16(g0[-1]) + away * (1 if x > 0 else -1) * 2.0 ** -14))
    paths = [os.path.join(where, "grow-" + x + ".safetensors") for x in ("old", "new")]
    write_safetensors(paths[0], [("a.grow", "BF16", [20000], u16(g0))])
    write_safetensors(paths[1], [("a.grow", "BF16", [20000], u16(g1))])
    return paths


if __name__ == "__main__":
    main()
