# SPDX-License-Identifier: Apache-2.0
"""Trainer -> inference sync for the RL example through pulse: a Publisher that publishes the BF16
view of the trainer's weights each step and a Follower that brings an inference model's BF16
parameters to the newest published step. Two backends: the Python bindings (python/pulseweights,
in place, no files) and the `pulse` CLI (a safetensors file written, published, pulled, reloaded).
Also the per-step logits files the follower checks against."""
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import safetensors_io  # noqa: E402


def find_pulse():
    """The pulse binary: $PULSE_BIN, else the first repo build dir that has one."""
    if os.environ.get("PULSE_BIN"):
        return os.environ["PULSE_BIN"]
    for d in ("build-rlsync", "build"):
        p = os.path.join(REPO, d, "tools", "pulse")
        if os.access(p, os.X_OK):
            return p
    return "pulse"


def bindings():
    """The pulseweights module, or None when it is not importable (or PULSE_RL_BACKEND=cli)."""
    if os.environ.get("PULSE_RL_BACKEND") == "cli":
        return None
    sys.path.insert(0, os.path.join(REPO, "python"))
    if not os.environ.get("PULSE_LIB"):
        lib = os.path.join(os.path.dirname(os.path.dirname(find_pulse())), "libpulseweights.so")
        if os.path.exists(lib):
            os.environ["PULSE_LIB"] = lib
    try:
        import pulseweights
        pulseweights.version()
        return pulseweights
    except Exception:  # not there yet, or its library is not found: the CLI does the same job
        return None


def _backend(name):
    if name == "cli":
        return None
    pw = bindings()
    if pw is None and name == "bindings":
        raise RuntimeError("backend 'bindings' asked for but python/pulseweights is not importable")
    return pw


def keygen(prefix):
    subprocess.run([find_pulse(), "keygen", prefix], check=True, stdout=subprocess.DEVNULL)


def _run(args):
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed: {p.stderr.strip()}")
    return p.stdout


class Publisher:
    """Publishes name -> BF16 tensor dicts as steps of a run (first a keyframe, then patches)."""

    def __init__(self, store, run, key, state_dir, backend="auto", values="ulp"):
        self.pw = _backend(backend)
        self.backend = "bindings" if self.pw else "cli"
        self.args = dict(store=store, run=run, key=key, state_dir=state_dir, values=values)
        self.last_step = None
        if self.pw:
            self.pub = self.pw.Publisher(store=store, run=run, key=key, state_dir=state_dir,
                                         values=values, threads=1)
        else:
            os.makedirs(state_dir, exist_ok=True)
            self.ckpt = state_dir.rstrip("/") + ".next.safetensors"

    def publish(self, state, step):
        """(step whose record holds this state, short summary). A state equal to the last
        published one makes no new record (pulse skips it): the earlier step is returned."""
        if self.pw:
            i = self.pub.publish(state, step=step)
            if i.already:
                return self.last_step, "unchanged, nothing published"
            self.last_step = i.step
            return i.step, (f"{i.kind}, {i.changes} changes, {i.object_bytes} bytes of objects "
                            f"for {i.dense_bytes} dense")
        a = self.args
        safetensors_io.save(self.ckpt, state)
        out = _run([find_pulse(), "publish", "--store", a["store"], "--run", a["run"], "--key", a["key"],
                    "--state", a["state_dir"], "--step", str(step), "--values", a["values"],
                    "--threads", "1", self.ckpt])
        os.unlink(self.ckpt)
        if "already published" in out:
            return self.last_step, "unchanged, nothing published"
        self.last_step = step
        return step, out.strip().split(": ", 1)[-1]

    def close(self):
        if self.pw:
            self.pub.close()


class Follower:
    """Keeps an inference model's BF16 parameters at the newest published step of a run."""

    def __init__(self, store, run, trust, state_dir, model, backend="auto", weights_path=None):
        self.pw = _backend(backend)
        self.backend = "bindings" if self.pw else "cli"
        self.params = {k: v for k, v in model.state_dict().items()}
        self.held = None
        if self.pw:
            # The model's own parameter storage is the follower's weights: updated in place.
            self.fol = self.pw.Follower(store=store, run=run, trust=[trust], state_dir=state_dir,
                                        weights=self.params)
        else:
            os.makedirs(state_dir, exist_ok=True)
            self.cmd = [find_pulse(), "pull", "--store", store, "--run", run, "--trust", trust,
                        "--state", state_dir, "--threads", "1", "--weights",
                        weights_path or os.path.join(state_dir, "weights.safetensors")]

    def pull(self):
        """(steps applied, step now held or None). The model holds that step's weights."""
        if self.pw:
            try:
                applied, held = self.fol.pull()
            except self.pw.PulseError as e:
                if self.held is None and e.name == "PULSE_ERR_NOTFOUND":
                    return 0, None      # the trainer has not published its first step yet
                raise
            self.held = held.step if held is not None else None
            return applied, self.held
        p = subprocess.run(self.cmd, capture_output=True, text=True)
        if p.returncode != 0:
            if self.held is None and ("no keyframe" in p.stderr or "no records under" in p.stderr):
                return 0, None          # the trainer has not published its first step yet
            raise RuntimeError(f"pulse pull failed: {p.stderr.strip()}")
        out = p.stdout
        m = re.search(r"at step (\d+).*\((\d+) steps? applied\)", out)
        if not m:
            return 0, self.held
        applied = int(m.group(2))
        self.held = int(m.group(1))
        if applied:
            loaded = safetensors_io.load(self.cmd[-1])   # reload the model from the pulled file
            with torch.no_grad():
                for k, p in self.params.items():
                    p.copy_(loaded[k])
        return applied, self.held

    def close(self):
        if self.pw:
            self.fol.close()


def _logits_path(d, step):
    return os.path.join(d, f"logits-{step:06d}.npy")


def save_logits(d, step, logits):
    """Saves the BF16 logits' bit patterns (atomically: a reader never sees half a file)."""
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, suffix=".npy")
    with os.fdopen(fd, "wb") as f:
        np.save(f, logits.contiguous().view(torch.int16).numpy())
    os.replace(tmp, _logits_path(d, step))


def load_logits(d, step):
    return torch.from_numpy(np.load(_logits_path(d, step))).view(torch.bfloat16)


def mark_done(d, last_step):
    with open(os.path.join(d, "done.tmp"), "w") as f:
        f.write(f"{last_step}\n")
    os.replace(os.path.join(d, "done.tmp"), os.path.join(d, "done"))


def done_step(d):
    try:
        with open(os.path.join(d, "done")) as f:
            return int(f.read())
    except FileNotFoundError:
        return None
