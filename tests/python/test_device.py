# SPDX-License-Identifier: Apache-2.0
# pulseweights.device.DeviceFollower: torch tensors kept at a run's newest step by keyframe copies and patches applied with torch ops on their device (CPU here; tests/gpu/run.sh runs it on CUDA when a device is there), Follower(weights=...) dispatching tensors off the host to it, and a run published from its changes found on that device (pw.Changes).
import os
import sys
import atexit
import shutil
import tempfile

import numpy as np

import pulseweights as pw
from pulseweights.device import DeviceFollower, off_host

fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += not cond


try:
    import torch
except ImportError:
    print("device: torch is not importable; nothing to test")
    sys.exit(77)

dev = sys.argv[1] if len(sys.argv) > 1 else "cpu"
tmp = tempfile.mkdtemp(prefix="pulse-device-py.")
atexit.register(shutil.rmtree, tmp, ignore_errors=True)
store = "file://" + os.path.join(tmp, "store")
pw.keygen(os.path.join(tmp, "t"))
g = torch.Generator().manual_seed(1)
w = {"a.w": torch.randn(96, 64, generator=g).to(torch.bfloat16), "b.n": torch.randn(64, generator=g),
     "c.e": torch.randn(4, 8, 16, generator=g).to(torch.bfloat16)}
held = {k: torch.zeros_like(v, device=dev) for k, v in w.items()}


class FakeCuda:
    class device:
        type = "cuda"


check(off_host({"x": FakeCuda()}) is not None and off_host({"x": np.zeros(3)}) is None
      and off_host(w) is None, "off_host: only tensors off the host")

with pw.Publisher(store, "r", os.path.join(tmp, "t.key"), os.path.join(tmp, "pub"), chunk_elems=512) as pub:
    f = DeviceFollower(store, "r", os.path.join(tmp, "t.pub"), os.path.join(tmp, "dev"), held)
    for step in range(4):
        if step:
            with torch.no_grad():
                for v in w.values():
                    v.view(-1)[torch.randint(0, v.numel(), (v.numel() // 10,), generator=g)] *= 1.01
        pub.publish(w)
        n, info = f.pull()
        same = all(torch.equal(held[k].cpu().view(torch.int16 if v.dtype == torch.bfloat16 else torch.int32),
                               v.view(torch.int16 if v.dtype == torch.bfloat16 else torch.int32)) for k, v in w.items())
        check(n == 1 and info.step == step and same, "step %d on %s: every tensor bit-identical (%s)"
              % (step, dev, info and info.kind))
    f.close()
    # A tensor set that is not the run's: the keyframe is refused by name, nothing written.
    wrong = {k: torch.zeros_like(v, device=dev) for k, v in w.items() if k != "b.n"}
    f = DeviceFollower(store, "r", os.path.join(tmp, "t.pub"), os.path.join(tmp, "dev2"), wrong)
    try:
        f.pull()
        check(False, "a tensor set that is not the run's is refused")
    except ValueError as e:
        check("b.n" in str(e) and all(not v.any() for v in wrong.values()),
              "a tensor set that is not the run's is refused by name, nothing written: %s" % e)
    f.close()

# A trainer's tensors on DEV published from their changes (pw.Changes: on a CUDA device the diff and
# the hashes run there and only the changes cross; on the CPU, its twin): each step's record is the
# one a publish of the same tensors from the host makes, and a follower holds them bit for bit.
trained = {k: v.to(dev) for k, v in w.items()}
with pw.Publisher(store, "c", os.path.join(tmp, "t.key"), os.path.join(tmp, "pubc")) as pc, \
        pw.Publisher(store, "c-host", os.path.join(tmp, "t.key"), os.path.join(tmp, "pubh")) as ph, \
        pw.Changes(trained) as ch:
    pc.publish(trained, step=0)   # the keyframe, from a host copy
    ph.publish(trained, step=0)
    for step in (1, 2):
        with torch.no_grad():
            for v in trained.values():
                v.view(-1)[torch.randint(0, v.numel(), (v.numel() // 20,), generator=g).to(dev)] *= 1.01
        got = pc.publish_changes(ch, trained, step=step)
        ref = ph.publish(trained, step=step)
        check(got.result == ref.result and got.object_bytes == ref.object_bytes,
              "step %d on %s: published from its changes, the same record as from the tensors" % (step, dev))
    mine = {k: torch.zeros_like(v, device="cpu") for k, v in w.items()}
    with pw.Follower(store, "c", os.path.join(tmp, "t.pub"), os.path.join(tmp, "folc"), weights=mine) as fc:
        n, info = fc.pull()
    check(info is not None and info.step == 2 and info.result == pw.state_id(trained)
          and all(torch.equal(mine[k], v.cpu()) for k, v in trained.items()),
          "a follower of the run from changes holds the tensors bit for bit")
print("device: %d failed" % fails)
sys.exit(1 if fails else 0)
