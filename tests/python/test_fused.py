# SPDX-License-Identifier: Apache-2.0
# pulseweights.fused: a Llama checkpoint's sparse updates land in vLLM/SGLang-style fused, tensor-parallel shards bit for bit (numpy and torch), and a layout mismatch writes nothing.
import sys

import numpy as np

from pulseweights import fused

CFG = dict(layers=2, hidden=64, intermediate=96, heads=4, kv_heads=2, vocab=100)
rng = np.random.default_rng(7)
fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += not cond


def checkpoint():
    h, i, v = CFG["hidden"], CFG["intermediate"], CFG["vocab"]
    kv = CFG["kv_heads"] * h // CFG["heads"]
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for l in range(CFG["layers"]):
        p = "model.layers.%d." % l
        shapes.update({p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                       p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                       p + "mlp.gate_proj.weight": (i, h), p + "mlp.up_proj.weight": (i, h),
                       p + "mlp.down_proj.weight": (h, i), p + "input_layernorm.weight": (h,),
                       p + "post_attention_layernorm.weight": (h,)})
    return {k: rng.integers(0, 1 << 16, size=s, dtype=np.uint16) for k, s in shapes.items()}


class Update:
    def __init__(self, index, deltas=None, values=None):
        self.index, self.deltas, self.values = index, deltas, values


old = checkpoint()
new, ups_delta, ups_value = {}, {}, {}
for k, a in old.items():
    flat = a.reshape(-1)
    idx = np.sort(rng.choice(flat.size, size=max(1, flat.size // 20), replace=False)).astype(np.int64)
    d = rng.choice(np.array([-3, -1, 1, 2, 7], dtype=np.int16), size=idx.size)
    b = flat.copy()
    b[idx] = (b[idx].view(np.int16) + d).view(np.uint16)   # wraps like the bits do
    new[k] = b.reshape(a.shape)
    ups_delta[k] = Update(idx, deltas=d)
    ups_value[k] = Update(idx, values=b[idx])


def independent_shards(t, tp, r):
    """The fused layout written out by hand (torch.cat of slices), to check fused.shard itself."""
    h, i, v = CFG["hidden"], CFG["intermediate"], CFG["vocab"]
    hd = h // CFG["heads"]
    kvh = CFG["kv_heads"]
    q = slice(r * h // tp, (r + 1) * h // tp)
    if kvh >= tp:
        kv = slice(r * kvh * hd // tp, (r + 1) * kvh * hd // tp)
    else:
        hh = r * kvh // tp
        kv = slice(hh * hd, (hh + 1) * hd)
    g = slice(r * i // tp, (r + 1) * i // tp)
    vv = slice(r * v // tp, (r + 1) * v // tp)
    out = {"model.embed_tokens.weight": t["model.embed_tokens.weight"][vv], "model.norm.weight": t["model.norm.weight"],
           "lm_head.weight": t["lm_head.weight"][vv]}
    for l in range(CFG["layers"]):
        p = "model.layers.%d." % l
        out[p + "self_attn.qkv_proj.weight"] = np.concatenate(
            [t[p + "self_attn.q_proj.weight"][q], t[p + "self_attn.k_proj.weight"][kv], t[p + "self_attn.v_proj.weight"][kv]])
        out[p + "self_attn.o_proj.weight"] = t[p + "self_attn.o_proj.weight"][:, q]
        out[p + "mlp.gate_up_proj.weight"] = np.concatenate([t[p + "mlp.gate_proj.weight"][g], t[p + "mlp.up_proj.weight"][g]])
        out[p + "mlp.down_proj.weight"] = t[p + "mlp.down_proj.weight"][:, g]
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            out[p + n] = t[p + n]
    return out


for tp in (1, 2, 4):
    for r in range(tp):
        lay = fused.llama_tp_layout(tp=tp, rank=r, **CFG)
        ref_old, ref_new = independent_shards(old, tp, r), independent_shards(new, tp, r)
        got = fused.shard(old, lay)
        check(set(got) == set(ref_old) and all(np.array_equal(got[k], ref_old[k]) for k in got),
              "tp %d rank %d: shard() equals the hand-written fused layout" % (tp, r))
        for kind, ups in (("deltas", ups_delta), ("values", ups_value)):
            params = fused.shard(old, lay)
            written = fused.apply_updates(params, ups, lay)
            same = all(np.array_equal(params[k], ref_new[k]) for k in ref_new)
            check(same, "tp %d rank %d: %s applied to the shards give the new shards bit for bit (%d elements)"
                  % (tp, r, kind, sum(written.values())))

# Each element changed in the checkpoint is written exactly once over the ranks of one TP group,
# except the norms, which every rank holds.
total = sum(u.index.size for k, u in ups_delta.items() if not k.endswith("norm.weight"))
per = sum(sum(v for p, v in fused.apply_updates(fused.shard(old, fused.llama_tp_layout(tp=2, rank=r, **CFG)), ups_delta,
                                                  fused.llama_tp_layout(tp=2, rank=r, **CFG)).items()
              if not p.endswith("norm.weight")) for r in range(2))
check(per == total, "tp 2: %d changes written once across the ranks (%d in the checkpoint)" % (per, total))

try:
    import torch
except ImportError:
    torch = None
if torch is not None:
    lay = fused.llama_tp_layout(tp=2, rank=1, **CFG)
    as_bf16 = lambda d: {k: torch.from_numpy(v.astype(np.uint16).view(np.int16).copy()).view(torch.bfloat16)
                         for k, v in d.items()}
    params = as_bf16(fused.shard(old, lay))
    fused.apply_updates(params, ups_delta, lay)
    want = as_bf16(independent_shards(new, 2, 1))
    check(all(torch.equal(params[k].view(torch.int16), want[k].view(torch.int16)) for k in want),
          "torch bfloat16 shards: deltas applied in place bit for bit")

# A parameter of the wrong size is refused by name and nothing is written, not even to the
# parameters checked before it.
lay = fused.llama_tp_layout(tp=2, rank=0, **CFG)
params = fused.shard(old, lay)
before = {k: v.copy() for k, v in params.items()}
params["model.layers.1.mlp.gate_up_proj.weight"] = params["model.layers.1.mlp.gate_up_proj.weight"][:-1].copy()
before["model.layers.1.mlp.gate_up_proj.weight"] = params["model.layers.1.mlp.gate_up_proj.weight"].copy()
try:
    fused.apply_updates(params, ups_delta, lay)
    check(False, "a wrong-size parameter is refused")
except ValueError as e:
    check("model.layers.1.mlp.gate_up_proj.weight" in str(e), "a wrong-size parameter is refused by name: %s" % e)
check(all(np.array_equal(params[k], before[k]) for k in params), "nothing written after the refusal")
try:
    fused.apply_updates(params, {"model.layers.9.mlp.up_proj.weight": ups_delta["model.norm.weight"]}, lay)
    check(False, "a tensor the layout does not place is refused")
except ValueError as e:
    check("layers.9" in str(e), "a tensor the layout does not place is refused by name")
try:
    fused.llama_tp_layout(tp=3, rank=0, **CFG)
    check(False, "an uneven split is refused")
except ValueError as e:
    check("does not split" in str(e), "an uneven split is refused: %s" % e)

# apply_patch: a real patch of old -> new (published through a file:// store in chunks of 256
# elements), written by the library straight into the shards, whole and sliced, bit for bit.
import atexit
import os
import shutil
import tempfile

import pulseweights as pw
from pulseweights.updates import Patch
from stored_patch import patch_bytes

tmp = tempfile.mkdtemp(prefix="pulse-fused-py.")
atexit.register(shutil.rmtree, tmp, ignore_errors=True)
store = "file://" + os.path.join(tmp, "store")
pw.keygen(os.path.join(tmp, "t"))
with pw.Publisher(store, "r", os.path.join(tmp, "t.key"), os.path.join(tmp, "pub"), chunk_elems=256) as pub:
    pub.publish({k: (v, "BF16") for k, v in old.items()})
    last = pub.publish({k: (v, "BF16") for k, v in new.items()})
raw = patch_bytes(os.path.join(tmp, "store"), "r", last.record_key)
whole = Patch.from_bytes(raw)
whole.verify()
for tp in (1, 2, 4):
    for r in range(tp):
        lay = fused.llama_tp_layout(tp=tp, rank=r, **CFG)
        ref_new = independent_shards(new, tp, r)
        params = fused.shard(old, lay)
        written = fused.apply_patch(params, whole, lay, threads=2)
        check(all(np.array_equal(params[k], ref_new[k]) for k in ref_new),
              "tp %d rank %d: apply_patch writes the new shards bit for bit (%d elements)" % (tp, r, sum(written.values())))
        with Patch.from_head(raw[:whole.head_bytes], len(raw)) as sp:
            for name, lo, hi in fused.slices(lay):
                sp.want(name, lo, hi)
            for off, n in sp.missing():
                sp.supply(off, raw[off:off + n])
            sp.verify()
            params = fused.shard(old, lay)
            fused.apply_patch(params, sp, lay)
            check(all(np.array_equal(params[k], ref_new[k]) for k in ref_new),
                  "tp %d rank %d: the sliced patch too" % (tp, r))
lay = fused.llama_tp_layout(tp=2, rank=0, **CFG)
params = fused.shard(old, lay)
params["model.layers.1.mlp.down_proj.weight"] = params["model.layers.1.mlp.down_proj.weight"][:, :10].copy()
before = {k: v.copy() for k, v in params.items()}
try:
    fused.apply_patch(params, whole, lay)
    check(False, "apply_patch refuses a wrong-size parameter")
except ValueError as e:
    check("down_proj" in str(e), "apply_patch refuses a wrong-size parameter by name: %s" % e)
check(all(np.array_equal(params[k], before[k]) for k in params), "nothing written by apply_patch after the refusal")
if torch is not None:
    params = as_bf16(fused.shard(old, lay))
    fused.apply_patch(params, whole, lay)
    want = as_bf16(independent_shards(new, 2, 0))
    check(all(torch.equal(params[k].view(torch.int16), want[k].view(torch.int16)) for k in want),
          "apply_patch into torch.bfloat16 CPU shards bit for bit")
whole.close()

print("fused: %d failed" % fails)
sys.exit(1 if fails else 0)
