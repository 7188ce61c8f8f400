# SPDX-License-Identifier: Apache-2.0
"""Training loop of the RL example (library and CLI): supervised warm-up at an SFT rate, then
GRPO-style group-normalized REINFORCE with AdamW at RL rates; FP32 master weights, BF16 autocast
forward for training, rollouts sampled from the BF16 view of the weights (what an inference
server holds). The CLI can publish every RL step through pulse (see sync.py, follow.py).

  python3 train.py sft --out sft.pt [--tiny] [--steps N] [--target R]
  python3 train.py rl --init sft.pt --lr 3e-6 --steps N [--store URL --run R --key K.key
                      --state DIR --logits-dir DIR]
"""
import argparse
import dataclasses
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
import task as T  # noqa: E402

RL_LRS = (1e-6, 3e-6, 1e-5, 3e-5)


def default_config(tiny=False):
    return dataclasses.replace(M.TINY if tiny else M.Config(),
                               vocab_size=T.VOCAB_SIZE, max_len=T.SEQ_LEN)


def make_optimizer(model, lr, weight_decay=0.0):
    """AdamW on the FP32 master weights (betas 0.9/0.999, eps 1e-8)."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8,
                             weight_decay=weight_decay)


def answer_logprobs(model, seqs):
    """Sum of log p(answer tokens | prefix) per sequence [n], BF16 autocast forward on the FP32
    master; log-softmax in FP32. seqs: [n, SEQ_LEN] (prompt + answer)."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(seqs[:, :-1])
    logits = logits[:, T.PROMPT_LEN - 1:].float()
    logp = F.log_softmax(logits, dim=-1)
    tgt = seqs[:, T.PROMPT_LEN:]
    return logp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).sum(dim=1)


def policy_from(model, policy=None):
    """The BF16 inference view of model: policy's parameters refreshed in place, or a new one."""
    state = M.bf16_state(model)
    if policy is None:
        return M.inference_model(model.cfg, state)
    with torch.no_grad():
        for k, p in M.bf16_params(policy).items():
            p.copy_(state[k])
    return policy


@torch.no_grad()
def generate(policy, prompts, gen=None, greedy=False, temperature=1.0):
    """Samples ANSWER_LEN tokens after each prompt with a BF16 policy. [n, ANSWER_LEN]."""
    seq = prompts
    for _ in range(T.ANSWER_LEN):
        logits = M.inference_logits(policy, seq)[:, -1].float()
        if greedy:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
        seq = torch.cat([seq, nxt.unsqueeze(-1)], dim=1)
    return seq[:, T.PROMPT_LEN:]


def evaluate(model, n=512, seed=999, greedy=False, policy=None):
    """Mean reward of the BF16 view of model on n fresh prompts (sampled at temperature 1
    unless greedy)."""
    policy = policy_from(model, policy)
    a, b = T.sample_operands(np.random.default_rng(seed), n)
    gen = torch.Generator().manual_seed(seed)
    return T.reward(generate(policy, T.prompts(a, b), gen, greedy=greedy), a, b).mean().item()


def sft_warmup(model, steps=600, lr=1e-3, batch=64, seed=0, target=None, eval_every=50,
               log=print):
    """Supervised warm-up (cross-entropy on the answer tokens of task.sample_sft_operands; AdamW,
    20-step linear warm-up, cosine to lr/10). Stops early once the sampled reward of the BF16 view
    (256 uniform 3-digit prompts, temperature 1) reaches target.
    Returns (steps run, last evaluated reward)."""
    opt = make_optimizer(model, lr, weight_decay=0.01)
    rng = np.random.default_rng(seed)
    rew = float("nan")
    for step in range(steps):
        scale = min(1.0, (step + 1) / 20) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for g in opt.param_groups:
            g["lr"] = lr * scale
        seqs = T.full_sequences(*T.sample_sft_operands(rng, batch))
        loss = -answer_logprobs(model, seqs).mean() / T.ANSWER_LEN
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            rew = evaluate(model, n=256)
            if log:
                log(f"sft step {step + 1}: loss {loss.item():.4f} reward {rew:.3f}")
            if target is not None and rew >= target:
                return step + 1, rew
    return steps, rew


def grpo_step(model, opt, batch_rng, n_prompts=16, group=8, temperature=1.0, clip=1.0,
              policy=None, stats=None, reward_kind="exact"):
    """One GRPO-style step: n_prompts prompts drawn with batch_rng (numpy Generator), group
    completions each sampled from the BF16 view of model (policy, refreshed in place when given),
    advantages = (reward - group mean) / (group std + 1e-4), REINFORCE loss on the answer tokens'
    log-probs (BF16 autocast forward on the FP32 master), grad-norm clip, one opt.step().
    reward_kind "exact" (the task's reward) or "digits" (fraction of answer tokens right: only
    for the smoke test, whose barely trained tiny model never gets an exact answer).
    Returns the mean reward of the rollouts (sampled before the update). stats, if a dict,
    receives 'reward', 'loss', 'grad_norm', 'frac_groups_with_signal'."""
    policy = policy_from(model, policy)
    a, b = T.sample_operands(batch_rng, n_prompts)
    a, b = np.repeat(a, group), np.repeat(b, group)
    prompts = T.prompts(a, b)
    gen = torch.Generator().manual_seed(int(batch_rng.integers(0, 2 ** 62)))
    comp = generate(policy, prompts, gen, temperature=temperature)
    if reward_kind == "digits":
        r = (comp == T.answers(a, b)).float().mean(1).view(n_prompts, group)
    else:
        r = T.reward(comp, a, b).view(n_prompts, group)
    adv = ((r - r.mean(1, keepdim=True)) / (r.std(1, unbiased=False, keepdim=True) + 1e-4)).view(-1)
    logp = answer_logprobs(model, torch.cat([prompts, comp], dim=1))
    loss = -(adv * logp).mean() / T.ANSWER_LEN
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    if stats is not None:
        stats.update(reward=r.mean().item(), loss=loss.item(), grad_norm=float(gn),
                     frac_groups_with_signal=(r.std(1) > 0).float().mean().item())
    return r.mean().item()


def save_checkpoint(path, model, **extra):
    tmp = path + ".tmp"
    torch.save({"config": dataclasses.asdict(model.cfg), "state": model.state_dict(), **extra}, tmp)
    os.replace(tmp, path)


def load_checkpoint(path):
    """(FP32 model, checkpoint dict)."""
    ck = torch.load(path)
    model = M.Transformer(M.Config(**ck["config"]))
    model.load_state_dict(ck["state"])
    return model, ck


def cmd_sft(args):
    M.set_deterministic()
    model = M.build_model(default_config(args.tiny), seed=args.seed)
    t0 = time.time()
    steps, rew = sft_warmup(model, steps=args.steps, lr=args.lr, batch=args.batch, seed=args.seed,
                            target=args.target, eval_every=args.eval_every)
    save_checkpoint(args.out, model, sft_steps=steps, sft_reward=rew)
    n = sum(p.numel() for p in model.parameters())
    print(f"sft: {n} parameters, {steps} steps, reward {rew:.3f}, {time.time() - t0:.0f} s -> {args.out}")


def cmd_rl(args):
    import sync
    M.set_deterministic()
    model, _ = load_checkpoint(args.init)
    opt = make_optimizer(model, args.lr)
    rng = np.random.default_rng(args.seed)
    probe = T.fixed_prompts()
    pub = None
    if args.store:
        pub = sync.Publisher(args.store, args.run, args.key, args.state, backend=args.backend)
    policy = policy_from(model)

    last = [None]

    def publish(step):
        if pub is None:
            return
        state = M.bf16_state(model)
        # Logits of the trainer's model at this step, saved before the step is published so a
        # follower that holds the step can always find them.
        ref = M.inference_logits(M.inference_model(model.cfg, state), probe)
        sync.save_logits(args.logits_dir, step, ref)
        last[0], info = pub.publish(state, step)
        print(f"published step {step}: {info}", flush=True)

    publish(0)
    for step in range(1, args.steps + 1):
        st = {}
        grpo_step(model, opt, rng, n_prompts=args.prompts, group=args.group, policy=policy, stats=st,
                  reward_kind=args.reward)
        print(f"rl step {step}: reward {st['reward']:.3f} loss {st['loss']:+.4f} "
              f"grad_norm {st['grad_norm']:.3f}", flush=True)
        publish(step)
    if pub is not None:
        sync.mark_done(args.logits_dir, last[0])
        pub.close()
    if args.out:
        save_checkpoint(args.out, model)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sft", help="supervised warm-up to a checkpoint")
    s.add_argument("--out", required=True)
    s.add_argument("--tiny", action="store_true", help="the tiny model of the smoke test")
    s.add_argument("--steps", type=int, default=600)
    s.add_argument("--lr", type=float, default=1e-3)
    s.add_argument("--batch", type=int, default=64)
    s.add_argument("--target", type=float, default=None, help="stop once the reward reaches this")
    s.add_argument("--eval-every", type=int, default=50)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=cmd_sft)
    r = sub.add_parser("rl", help="GRPO from a checkpoint, publishing every step through pulse")
    r.add_argument("--init", required=True)
    r.add_argument("--lr", type=float, default=3e-6)
    r.add_argument("--steps", type=int, default=10)
    r.add_argument("--prompts", type=int, default=16)
    r.add_argument("--group", type=int, default=8)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--reward", default="exact", choices=["exact", "digits"],
                   help="digits: partial credit (smoke test only)")
    r.add_argument("--out", default=None)
    r.add_argument("--store", default=None, help="publish through pulse to this store")
    r.add_argument("--run", default="rl")
    r.add_argument("--key", default=None)
    r.add_argument("--state", default=None)
    r.add_argument("--logits-dir", default=None)
    r.add_argument("--backend", default="auto", choices=["auto", "bindings", "cli"])
    r.set_defaults(func=cmd_rl)
    args = ap.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
