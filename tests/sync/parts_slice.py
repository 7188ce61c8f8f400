# SPDX-License-Identifier: Apache-2.0
"""A slice follower of a run committed from parts: a tensor-parallel rank's rows of the largest 2-D
BF16 tensor, through pulseweights.engine.EngineFollower with slices; its rows must equal the
sharded checkpoint's at the newest step, and it must fetch fewer bytes than the patches hold.

usage: parts_slice.py STORE RUN TRUST STATE_DIR NEWEST_INDEX_JSON FIRST_INDEX_JSON_DIR"""
import json
import os
import struct
import sys

import numpy as np

from pulseweights.engine import EngineFollower

store, run, trust, state, newest = sys.argv[1:6]


def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    h.pop("__metadata__", None)
    return h, raw, 8 + n


def tensor_of(index_json, name):
    shard = json.load(open(index_json))["weight_map"][name]
    h, raw, base = tensors(os.path.join(os.path.dirname(index_json), shard))
    a, b = h[name]["data_offsets"]
    return np.frombuffer(raw[base + a:base + b], dtype=np.uint16).reshape(h[name]["shape"])


wm = json.load(open(newest))["weight_map"]
best = None
for name, shard in wm.items():
    h, _, _ = tensors(os.path.join(os.path.dirname(newest), shard))
    if h[name]["dtype"] == "BF16" and len(h[name]["shape"]) == 2:
        size = h[name]["shape"][0] * h[name]["shape"][1]
        if best is None or size > best[1]:
            best = (name, size, h[name]["shape"])
name, _, (rows, cols) = best
r0, r1 = rows // 4, rows // 2
held = {}
moved = []


def on_keyframe(step, path):
    h, raw, base = tensors(path)
    a, b = h[name]["data_offsets"]
    held["w"] = np.frombuffer(raw[base + a:base + b], dtype=np.uint16).reshape(rows, cols)[r0:r1].copy()


def on_patch(step, patch):
    moved.append((step.moved_bytes, step.object_bytes))
    for tname, u in patch.updates().items():
        if tname != name:
            continue
        keep = (u.index >= r0 * cols) & (u.index < r1 * cols)
        held["w"].view(np.int16).reshape(-1)[u.index[keep] - r0 * cols] += u.deltas[keep]


f = EngineFollower(store, run, trust, state, on_patch, on_keyframe, slices=[(name, r0 * cols, r1 * cols)])
f.pull()
f.close()
want = tensor_of(newest, name)[r0:r1]
ok = np.array_equal(held.get("w"), want)
fewer = all(m < o for m, o in moved) and len(moved) > 0
print("rows %d..%d of %s: %s; patch steps %d, bytes fetched/held %s" % (r0, r1, name, "equal" if ok else "DIFFER",
                                                                        len(moved), moved))
raise SystemExit(0 if ok and fewer else 1)
