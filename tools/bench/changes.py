#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# A part published from its changes against a publish of its tensors: N BF16 elements (default
# 100M) in 8 tensors, 1 % changed a step, file:// store. The find runs on the host here (the GPU
# path's twin); its publish of the lists is what a host does when the find runs on its GPU.
#   PYTHONPATH=python PULSE_LIB=build/libpulseweights.so python3 tools/bench/changes.py [N]
import ctypes
import os
import shutil
import sys
import tempfile
import time

import numpy as np

import pulseweights as pw
from pulseweights import _lib
from pulseweights.sync import _step_info
from pulseweights.tensors import mem_tensors, resident_tensors

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000_000
tmp = tempfile.mkdtemp(prefix="pulse-changes-bench.")
store = "file://" + tmp + "/store"
pw.keygen(tmp + "/t")
rng = np.random.default_rng(1)
w = {"t%d" % i: (rng.integers(0x3c00, 0x3e00, n // 8, dtype=np.uint16), "BF16") for i in range(8)}
tensors = pw.Publisher(store, "a", tmp + "/t.key", tmp + "/a")
changes = pw.Publisher(store, "b", tmp + "/t.key", tmp + "/b")
tensors.publish(w, step=0)
changes.publish(w, step=0)
ch = pw.Changes(w)
arr, count, keep = mem_tensors(resident_tensors(w)[0])
for step in (1, 2, 3):
    for v, _ in w.values():
        v[rng.integers(0, v.size, v.size // 100)] += 1
    t0 = time.perf_counter()
    ra = tensors.publish(w, step=step)
    t1 = time.perf_counter()
    found, s = ctypes.c_void_p(), _lib.SyncStep()
    _lib.check(_lib.changes_find(ch._p, arr, count, ctypes.byref(found)))
    t2 = time.perf_counter()
    _lib.check(_lib.publisher_publish_changes(changes._handle(), found, count, step, ctypes.byref(s)))
    _lib.check(_lib.changes_accept(ch._p))
    t3 = time.perf_counter()
    rb = _step_info(s)
    assert ra.result == rb.result and ra.object_bytes == rb.object_bytes, "the two ways disagree"
    print("step %d: %d changes, %.1f MB: publish of the tensors %.0f ms; from changes: find (host) %.0f ms, "
          "publish of the lists %.0f ms" % (step, ra.changes, ra.object_bytes / 1e6, 1e3 * (t1 - t0),
                                            1e3 * (t2 - t1), 1e3 * (t3 - t2)))
du = [sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)) for d in (tmp + "/a", tmp + "/b")]
print("state directories: publish of the tensors %.0f MB, from changes %.1f MB" % (du[0] / 1e6, du[1] / 1e6))
shutil.rmtree(tmp)
