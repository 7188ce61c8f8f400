#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# Patch.updates / apply_updates: a patch's changes applied to numpy and torch tensors rebuild NEW bit for bit; damaged patches and unfit tensors are refused before any write.
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

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


def raises(exc, fn, what, name=None):
    """fn() must raise exc (a PulseError with code name `name` when given); returns the error."""
    try:
        fn()
    except exc as e:
        if name:
            check(getattr(e, "name", None) == name, "%s: %s, wanted %s (%s)" % (what, getattr(e, "name", e), name, e))
        return e
    except Exception as e:   # noqa: BLE001 - reported as a failure
        check(False, "%s: %r, wanted %s" % (what, e, exc.__name__))
        return None
    check(False, "%s: nothing raised" % what)
    return None


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def write_safetensors(path, tensors):
    """tensors: {name: (dtype_name, array)}; an independent writer (sorted keys, data back to back:
    after the odd-length U8 tensor nothing is aligned)."""
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


def pulse(*args):
    return subprocess.run([PULSE] + list(args), check=True, capture_output=True, text=True).stdout


rng = np.random.default_rng(11)


def make_pair():
    """OLD and NEW {name: (dtype, array)}: every dtype kind, sparse changes, one tensor unchanged."""
    old = {
        "a.u8": ("U8", rng.integers(0, 256, size=37, dtype=np.uint8)),                  # odd: misaligns the rest
        "b.bf16": ("BF16", rng.integers(0x3c00, 0x3e00, size=(40, 10), dtype=np.uint16)),
        "c.f32": ("F32", rng.standard_normal(333).astype(np.float32)),
        "d.f16": ("F16", rng.standard_normal(16).astype(np.float16)),                    # unchanged
        "e.e4m3": ("F8_E4M3", rng.integers(0, 256, size=50, dtype=np.uint8)),
        "z.i64": ("I64", rng.integers(-1000, 1000, size=20, dtype=np.int64)),             # opaque, last
    }
    new = {k: (dt, a.copy()) for k, (dt, a) in old.items()}
    b = new["b.bf16"][1].reshape(-1)
    pick = rng.random(b.size) < 0.1
    b[pick] += rng.choice(np.array([1, 0xffff, 3, 0x100], dtype=np.uint16), size=int(pick.sum()))   # +-1 ulp, escapes
    b[0] = 0
    old["b.bf16"][1].reshape(-1)[0] = 0xffff                                             # wraps: +1 modulo 2^16
    c = new["c.f32"][1]
    c[rng.random(c.size) < 0.05] *= 1.5
    new["a.u8"][1][[3, 36]] ^= 0x5a
    new["e.e4m3"][1][::7] += 1
    new["z.i64"][1][[2, 17]] += 12345
    return old, new


def copy_model(m):
    return {k: a.copy() for k, (dt, a) in m.items()}


def same(model, ref):
    return all(bits(model[k]) == bits(a) for k, (dt, a) in ref.items())


def test_numpy(work, old, new, values):
    path = os.path.join(work, values + ".patch")
    pulse("diff", os.path.join(work, "old.safetensors"), os.path.join(work, "new.safetensors"), "-o", path,
          "--values", values, "--chunk", "64", "--threads", "2")
    with pw.Patch(path) as p:
        check(p.values == values, "%s: values" % values)
        check(p.base_id == pulse("hash", os.path.join(work, "old.safetensors")).split()[0], "%s: base id" % values)
        check(p.result_id == pulse("hash", os.path.join(work, "new.safetensors")).split()[0], "%s: result id" % values)
        check(p.tensors == sorted(old), "%s: tensor names" % values)
        p.verify()

        # base as a path and as a mapping (the U8 tensor of odd length misaligns the rest in the file)
        for base in (os.path.join(work, "old.safetensors"), {k: (a, dt) for k, (dt, a) in old.items()}):
            ups = p.updates(base=base, threads=2)
            check(sorted(ups) == ["a.u8", "b.bf16", "c.f32", "e.e4m3", "z.i64"], "%s: changed tensors %s" % (values, sorted(ups)))
            for name, u in ups.items():
                dt, a = old[name]
                check(u.dtype == dt and u.shape == a.shape and u.nbytes == a.nbytes, "%s %s: dtype/shape" % (values, name))
                check(u.index.dtype == np.int64 and bool(np.all(np.diff(u.index) > 0)), "%s %s: index ascending" % (values, name))
                width = {"BF16": 2, "F32": 4, "F8_E4M3": 1}.get(dt, 1)
                check(u.values.dtype.kind == "u" and u.values.dtype.itemsize == width, "%s %s: values dtype" % (values, name))
                check(u.deltas.dtype.kind == "i" and u.deltas.dtype.itemsize == width, "%s %s: deltas dtype" % (values, name))
                check(len(u.index) == len(u.values) == len(u.deltas) > 0, "%s %s: counts" % (values, name))
            by_values = copy_model(old)
            ptrs = {k: a.ctypes.data for k, a in by_values.items()}
            pw.apply_updates(by_values, ups)
            check(same(by_values, new), "%s: numpy by values == NEW" % values)
            check(all(by_values[k].ctypes.data == ptrs[k] for k in ptrs), "%s: written in place" % values)
            by_deltas = copy_model(old)
            pw.apply_updates(by_deltas, {k: u._replace(values=None) for k, u in ups.items()})
            check(same(by_deltas, new), "%s: numpy by deltas == NEW" % values)

        # Without base: what the patch carries (ulp: deltas, abs: values); OPAQUE tensors nothing.
        ups = p.updates()
        for name, u in ups.items():
            if name in ("a.u8", "z.i64"):
                check(u.index is None and u.values is None and u.deltas is None, "%s %s: opaque without base" % (values, name))
            else:
                check(u.index is not None and (u.values is None) == (values == "ulp")
                      and (u.deltas is None) == (values == "abs"), "%s %s: what comes without base" % (values, name))
        m = copy_model(old)
        later = {k: ups[k] for k in ("b.bf16", "c.f32", "z.i64")}   # the unusable one last
        e = raises(ValueError, lambda: pw.apply_updates(m, later), "%s: opaque update without base" % values)
        check(e is not None and "z.i64" in str(e), "%s: the refusal names z.i64: %s" % (values, e))
        check(same(m, old), "%s: refused before any write (b.bf16, c.f32 come first)" % values)
        pw.apply_updates(m, {k: u for k, u in ups.items() if k not in ("a.u8", "z.i64")})
        m["a.u8"][:] = new["a.u8"][1]
        m["z.i64"][:] = new["z.i64"][1]
        check(same(m, new), "%s: without base == NEW" % values)

        only = p.updates(want=("index",))
        check(all(u.values is None and u.deltas is None for u in only.values()), "%s: want index only" % values)
        check(np.array_equal(only["b.bf16"].index, ups["b.bf16"].index), "%s: the same index" % values)
        raises(ValueError, lambda: p.updates(want=("index", "bogus")), "%s: unknown want" % values)

        with open(path, "rb") as f:
            mem = pw.Patch.from_bytes(f.read())
        with mem:
            ups2 = mem.updates(base=os.path.join(work, "old.safetensors"))
            check(all(np.array_equal(ups2[k].deltas, u.deltas) for k, u in
                      p.updates(base=os.path.join(work, "old.safetensors")).items()), "%s: from_bytes the same" % values)

        # Refusals before any write: a width, an element count, a missing tensor, read-only memory.
        full = p.updates(base=os.path.join(work, "old.safetensors"))
        for what, bad in (("width", {"c.f32": old["c.f32"][1].astype(np.float64)}),
                          ("numel", {"c.f32": old["c.f32"][1][:-1].copy()}),
                          ("missing", {"c.f32": None}),
                          ("bytes", {"z.i64": old["z.i64"][1].astype(np.int32)})):
            m = copy_model(old)
            for k, v in bad.items():
                if v is None:
                    del m[k]
                else:
                    m[k] = v
            before = {k: bits(a) for k, a in m.items()}
            e = raises(ValueError, lambda: pw.apply_updates(m, full), "%s: %s refused" % (values, what))
            check(e is not None and list(bad)[0] in str(e), "%s: %s names the tensor: %s" % (values, what, e))
            check(all(bits(m[k]) == before[k] for k in m), "%s: %s: nothing written" % (values, what))
        ro = copy_model(old)
        ro["b.bf16"].flags.writeable = False
        raises(ValueError, lambda: pw.apply_updates(ro, full), "%s: read-only array" % values)

        # A base of another layout.
        wrong = {k: (a, dt) for k, (dt, a) in old.items()}
        wrong["c.f32"] = (old["c.f32"][1][:-1].copy(), "F32")
        raises(pw.PulseError, lambda: p.updates(base=wrong), "%s: base layout" % values, "PULSE_ERR_MISMATCH")
    raises(pw.PulseNotFound, lambda: pw.Patch(os.path.join(work, "nope.patch")), "missing patch", "PULSE_ERR_NOTFOUND")
    raises(pw.PulseError, lambda: pw.Patch.from_bytes(b"PULSEPCH" + bytes(200)), "garbage patch")
    return path


def test_corrupt(work, old, path):
    """A byte of the last chunk (z.i64, the last tensor) flipped: earlier tensors would decode, but
    the whole patch is verified first, so nothing is returned and nothing is applied."""
    with open(path, "rb") as f:
        b = bytearray(f.read())
    table_len = struct.unpack_from("<Q", b, 88)[0]
    data_len = struct.unpack_from("<Q", b, 96)[0]
    check(104 + table_len + 32 + data_len == len(b), "patch layout as documented")
    b[len(b) - 3] ^= 0x40
    bad = os.path.join(work, "bad.patch")
    with open(bad, "wb") as f:
        f.write(b)
    m = copy_model(old)
    applied = []
    for p in (pw.Patch(bad), pw.Patch.from_bytes(bytes(b))):
        with p:
            for base in (None, os.path.join(work, "old.safetensors")):
                try:
                    ups = p.updates(base=base)
                    applied.append(True)
                    pw.apply_updates(m, {k: u for k, u in ups.items() if u.index is not None})
                except pw.PulseError as e:
                    check(e.name == "PULSE_ERR_CORRUPT", "corrupt: %s (%s)" % (e.name, e))
            raises(pw.PulseError, p.verify, "corrupt: verify", "PULSE_ERR_CORRUPT")
    check(not applied, "corrupt: updates returned nothing")
    check(same(m, old), "corrupt: tensors unchanged")


def test_torch(work, old, new, path_ulp, path_abs):
    try:
        import torch
    except Exception as e:   # noqa: BLE001 - any import failure means no torch here
        print("NOTE: torch does not import here (%s): the torch part was skipped" % e)
        return

    def to_torch(m):
        out = {}
        for k, (dt, a) in m.items():
            t = torch.from_numpy(a.view(np.int16).copy() if a.dtype == np.uint16 else a.copy())
            out[k] = t.view(torch.bfloat16) if dt == "BF16" else t.view(torch.float8_e4m3fn) if (
                dt == "F8_E4M3" and hasattr(torch, "float8_e4m3fn")) else t
        return out

    def tbits(t):
        return bytes(t.contiguous().reshape(-1).view(torch.uint8).numpy())

    def same_t(model, ref):
        return all(tbits(model[k]) == bits(a) for k, (dt, a) in ref.items())

    for path in (path_ulp, path_abs):
        with pw.Patch(path) as p:
            # base given as torch tensors (BF16 as torch.bfloat16)
            ups = p.updates(base={k: (t, old[k][0]) for k, t in to_torch(old).items()})   # uint8 -> F8_E4M3 named
            m = to_torch(old)
            ptrs = {k: t.data_ptr() for k, t in m.items()}
            pw.apply_updates(m, ups)
            check(same_t(m, new), "torch %s: == NEW bit for bit" % p.values)
            check(m["b.bf16"].dtype == torch.bfloat16 and all(m[k].data_ptr() == ptrs[k] for k in m),
                  "torch %s: bfloat16 written in place" % p.values)
            m = to_torch(old)
            pw.apply_updates(m, {k: u._replace(values=None) for k, u in ups.items()})
            check(same_t(m, new), "torch %s: by deltas == NEW" % p.values)
            # a shape mismatch refused before any write
            m = to_torch(old)
            m["c.f32"] = m["c.f32"][:-1].clone()
            before = {k: tbits(t) for k, t in m.items()}
            e = raises(ValueError, lambda: pw.apply_updates(m, ups), "torch %s: shape refused" % p.values)
            check(e is not None and "c.f32" in str(e), "torch: names c.f32")
            check(all(tbits(m[k]) == before[k] for k in m), "torch %s: nothing written" % p.values)
            m = to_torch(old)
            m["b.bf16"] = m["b.bf16"].float()
            raises(ValueError, lambda: pw.apply_updates(m, ups), "torch %s: float32 for BF16 refused" % p.values)
    # A Parameter that requires grad, through an nn.Module's state_dict (which shares its storage).
    with pw.Patch(path_ulp) as p:
        ups = p.updates(base=os.path.join(work, "old.safetensors"))
        mod = torch.nn.Module()
        mod.w = torch.nn.Parameter(torch.from_numpy(old["c.f32"][1].copy()))
        pw.apply_updates(mod, {"w": ups["c.f32"]._replace(name="w")})
        check(bits(mod.w.detach().numpy()) == bits(new["c.f32"][1]), "torch: nn.Module parameter updated in place")
    print("torch %s: updates applied" % torch.__version__)


def test_format6():
    """A format-6 patch (patches by direction, no longer read) opens to a clear refusal."""
    seed = os.path.join(os.environ["PULSE_SRC"], "tests", "fuzz", "corpus", "patch", "v6-prev.patch")
    e = raises(pw.PulseError, lambda: pw.Patch(seed), "a format-6 patch", "PULSE_ERR_UNSUPPORTED")
    check(e is not None and "format 6 (patches by direction) is no longer read" in str(e),
          "the refusal names format 6: %s" % e)
    print("format 6: refused")


def main():
    work = tempfile.mkdtemp(prefix="pulse-py-updates.")
    try:
        old, new = make_pair()
        write_safetensors(os.path.join(work, "old.safetensors"), old)
        write_safetensors(os.path.join(work, "new.safetensors"), new)
        path_ulp = test_numpy(work, old, new, "ulp")
        path_abs = test_numpy(work, old, new, "abs")
        test_corrupt(work, old, path_ulp)
        test_corrupt(work, old, path_abs)
        test_torch(work, old, new, path_ulp, path_abs)
        test_format6()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("python-updates: %d checks, %d failed" % (checks, failures))
    return 1 if failures or not checks else 0


if __name__ == "__main__":
    sys.exit(main())
