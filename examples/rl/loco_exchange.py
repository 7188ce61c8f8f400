# SPDX-License-Identifier: Apache-2.0
"""One trainer's side of a PULSELoCo round on in-memory FP32 numpy arrays: the Python bindings when
they import, else `pulse loco init/round` through safetensors files (same library, same bits)."""

import hashlib
import os
import re
import subprocess

import numpy as np
import torch

import safetensors_io


def st_write(path, arrays):
    """Writes name -> float32 array as an F32 safetensors file (safetensors_io, zero-copy views)."""
    for name, a in arrays.items():
        assert a.dtype == np.float32, name
    safetensors_io.save(path, {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in arrays.items()})


def st_read(path):
    """Reads an F32 safetensors file into name -> float32 array."""
    out = {}
    for name, t in safetensors_io.load(path).items():
        if t.dtype != torch.float32:
            raise ValueError(f"{path}: tensor {name} is {t.dtype}, not F32")
        out[name] = t.numpy()
    return out


def theta_digest(arrays):
    """SHA-256 over the names and FP32 bits of every tensor (sorted): equal digests = identical theta."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        h.update(name.encode() + b"\0")
        h.update(np.ascontiguousarray(arrays[name], dtype=np.float32).tobytes())
    return h.hexdigest()


def bindings():
    """The pulseweights module when it imports and has the LoCo calls, else None."""
    try:
        import pulseweights as pw
    except Exception:  # not landed yet, or no shared library: fall back to the CLI
        return None
    return pw if hasattr(pw, "loco_round") and hasattr(pw, "loco_init") else None


_ROUND_LINE = re.compile(
    r"round (\d+): sent (\d+) of (\d+) entries .*?, (\d+) shard bytes .*?; (\d+) of (\d+) trainers included.*?, "
    r"(\d+) excluded.*?; uploaded (\d+) downloaded (\d+) bytes; theta_\{r\+1\} \w+ ([0-9a-f]+); "
    r"(\d+) result")


class LocoExchange:
    """PULSELoCo rounds for one trainer. via: 'bindings', 'cli' or 'auto' (bindings when present)."""

    def __init__(self, store, run, key, state_dir, trainers, via="auto", pulse_bin=None, workdir=None,
                 deadline=600.0):
        self.store, self.run, self.key, self.state_dir = store, run, key, state_dir
        self.trainers, self.deadline = list(trainers), deadline
        self.pw = bindings() if via in ("auto", "bindings") else None
        if via == "bindings" and self.pw is None:
            raise RuntimeError("pulseweights bindings with loco_round are not importable")
        self.via = "bindings" if self.pw is not None else "cli"
        self.pulse_bin = pulse_bin or os.environ.get("PULSE_BIN", "pulse")
        self.workdir = workdir or state_dir + ".io"

    def init(self, params):
        if self.pw is not None:
            self.pw.loco_init(self.state_dir, params, view="bf16")
            return
        os.makedirs(self.workdir, exist_ok=True)
        theta0 = os.path.join(self.workdir, "theta0.safetensors")
        st_write(theta0, params)
        self._pulse(["loco", "init", "--state", self.state_dir, "--global", theta0, "--view", "bf16"])

    def round(self, params, local_steps):
        """theta_local = params (after the H local steps) in, theta_{r+1} written back into params in place."""
        if self.pw is not None:
            rep = self.pw.loco_round(store=self.store, run=self.run, key=self.key, state_dir=self.state_dir,
                                     trainers=self.trainers, local=params, out=params, deadline=self.deadline,
                                     quorum=0, outer_lr=1.0, outer_momentum=0.0, nesterov=False, values="fp32",
                                     threads=1)
            return {k: rep[k] for k in ("round", "sent", "params", "shard_bytes", "bytes_up", "bytes_down",
                                        "members", "excluded", "results_compared", "view_state") if k in rep}
        local = os.path.join(self.workdir, "local.safetensors")
        nxt = os.path.join(self.workdir, "next.safetensors")
        st_write(local, params)
        out = self._pulse(["loco", "round", "--store", self.store, "--run", self.run, "--key", self.key,
                           "--state", self.state_dir, "--trainers", *self.trainers, "--local", local, "-o", nxt,
                           "--deadline", str(self.deadline), "--local-steps", str(local_steps), "--threads", "1"])
        m = _ROUND_LINE.search(out)
        if not m:
            raise RuntimeError(f"unexpected `pulse loco round` output: {out.strip()}")
        new = st_read(nxt)
        for name, a in params.items():
            a[...] = new[name]  # in place: params are views of the model's FP32 tensors
        g = m.groups()
        return {"round": int(g[0]), "sent": int(g[1]), "params": int(g[2]), "shard_bytes": int(g[3]),
                "members": int(g[4]), "excluded": int(g[6]), "bytes_up": int(g[7]), "bytes_down": int(g[8]),
                "view_state": g[9], "results_compared": int(g[10])}

    def _pulse(self, args):
        p = subprocess.run([self.pulse_bin, *args], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"pulse {' '.join(args[:2])} failed ({p.returncode}): {p.stderr.strip()}")
        return p.stdout
