# SPDX-License-Identifier: Apache-2.0
"""The two baselines PULSELoCo is compared with, K trainers simulated in one process on the same
init, seeds and data streams as loco_trainer.py:
  DDP:    every step each trainer computes its GRPO gradient on its own batch, the K gradients are
          averaged (FP32, trainer order), clipped and applied by one AdamW: H dense gradients per round.
  DiLoCo: each trainer runs H local steps with its own AdamW (state kept across rounds); then
          theta_{r+1} = theta_r - (sum_k (theta_r - theta_k)) / K in FP32: the dense pseudo-gradient
          averaged, outer lr 1, momentum 0 (the outer step PULSELoCo's rounds use).
Exchange is free here (no store): only the bytes a real exchange would send are counted."""

import copy
import time

import torch

import loco_common as C
import train as TR
from loco_exchange import theta_digest


class _GradRecorder:
    """Stands in for the optimizer inside train.grpo_step: keeps the step's gradient, moves nothing."""

    def __init__(self, params):
        self.params = params
        self.grads = None

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        self.grads = [p.grad.detach().clone() for p in self.params]


def run_ddp(init_path, K, hp, log=print):
    model = C.load_init(init_path)
    params = list(model.parameters())
    opt = TR.make_optimizer(model, hp["lr"])
    rngs = [C.trainer_rng(hp["seed"], k) for k in range(K)]
    policy = TR.policy_from(model)
    P = C.n_params(model)
    out = {"method": "ddp", "trainers": K, "params": P, "eval0": C.evaluate(model, hp, policy), "log": []}
    t_start = time.time()
    for r in range(hp["rounds"]):
        rewards = []
        for _ in range(hp["H"]):
            acc = None
            for k in range(K):
                rec = _GradRecorder(params)
                # clip=inf: DDP clips the averaged gradient (below), not each trainer's.
                rewards.append(TR.grpo_step(model, rec, rngs[k], n_prompts=hp["n_prompts"], group=hp["group"],
                                            clip=float("inf"), policy=policy))
                acc = rec.grads if acc is None else [a + g for a, g in zip(acc, rec.grads)]
            for p, a in zip(params, acc):
                p.grad = a / K
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
        ev = C.evaluate(model, hp, policy)
        out["log"].append(_entry(r, rewards, ev, hp["H"] * 4 * P, theta_digest(C.params_np(model))))
        log(f"ddp K={K} round {r}: reward {out['log'][-1]['train_reward']:.3f} eval {ev:.3f}")
    out["seconds"] = time.time() - t_start
    return out


def run_diloco(init_path, K, hp, log=print):
    base = C.load_init(init_path)
    models = [copy.deepcopy(base) for _ in range(K)]
    opts = [TR.make_optimizer(m, hp["lr"]) for m in models]
    rngs = [C.trainer_rng(hp["seed"], k) for k in range(K)]
    policies = [TR.policy_from(m) for m in models]
    P = C.n_params(base)
    theta = {n: p.detach().clone() for n, p in base.named_parameters()}
    out = {"method": "diloco", "trainers": K, "params": P, "eval0": C.evaluate(base, hp, policies[0]), "log": []}
    t_start = time.time()
    for r in range(hp["rounds"]):
        rewards = []
        for k in range(K):
            rewards += C.local_steps(models[k], opts[k], rngs[k], hp["H"], policies[k], hp)
        with torch.no_grad():
            for name, t in theta.items():
                acc = torch.zeros_like(t)
                for m in models:
                    acc += t - m.get_parameter(name)  # the FP32 pseudo-gradient, one subtraction
                t -= acc / K                          # outer lr 1, momentum 0: plain averaging
            for m in models:
                for name, p in m.named_parameters():
                    p.copy_(theta[name])
        digests = {theta_digest(C.params_np(m)) for m in models}
        assert len(digests) == 1, "DiLoCo trainers diverged"
        ev = C.evaluate(models[0], hp, policies[0])
        out["log"].append(_entry(r, rewards, ev, 4 * P, digests.pop()))
        log(f"diloco K={K} round {r}: reward {out['log'][-1]['train_reward']:.3f} eval {ev:.3f}")
    out["seconds"] = time.time() - t_start
    return out


def _entry(r, rewards, ev, bytes_up, digest):
    return {"round": r, "train_reward": sum(rewards) / len(rewards), "eval_reward": ev, "bytes_up": bytes_up,
            "sent_frac": 1.0, "sent_frac_min": 1.0, "sent_frac_max": 1.0, "digest": digest}
