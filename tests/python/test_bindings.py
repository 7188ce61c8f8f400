#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# The Python bindings on numpy arrays: publish from memory, follow in place, refusals, a 2-trainer LoCo round, torch BF16.
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy does not import in %s (Debian: python3-numpy)" % sys.executable)
    sys.exit(77)

import pulseweights as pw

PULSE = os.environ["PULSE_BIN"]
failures = 0
checks = 0


def check(cond, what):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL: " + what, file=sys.stderr)


def raises(code_name, fn, what):
    """fn() must raise PulseError with this code name; returns the error."""
    try:
        fn()
    except pw.PulseError as e:
        check(e.name == code_name, "%s: %s, wanted %s (%s)" % (what, e.name, code_name, e))
        check(len(str(e)) > 0 and e.code < 0, "%s: message and code" % what)
        return e
    check(False, "%s: no PulseError" % what)
    return None


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def write_safetensors(path, tensors):
    """tensors: {name: (dtype_name, array)}; an independent writer (sorted keys, contiguous data)."""
    header, off, blobs = {}, 0, []
    for name in sorted(tensors):
        dt, a = tensors[name]
        b = bits(a)
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    text = json.dumps(header).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def pulse_hash(path):
    out = subprocess.run([PULSE, "hash", path], check=True, capture_output=True, text=True).stdout
    return out.split()[0]


def objects(store_dir, run):
    d = os.path.join(store_dir, run, "objects")
    return set(os.listdir(d)) if os.path.isdir(d) else set()


rng = np.random.default_rng(7)


def make_model():
    return {
        "embed.weight": (rng.integers(0x3c00, 0x3e00, size=(128, 32), dtype=np.uint16), "BF16"),
        "layer.0.proj": rng.standard_normal((32, 48)).astype(np.float32),
        "layer.0.norm": rng.standard_normal(48).astype(np.float16),
        "steps": np.zeros(1, dtype=np.int64),
    }


def arr(v):
    return v[0] if isinstance(v, tuple) else v


def train(model):
    """An RL-sized step: a few weights move by one or two units in the last place."""
    e = arr(model["embed.weight"])
    idx = rng.choice(e.size, 40, replace=False)
    e.reshape(-1)[idx] += 1
    p = model["layer.0.proj"].view(np.uint32)
    p.reshape(-1)[rng.choice(p.size, 30, replace=False)] += 2
    model["steps"][0] += 1


def dtypes_of(model):
    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64"}
    return {k: (v[1], v[0]) if isinstance(v, tuple) else (names[v.dtype], v) for k, v in model.items()}


def test_sync(work):
    store_dir = os.path.join(work, "store")
    url = "file://" + store_dir
    node = pw.keygen(os.path.join(work, "trainer"), comment="trainer")
    check(len(node) == 64, "keygen returns a node id")
    check(oct(os.stat(os.path.join(work, "trainer.key")).st_mode & 0o777) == "0o600", "key mode 0600")
    raises("PULSE_ERR_EXISTS", lambda: pw.keygen(os.path.join(work, "trainer")), "keygen never overwrites")
    pw.keygen(os.path.join(work, "mallory"))

    trainer = make_model()
    # The follower's model: same names, dtypes and shapes, other contents (a fresh model).
    follower_model = {k: ((np.zeros_like(v[0]), v[1]) if isinstance(v, tuple) else np.full_like(v, 3))
                      for k, v in trainer.items()}
    # Zero-copy: the library is given the arrays' own buffers.
    ts = pw.as_tensors(follower_model)
    check(all(t.ptr == arr(follower_model[t.name]).ctypes.data for t in ts), "as_tensors takes the buffer pointers")
    ptrs = {k: arr(v).ctypes.data for k, v in follower_model.items()}
    objs = {k: arr(v) for k, v in follower_model.items()}

    pub = pw.Publisher(store=url, run="rl", key=os.path.join(work, "trainer.key"),
                       state_dir=os.path.join(work, "pub"), threads=2)
    fol = pw.Follower(store=url, run="rl", trust=[os.path.join(work, "trainer.pub")],
                      state_dir=os.path.join(work, "fol"), weights=follower_model, threads=2)
    for step in range(3):
        if step:
            train(trainer)
        info = pub.publish(trainer)
        check(info.step == step, "publish step %d: got %d" % (step, info.step))
        check(info.kind == ("keyframe" if step == 0 else "patch"), "step %d kind %s" % (step, info.kind))
        check(not info.already, "step %d is new" % step)
        sid = pw.state_id(trainer)
        check(info.result == sid, "step %d: result is the state id" % step)
        path = os.path.join(work, "step%d.safetensors" % step)
        write_safetensors(path, dtypes_of(trainer))
        check(pulse_hash(path) == sid, "step %d: state_id equals `pulse hash` of the same tensors" % step)
        if step:
            check(0 < info.changes <= 71, "step %d: %d changes" % (step, info.changes))
        applied, held = fol.pull()
        check(applied == 1, "step %d: applied %d" % (step, applied))
        check(held is not None and held.step == step and held.result == sid, "step %d: held %r" % (step, held))
        check(held is not None and held.kind == info.kind, "step %d: held kind" % step)
        for k in trainer:
            check(bits(arr(follower_model[k])) == bits(arr(trainer[k])), "step %d: %s bit-identical" % (step, k))
    check(all(arr(follower_model[k]) is objs[k] and arr(follower_model[k]).ctypes.data == ptrs[k]
              for k in follower_model), "the follower's arrays were written in place (same objects, same buffers)")
    applied, held = fol.pull()
    check(applied == 0 and held.step == 2, "nothing new: applied %d" % applied)

    # A file publisher updates its copy of the last state in place without a sync: a note until sync().
    with pw.Publisher(store=url, run="rl-file", key=os.path.join(work, "trainer.key"),
                      state_dir=os.path.join(work, "pub-file")) as pf:
        for step in range(3):
            check(pf.publish_file(os.path.join(work, "step%d.safetensors" % step)).step == step, "file publish %d" % step)
        note = os.path.join(work, "pub-file", "unsynced")
        check(os.path.exists(note), "the file publisher noted its unsynced copy")
        pf.sync()
        check(not os.path.exists(note), "Publisher.sync() removed the note")
    # Its own run: a second publisher of the same key on one run is refused (docs/sync.md).
    with pw.Publisher(store=url, run="rl-durable", key=os.path.join(work, "trainer.key"),
                      state_dir=os.path.join(work, "pub-durable"), durable=True) as pd:
        for step in range(3):
            pd.publish_file(os.path.join(work, "step%d.safetensors" % step))
        check(not os.path.exists(os.path.join(work, "pub-durable", "unsynced")), "durable=True writes no note")
    check(pub.publish(trainer).already, "publishing the same state again is a no-op")

    # A corrupted object: refused, arrays unchanged.
    before_objs = objects(store_dir, "rl")
    train(trainer)
    pub.publish(trainer)
    added = objects(store_dir, "rl") - before_objs
    check(len(added) == 2, "two new objects for a patch step: the patch and its head")
    for name in added:
        p = os.path.join(store_dir, "rl", "objects", name)
        data = bytearray(open(p, "rb").read())
        data[len(data) // 2] ^= 0x01
        os.chmod(p, 0o644)
        with open(p, "wb") as f:
            f.write(data)
    snapshot = {k: bits(arr(v)) for k, v in follower_model.items()}
    e = raises("PULSE_ERR_CORRUPT", fol.pull, "corrupted patch object")
    check(e is not None and getattr(e, "applied", None) == 0, "nothing applied before the refusal")
    check(all(bits(arr(v)) == snapshot[k] for k, v in follower_model.items()), "arrays unchanged after the refusal")
    fol.close()

    # A follower trusting another key: nothing from a trusted key to start from.
    other = {k: (np.zeros_like(v[0]), v[1]) if isinstance(v, tuple) else np.zeros_like(v) for k, v in trainer.items()}
    with pw.Follower(store=url, run="rl", trust=os.path.join(work, "mallory.pub"),
                     state_dir=os.path.join(work, "fol-wrong"), weights=other) as bad:
        raises("PULSE_ERR_NOTFOUND", bad.pull, "wrong-key follower")
    check(all(not bits(arr(v)).strip(b"\0") for v in other.values()), "wrong-key follower wrote nothing")

    # Tensors that are not the run's: refused before any write.
    wrong = {k: (np.full_like(v[0], 9), v[1]) if isinstance(v, tuple) else np.full_like(v, 9) for k, v in trainer.items()}
    wrong["layer.0.proj"] = np.full((48, 32), 9, dtype=np.float32)
    before = {k: bits(arr(v)) for k, v in wrong.items()}
    with pw.Follower(store=url, run="rl", trust=os.path.join(work, "trainer.pub"),
                     state_dir=os.path.join(work, "fol-shape"), weights=wrong) as bad:
        e = raises("PULSE_ERR_MISMATCH", bad.pull, "wrong shape")
        check(e is not None and "layer.0.proj" in str(e), "the message names the tensor: %s" % e)
    check(all(bits(arr(v)) == before[k] for k, v in wrong.items()), "wrong-shape arrays unchanged")

    # Usage errors in Python, before the library.
    try:
        pw.Follower(store=url, run="rl", trust=os.path.join(work, "trainer.pub"), state_dir=work)
        check(False, "Follower without weights accepted")
    except ValueError:
        check(True, "")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    try:
        pw.Follower(store=url, run="rl", trust=os.path.join(work, "trainer.pub"), state_dir=work, weights={"x": ro})
        check(False, "read-only array accepted as follower weights")
    except ValueError:
        check(True, "")
    strided = np.arange(16, dtype=np.float32).reshape(4, 4)[:, ::2]
    check(pw.state_id({"x": strided}) == pw.state_id({"x": np.ascontiguousarray(strided)}),
          "state_id reads a non-contiguous array through a contiguous copy")
    try:
        pw.Follower(store=url, run="rl", trust=os.path.join(work, "trainer.pub"), state_dir=work,
                    weights={"x": np.zeros((4, 4), np.float32)[:, ::2]})
        check(False, "non-contiguous array accepted as follower weights (written in place)")
    except ValueError:
        check(True, "")
    raises("PULSE_ERR_INVALID", lambda: pw.state_id({"x": (np.zeros(4, np.uint16), "F99")}), "unknown dtype")

    # weights_path: the file follower from Python, same bits.
    with pw.Follower(store=url, run="rl", trust=os.path.join(work, "trainer.pub"),
                     state_dir=os.path.join(work, "fol-file"), weights_path=os.path.join(work, "w.safetensors")) as ff:
        e = raises("PULSE_ERR_CORRUPT", ff.pull, "file follower: corrupted step 3")
        check(e is not None and e.applied >= 1, "file follower applied the good steps first")
        note = os.path.join(work, "fol-file", "unsynced")
        check(os.path.exists(note), "file follower noted its unsynced weights")
        ff.sync()
        check(not os.path.exists(note), "sync() synced them and removed the note")
    check(pulse_hash(os.path.join(work, "w.safetensors")) == pw.state_id(dict(
        (k, follower_model[k]) for k in follower_model)), "file follower holds the memory follower's state")
    pub.close()


def test_loco(work):
    url = "file://" + os.path.join(work, "loco-store")
    keys = [os.path.join(work, "t%d" % i) for i in (1, 2)]
    for k in keys:
        pw.keygen(k)
    theta0 = {"w1": rng.standard_normal((64, 32)).astype(np.float32) * 0.02,
              "b1": rng.standard_normal(32).astype(np.float32)}
    states = [os.path.join(work, "loco-s%d" % i) for i in (1, 2)]
    for s in states:
        pw.loco_init(s, theta0, view="bf16")
    raises("PULSE_ERR_EXISTS", lambda: pw.loco_init(states[0], theta0), "loco_init on an existing state")
    # Each trainer's local steps move its parameters differently.
    local = []
    for i in range(2):
        d = {k: v.copy() for k, v in theta0.items()}
        for v in d.values():
            v += rng.standard_normal(v.shape).astype(np.float32) * np.float32(0.01 * (i + 1))
        local.append(d)
    locals_before = [{k: bits(v) for k, v in d.items()} for d in local]
    outs = [{k: np.zeros_like(v) for k, v in theta0.items()} for _ in range(2)]
    reps, errs = [None, None], [None, None]

    def run(i):
        try:
            reps[i] = pw.loco_round(store=url, run="loco", key=keys[i] + ".key", state_dir=states[i],
                                    trainers=[keys[1 - i] + ".pub"], local=local[i], out=outs[i],
                                    deadline=60.0, outer_lr=0.7, threads=1, shard_elems=256)
        except Exception as e:   # reported below, in the main thread
            errs[i] = e

    th = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in th:
        t.start()
    for t in th:
        t.join(120)
    check(errs == [None, None], "loco rounds: %r" % (errs,))
    if None in reps:
        return
    check(all(r["round"] == 0 and r["members"] == 2 and r["trainers"] == 2 for r in reps), "round 0, 2 members: %r" % reps)
    check(reps[0]["view_state"] == reps[1]["view_state"], "both trainers reach the same view state")
    for k in theta0:
        check(bits(outs[0][k]) == bits(outs[1][k]), "loco: %s identical bits on both trainers" % k)
        check(bits(outs[0][k]) != bits(theta0[k]), "loco: %s moved" % k)
    check(all(bits(local[i][k]) == locals_before[i][k] for i in range(2) for k in theta0), "local tensors only read")
    # Round 1 with out = local: theta_{r+1} lands in the same arrays.
    for i in range(2):
        local[i] = {k: v.copy() for k, v in outs[i].items()}
        for v in local[i].values():
            v -= np.float32(0.003 * (i + 1))
    ptrs = [{k: v.ctypes.data for k, v in d.items()} for d in local]

    def run2(i):
        try:
            reps[i] = pw.loco_round(store=url, run="loco", key=keys[i] + ".key", state_dir=states[i],
                                    trainers=[keys[1 - i] + ".pub"], local=local[i], out=local[i],
                                    deadline=60.0, outer_lr=0.7, values="bf16", threads=1, shard_elems=256)
        except Exception as e:
            errs[i] = e

    th = [threading.Thread(target=run2, args=(i,)) for i in range(2)]
    for t in th:
        t.start()
    for t in th:
        t.join(120)
    check(errs == [None, None], "loco round 1: %r" % (errs,))
    check(all(r is not None and r["round"] == 1 for r in reps), "round 1 ran")
    for k in theta0:
        check(bits(local[0][k]) == bits(local[1][k]), "loco round 1 (out = local): %s identical bits" % k)
    check(all(local[i][k].ctypes.data == ptrs[i][k] for i in range(2) for k in theta0), "round 1 wrote in place")


def test_torch(work):
    try:
        import torch
    except Exception as e:   # not counted as a pass
        print("NOTE: torch does not import here (%s): the torch BF16 part was skipped" % e)
        return
    url = "file://" + os.path.join(work, "torch-store")
    key = os.path.join(work, "torch-trainer")
    pw.keygen(key)
    torch.manual_seed(0)
    model = {"w": torch.randn(64, 16).to(torch.bfloat16), "b": torch.randn(16), "h": torch.randn(8).half()}
    sid = pw.state_id(model)
    as_numpy = {"w": (model["w"].view(torch.int16).numpy().view(np.uint16), "BF16"), "b": model["b"].numpy(),
                "h": model["h"].numpy()}
    check(sid == pw.state_id(as_numpy), "torch bf16 state id equals the same bits given as numpy uint16 BF16")
    mirror = {k: torch.zeros_like(v) for k, v in model.items()}
    ptrs = {k: v.data_ptr() for k, v in mirror.items()}
    with pw.Publisher(store=url, run="t", key=key + ".key", state_dir=os.path.join(work, "tpub")) as pub, \
            pw.Follower(store=url, run="t", trust=key + ".pub", state_dir=os.path.join(work, "tfol"),
                        weights=mirror) as fol:
        for step in range(3):
            if step:
                with torch.no_grad():
                    model["w"].add_(torch.randn(64, 16).to(torch.bfloat16) * 0.01)
                    model["b"].add_(1e-3)
            info = pub.publish(model)
            applied, held = fol.pull()
            check(applied == 1 and held.result == info.result == pw.state_id(model), "torch step %d" % step)
            for k in model:
                check(torch.equal(mirror[k].view(torch.int16) if mirror[k].dtype == torch.bfloat16 else mirror[k],
                                  model[k].view(torch.int16) if model[k].dtype == torch.bfloat16 else model[k]),
                      "torch step %d: %s identical" % (step, k))
    check(all(mirror[k].data_ptr() == ptrs[k] for k in mirror), "torch tensors written in place")
    print("torch %s: BF16 publish/follow checked" % torch.__version__)
    test_module(work, torch)


def test_missing_files(work):
    """A missing key or trust file is a FileNotFoundError (and a PulseError), before anything is written."""
    url = "file://" + os.path.join(work, "missing-store")
    pw.keygen(os.path.join(work, "present"))
    cases = [
        ("Publisher key", lambda sd: pw.Publisher(store=url, run="m", key=os.path.join(work, "absent.key"), state_dir=sd)),
        ("Follower trust", lambda sd: pw.Follower(store=url, run="m", state_dir=sd, weights={"x": np.zeros(4, np.float32)},
                                                  trust=[os.path.join(work, "present.pub"), os.path.join(work, "absent.pub")])),
        ("Follower trust (one path)", lambda sd: pw.Follower(store=url, run="m", state_dir=sd, weights_path=sd + ".st",
                                                             trust=os.path.join(work, "absent.pub"))),
    ]
    for what, make in cases:
        sd = os.path.join(work, "missing-" + what.split()[1] + str(len(what)))
        try:
            make(sd).close()
            check(False, "%s file missing: accepted" % what)
        except FileNotFoundError as e:
            check(isinstance(e, pw.PulseError) and e.name == "PULSE_ERR_NOTFOUND",
                  "%s: also a PulseError(PULSE_ERR_NOTFOUND): %r" % (what, e))
            check(e.filename is not None and e.filename.startswith(os.path.join(work, "absent")),
                  "%s: .filename names the file: %r" % (what, e.filename))
            check("absent" in str(e), "%s: the message names the file: %s" % (what, e))
        except Exception as e:
            check(False, "%s file missing: %s, not FileNotFoundError: %s" % (what, type(e).__name__, e))
        check(not os.path.exists(sd) and not os.path.exists(sd + ".st"), "%s: nothing created" % what)
    check(not os.path.exists(os.path.join(work, "missing-store")), "missing files: the store untouched")


def test_version():
    want = os.environ.get("PULSE_PROJECT_VERSION")
    check(want is not None and getattr(pw, "__version__", None) == want,
          "pulseweights.__version__ %r, meson's project version %r" % (getattr(pw, "__version__", None), want))
    check(pw.version() == want, "the library's versioned name says %r" % pw.version())


def test_module(work, torch):
    """nn.Module given directly: publish its state_dict (parameters and buffers, in the dtypes it
    holds, a non-contiguous buffer read through a copy) and follow into another module in place."""
    nn = torch.nn

    class Net(nn.Module):
        def __init__(self, seed):
            super().__init__()
            torch.manual_seed(seed)
            self.emb = nn.Embedding(32, 16).to(torch.bfloat16)
            self.proj = nn.Linear(16, 8)
            self.norm = nn.LayerNorm(8).half()
            self.bn = nn.BatchNorm1d(8)       # buffers: running stats, num_batches_tracked (int64)
            self.register_buffer("rot", torch.randn(4, 8).t())   # a transposed view: not contiguous

    url = "file://" + os.path.join(work, "module-store")
    key = os.path.join(work, "module-trainer")
    pw.keygen(key)
    model = Net(1)
    check(not model.rot.is_contiguous(), "the module holds a non-contiguous buffer")
    mirror = Net(2)
    mirror.rot = mirror.rot.contiguous()       # written in place by the follower: must be contiguous
    ptrs = {k: v.data_ptr() for k, v in mirror.state_dict().items()}

    def same(a, b):
        return a.dtype == b.dtype and a.shape == b.shape and bytes(a.contiguous().reshape(-1).view(torch.uint8).numpy()) == \
            bytes(b.contiguous().reshape(-1).view(torch.uint8).numpy())

    with pw.Publisher(store=url, run="mod", key=key + ".key", state_dir=os.path.join(work, "mpub")) as pub, \
            pw.Follower(store=url, run="mod", trust=key + ".pub", state_dir=os.path.join(work, "mfol"),
                        weights=mirror) as fol:
        for step in range(3):
            if step:
                with torch.no_grad():
                    model.proj.weight.add_(1e-3)
                    model.emb.weight[3].add_(1)
                    model.bn.num_batches_tracked.add_(1)
            try:
                info = pub.publish(model)
            except Exception as e:
                check(False, "publish(nn.Module) step %d: %s: %s" % (step, type(e).__name__, e))
                return
            flat = {k: v.contiguous() for k, v in model.state_dict().items()}
            check(info.step == step and info.result == pw.state_id(flat), "module step %d: state id" % step)
            check(pw.state_id(model) == info.result, "state_id(nn.Module) is the published state")
            applied, held = fol.pull()
            check(applied == 1 and held.result == info.result, "module step %d followed" % step)
            sd = mirror.state_dict()
            for k, v in model.state_dict().items():
                check(same(sd[k], v), "module step %d: %s bit-identical (%s)" % (step, k, v.dtype))
    check(all(v.data_ptr() == ptrs[k] for k, v in mirror.state_dict().items()), "the mirror module written in place")
    print("torch nn.Module: published and followed in place")


def main():
    work = tempfile.mkdtemp(prefix="pulse-py.")
    try:
        print("pulseweights %s (library %s) from %s" % (getattr(pw, "__version__", None), pw.version(), pw.lib_path))
        test_version()
        test_missing_files(work)
        test_sync(work)
        test_loco(work)
        test_torch(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("python-bindings: %d checks, %d failed" % (checks, failures))
    return 1 if failures or not checks else 0


if __name__ == "__main__":
    sys.exit(main())
