# SPDX-License-Identifier: Apache-2.0
"""Draws the PULSELoCo vs DiLoCo vs DDP figures (docs/img/loco-*.png) and a markdown table from a
loco_run.py output directory."""

import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {"ddp": ("DDP", "tab:gray", "-"), "diloco": ("DiLoCo (dense FP32)", "tab:blue", "-"),
         "loco": ("PULSELoCo", "tab:red", "-")}


def load_runs(out_dir):
    runs = []
    for name in sorted(os.listdir(os.path.join(out_dir, "runs"))):
        if name.endswith(".json"):
            with open(os.path.join(out_dir, "runs", name)) as f:
                runs.append(json.load(f))
    return runs


def _label(run):
    return f"{STYLE[run['method']][0]}, {run['trainers']} trainers"


def plot_reward(runs, path):
    ks = sorted({r["trainers"] for r in runs})
    fig, axes = plt.subplots(2, len(ks), figsize=(5.2 * len(ks), 7), squeeze=False, sharey="row")
    for col, k in enumerate(ks):
        for run in (r for r in runs if r["trainers"] == k):
            name, color, _ = STYLE[run["method"]]
            log = run["log"]
            x = [0] + [e["round"] + 1 for e in log]
            axes[0][col].plot(x, [run["eval0"]] + [e["eval_reward"] for e in log], color=color, label=name,
                              marker="o", ms=3)
            axes[1][col].plot([e["round"] for e in log], [e["train_reward"] for e in log], color=color,
                              label=name, marker="o", ms=3)
        h = runs[0]["H"]
        axes[0][col].set_title(f"{k} trainers, H = {h} local steps, lr {runs[0]['lr']:g}\n"
                               f"eval: {runs[0]['hp']['eval_n']} fixed prompts, sampled at T = 1", fontsize=10)
        axes[1][col].set_title("training: mean reward of round r's rollouts, all trainers", fontsize=10)
        axes[0][col].set_ylabel("eval reward of theta_r")
        axes[1][col].set_ylabel("training reward")
        axes[1][col].set_xlabel(f"round r (DDP: step {h} x r)")
        for ax in axes[:, col]:
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sparsity(runs, path):
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for run in (r for r in runs if r["method"] == "loco"):
        log = run["log"]
        x = [e["round"] for e in log]
        mean = [100.0 * e["sent_frac"] for e in log]
        lo = [100.0 * e["sent_frac_min"] for e in log]
        hi = [100.0 * e["sent_frac_max"] for e in log]
        color = "tab:red" if run["trainers"] == 2 else "tab:purple"
        ax.plot(x, mean, color=color, marker="o", ms=3, label=f"{run['trainers']} trainers (mean)")
        ax.fill_between(x, lo, hi, color=color, alpha=0.2, label=f"{run['trainers']} trainers (min-max)")
        if all(e.get("gate_expect_frac") is not None for e in log):
            ax.plot(x, [100.0 * e["gate_expect_frac"] for e in log], color=color, linestyle="--", linewidth=1,
                    label=f"{run['trainers']} trainers: mechanism, mean of min(1, |a| / ulp_bf16(theta_r))")
    bound = next((r.get("visible_bound") for r in runs if r.get("visible_bound") is not None), None)
    if bound is not None:
        ax.axhline(100.0 * bound, color="black", linestyle=":", linewidth=1,
                   label=f"bound if every weight moved H x lr: mean min(1, H lr / ulp(w)) = {100 * bound:.0f} %")
    ax.set_xlabel("round")
    ax.set_ylabel("entries sent per trainer (% of parameters)")
    ax.set_title(f"PULSELoCo payload density (100 % - sparsity), H = {runs[0]['H']}, lr {runs[0]['lr']:g}")
    ax.set_ylim(0, 105)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bytes(runs, path):
    fig, ax = plt.subplots(figsize=(6.4, 4))
    ax.xaxis.get_major_locator().set_params(integer=True)
    for run in runs:
        log = run["log"]
        name, color, _ = STYLE[run["method"]]
        ls = "-" if run["trainers"] == 2 else "--"
        ax.plot([e["round"] for e in log], [e["bytes_up"] for e in log], color=color, linestyle=ls,
                marker="o" if run["method"] == "loco" else None, ms=3, label=_label(run))
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("bytes sent per trainer per round")
    ax.set_title(f"Payload per round, lr {runs[0]['lr']:g} (PULSELoCo: shard bytes; DiLoCo 4 B x P; "
                 f"DDP H x 4 B x P)")
    ax.title.set_fontsize(9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(runs):
    """Markdown summary: final rewards, mean bytes and density per method."""
    rows = ["| method | trainers | eval reward r=0 -> last | mean training reward, last 3 rounds | bytes up per trainer"
            " per round (mean) | vs DiLoCo | entries sent (mean) | wall s |",
            "|---|---|---|---|---|---|---|---|"]
    for run in sorted(runs, key=lambda r: (r["trainers"], ["ddp", "diloco", "loco"].index(r["method"]))):
        log = run["log"]
        up = sum(e["bytes_up"] for e in log) / len(log)
        dense = 4.0 * run["params"]
        tail = log[-3:]
        sent = (f"{100.0 * sum(e['sent_frac'] for e in log) / len(log):.2f} %" if run["method"] == "loco" else "100 %")
        rows.append(f"| {STYLE[run['method']][0]} | {run['trainers']} | {run['eval0']:.3f} -> "
                    f"{log[-1]['eval_reward']:.3f} | {sum(e['train_reward'] for e in tail) / len(tail):.3f} | "
                    f"{up:,.0f} | {dense / up:.2f}x less | {sent} | {run['seconds']:.0f} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, help="loco_run.py output directory")
    ap.add_argument("--img", default=None, help="where the PNGs go (default OUT)")
    ap.add_argument("--prefix", default="loco-", help="file name prefix of the PNGs (default loco-)")
    args = ap.parse_args()
    runs = load_runs(args.out)
    img = args.img or args.out
    os.makedirs(img, exist_ok=True)
    plot_reward(runs, os.path.join(img, args.prefix + "reward.png"))
    plot_sparsity(runs, os.path.join(img, args.prefix + "sparsity.png"))
    plot_bytes(runs, os.path.join(img, args.prefix + "bytes.png"))
    md = table(runs)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
