# SPDX-License-Identifier: Apache-2.0
# pulseweights.engine.EngineFollower: verified steps delivered to callbacks (a keyframe file, then patches) with no weights held; a callback's exception refuses the step and the next pull delivers it again.
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


tmp = tempfile.mkdtemp(prefix="pulse-engine-py.")
atexit.register(shutil.rmtree, tmp, ignore_errors=True)
store = "file://" + os.path.join(tmp, "store")
pw.keygen(os.path.join(tmp, "t"))
rng = np.random.default_rng(3)
w = {"a": rng.integers(0, 1 << 16, size=(64, 32), dtype=np.uint16), "b": rng.standard_normal(100).astype(np.float32)}
engine = {}
seen = []
refuse = [False]


def on_keyframe(step, path):
    import struct, json
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    for k, v in h.items():
        if k == "__metadata__":
            continue
        b0, b1 = v["data_offsets"]
        dt = np.uint16 if v["dtype"] == "BF16" else np.float32
        engine[k] = np.frombuffer(raw[8 + n + b0:8 + n + b1], dtype=dt).reshape(v["shape"]).copy()
    seen.append(("keyframe", step.step))


def on_patch(step, patch):
    if refuse[0]:
        refuse[0] = False
        raise RuntimeError("engine busy")
    pw.apply_updates(engine, patch.updates())
    seen.append(("patch", step.step))


with pw.Publisher(store, "r", os.path.join(tmp, "t.key"), os.path.join(tmp, "pub")) as pub:
    f = EngineFollower(store, "r", os.path.join(tmp, "t.pub"), os.path.join(tmp, "eng"), on_patch, on_keyframe)
    for step in range(3):
        if step:
            w["a"][rng.integers(0, 64, 20), rng.integers(0, 32, 20)] += 1
            w["b"][:5] += 1.0
        pub.publish({"a": (w["a"], "BF16"), "b": w["b"]})
        n, held = f.pull()
        check(n == 1 and held.step == step, "step %d delivered (%d, %s)" % (step, n, held and held.step))
        check(np.array_equal(engine["a"], w["a"]) and np.array_equal(engine["b"], w["b"]),
              "step %d: the engine's arrays equal the trainer's" % step)
    check([k for k, _ in seen] == ["keyframe", "patch", "patch"], "a keyframe, then patches: %s" % seen)
    check(not [p for p in os.listdir(os.path.join(tmp, "eng")) if p.endswith(".safetensors")],
          "no weights file in the state directory")
    w["a"][0, 0] += 1
    pub.publish({"a": (w["a"], "BF16"), "b": w["b"]})
    refuse[0] = True
    before = {k: v.copy() for k, v in engine.items()}
    try:
        f.pull()
        check(False, "a callback's exception refuses the step")
    except RuntimeError as e:
        check("engine busy" in str(e) and isinstance(e.__cause__, pw.PulseError),
              "the callback's exception comes out of pull(), the PulseError as its cause")
    check(all(np.array_equal(engine[k], before[k]) for k in engine), "nothing written by the refused step")
    n, held = f.pull()
    check(n == 1 and held.step == 3 and np.array_equal(engine["a"], w["a"]), "the next pull delivers step 3 again")
    f.close()

print("engine: %d failed" % fails)
sys.exit(1 if fails else 0)
