# SPDX-License-Identifier: Apache-2.0
# The receiver of an engine-held follower: per patch step, the time to take a step's updates (patch.updates) and write them (apply_updates) into weights held as numpy arrays, against a memcpy of the model and a reload of the checkpoint file, and the peak memory the step adds above the weights. Usage: serve_receiver.py STORE RUN TRUST.pub STATE_DIR CKPT [direct] (direct: fused.apply_patch decodes each chunk straight into the arrays, no update arrays)
import ctypes
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
direct = sys.argv[6:7] == ["direct"]
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
walls = []   # per patch step: from the previous callback's end to this one's (fetch, verify, callback)


def status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("/proc/self/status has no " + field)


_libc = ctypes.CDLL(None)


def reset_peak():
    """Restarts the process's peak RSS (VmHWM) from its current RSS; returns that RSS in bytes.
    Each step's peak then counts everything the step adds above the weights held: the patch
    fetched and verified by the follower (C), the update arrays and any temporaries. The heap
    the last step freed is handed back first (malloc_trim), else it would hide the next peak."""
    _libc.malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return 1024 * status_kb("VmRSS")


base_rss = [0]


last_end = [0.0]   # when the previous callback returned: a step's wall time includes the follower's fetch and verify


def on_keyframe(step, path):
    load(path, engine)
    base_rss[0] = reset_peak()
    last_end[0] = time.perf_counter()


def on_patch(step, patch):
    if direct:
        from pulseweights import fused
        tracemalloc.start()
        t0 = time.perf_counter()
        fused.apply_patch(engine, patch, fused.whole_layout({k: v.shape for k, v in engine.items()}))
        t1 = time.perf_counter()
        arrays = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        peak = 1024 * status_kb("VmHWM") - base_rss[0]
        times.append((step.step, 0.0, t1 - t0, step.changes, step.object_bytes, arrays, peak))
        walls.append(time.perf_counter() - last_end[0])
        base_rss[0] = reset_peak()
        last_end[0] = time.perf_counter()
        return
    tracemalloc.start()   # numpy's allocations (the update arrays and the scatter's temporaries)
    t0 = time.perf_counter()
    ups = patch.updates(want=("index", "deltas"))
    t1 = time.perf_counter()
    pw.apply_updates(engine, ups)
    t2 = time.perf_counter()
    arrays = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    peak = 1024 * status_kb("VmHWM") - base_rss[0]
    times.append((step.step, t1 - t0, t2 - t1, step.changes, step.object_bytes, arrays, peak))
    # The step's updates, kept on disk (not in memory: the next step's peak) for the write alone below.
    np.savez(os.path.join(state, "last-updates.npz"), **{"i:" + k: u.index for k, u in ups.items()},
             **{"d:" + k: u.deltas for k, u in ups.items()})
    del ups
    walls.append(time.perf_counter() - last_end[0])
    base_rss[0] = reset_peak()
    last_end[0] = time.perf_counter()


f = pw.EngineFollower(store, run, trust, state, on_patch, on_keyframe)
f.pull()   # the keyframe alone: pulse pull of step 0 only is not offered, so all steps come at once
model = sum(a.nbytes for a in engine.values())
rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print("model %.1f MB; peak RSS %.1f MB after the keyframe and %d patch steps" % (model / 1e6, rss_kb / 1e3, len(times)))
copy = {k: np.empty_like(v) for k, v in engine.items()}
for k, v in engine.items():
    np.copyto(copy[k], v)   # first touch: page faults, not copying
memcpy = reload = float("inf")
for _ in range(3):   # the best of three of each: this machine's cores are shared
    t0 = time.perf_counter()
    for k, v in engine.items():
        np.copyto(copy[k], v)
    memcpy = min(memcpy, time.perf_counter() - t0)
    t0 = time.perf_counter()
    load(ckpt, engine)
    reload = min(reload, time.perf_counter() - t0)
print("memcpy of the model %.1f ms; reload of the file from the page cache %.1f ms" % (1e3 * memcpy, 1e3 * reload))
for (s, tu, tw, ch, ob, arrays, peak), wall in zip(times, walls):
    t = tu + tw
    print("step %d: %d changes, %d bytes of patch: updates %.1f ms + write %.1f ms = %.1f ms = %.2fx a memcpy, "
          "%.2fx a reload; whole step with the follower's fetch and verify %.1f ms = %.2fx a memcpy; peak above "
          "the weights %.1f MB (%.1f bytes a change, %.4f of the model), of which update arrays %.1f MB "
          "(%.1f bytes a change)"
          % (s, ch, ob, 1e3 * tu, 1e3 * tw, 1e3 * t, t / memcpy, t / reload, 1e3 * wall, wall / memcpy,
             peak / 1e6, peak / ch, peak / model, arrays / 1e6, arrays / ch))

if direct:
    sys.exit(0)
# The write alone, the last step's updates into the copy of the model: pulseweights.apply_updates
# (the library's scatter on CPU arrays) against numpy's fancy-indexed scatter of the same updates.
with np.load(os.path.join(state, "last-updates.npz")) as z:
    last = {k[2:]: (z[k], z["d:" + k[2:]]) for k in z.files if k.startswith("i:")}
ups = {k: pw.TensorUpdate(k, "BF16" if d.itemsize == 2 else "F32", i, None, d, copy[k].shape, None)
       for k, (i, d) in last.items()}
lib_w = numpy_w = float("inf")
for _ in range(3):
    t0 = time.perf_counter()
    pw.apply_updates(copy, ups)
    lib_w = min(lib_w, time.perf_counter() - t0)
    t0 = time.perf_counter()
    for k, (i, d) in last.items():
        copy[k].reshape(-1).view(d.dtype)[i] += d
    numpy_w = min(numpy_w, time.perf_counter() - t0)
n = sum(i.size for i, _ in last.values())
print("write alone, step %d's %d changes (best of 3): apply_updates %.1f ms = %.2fx a memcpy; numpy's "
      "flat[index] += deltas %.1f ms = %.2fx a memcpy" % (times[-1][0], n, 1e3 * lib_w, lib_w / memcpy,
                                                          1e3 * numpy_w, numpy_w / memcpy))
