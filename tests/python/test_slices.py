# SPDX-License-Identifier: Apache-2.0
# Slices from Python: an EngineFollower holding a tensor-parallel rank's rows fetches fewer bytes than a whole one and stays bit-identical on them; Patch.from_head / want / missing / supply by hand, with a damaged range refused; fused.slices of a layout.
import os
import atexit
import shutil
import tempfile

import numpy as np

import pulseweights as pw
from pulseweights import fused
from pulseweights.engine import EngineFollower
from pulseweights.updates import Patch
from stored_patch import patch_bytes

fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += not cond


tmp = tempfile.mkdtemp(prefix="pulse-slices-py.")
atexit.register(shutil.rmtree, tmp, ignore_errors=True)
store = "file://" + os.path.join(tmp, "store")
pw.keygen(os.path.join(tmp, "t"))
rng = np.random.default_rng(5)
ROWS, COLS, R0, R1 = 64, 32, 16, 32
w = {"a": rng.integers(0x3c00, 0x3e00, size=(ROWS, COLS), dtype=np.uint16), "n": np.ones(COLS, np.float32)}


def keyframe_into(held, rows):
    def on_keyframe(step, path):
        import json
        import struct
        raw = open(path, "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        h = json.loads(raw[8:8 + n])
        a0, a1 = h["a"]["data_offsets"]
        a = np.frombuffer(raw[8 + n + a0:8 + n + a1], dtype=np.uint16).reshape(ROWS, COLS)
        held["a"] = a[rows[0]:rows[1]].copy()
        n0, n1 = h["n"]["data_offsets"]
        held["n"] = np.frombuffer(raw[8 + n + n0:8 + n + n1], dtype=np.float32).copy()
    return on_keyframe


def patch_into(held, rows, seen):
    def on_patch(step, patch):
        ups = patch.updates()
        seen.append((patch.sliced, step.moved_bytes))
        for name, u in ups.items():
            if name == "a":
                keep = (u.index >= rows[0] * COLS) & (u.index < rows[1] * COLS)
                held["a"].view(np.int16).reshape(-1)[u.index[keep] - rows[0] * COLS] += u.deltas[keep]
            else:
                held["n"].view(np.int32)[u.index] += u.deltas
    return on_patch


part, whole = {}, {}
seen_p, seen_w = [], []
with pw.Publisher(store, "r", os.path.join(tmp, "t.key"), os.path.join(tmp, "pub"), chunk_elems=64) as pub:
    trust = os.path.join(tmp, "t.pub")
    fp = EngineFollower(store, "r", trust, os.path.join(tmp, "part"), patch_into(part, (R0, R1), seen_p),
                        keyframe_into(part, (R0, R1)), slices=[("a", R0 * COLS, R1 * COLS), ("n", 0, COLS)])
    fw = EngineFollower(store, "r", trust, os.path.join(tmp, "whole"), patch_into(whole, (0, ROWS), seen_w),
                        keyframe_into(whole, (0, ROWS)))
    for step in range(4):
        if step:
            w["a"].reshape(-1)[rng.integers(0, ROWS * COLS, 400)] += 1
            w["n"][step] += 0.5
        info = pub.publish({"a": (w["a"], "BF16"), "n": w["n"]})
        fp.pull()
        fw.pull()
        check(np.array_equal(part["a"], w["a"][R0:R1]) and np.array_equal(part["n"], w["n"]),
              "step %d: the rank's rows and the norm equal the trainer's" % step)
        check(np.array_equal(whole["a"], w["a"]), "step %d: the whole follower too" % step)
    check(all(s for s, _ in seen_p) and not any(s for s, _ in seen_w), "sliced patches to the rank only")
    moved_p, moved_w = sum(m for _, m in seen_p), sum(m for _, m in seen_w)
    check(0 < moved_p < moved_w, "the rank fetched fewer bytes: %d against %d" % (moved_p, moved_w))
    fp.close()
    fw.close()
    try:
        EngineFollower(store, "r", trust, os.path.join(tmp, "bad"), patch_into({}, (0, 1), []),
                       keyframe_into({}, (0, 1)), slices=[("a", 5, 5)])
        check(False, "an empty slice is refused")
    except ValueError:
        check(True, "an empty slice is refused")

    # By hand: the newest patch, put together from the objects its record names (its head,
    # then its data in parts), its head, then the rank's ranges.
    last = pub.publish({"a": (w["a"] + 1, "BF16"), "n": w["n"]})
raw = patch_bytes(os.path.join(tmp, "store"), "r", last.record_key)
path = os.path.join(tmp, "whole.patch")
with open(path, "wb") as f:
    f.write(raw)
whole_patch = Patch(path)
hb = whole_patch.head_bytes
check(not whole_patch.sliced and 0 < hb < len(raw), "a whole patch of %d bytes, head %d" % (len(raw), hb))
try:
    Patch.from_head(raw[:hb - 1], len(raw))
    check(False, "a short head is refused")
except pw.PulseError:
    check(True, "a short head is refused")
with Patch.from_head(raw[:hb], len(raw)) as sp:
    check(sp.sliced and sp.updates() == {}, "nothing present: no updates")
    sp.want("a", R0 * COLS, R1 * COLS)
    rg = sp.missing()
    check(len(rg) >= 1 and sum(n for _, n in rg) < len(raw) - hb, "ranges of the rank's rows only: %s" % rg)
    off, n = rg[0]
    bad = bytearray(raw[off:off + n])
    bad[-1] ^= 1
    try:
        sp.supply(off, bytes(bad))
        check(False, "a damaged range is refused")
    except pw.PulseError as e:
        check(e.name == "PULSE_ERR_CORRUPT" and "tensor a chunk" in str(e),
              "a damaged range is refused by chunk: %s" % e)
    for off, n in rg:
        sp.supply(off, raw[off:off + n])
    check(sp.missing() == [], "nothing missing once supplied")
    part_ups, all_ups = sp.updates()["a"], whole_patch.updates()["a"]
    keep = (all_ups.index >= R0 * COLS) & (all_ups.index < R1 * COLS)
    check(np.array_equal(part_ups.index[(part_ups.index >= R0 * COLS) & (part_ups.index < R1 * COLS)],
                         all_ups.index[keep]), "the sliced updates are the whole patch's on those rows")
    check("n" not in sp.updates(), "a tensor not wanted has no updates")
whole_patch.close()

# fused.slices: rows are one range, columns one range per row.
lay = fused.llama_tp_layout(layers=1, hidden=8, intermediate=16, heads=2, kv_heads=2, vocab=12, tp=2, rank=1)
sl = fused.slices(lay)
q = [x for x in sl if x[0] == "model.layers.0.self_attn.q_proj.weight"]
o = [x for x in sl if x[0] == "model.layers.0.self_attn.o_proj.weight"]
check(q == [("model.layers.0.self_attn.q_proj.weight", 4 * 8, 8 * 8)], "q rows 4..8 of 8 columns: %s" % q)
check(len(o) == 8 and o[0][1:] == (4, 8) and o[1][1:] == (12, 16), "o_proj columns 4..8 in each of 8 rows")
print("python-slices: %d failed" % fails)
raise SystemExit(1 if fails else 0)
