#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# LoCo test data and an independent check of a round: writes F32 safetensors (theta_0, RL-like local
# updates) and recomputes the gate, error feedback and plain mean in FP32 with the standard library only.
import array
import json
import random
import struct
import sys

SHAPES = [("attn.q.weight", [64, 96]), ("mlp.up.weight", [96, 64]), ("norm.bias", [96]), ("emb.weight", [40, 32])]


def read_st(path):
    with open(path, "rb") as f:
        data = f.read()
    (hlen,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + hlen])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (path, name, t["dtype"])
        b, e = t["data_offsets"]
        a = array.array("f")
        a.frombytes(data[8 + hlen + b:8 + hlen + e])
        out[name] = (t["shape"], a)
    return out


def write_st(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        shape, a = tensors[name]
        raw = a.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bf16(x):
    u = bits(x)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def finite(x):
    return x == x and abs(x) != float("inf")


def cmd_init(out, seed):
    rng = random.Random(int(seed))
    t = {}
    for name, shape in SHAPES:
        n = 1
        for d in shape:
            n *= d
        std = 1.0 if name.endswith("bias") else 0.02
        t[name] = (shape, array.array("f", (rng.gauss(0.0, std) for _ in range(n))))
    write_st(out, t)


def cmd_local(theta_path, seed, lr, steps, *outs):
    """Per OUT (one trainer each): theta_local = theta_r - lr * the sum of H Adam-like steps, each
    about +-1 (a per-weight drift plus noise, clipped like Adam's normalised update)."""
    lr, steps = float(lr), int(steps)
    t = read_st(theta_path)
    for j, out in enumerate(outs):
        rng = random.Random(int(seed) * 100 + j)
        o = {}
        for name in sorted(t):
            shape, a = t[name]
            b = array.array("f", a)
            for i in range(len(a)):
                drift = rng.uniform(-1.0, 1.0)
                u = 0.0
                for _ in range(steps):
                    u += max(-1.0, min(1.0, drift + rng.gauss(0.0, 0.5)))
                b[i] = f32(a[i] - lr * u)
            o[name] = (shape, b)
        write_st(out, o)


def cmd_verify(theta_path, theta_new_path, *trainers):
    """trainers: LOCAL E_OLD E_NEW INCLUDED(0/1) per trainer, in node-id order. Plain mean (lr 1, mu 0)."""
    theta = read_st(theta_path)
    new = read_st(theta_new_path)
    groups = [trainers[i:i + 4] for i in range(0, len(trainers), 4)]
    locals_ = [(read_st(g[0]), read_st(g[1]), read_st(g[2]), g[3] == "1") for g in groups]
    k = sum(1 for g in locals_ if g[3])
    sent_total = n_total = 0
    for name in sorted(theta):
        shape, th = theta[name]
        for i in range(len(th)):
            acc = 0.0
            for lo, eo, en, inc in locals_:
                a = f32(f32(th[i] - lo[name][1][i]) + eo[name][1][i])
                vis = (not finite(th[i])) or (not finite(a)) or bf16(f32(th[i] - a)) != bf16(th[i])
                want_e = a if (not vis or not inc) else 0.0
                got_e = en[name][1][i]
                if bits(got_e) != bits(want_e):
                    sys.exit("FAIL: %s[%d]: e_new %r, expected %r (a %r, sent %s, included %s)" % (name, i, got_e, want_e, a, vis, inc))
                if vis and inc:
                    acc = f32(acc + a)
                    sent_total += 1
            g = f32(acc / k)
            m = f32(f32(0.0 * 0.0) + g)
            want = f32(th[i] - f32(1.0 * m))
            if bits(new[name][1][i]) != bits(want):
                sys.exit("FAIL: %s[%d]: theta_new %r, expected %r" % (name, i, new[name][1][i], want))
            n_total += 1
    print("verified %d elements: e_new and theta_{r+1} bit-exact; %d entries summed from %d trainer(s)" % (n_total, sent_total, k))


def ulp(x):
    u = bits(abs(x)) & 0x7FFFFFFF
    if u >= 0x7F800000:
        return float("inf")
    nxt = struct.unpack("<f", struct.pack("<I", u + 1))[0]
    return nxt - abs(x)


def cmd_verify_gate(theta_path, m_path, theta_new_path, cut, lr, *trainers):
    """The --reduce-gate round (docs/loco.md), every trainer a member. trainers: LOCAL E_OLD E_NEW per
    trainer in node-id order. Ranges of CUT elements per tensor (canonical order), range g owned by
    trainer g mod K. Recomputes theta_{r+1} and every e_new bit for bit, and checks conservation:
    the owners' e grew by exactly the withheld sums, up to one FP32 rounding of each e + sum."""
    from fractions import Fraction
    cut, lr = int(cut), f32(float(lr))
    theta, mold, new = read_st(theta_path), read_st(m_path), read_st(theta_new_path)
    groups = [trainers[i:i + 3] for i in range(0, len(trainers), 3)]
    tr = [(read_st(g[0]), read_st(g[1]), read_st(g[2])) for g in groups]
    k = len(tr)
    g_no = n_union = n_pub = n_held = n_exact = 0
    d_total = w_total = Fraction(0)
    bound = 0.0
    for name in sorted(theta):
        shape, th = theta[name]
        for off in range(0, len(th), cut):
            owner = g_no % k
            g_no += 1
            for i in range(off, min(off + cut, len(th))):
                acc, union, e_gate = 0.0, False, []
                for lo, eo, en in tr:
                    a = f32(f32(th[i] - lo[name][1][i]) + eo[name][1][i])
                    vis = (not finite(th[i])) or (not finite(a)) or bf16(f32(th[i] - a)) != bf16(th[i])
                    e_gate.append(0.0 if vis else a)
                    if vis:
                        acc = f32(acc + a)
                        union = True
                pub = False
                if union:
                    n_union += 1
                    u = f32(lr * f32(acc / k))
                    a0 = f32(u + 0.0)
                    pub = (not finite(th[i])) or (not finite(a0)) or bf16(f32(th[i] - a0)) != bf16(th[i])
                    n_pub += pub
                want_e = list(e_gate)
                if union and not pub:
                    n_held += 1
                    want_e[owner] = f32(e_gate[owner] + acc)
                    got = tr[owner][2][name][1][i]
                    d = Fraction(got) - Fraction(e_gate[owner])
                    d_total += d
                    w_total += Fraction(acc)
                    n_exact += d == Fraction(acc)
                    bound += ulp(got) / 2
                for t, (lo, eo, en) in enumerate(tr):
                    if bits(en[name][1][i]) != bits(want_e[t]):
                        sys.exit("FAIL: %s[%d] trainer %d: e_new %r, expected %r (owner %d, union %s, published %s)"
                                 % (name, i, t, en[name][1][i], want_e[t], owner, union, pub))
                g_ = f32((acc if pub else 0.0) / k)
                m = f32(f32(0.0 * mold[name][1][i]) + g_)
                want = f32(th[i] - f32(lr * m))
                if bits(new[name][1][i]) != bits(want):
                    sys.exit("FAIL: %s[%d]: theta_new %r, expected %r (published %s)" % (name, i, new[name][1][i], want, pub))
                if not pub and bits(new[name][1][i]) != bits(th[i]):
                    sys.exit("FAIL: %s[%d]: not published, but theta changed" % (name, i))
    err = abs(float(d_total - w_total))
    if err > bound:
        sys.exit("FAIL: conservation: the owners' e grew by %r, the withheld sums are %r (bound %r)"
                 % (float(d_total), float(w_total), bound))
    print("verified gate: %d union entries, published %d withheld %d; e_new and theta_{r+1} bit-exact; "
          "conservation: owners' e grew by %.9e, withheld sums %.9e, |diff| %.3e <= %.3e; %d of %d exact"
          % (n_union, n_pub, n_held, float(d_total), float(w_total), err, bound, n_exact, n_held))


def cmd_shift(local_path, out, *shifts):
    """OUT = LOCAL with large honest moves: shifts are ELEMENT:D pairs, local[ELEMENT] - D in every
    tensor that has the element (so the trainer's a there is about +D)."""
    t = read_st(local_path)
    for name in t:
        shape, a = t[name]
        for sh in shifts:
            i, d = sh.split(":")
            if int(i) < len(a):
                a[int(i)] = f32(a[int(i)] - float(d))
    write_st(out, t)


def cmd_finite(*paths):
    """Every element of every PATH finite; prints the largest magnitude."""
    big = 0.0
    for p in paths:
        for name, (shape, a) in read_st(p).items():
            for i, x in enumerate(a):
                if not finite(x):
                    sys.exit("FAIL: %s: %s[%d] is %r" % (p, name, i, x))
                big = max(big, abs(x))
    print("finite; largest |x| %.9g" % big)


if __name__ == "__main__":
    cmds = {"init": cmd_init, "local": cmd_local, "verify": cmd_verify, "verify-gate": cmd_verify_gate,
            "shift": cmd_shift, "finite": cmd_finite}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        sys.exit("usage: locogen.py init OUT SEED | local THETA SEED LR STEPS OUT... | verify THETA NEW [LOCAL E_OLD E_NEW INC]..."
                 " | verify-gate THETA M_OLD NEW CUT LR [LOCAL E_OLD E_NEW]... | shift LOCAL OUT [ELEMENT:D]..."
                 " | finite FILE...")
    cmds[sys.argv[1]](*sys.argv[2:])
