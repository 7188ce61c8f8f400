# SPDX-License-Identifier: Apache-2.0
# Context-coded patches (format 5) through Python: Publisher(context=True), a Follower holding the weights follows bit for bit (BF16 and F16 tensors), an EngineFollower's Patch.updates() is refused without the base and given with it.
import os
import sys
import atexit
import shutil
import tempfile

import numpy as np

import pulseweights as pw
from pulseweights.engine import EngineFollower

fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += not cond


def bf16(x):
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def f32(h):
    return (h.astype(np.uint32) << 16).view(np.float32)


tmp = tempfile.mkdtemp(prefix="pulse-context-py.")
atexit.register(shutil.rmtree, tmp, ignore_errors=True)
store = "file://" + os.path.join(tmp, "store")
pw.keygen(os.path.join(tmp, "t"))
rng = np.random.default_rng(5)
# A BF16 matrix of rows at different scales, stepped by noise near its rounding cells: enough
# changes a chunk that the diff keeps the context coding.
scale = np.repeat(0.002 * (1 + np.arange(512) % 8), 1024).reshape(512, 1024)
# And an F16 vector over many binades (its chunks coded by F16's exponent).
w = {"a": bf16(rng.standard_normal((512, 1024)) * scale), "b": rng.standard_normal(300).astype(np.float32),
     "c": (rng.standard_normal(65536) * 2.0 ** -rng.integers(0, 10, 65536)).astype(np.float16)}
mine = {k: v.copy() for k, v in w.items()}   # a follower's weights, updated in place
engine = {}
refused = []


def on_keyframe(step, path):
    import json, struct
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    for k, v in json.loads(raw[8:8 + n]).items():
        if k != "__metadata__":
            b0, b1 = v["data_offsets"]
            dt = {"BF16": np.uint16, "F16": np.float16}.get(v["dtype"], np.float32)
            engine[k] = np.frombuffer(raw[8 + n + b0:8 + n + b1], dtype=dt).reshape(v["shape"]).copy()


def on_patch(step, patch):
    try:
        patch.updates()
        refused.append(None)
    except pw.PulseError as e:
        refused.append(str(e))
    pw.apply_updates(engine, patch.updates(base={"a": (engine["a"], "BF16"), "b": engine["b"], "c": engine["c"]}))


with pw.Publisher(store, "r", os.path.join(tmp, "t.key"), os.path.join(tmp, "pub"), context=True) as pub, \
        pw.Follower(store, "r", os.path.join(tmp, "t.pub"), os.path.join(tmp, "fol"),
                     weights={"a": (mine["a"], "BF16"), "b": mine["b"], "c": mine["c"]}) as fol:
    eng = EngineFollower(store, "r", os.path.join(tmp, "t.pub"), os.path.join(tmp, "eng"), on_patch, on_keyframe)
    for step in range(3):
        if step:
            w["a"] = bf16(f32(w["a"]) + rng.standard_normal((512, 1024)).astype(np.float32) * 1e-4)
            w["b"][:7] += 1.0
            w["c"] = (w["c"].astype(np.float32) - 3e-5 * np.sign(rng.standard_normal(65536))).astype(np.float16)
        pub.publish({"a": (w["a"], "BF16"), "b": w["b"], "c": w["c"]})
        same = lambda have: all(np.array_equal(have[k].view(np.uint8), w[k].view(np.uint8)) for k in w)
        n, held = fol.pull()
        check(n == 1 and same(mine), "step %d: the follower's weights equal the trainer's" % step)
        n, held = eng.pull()
        check(n == 1 and same(engine), "step %d: the engine's arrays, updated with the base, equal the trainer's" % step)
    check(len(refused) == 2 and all(r and "base weights" in r and "a" in r for r in refused),
          "Patch.updates() without the base is refused by name: %s" % refused[:1])
    pfiles = []
    for root, _, names in os.walk(os.path.join(tmp, "store")):
        for nm in names:
            with open(os.path.join(root, nm), "rb") as fh:
                head = fh.read(12)
            if head[:8] == b"PULSEPCH":
                pfiles.append(int.from_bytes(head[8:12], "little"))
    check(pfiles and all(v == 5 for v in pfiles), "the published patches are format 5: %s" % pfiles)
    eng.close()

sys.exit(1 if fails else 0)
