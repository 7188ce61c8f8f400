# SPDX-License-Identifier: Apache-2.0
# The receiver of an engine-held follower: per patch step, the time to take a step's updates and apply them to weights held as numpy arrays, against a memcpy of the model and a reload of the checkpoint file, and the peak memory it adds above the weights. Usage: serve_receiver.py STORE RUN TRUST.pub STATE_DIR CKPT
import json
import os
import resource
import struct
import sys
import time
import tracemalloc

import numpy as np

import pulseweights as pw

store, run, trust, state, ckpt = sys.argv[1:6]
engine = {}


def load(path, into):
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    n = int(struct.unpack("<Q", bytes(raw[:8]))[0])
    h = json.loads(bytes(raw[8:8 + n]))
    for k, v in h.items():
        if k == "__metadata__":
            continue
        b0, b1 = v["data_offsets"]
        width = {"BF16": np.uint16, "F16": np.uint16, "F32": np.uint32}.get(v["dtype"], np.uint8)
        src = raw[8 + n + b0:8 + n + b1].view(width)
        if k in into:
            np.copyto(into[k].reshape(-1), src)   # a reload: every byte read and written again
        else:
            into[k] = np.array(src)


times = []


def on_keyframe(step, path):
    load(path, engine)


def on_patch(step, patch):
    tracemalloc.start()   # numpy's allocations (the update arrays and the scatter's temporaries)
    t0 = time.perf_counter()
    ups = patch.updates(want=("index", "deltas"))
    pw.apply_updates(engine, ups)
    t = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    times.append((step.step, t, step.changes, step.object_bytes, peak))


f = pw.EngineFollower(store, run, trust, state, on_patch, on_keyframe)
f.pull()   # the keyframe alone: pulse pull of step 0 only is not offered, so all steps come at once
model = sum(a.nbytes for a in engine.values())
rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("model %.1f MB; peak RSS %.1f MB after the keyframe and %d patch steps" % (model / 1e6, rss_kb / 1e3, len(times)))
copy = {k: np.empty_like(v) for k, v in engine.items()}
for k, v in engine.items():
    np.copyto(copy[k], v)   # first touch: page faults, not copying
t0 = time.perf_counter()
for k, v in engine.items():
    np.copyto(copy[k], v)
memcpy = time.perf_counter() - t0
t0 = time.perf_counter()
load(ckpt, engine)
reload = time.perf_counter() - t0
for s, t, ch, ob, peak in times:
    print("step %d: %d changes, %d bytes of patch: apply %.1f ms = %.2fx a memcpy of the model (%.1f ms), "
          "%.2fx a reload of the file from the page cache (%.1f ms); update arrays peak %.1f MB (%.1f bytes a change, "
          "%.3f of the model)" % (s, ch, ob, 1e3 * t, t / memcpy, 1e3 * memcpy, t / reload, 1e3 * reload,
                                  peak / 1e6, peak / ch, peak / model))
