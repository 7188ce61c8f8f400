# SPDX-License-Identifier: Apache-2.0
# A trainer in parts through Python: three Publishers(part=(i, 3)) each publish_part a disjoint set of whole tensors (and, later, publish_changes of a pw.Changes), a fourth commits each step; a Follower of the run holds the union of the parts bit for bit, at the state id of the whole model; a missing part, a part mismatch and publish_part on a whole Publisher are refused.
import json
import os
import shutil
import struct
import sys
import atexit
import tempfile

import numpy as np

import pulseweights as pw

fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += not cond


def bf16(x):
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def read_safetensors(path):
    """name -> (dtype name, shape, raw bytes) of a safetensors file."""
    with open(path, "rb") as fh:
        raw = fh.read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for k, v in json.loads(raw[8:8 + n]).items():
        if k != "__metadata__":
            b0, b1 = v["data_offsets"]
            out[k] = (v["dtype"], list(v["shape"]), raw[8 + n + b0:8 + n + b1])
    return out


def raises(f, kind, what):
    try:
        f()
    except kind as e:
        return str(e)
    except Exception as e:   # the wrong kind of error
        print("     (%s: %s)" % (type(e).__name__, e))
        return None
    print("     (nothing raised: %s)" % what)
    return None


tmp = tempfile.mkdtemp(prefix="pulse-parts-py.")
atexit.register(shutil.rmtree, tmp, ignore_errors=True)
store = "file://" + os.path.join(tmp, "store")
key, pub_key = os.path.join(tmp, "t.key"), os.path.join(tmp, "t.pub")
pw.keygen(os.path.join(tmp, "t"))
rng = np.random.default_rng(11)

# Seven tensors: BF16 matrices (uint16 bits, given with their dtype name) and F32 vectors.
w = {}
for t in range(7):
    if t % 2 == 0:
        w["layer%d.weight" % t] = bf16(rng.standard_normal((64 + 16 * t, 96)) * 0.02)
    else:
        w["layer%d.bias" % t] = rng.standard_normal(200 + 10 * t).astype(np.float32)
names = sorted(w)
owner = {nm: i % 3 for i, nm in enumerate(names)}   # round-robin by name


def tensors(nms):
    return {nm: ((w[nm], "BF16") if w[nm].dtype == np.uint16 else w[nm]) for nm in nms}


def part_of(i):
    return tensors([nm for nm in names if owner[nm] == i])


def dtype_name(a):
    return "BF16" if a.dtype == np.uint16 else "F32"


parts = [pw.Publisher(store, "r", key, os.path.join(tmp, "part%d" % i), part=(i, 3)) for i in range(3)]
committer = pw.Publisher(store, "r", key, os.path.join(tmp, "commit"))
whole = pw.Publisher(store, "whole", key, os.path.join(tmp, "whole"))   # the union, published whole elsewhere
wpath = os.path.join(tmp, "follow.safetensors")
fol = pw.Follower(store, "r", pub_key, os.path.join(tmp, "fol"), weights_path=wpath)


def follower_holds_union(path, label):
    have = read_safetensors(path)
    same = sorted(have) == names and all(
        have[nm][0] == dtype_name(w[nm]) and have[nm][1] == list(w[nm].shape) and have[nm][2] == w[nm].tobytes()
        for nm in names)
    check(same, "%s: the follower's file holds the union of the parts' tensors, byte for byte" % label)


for step in range(2):
    if step == 1:   # parts 0 and 2 change; part 1 does not (it publishes a patch of no changes)
        for nm in names:
            if owner[nm] == 0:
                w[nm] = bf16((w[nm].astype(np.uint32) << 16).view(np.float32) + 1e-3) if w[nm].dtype == np.uint16 \
                    else w[nm] + np.float32(0.5)
            elif owner[nm] == 2:
                w[nm] = w[nm].copy()
                w[nm][:5] = w[nm][5:10]
    got = [p.publish_part(part_of(i), step=step) for i, p in enumerate(parts)]
    want_kind = "keyframe" if step == 0 else "patch"
    check(all(g.step == step and g.kind == want_kind for g in got),
          "step %d: every part published its %s (%s)" % (step, want_kind, [g.kind for g in got]))
    c = committer.commit(step=step, parts=3)
    ref = whole.publish(tensors(names), step=step)
    sid = pw.state_id(tensors(names))
    check(c.step == step and c.kind == want_kind and not c.already,
          "step %d: commit wrote a %s record (%s)" % (step, want_kind, c.kind))
    check(c.result == ref.result == sid,
          "step %d: the commit's state id is the whole model's (%s..., whole publish %s..., state_id %s...)"
          % (step, c.result[:12], ref.result[:12], sid[:12]))
    if step == 1:
        check(c.base == prev_result, "step 1: the commit's base is step 0's state")
    prev_result = c.result
    n, held = fol.pull()
    check(n == 1 and held is not None and held.step == step and held.result == sid,
          "step %d: the follower applied the commit and holds its state (%d applied, %s)"
          % (step, n, held and held.result[:12]))
    fol.sync()
    follower_holds_union(wpath, "step %d" % step)

again = committer.commit(step=1, parts=3, wait=0)
check(again.already and again.step == 1 and again.result == prev_result, "commit of step 1 again: already committed")

# A follower from nothing goes through both commits (keyframe, then patch).
wpath2 = os.path.join(tmp, "fresh.safetensors")
with pw.Follower(store, "r", pub_key, os.path.join(tmp, "fresh"), weights_path=wpath2) as fresh:
    n, held = fresh.pull()
    check(n >= 1 and held.step == 1 and held.result == prev_result,
          "a fresh follower reaches step 1 (%d applied)" % n)
follower_holds_union(wpath2, "fresh follower")

# Step 2: only parts 0 and 1 publish; the commit waits 0.5 s and names part 2.
for nm in names:
    w[nm] = w[nm].copy()
    if w[nm].dtype == np.uint16:
        w[nm].reshape(-1)[0] ^= 1
    else:
        w[nm][0] += np.float32(1.0)
for i in (0, 1):
    parts[i].publish_part(part_of(i), step=2, part=(i, 3))
msg = raises(lambda: committer.commit(step=2, parts=3, wait=0.5), pw.PulseError, "commit with part 2 missing")
check(msg is not None and "part 2 of 3" in msg, "a commit with part 2 missing is refused by name: %s" % msg)
n, held = fol.pull()
check(n == 0 and held is not None and held.step == 1, "nothing was committed: the follower stays at step 1")
parts[2].publish_part(part_of(2), step=2)
c = committer.commit(parts=3, wait=5)   # step None: one more than the last committed
check(c.step == 2 and c.result == pw.state_id(tensors(names)), "once part 2 published, step 2 commits")
n, held = fol.pull()
fol.sync()
check(n == 1 and held.step == 2, "the follower applies step 2")
follower_holds_union(wpath, "step 2")

# Refusals in Python, before the library is called.
msg = raises(lambda: committer.publish_part(part_of(0), step=3), ValueError, "publish_part on a whole Publisher")
check(msg is not None and "part=(i, n)" in msg, "publish_part on a Publisher opened without part: %s" % msg)
msg = raises(lambda: parts[0].publish_part(part_of(0), step=3, part=(1, 3)), ValueError, "part mismatch")
check(msg is not None and "(1, 3)" in msg and "(0, 3)" in msg, "publish_part with another part: %s" % msg)
check(raises(lambda: parts[0].publish_part(part_of(0), step=None), ValueError, "no step") is not None,
      "publish_part without a step is refused")
check(raises(lambda: parts[0].publish_part(part_of(0), step=-1), ValueError, "step -1") is not None,
      "publish_part with step -1 is refused")
check(raises(lambda: parts[0].commit(step=3, parts=3), ValueError, "commit on a part") is not None,
      "commit on a part Publisher is refused")
check(raises(lambda: committer.commit(step=3), ValueError, "commit without parts") is not None,
      "commit without parts is refused")
for bad in [(3, 3), (-1, 3), (0, 0), (0, 4097), (1,), "ab", (0.0, 3)]:
    check(raises(lambda: pw.Publisher(store, "r", key, os.path.join(tmp, "bad"), part=bad), ValueError,
                 "part=%r" % (bad,)) is not None, "Publisher(part=%r) is refused" % (bad,))

# Steps 3-4 from the parts' changes (pw.Changes on the host, the GPU path's CPU twin): no part
# reads a copy of its last state; the commit and the follower are as before.
changes = [pw.Changes(part_of(i)) for i in range(3)]   # over step 2's tensors, the last published
for step in (3, 4):
    for nm in names:
        w[nm] = w[nm].copy()
        flat = w[nm].reshape(-1)
        flat[step::7] = flat[step::7] + (1 if w[nm].dtype == np.uint16 else np.float32(0.25))
    got = [p.publish_changes(changes[i], part_of(i), step=step) for i, p in enumerate(parts)]
    check(all(g.step == step and g.kind == "patch" for g in got), "step %d: every part published from its changes"
          % step)
    c = committer.commit(step=step, parts=3)
    check(c.result == pw.state_id(tensors(names)), "step %d: the commit of the parts' changes is the whole model's "
          "state" % step)
    n, held = fol.pull()
    fol.sync()
    check(n == 1 and held.step == step, "step %d: the follower applies it" % step)
    follower_holds_union(wpath, "step %d (from changes)" % step)
msg = raises(lambda: parts[0].publish_changes(changes[0], part_of(0)), ValueError, "publish_changes of a part, no step")
check(msg is not None and "step" in msg, "publish_changes of a part without a step is refused: %s" % msg)
msg = raises(lambda: parts[0].publish_changes(None, part_of(0), step=5), ValueError, "no Changes")
check(msg is not None and "Changes" in msg, "publish_changes without a Changes is refused: %s" % msg)
msg = raises(lambda: parts[0].publish_changes(changes[0], part_of(1), step=5), pw.PulseError, "other tensors")
check(msg is not None, "publish_changes of tensors that are not its Changes' is refused: %s" % msg)
for ch in changes:
    ch.close()

fol.close()
for p in parts + [committer, whole]:
    p.close()
sys.exit(1 if fails else 0)
