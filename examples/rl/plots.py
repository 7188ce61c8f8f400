# SPDX-License-Identifier: Apache-2.0
"""Figures and tables of the RL measurement (measure.py's JSONL files) in the manner of the paper:
per-step BF16 sparsity by learning rate and tensor kind beside the mechanism's bound, the same FP32
trajectory viewed in FP16 / FP8 E4M3 / E5M2, and the sync payload per step by method.

  python3 plots.py --in DIR [--img docs/img] [--tables DIR/tables.md]
"""
import argparse
import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COLORS = {1e-6: "#1f77b4", 3e-6: "#2ca02c", 1e-5: "#ff7f0e", 3e-5: "#d62728"}
FORMATS = [("fp32", "FP32 master"), ("fp16", "FP16"), ("bf16", "BF16"), ("e5m2", "FP8 E5M2"),
           ("e4m3", "FP8 E4M3")]
METHODS = [("dense", "dense BF16"), ("xdelta3", "xdelta3 -e -s"), ("zstd_patch_from", "zstd --patch-from"),
           ("pulse_abs", "pulse (abs values)"), ("pulse_ulp", "pulse (ulp values)")]


def load(d):
    runs = {}
    for p in sorted(glob.glob(os.path.join(d, "measure-lr*.jsonl"))):
        recs = [json.loads(line) for line in open(p)]
        if recs:
            runs[recs[0]["lr"]] = recs
    return dict(sorted(runs.items()))


def frac(recs, kind, key):
    return np.array([r["kinds"][kind][key] / r["kinds"][kind]["n"] for r in recs])


def floor(y, n):
    # A step with no change is drawn at half of one element, so it stays on the log axis.
    return np.maximum(y, 0.5 / n)


def lr_label(lr):
    m, e = f"{lr:.0e}".split("e")
    return f"lr {m}e{int(e)}"


def fig_sparsity(runs, path):
    fig, axes = plt.subplots(1, 4, figsize=(17, 4.9), sharey=True)
    for ax, kind, title in zip(axes, ("all", "matrix", "embedding", "norm"),
                               ("all weights", "matrices", "embeddings + head", "norm gains")):
        for lr, recs in runs.items():
            n = recs[0]["kinds"][kind]["n"]
            x = [r["step"] for r in recs]
            c = COLORS.get(lr)
            ax.plot(x, floor(frac(recs, kind, "bf16"), n), color=c, lw=1.8, label=f"{lr_label(lr)} BF16 changed")
            ax.plot(x, floor(frac(recs, kind, "bound"), n), color=c, lw=1, ls="--",
                    label=f"{lr_label(lr)} |update| >= half cell")
            ax.plot(x, floor(frac(recs, kind, "expected"), n), color="k", lw=0.8, ls=":",
                    label="drift expectation" if lr == list(runs)[-1] else None)
        ax.set_yscale("log")
        ax.set_title(f"{title} ({recs[0]['kinds'][kind]['n']:,})")
        ax.set_xlabel("RL step")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("fraction of weights changed this step")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle("Per-step BF16 weight changes (solid) vs the mechanism: |update| >= half a BF16 cell "
                 "(dashed), drift expectation (dotted)")
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_views(runs, path):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.4))
    lrs = list(runs)
    width = 0.8 / len(FORMATS)
    n = runs[lrs[0]][0]["kinds"]["all"]["n"]
    for i, (f, name) in enumerate(FORMATS):
        means = [frac(runs[lr], "all", f).mean() for lr in lrs]
        ax1.bar(np.arange(len(lrs)) + (i - (len(FORMATS) - 1) / 2) * width, np.maximum(means, 0.5 / n),
                width, label=name)
    ax1.set_xticks(np.arange(len(lrs)), [lr_label(lr) for lr in lrs])
    ax1.set_yscale("log")
    ax1.set_ylabel("mean fraction of weights changed per step")
    ax1.set_title("The same FP32 trajectory seen in each format")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3, axis="y", which="both")
    lr = 3e-6 if 3e-6 in runs else lrs[0]
    recs = runs[lr]
    x = [r["step"] for r in recs]
    for f, name in FORMATS:
        ax2.plot(x, floor(frac(recs, "all", f), n), lw=1.6, label=name)
    ax2.set_yscale("log")
    ax2.set_xlabel("RL step")
    ax2.set_title(f"Per step at {lr_label(lr)} (FP8: per-tensor power-of-two scale)")
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_payload(runs, path):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.4))
    lrs = list(runs)
    width = 0.8 / len(METHODS)
    for i, (m, name) in enumerate(METHODS):
        means = [np.mean([r["payload"][m] for r in runs[lr]]) for lr in lrs]
        ax1.bar(np.arange(len(lrs)) + (i - (len(METHODS) - 1) / 2) * width, means, width, label=name)
    ax1.set_xticks(np.arange(len(lrs)), [lr_label(lr) for lr in lrs])
    ax1.set_yscale("log")
    ax1.set_ylabel("bytes per step (mean)")
    ax1.set_title("Trainer -> inference payload per step")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3, axis="y", which="both")
    for lr, recs in runs.items():
        x = [r["step"] for r in recs]
        ax2.plot(x, [r["payload"]["dense"] / r["payload"]["pulse_ulp"] for r in recs], color=COLORS.get(lr),
                 lw=1.6, label=f"{lr_label(lr)} pulse ulp")
        ax2.plot(x, [r["payload"]["dense"] / r["payload"]["zstd_patch_from"] for r in recs],
                 color=COLORS.get(lr), lw=1, ls=":", label=f"{lr_label(lr)} zstd --patch-from")
    ax2.set_yscale("log")
    ax2.set_xlabel("RL step")
    ax2.set_ylabel("dense bytes / payload bytes")
    ax2.set_title("Reduction vs dense BF16, per step")
    ax2.grid(alpha=0.3, which="both")
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig_reward(runs, path):
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for lr, recs in runs.items():
        x = [r["step"] for r in recs]
        y = np.array([r["reward"] for r in recs])
        k = min(5, len(y))
        smooth = np.convolve(y, np.ones(k) / k, mode="valid")
        ax.plot(x, y, color=COLORS.get(lr), alpha=0.25, lw=1)
        ax.plot(x[k - 1:], smooth, color=COLORS.get(lr), lw=1.8, label=lr_label(lr))
    ax.set_xlabel("RL step")
    ax.set_ylabel("mean reward of the step's rollouts")
    ax.set_title("GRPO reward (exact 3-digit sums), same seed per LR")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tables(runs):
    out = ["### Per-step fraction of weights changed (mean over steps; min-max in brackets)", "",
           "| LR | kind | FP32 master | BF16 | bound: \\|update\\| >= half BF16 cell | drift expectation | FP16 | FP8 E5M2 | FP8 E4M3 |",
           "|---|---|---|---|---|---|---|---|---|"]
    for lr, recs in runs.items():
        for kind in ("all", "matrix", "embedding", "norm"):
            cells = []
            for key in ("fp32", "bf16", "bound", "expected", "fp16", "e5m2", "e4m3"):
                y = frac(recs, kind, key)
                cells.append(f"{y.mean():.2e} [{y.min():.1e}-{y.max():.1e}]" if key in ("bf16",) else f"{y.mean():.2e}")
            out.append(f"| {lr:g} | {kind} ({recs[0]['kinds'][kind]['n']:,}) | " + " | ".join(cells) + " |")
    out += ["", "### Payload per step (mean bytes; reduction vs dense in brackets)", "",
            "| LR | dense BF16 | xdelta3 | zstd --patch-from | pulse abs | pulse ulp (positions + values) | BF16 changed / step | BF16 changed since step 0 after the last step | reward first 5 -> last 5 steps |",
            "|---|---|---|---|---|---|---|---|---|"]
    for lr, recs in runs.items():
        p = {m: np.mean([r["payload"][m] for r in recs]) for m, _ in METHODS}
        pos = np.mean([r["payload"]["pulse_ulp_pos"] for r in recs])
        val = np.mean([r["payload"]["pulse_ulp_val"] for r in recs])
        ch = np.mean([r["kinds"]["all"]["bf16"] for r in recs])
        rw = [r["reward"] for r in recs]
        cells = [f"{p['dense']:,.0f}"] + [f"{p[m]:,.0f} ({p['dense'] / p[m]:.0f}x)"
                                          for m in ("xdelta3", "zstd_patch_from", "pulse_abs")]
        cells.append(f"{p['pulse_ulp']:,.0f} ({p['dense'] / p['pulse_ulp']:.0f}x; {pos:,.0f} + {val:,.0f})")
        cells.append(f"{ch:,.0f}")
        last = recs[-1]["kinds"]["all"]
        cells.append(f"{last['bf16_since_start'] / last['n']:.1%} (step {recs[-1]['step']})")
        cells.append(f"{np.mean(rw[:5]):.3f} -> {np.mean(rw[-5:]):.3f}")
        out.append(f"| {lr:g} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--in", dest="indir", required=True)
    ap.add_argument("--img", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                  "docs", "img"))
    ap.add_argument("--tables", default=None)
    args = ap.parse_args(argv)
    runs = load(args.indir)
    if not runs:
        raise SystemExit(f"plots: no measure-lr*.jsonl in {args.indir}")
    os.makedirs(args.img, exist_ok=True)
    fig_sparsity(runs, os.path.join(args.img, "rl-sparsity.png"))
    fig_views(runs, os.path.join(args.img, "rl-views.png"))
    if all("payload" in r for recs in runs.values() for r in recs):
        fig_payload(runs, os.path.join(args.img, "rl-payload.png"))
    fig_reward(runs, os.path.join(args.img, "rl-reward.png"))
    t = tables(runs) if all("payload" in r for recs in runs.values() for r in recs) else ""
    if args.tables:
        with open(args.tables, "w") as f:
            f.write(t)
    print(t)


if __name__ == "__main__":
    main()
