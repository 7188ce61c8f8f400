# SPDX-License-Identifier: Apache-2.0
"""Measures what each RL step changes, per learning rate, from one SFT checkpoint and one batch
seed: the fraction of FP32 master weights that moved, of BF16 weights that changed (split by
tensor kind) beside the mechanism's bound (updates of at least half a BF16 cell) and the drift
expectation (sum of min(1, |update| / cell)), the same FP32 trajectory viewed as FP16, FP8 E4M3 and
E5M2 (per-tensor power-of-two scale fixed at the start), and the sync payload of each step: pulse
patches (ulp and abs values), dense BF16, `zstd --patch-from`, `xdelta3 -e -s`.

  python3 measure.py --init sft.pt --out DIR [--lrs 1e-6,3e-6,1e-5,3e-5] [--steps 40] [--no-payload]

Writes DIR/measure-lr<lr>.jsonl (one JSON object per step) and prints a summary per LR.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
import safetensors_io  # noqa: E402
import sync  # noqa: E402
import train as TR  # noqa: E402
import views as V  # noqa: E402

KINDS = ("matrix", "embedding", "norm")
LOWP = ("fp16", "e4m3", "e5m2")


def fp32_params(model):
    return {k: v.detach().numpy().ravel().copy() for k, v in model.state_dict().items()}


def lowp_view(x, fmt, scale):
    return V.quantize(x * scale, fmt) if scale != 1.0 else V.quantize(x, fmt)


class Views:
    """The low-precision views of one FP32 state, kept to compare with the next."""

    def __init__(self, params, scales):
        self.bf16 = {k: V.bf16_bits(v) for k, v in params.items()}
        self.low = {f: {k: lowp_view(v, f, scales[f][k]) for k, v in params.items()} for f in LOWP}


def _size(path):
    return os.path.getsize(path)


def payload(pulse, prev, cur, tmp):
    """Bytes moved for the step prev -> cur (two BF16 safetensors files) by each method."""
    out = {}
    for values in ("ulp", "abs"):
        p = os.path.join(tmp, f"step.{values}")
        subprocess.run([pulse, "diff", prev, cur, "-o", p, "--values", values, "--threads", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        out[f"pulse_{values}"] = _size(p)
        if values == "ulp":
            js = json.loads(subprocess.run([pulse, "inspect", p, "--json"], check=True,
                                           capture_output=True, text=True).stdout)["total"]
            out["pulse_ulp_pos"], out["pulse_ulp_val"] = js["pos_bytes"], js["val_bytes"]
            out["dense"] = js["dense_bytes"]
    z = os.path.join(tmp, "step.zst")
    subprocess.run(["zstd", "-q", "-f", "-3", f"--patch-from={prev}", cur, "-o", z], check=True,
                   stderr=subprocess.DEVNULL)   # "long mode automatically triggered"
    out["zstd_patch_from"] = _size(z)
    x = os.path.join(tmp, "step.vcdiff")
    subprocess.run(["xdelta3", "-e", "-f", "-s", prev, cur, x], check=True)
    out["xdelta3"] = _size(x)
    return out


def measure_lr(init, lr, steps, out_path, seed=1, prompts=16, group=8, with_payload=True, log=print,
               reward_kind="exact"):
    model, _ = TR.load_checkpoint(init)
    opt = TR.make_optimizer(model, lr)
    rng = np.random.default_rng(seed)
    names = list(model.state_dict().keys())
    kind = {k: M.tensor_kind(k, v.shape) for k, v in model.state_dict().items()}
    prev = fp32_params(model)
    scales = {f: {k: (1.0 if f == "fp16" else V.pow2_scale(float(np.abs(v).max()), f))
                  for k, v in prev.items()} for f in LOWP}
    pv = Views(prev, scales)
    start_bf16 = dict(pv.bf16)
    tmp = tempfile.mkdtemp(prefix="pulse-rl-measure-")
    pulse = sync.find_pulse()
    prev_file, cur_file = os.path.join(tmp, "prev.safetensors"), os.path.join(tmp, "cur.safetensors")
    if with_payload:
        safetensors_io.save(prev_file, M.bf16_state(model))
    policy = TR.policy_from(model)
    with open(out_path + ".tmp", "w") as fo:
        for step in range(1, steps + 1):
            t0 = time.time()
            st = {}
            TR.grpo_step(model, opt, rng, n_prompts=prompts, group=group, policy=policy, stats=st,
                         reward_kind=reward_kind)
            t_train = time.time() - t0
            cur = fp32_params(model)
            cv = Views(cur, scales)
            rec = {"step": step, "lr": lr, **st, "kinds": {}}
            for kd in KINDS + ("all",):
                sel = [k for k in names if kd == "all" or kind[k] == kd]
                c = dict(n=0, fp32=0, bf16=0, bound=0, expected=0.0, bf16_since_start=0,
                         **{f: 0 for f in LOWP})
                for k in sel:
                    d = cur[k].astype(np.float64) - prev[k].astype(np.float64)
                    cell = V.bf16_cell(prev[k])
                    c["n"] += d.size
                    c["fp32"] += int(np.count_nonzero(d))
                    c["bf16"] += int(np.count_nonzero(cv.bf16[k] != pv.bf16[k]))
                    c["bound"] += int(np.count_nonzero(np.abs(d) >= cell / 2))
                    c["expected"] += float(np.minimum(1.0, np.abs(d) / cell).sum())
                    c["bf16_since_start"] += int(np.count_nonzero(cv.bf16[k] != start_bf16[k]))
                    for f in LOWP:
                        a, b = cv.low[f][k], pv.low[f][k]
                        c[f] += int(np.count_nonzero((a != b) | (np.signbit(a) != np.signbit(b))))
                rec["kinds"][kd] = c
            if with_payload:
                safetensors_io.save(cur_file, M.bf16_state(model))
                rec["payload"] = payload(pulse, prev_file, cur_file, tmp)
                os.replace(cur_file, prev_file)
            rec["seconds"] = {"train": round(t_train, 3), "total": round(time.time() - t0, 3)}
            fo.write(json.dumps(rec) + "\n")
            fo.flush()
            a = rec["kinds"]["all"]
            pay = rec.get("payload", {})
            log(f"lr {lr:g} step {step}: reward {st['reward']:.3f}  changed fp32 {a['fp32'] / a['n']:.4f} "
                f"bf16 {a['bf16'] / a['n']:.5f} (bound {a['bound'] / a['n']:.5f}, expected "
                f"{a['expected'] / a['n']:.5f}) fp16 {a['fp16'] / a['n']:.5f} e4m3 {a['e4m3'] / a['n']:.5f} "
                f"e5m2 {a['e5m2'] / a['n']:.5f}" + (f"  ulp {pay['pulse_ulp']} B of {pay['dense']}"
                                                    if pay else "") + f"  {time.time() - t0:.1f} s")
            prev, pv = cur, cv
    os.replace(out_path + ".tmp", out_path)
    shutil.rmtree(tmp)


def lr_tag(lr):
    return f"{lr:.0e}".replace("e-0", "e-")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--init", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--lrs", default=",".join(str(x) for x in TR.RL_LRS))
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-payload", action="store_true")
    ap.add_argument("--reward", default="exact", choices=["exact", "digits"], help="digits: smoke test only")
    args = ap.parse_args(argv)
    M.set_deterministic()
    os.makedirs(args.out, exist_ok=True)
    for lr in (float(x) for x in args.lrs.split(",")):
        measure_lr(args.init, lr, args.steps, os.path.join(args.out, f"measure-lr{lr_tag(lr)}.jsonl"),
                   seed=args.seed, prompts=args.prompts, group=args.group,
                   with_payload=not args.no_payload, log=lambda s: print(s, flush=True),
                   reward_kind=args.reward)


if __name__ == "__main__":
    main()
