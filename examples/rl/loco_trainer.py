# SPDX-License-Identifier: Apache-2.0
"""One PULSELoCo trainer process (like one node of a real run): H local GRPO steps on its own data
stream, then a PULSELoCo round through the store that leaves theta_{r+1} in its model, R times.
Writes one JSON line per round (rewards, the round's report, theta_{r+1}'s digest) for loco_run.py.

  loco_trainer.py --dir RUN --rank K --trainers N --init sft.pt --hp HP.json [--via auto|bindings|cli]
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loco_common as C  # noqa: E402
import model as M  # noqa: E402
import train as TR  # noqa: E402
from loco_exchange import LocoExchange, st_read, theta_digest  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="the run's directory (keys/, store/, state-K/)")
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--trainers", type=int, required=True)
    ap.add_argument("--init", required=True, help="theta_0: the SFT checkpoint")
    ap.add_argument("--hp", required=True, help="JSON: lr, H, rounds, seed, n_prompts, group, eval_n")
    ap.add_argument("--via", default="auto", choices=["auto", "bindings", "cli"])
    args = ap.parse_args()
    with open(args.hp) as f:
        hp = json.load(f)

    M.set_deterministic(1)
    C.use_reward(hp["reward"])
    model = C.load_init(args.init)
    opt = TR.make_optimizer(model, hp["lr"])
    rng = C.trainer_rng(hp["seed"], args.rank)
    policy = TR.policy_from(model)
    params = C.params_np(model)

    keys = os.path.join(args.dir, "keys")
    others = [os.path.join(keys, f"t{k}.pub") for k in range(args.trainers) if k != args.rank]
    ex = LocoExchange(store="file://" + os.path.abspath(os.path.join(args.dir, "store")), run="rl-loco",
                      key=os.path.join(keys, f"t{args.rank}.key"),
                      state_dir=os.path.join(args.dir, f"state-{args.rank}"), trainers=others, via=args.via,
                      deadline=float(hp.get("deadline", 900)))
    ex.init(params)
    log = os.path.join(args.dir, f"trainer-{args.rank}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    head = {"rank": args.rank, "via": ex.via, "params": C.n_params(model), "digest0": theta_digest(params)}
    if args.rank == 0:  # every trainer holds the same theta: one evaluates it
        head["eval0"] = C.evaluate(model, hp, policy)
    C.append_jsonl(log, head)

    for r in range(hp["rounds"]):
        t0 = time.time()
        theta_r = {n: a.copy() for n, a in params.items()}
        rewards = C.local_steps(model, opt, rng, hp["H"], policy, hp)
        # The gate recomputed here from theta_r, theta_local and the state's e entering round r.
        e = st_read(os.path.join(ex.state_dir, f"e-{r:012d}.safetensors"))
        gate_sent, gate_expect = C.gate_check(theta_r, params, e)
        del theta_r, e
        t1 = time.time()
        rep = ex.round(params, hp["H"])  # theta_local in, theta_{r+1} out, in the model's own storage
        t2 = time.time()
        if rep["round"] != r:
            raise SystemExit(f"trainer {args.rank}: state at round {rep['round']}, expected {r}")
        if rep["sent"] != gate_sent:
            raise SystemExit(f"trainer {args.rank} round {r}: the library sent {rep['sent']} entries, "
                             f"the gate recomputed in numpy gives {gate_sent}")
        line = {"round": r, "rewards": rewards, "rep": rep, "digest": theta_digest(params),
                "gate_expect": gate_expect, "local_s": t1 - t0, "round_s": t2 - t1}
        if args.rank == 0:
            line["eval"] = C.evaluate(model, hp, policy)
        C.append_jsonl(log, line)
        print(f"trainer {args.rank} round {r}: reward {sum(rewards) / len(rewards):.3f}, sent "
              f"{rep['sent']}/{rep['params']} ({100.0 * rep['sent'] / rep['params']:.2f} %), "
              f"{rep['shard_bytes']} shard bytes, theta {line['digest'][:12]}", flush=True)


if __name__ == "__main__":
    main()
