# SPDX-License-Identifier: Apache-2.0
# Bytes a tensor-parallel rank of an engine-held follower with slices fetches per patch step, at TP 2, 4 and 8, against the whole patch, on a Llama-shaped step published through a file:// store. Usage: serve_slices.py [--layers N] [--hidden H] [--intermediate I] [--heads N] [--kv-heads N] [--vocab V] [--density D] [--chunk N]
import argparse
import os
import shutil
import tempfile

import numpy as np

import pulseweights as pw
from pulseweights import fused
from pulseweights.updates import Patch


def model(cfg, rng):
    """BF16 bit patterns in HF checkpoint names, Llama-shaped."""
    h, i, v = cfg["hidden"], cfg["intermediate"], cfg["vocab"]
    kv = cfg["kv_heads"] * h // cfg["heads"]
    w = lambda *s: rng.integers(0x3a00, 0x3d00, size=s, dtype=np.uint16)   # noqa: E731
    sd = {"model.embed_tokens.weight": w(v, h), "model.norm.weight": w(h), "lm_head.weight": w(v, h)}
    for layer in range(cfg["layers"]):
        p = "model.layers.%d." % layer
        sd.update({p + "self_attn.q_proj.weight": w(h, h), p + "self_attn.k_proj.weight": w(kv, h),
                   p + "self_attn.v_proj.weight": w(kv, h), p + "self_attn.o_proj.weight": w(h, h),
                   p + "mlp.gate_proj.weight": w(i, h), p + "mlp.up_proj.weight": w(i, h),
                   p + "mlp.down_proj.weight": w(h, i), p + "input_layernorm.weight": w(h),
                   p + "post_attention_layernorm.weight": w(h)})
    return sd


def step(sd, density, rng):
    """An RL-like step: a fraction `density` of every tensor's weights moves by one BF16 ulp."""
    for t in sd.values():
        flat = t.reshape(-1)
        idx = rng.choice(flat.size, size=max(1, int(flat.size * density)), replace=False)
        flat[idx] += rng.choice(np.array([1, 0xFFFF], np.uint16), size=idx.size)


def newest_patch(objdir):
    """The newest object that opens as a whole patch, and its bytes."""
    for path in sorted((os.path.join(objdir, x) for x in os.listdir(objdir)), key=os.path.getmtime, reverse=True):
        try:
            with Patch(path):
                return open(path, "rb").read()
        except pw.PulseError:
            continue
    raise SystemExit("serve_slices: no patch object in %s" % objdir)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=11008)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--density", type=float, default=0.05)
    ap.add_argument("--chunk", type=int, default=0, help="elements per patch chunk (0: 2^20)")
    a = ap.parse_args()
    cfg = dict(layers=a.layers, hidden=a.hidden, intermediate=a.intermediate, heads=a.heads, kv_heads=a.kv_heads,
               vocab=a.vocab)
    rng = np.random.default_rng(0)
    sd = model(cfg, rng)
    params = sum(t.size for t in sd.values())
    tmp = tempfile.mkdtemp(prefix="pulse-serve-slices.")
    try:
        store = "file://" + os.path.join(tmp, "store")
        pw.keygen(os.path.join(tmp, "t"))
        with pw.Publisher(store, "r", os.path.join(tmp, "t.key"), os.path.join(tmp, "pub"),
                          chunk_elems=a.chunk) as pub:
            pub.publish({k: (v, "BF16") for k, v in sd.items()})
            step(sd, a.density, rng)
            info = pub.publish({k: (v, "BF16") for k, v in sd.items()})
        raw = newest_patch(os.path.join(tmp, "store", "r", "objects"))
        with Patch.from_bytes(raw) as whole:
            head = whole.head_bytes
        print("model: %.0fM parameters (%d layers, hidden %d, intermediate %d, vocab %d), %d changes (%.1f %%), "
              "chunk %d elements" % (params / 1e6, a.layers, a.hidden, a.intermediate, a.vocab, info.changes,
                                     100.0 * info.changes / params, a.chunk or (1 << 20)))
        print("patch: %d bytes (head %d)" % (len(raw), head))
        print("| TP | bytes a rank fetches (head + its chunks), mean | most | / whole patch |")
        print("|---|---|---|---|")
        for tp in (1, 2, 4, 8):
            got = []
            for rank in range(tp):
                lay = fused.llama_tp_layout(tp=tp, rank=rank, **cfg)
                with Patch.from_head(raw[:head], len(raw)) as sp:
                    for name, lo, hi in fused.slices(lay):
                        sp.want(name, lo, hi)
                    # What the follower fetches: the head, then these ranges (pulse_patch_missing).
                    got.append(head + sum(n for _, n in sp.missing()))
            print("| %d | %.0f | %d | %.3f |" % (tp, sum(got) / tp, max(got), max(got) / len(raw)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
