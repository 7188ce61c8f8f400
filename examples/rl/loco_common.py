# SPDX-License-Identifier: Apache-2.0
"""What the PULSELoCo trainers and the DiLoCo/DDP baselines share, so that the three methods differ
only in how trainers exchange: model sizes, each trainer's data stream, the local GRPO steps, the
evaluation and the per-round log."""

import dataclasses
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
import task as T  # noqa: E402
import train as TR  # noqa: E402

# "small" is the size of the full comparison: 18 trainer-runs (3 methods x 2 and 4 trainers) of
# R x H GRPO steps must fit in about 30 minutes on 2 shared cores; the 3.2M default costs 3x more
# per step. Weights are N(0, 0.02) at every size, so BF16 cells (the gate) are the same.
SIZES = {
    "tiny": dict(d_model=64, n_layers=2, n_heads=2, d_ff=256),
    "small": dict(d_model=128, n_layers=4, n_heads=4, d_ff=512),
    "default": {},
}

EVAL_SEED = 999


def use_reward(kind):
    """'exact' (task.py's reward: the whole answer right) everywhere but in --quick, where 'digits'
    (the fraction of answer tokens right) gives an untrained tiny model a learning signal, so that
    the smoke test's rounds move weights; exact answers need minutes of SFT first."""
    if kind == "digits":
        T.reward = lambda comp, a, b: (comp == T.answers(a, b)).float().mean(dim=1)
    elif kind != "exact":
        raise ValueError(f"reward {kind!r}")


def model_config(size):
    return dataclasses.replace(TR.default_config(), **SIZES[size])


def trainer_rng(seed, k):
    """Trainer k's data stream (prompts and sampling seeds): the same in every method."""
    return np.random.default_rng([seed, 1000 + k])


def params_np(model):
    """name -> numpy view of the model's own FP32 parameter storage (writes go into the model)."""
    out = {}
    for name, p in model.named_parameters():
        a = p.detach().numpy()
        assert a.dtype == np.float32 and a.flags["C_CONTIGUOUS"], name
        out[name] = a
    return out


def visible_bound(params, shift):
    """The mechanism's prediction of the gate's density when every weight moves by `shift` (Adam
    moves a weight by at most about lr per step, so H x lr bounds a round's pseudo-gradient): a
    weight sits uniformly inside its BF16 cell (width ulp(w) = 2^(floor(log2|w|) - 7)), so a shift
    crosses a rounding boundary with probability min(1, shift / ulp(w)). Mean over all weights."""
    tot, n = 0.0, 0
    for a in params.values():
        w = np.abs(a.astype(np.float64).ravel())
        _, ex = np.frexp(w)                      # w = m 2^ex, m in [0.5, 1): floor(log2 w) = ex - 1
        ulp = np.ldexp(1.0, ex - 8)
        p = np.where(w > 0, np.minimum(1.0, shift / ulp), 1.0)
        tot += float(p.sum())
        n += w.size
    return tot / n


def bf16_bits(a):
    """BF16 round-to-nearest-even of float32 values, as uint16 bit patterns (finite inputs)."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def gate_check(theta_r, theta_local, e):
    """Recomputes a round's gate in numpy from theta_r, theta_local and the error feedback e:
    a = (theta_r - theta_local) + e (FP32); returns (entries whose BF16 view changes, i.e. what the
    library must send; the mechanism's expectation sum min(1, |a| / ulp_bf16(theta_r)))."""
    sent, expect = 0, 0.0
    for name, t in theta_r.items():
        a = (t - theta_local[name]) + e[name]
        sent += int(np.count_nonzero(bf16_bits(t - a) != bf16_bits(t)))
        w = np.abs(t.astype(np.float64))
        _, ex = np.frexp(w)
        ulp = np.ldexp(1.0, ex - 8)
        expect += float(np.where(w > 0, np.minimum(1.0, np.abs(a) / ulp), 1.0).sum())
    return sent, expect


def n_params(model):
    return sum(p.numel() for p in model.parameters())


def load_init(path):
    model, _ = TR.load_checkpoint(path)
    return model


def local_steps(model, opt, rng, steps, policy, hp):
    """`steps` GRPO steps on this trainer's own stream; returns their rollout rewards."""
    return [TR.grpo_step(model, opt, rng, n_prompts=hp["n_prompts"], group=hp["group"], policy=policy)
            for _ in range(steps)]


def evaluate(model, hp, policy=None):
    """Sampled reward (temperature 1, fixed prompts and sampling seed) of the model's BF16 view."""
    return TR.evaluate(model, n=hp["eval_n"], seed=EVAL_SEED, greedy=False, policy=policy)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def append_jsonl(path, obj):
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
