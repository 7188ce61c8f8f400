# SPDX-License-Identifier: Apache-2.0
# The C scatter behind apply_updates and fused.apply_updates on CPU tensors: bit for bit what numpy's fancy-indexed scatter gives (numpy and torch, 1/2/4-byte elements), no index-sized temporaries, and bad positions refused before any tensor is written.
import sys
import tracemalloc

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy does not import in %s (Debian: python3-numpy)" % sys.executable)
    sys.exit(77)

import pulseweights as pw
from pulseweights import fused
from pulseweights.updates import TensorUpdate

rng = np.random.default_rng(11)
fails = 0
DT = {"F8_E4M3": (np.uint8, np.int8), "BF16": (np.uint16, np.int16), "F32": (np.uint32, np.int32)}


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += not cond


def update(name, dtype, shape, add, frac=0.3):
    """A random update of a tensor: ascending positions (both ends included), deltas spanning the
    whole signed range (so adds wrap) or new values."""
    n = int(np.prod(shape))
    idx = np.flatnonzero(rng.random(n) < frac).astype(np.int64)
    idx = np.union1d(idx, [0, n - 1]).astype(np.int64)
    u, s = DT[dtype]
    src = rng.integers(np.iinfo(s).min, np.iinfo(s).max, size=idx.size, endpoint=True, dtype=s)
    if add:
        return TensorUpdate(name, dtype, idx, None, src, tuple(shape), None)
    return TensorUpdate(name, dtype, idx, src.view(u), None, tuple(shape), None)


def numpy_scatter(a, u):
    """The numpy path apply_updates took before the C scatter: flat[index] += deltas / = values."""
    s = DT[u.dtype][1]
    flat = a.reshape(-1).view(s)
    if u.deltas is not None:
        flat[u.index] += u.deltas
    else:
        flat[u.index] = u.values.view(s)


# pulseweights.apply_updates on numpy arrays: every width, adds (wrapping) and sets.
for dtype in DT:
    for add in (True, False):
        shape = (37, 53)
        a = rng.integers(0, np.iinfo(DT[dtype][0]).max, size=shape, endpoint=True, dtype=DT[dtype][0])
        want = a.copy()
        u = update("t", dtype, shape, add)
        numpy_scatter(want, u)
        pw.apply_updates({"t": a}, {"t": u})
        check(np.array_equal(a.view(np.uint8), want.view(np.uint8)),
              "numpy %s %s: bit for bit numpy's scatter" % (dtype, "deltas" if add else "values"))

# The C path allocates nothing index-sized: numpy's `flat[index] += d` gathers into a temporary.
n = 1 << 21
a = np.zeros(n, np.uint16)
u = update("t", "BF16", (n,), True, frac=0.5)
tracemalloc.start()
pw.apply_updates({"t": a}, {"t": u})
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
check(peak < u.index.size // 4, "apply of %d changes: %d bytes allocated at peak (no temporaries)" % (u.index.size, peak))

# Bad positions in the second tensor: refused by name, the first tensor not written either.
shape = (8, 8)
first = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
second = rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
good = update("a", "BF16", shape, True)
for what, idx, detail in (("not ascending", [1, 5, 5, 9], "index[2] = 5 does not ascend strictly"),
                          ("descending", [3, 2], "index[1] = 2 does not ascend strictly"),
                          ("past the end", [0, 64], "index[1] = 64 is outside the tensor's 64 elements"),
                          ("negative", [-1, 3], "index[0] = -1 is outside")):
    a0, b0 = first.copy(), second.copy()
    bad = TensorUpdate("b", "BF16", np.array(idx, np.int64), None, np.ones(len(idx), np.int16), shape, None)
    try:
        pw.apply_updates({"a": a0, "b": b0}, {"a": good, "b": bad})
        check(False, "positions %s are refused" % what)
    except pw.PulseError as e:
        check(detail in str(e), "positions %s are refused: %s" % (what, e))
    check(np.array_equal(a0, first) and np.array_equal(b0, second), "positions %s: nothing written" % what)

# fused.apply_updates into a rank's fused shards: the C path gives what numpy's scatter of the
# same mapped positions gives.
CFG = dict(layers=1, hidden=32, intermediate=48, heads=4, kv_heads=2, vocab=40)
lay = fused.llama_tp_layout(tp=2, rank=1, **CFG)
whole = {}
for name, pieces in lay.items():
    r, c = pieces[0].shape
    whole[name] = rng.integers(0, 1 << 16, size=(r, c) if r > 1 else (c,), dtype=np.uint16)
for add in (True, False):
    ups = {k: update(k, "BF16", v.shape, add) for k, v in whole.items()}
    params = fused.shard(whole, lay)
    want = {k: v.copy() for k, v in params.items()}
    for name, u in ups.items():
        for pc in lay[name]:
            m = fused.map_index(pc, u.index)
            flat = want[pc.param].reshape(-1).view(np.int16)
            if add:
                flat[m.index] += u.deltas[m.sel]
            else:
                flat[m.index] = u.values[m.sel].view(np.int16)
    fused.apply_updates(params, ups, lay)
    check(all(np.array_equal(params[k], want[k]) for k in want),
          "fused numpy shards, %s: bit for bit numpy's scatter" % ("deltas" if add else "values"))

# A strided parameter would be written through a copy: refused by name, nothing written.
params = fused.shard(whole, lay)
p = "model.layers.0.self_attn.o_proj.weight"
base = np.zeros((params[p].shape[0], 2 * params[p].shape[1]), np.uint16)
base[:, ::2] = params[p]
params[p] = base[:, ::2]
before = {k: v.copy() for k, v in params.items()}
try:
    fused.apply_updates(params, {k: update(k, "BF16", v.shape, True) for k, v in whole.items()}, lay)
    check(False, "a strided numpy parameter is refused")
except ValueError as e:
    check(p in str(e) and "contiguous" in str(e), "a strided numpy parameter is refused by name: %s" % e)
check(all(np.array_equal(params[k], before[k]) for k in params), "nothing written after the refusal")

# Torch tensors on the CPU take the same C path (their data pointer): bit for bit numpy's.
try:
    import torch
except ImportError:
    torch = None
    print("skip torch: does not import")
if torch is not None:
    for add in (True, False):
        a = rng.integers(0, 1 << 16, size=(41, 29), dtype=np.uint16)
        u = update("t", "BF16", a.shape, add)
        t = torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
        want = a.copy()
        numpy_scatter(want, u)
        pw.apply_updates({"t": t}, {"t": u})
        check(np.array_equal(t.view(torch.int16).numpy().view(np.uint16), want),
              "torch bfloat16 on the CPU, %s: bit for bit numpy's scatter" % ("deltas" if add else "values"))
    ups = {k: update(k, "BF16", v.shape, True) for k, v in whole.items()}
    params_np = fused.shard(whole, lay)
    params_t = {k: torch.from_numpy(v.view(np.int16).copy()).view(torch.bfloat16) for k, v in params_np.items()}
    fused.apply_updates(params_np, ups, lay)
    fused.apply_updates(params_t, ups, lay)
    check(all(np.array_equal(params_t[k].view(torch.int16).numpy().view(np.uint16), params_np[k]) for k in params_np),
          "fused torch bfloat16 shards on the CPU: the same bits as the numpy shards")

print("scatter: %d failed" % fails)
sys.exit(1 if fails else 0)
