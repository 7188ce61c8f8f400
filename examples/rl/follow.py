# SPDX-License-Identifier: Apache-2.0
"""Inference side of the RL example: follows a run through pulse, reloads its BF16 model on each
update, and checks that its logits on the fixed prompts equal, bit for bit, the logits the trainer's
model produced at the same step (saved by train.py rl --logits-dir). Exits 1 on any mismatch.

  python3 follow.py --init sft.pt --store URL --run R --trust trainer.pub --state DIR --logits-dir DIR
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
import sync  # noqa: E402
import task as T  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True, help="checkpoint giving the model config (weights come from pulse)")
    ap.add_argument("--store", required=True)
    ap.add_argument("--run", default="rl")
    ap.add_argument("--trust", required=True)
    ap.add_argument("--state", required=True)
    ap.add_argument("--logits-dir", required=True)
    ap.add_argument("--poll", type=float, default=0.2)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--backend", default="auto", choices=["auto", "bindings", "cli"])
    args = ap.parse_args(argv)

    M.set_deterministic()
    cfg = M.Config(**torch.load(args.init)["config"])
    # Zero weights: nothing of the trainer's reaches this process except through pulse.
    model = M.inference_model(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    fol = sync.Follower(args.store, args.run, args.trust, args.state, model, backend=args.backend)
    probe = T.fixed_prompts()
    print(f"follower: backend {fol.backend}", flush=True)
    checked = changed = 0
    prev = prev_step = None
    t_end = time.time() + args.timeout
    while True:
        applied, step = fol.pull()
        if applied:
            logits = M.inference_logits(model, probe)
            ref = sync.load_logits(args.logits_dir, step)
            equal = torch.equal(logits, ref)
            if prev is None and step > 0:
                # A first pull that caught up several steps at once compares with the trainer's
                # logits at step 0, so the equality is still shown to follow a change.
                prev, prev_step = sync.load_logits(args.logits_dir, 0), 0
            moved = prev is not None and not torch.equal(logits, prev)
            since = prev_step
            prev, prev_step = logits, step
            checked += 1
            changed += moved
            diff = (logits.float() - ref.float()).abs().max().item()
            print(f"follower step {step}: {applied} step(s) applied, logits "
                  f"{'EQUAL' if equal else 'DIFFERENT'} to the trainer's bit for bit (max |diff| {diff:g})"
                  f"{f', changed since step {since}' if moved else ''}", flush=True)
            if not equal:
                print(f"follower: MISMATCH at step {step}", file=sys.stderr)
                return 1
        last = sync.done_step(args.logits_dir)
        if last is not None and step is not None and step >= last:
            break
        if time.time() > t_end:
            print("follower: timed out waiting for the trainer", file=sys.stderr)
            return 1
        if not applied:
            time.sleep(args.poll)
    fol.close()
    assert checked > 0
    print(f"follower: {checked} updates checked, logits bit-identical to the trainer's at every one; "
          f"{changed} changed the logits", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
