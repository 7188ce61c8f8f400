# SPDX-License-Identifier: Apache-2.0
"""Runs the trainer-to-trainer comparison (docs/loco.md): the same GRPO run with 2 and 4 trainers
exchanging by PULSELoCo (one loco_trainer.py process per trainer, rounds through a file:// store),
dense DiLoCo and DDP (loco_baselines.py), from one SFT checkpoint, on the same seeds and data.
Asserts that every PULSELoCo trainer holds the same theta bits after every round. Writes
OUT/runs/<method>-K<k>.json, then loco_plots.py draws the figures.

  loco_run.py --out DIR [--quick] [--init sft.pt] [--trainers 2 4] [--methods ddp diloco loco]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loco_baselines as B  # noqa: E402
import loco_common as C  # noqa: E402
import model as M  # noqa: E402
import train as TR  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

FULL = dict(size="small", sft_steps=600, sft_batch=64, sft_stages=4, sft_target=0.4, rounds=16, H=8, lr=3e-5, n_prompts=8, group=8,
            eval_n=512, seed=1, reward="exact")
QUICK = dict(size="tiny", sft_steps=20, sft_batch=64, sft_stages=1, sft_target=None, rounds=2, H=2, lr=3e-5, n_prompts=4, group=4,
             eval_n=64, seed=1, reward="digits")


def sft_checkpoint(out, hp, log):
    """theta_0 of every run: supervised warm-up from seed 0 (cached in OUT/sft.pt), in stages of
    sft_steps (train.sft_warmup: warm-up, cosine; stage i draws data with seed i) until the sampled
    reward reaches sft_target: addition sits on a plateau for a few hundred steps first, and GRPO
    needs groups with some right answers to learn at all."""
    path = os.path.join(out, "sft.pt")
    if os.path.exists(path):
        log(f"theta_0: {path} (cached)")
        return path
    model = M.build_model(C.model_config(hp["size"]), seed=0)
    t0, total = time.time(), 0
    for stage in range(hp["sft_stages"]):
        steps, rew = TR.sft_warmup(model, steps=hp["sft_steps"], batch=hp["sft_batch"], target=hp["sft_target"],
                                   seed=stage, eval_every=25, log=log)
        total += steps
        if hp["sft_target"] is None or rew >= hp["sft_target"]:
            break
    TR.save_checkpoint(path, model, sft_steps=total, sft_reward=rew)
    log(f"theta_0: {C.n_params(model)} parameters, {total} SFT steps, reward {rew:.3f}, "
        f"{time.time() - t0:.0f} s -> {path}")
    return path


def run_loco(out, init, K, hp, via, log):
    """K trainer processes; returns the run's summary after checking that their theta agree."""
    d = os.path.join(out, f"loco-K{K}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "keys"))
    pulse = os.environ.get("PULSE_BIN", "pulse")
    for k in range(K):
        subprocess.run([pulse, "keygen", "--comment", f"t{k}", os.path.join(d, "keys", f"t{k}")], check=True,
                       stdout=subprocess.DEVNULL)
    hp_path = os.path.join(d, "hp.json")
    C.write_json(hp_path, hp)
    t0 = time.time()
    procs = []
    for k in range(K):
        with open(os.path.join(d, f"trainer-{k}.out"), "w") as f:
            procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "loco_trainer.py"), "--dir", d,
                                           "--rank", str(k), "--trainers", str(K), "--init", init,
                                           "--hp", hp_path, "--via", via], stdout=f, stderr=subprocess.STDOUT))
    failed = []
    while any(p.poll() is None for p in procs):
        failed = [k for k, p in enumerate(procs) if p.poll() not in (None, 0)]
        if failed:  # the others would wait for its shard until the deadline: stop them now
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            break
        time.sleep(0.5)
    for p in procs:
        p.wait()
    failed = failed or [k for k, p in enumerate(procs) if p.returncode != 0]
    seconds = time.time() - t0
    if failed:
        for k in failed:
            with open(os.path.join(d, f"trainer-{k}.out")) as f:
                sys.stderr.write(f"--- trainer {k} ---\n" + f.read()[-3000:])
        raise SystemExit(f"loco K={K}: trainer(s) {failed} failed")
    return merge_loco(d, K, hp, seconds, log)


def merge_loco(d, K, hp, seconds, log):
    """One run summary from the trainers' logs, asserting that they agree on theta every round."""
    logs = [C.read_jsonl(os.path.join(d, f"trainer-{k}.jsonl")) for k in range(K)]
    heads = [lg[0] for lg in logs]
    assert len({h["digest0"] for h in heads}) == 1, "trainers started from different theta_0"
    P = heads[0]["params"]
    run = {"method": "loco", "trainers": K, "params": P, "eval0": heads[0]["eval0"], "via": heads[0]["via"],
           "seconds": seconds, "log": []}
    for r in range(hp["rounds"]):
        lines = [lg[1 + r] for lg in logs]
        assert all(ln["round"] == r for ln in lines)
        digests = {ln["digest"] for ln in lines}
        views = {ln["rep"]["view_state"] for ln in lines}
        # The claim of the round: every trainer holds the same theta_{r+1}, bit for bit.
        assert len(digests) == 1, f"loco K={K} round {r}: trainers hold different theta: {digests}"
        assert len(views) == 1, f"loco K={K} round {r}: different view states {views}"
        members = [ln["rep"].get("members", K) for ln in lines]
        fracs = [ln["rep"]["sent"] / ln["rep"]["params"] for ln in lines]
        rewards = [x for ln in lines for x in ln["rewards"]]
        run["log"].append({
            "round": r, "train_reward": sum(rewards) / len(rewards), "eval_reward": lines[0]["eval"],
            "bytes_up": sum(ln["rep"]["shard_bytes"] for ln in lines) / K,
            "bytes_up_store": sum(ln["rep"]["bytes_up"] for ln in lines) / K,
            "bytes_down_store": sum(ln["rep"]["bytes_down"] for ln in lines) / K,
            "sent_frac": sum(fracs) / K, "sent_frac_min": min(fracs), "sent_frac_max": max(fracs),
            "gate_expect_frac": (sum(ln["gate_expect"] for ln in lines) / K / P
                                 if all("gate_expect" in ln for ln in lines) else None),
            "members_min": min(members), "excluded": sum(ln["rep"]["excluded"] for ln in lines),
            "digest": digests.pop(), "view_state": views.pop(),
            "local_s": max(ln["local_s"] for ln in lines), "round_s": max(ln["round_s"] for ln in lines)})
        e = run["log"][-1]
        log(f"loco K={K} round {r}: reward {e['train_reward']:.3f} eval {e['eval_reward']:.3f} sent "
            f"{100 * e['sent_frac']:.2f} % {e['bytes_up']:.0f} B/trainer, {K} trainers hold theta "
            f"{e['digest'][:12]}, members >= {e['members_min']}")
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (sft.pt is reused when present)")
    ap.add_argument("--quick", action="store_true", help="tiny model, 2 trainers, 2 rounds (smoke test)")
    ap.add_argument("--init", default=None, help="theta_0 checkpoint instead of OUT/sft.pt")
    ap.add_argument("--trainers", type=int, nargs="+", default=None)
    ap.add_argument("--methods", nargs="+", default=["ddp", "diloco", "loco"], choices=["ddp", "diloco", "loco"])
    ap.add_argument("--via", default="auto", choices=["auto", "bindings", "cli"], help="how loco rounds run")
    for k, v in FULL.items():
        if k not in ("size", "reward"):
            ap.add_argument("--" + k.replace("_", "-"), type=type(v) if v is not None else float, default=None)
    ap.add_argument("--size", choices=sorted(C.SIZES), default=None)
    ap.add_argument("--merge-only", action="store_true",
                    help="rebuild runs/loco-K*.json from OUT/loco-K*/ trainer logs (no training)")
    args = ap.parse_args()
    hp = dict(QUICK if args.quick else FULL)
    for k in hp:
        v = getattr(args, k, None)
        if v is not None:
            hp[k] = v
    trainers = args.trainers or ([2] if args.quick else [2, 4])
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
    logf = open(os.path.join(args.out, "run.log"), "a")

    def log(msg):
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    if args.merge_only:
        for K in trainers:
            path = os.path.join(args.out, "runs", f"loco-K{K}.json")
            with open(path) as f:
                old = json.load(f)
            hp = old["hp"]
            run = merge_loco(os.path.join(args.out, f"loco-K{K}"), K, hp, old["seconds"], log)
            run.update(H=hp["H"], lr=hp["lr"], rounds=hp["rounds"], hp=hp, visible_bound=old.get("visible_bound"))
            C.write_json(path, run)
        return
    M.set_deterministic(1)
    C.use_reward(hp["reward"])
    log(f"hyper-parameters: {json.dumps(hp)}; trainers {trainers}; methods {args.methods}")
    init = args.init or sft_checkpoint(args.out, hp, log)
    bound = C.visible_bound(C.params_np(C.load_init(init)), hp["H"] * hp["lr"])
    log(f"mechanism bound on the round-0 gate density (shift H x lr = {hp['H'] * hp['lr']:g}): {100 * bound:.1f} %")
    for K in trainers:
        for method in args.methods:
            t0 = time.time()
            if method == "loco":
                run = run_loco(args.out, init, K, hp, args.via, log)
            elif method == "diloco":
                run = B.run_diloco(init, K, hp, log)
            else:
                run = B.run_ddp(init, K, hp, log)
            run.update(H=hp["H"], lr=hp["lr"], rounds=hp["rounds"], hp=hp, visible_bound=bound)
            C.write_json(os.path.join(args.out, "runs", f"{method}-K{K}.json"), run)
            log(f"{method} K={K}: done in {time.time() - t0:.0f} s")
    log("all runs done")


if __name__ == "__main__":
    main()
