#!/usr/bin/env python3
"""Plots for `eldr sim --plot-dir DIR`: TPOT vs rate per policy, and the
distribution of distinct experts per step. matplotlib (the project's venv)."""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(out_dir: str) -> int:
    with open(os.path.join(out_dir, "results.json")) as f:
        results = json.load(f)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharex=True)
    for name, entry in results.items():
        runs = entry["by_rate"]
        rates = [r["rate"] for r in runs]
        style = "-" if name.startswith("eldr") else "--"
        axes[0].plot(rates, [r["p50_ms"] for r in runs], style, marker="o", label=name)
        axes[1].plot(rates, [r["p99_ms"] for r in runs], style, marker="o", label=name)
    for ax, title in zip(axes, ("median TPOT", "P99 TPOT")):
        ax.set_title(title)
        ax.set_xlabel("arrival rate (req/s)")
        ax.set_ylabel("ms per output token")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "tpot_vs_rate.png"), dpi=110)

    hist_files = sorted(glob.glob(os.path.join(out_dir, "experts_per_step_*.json")))
    if hist_files:
        with open(hist_files[-1]) as f:
            hist = json.load(f)
        fig, ax = plt.subplots(figsize=(7, 4))
        for name, samples in hist.items():
            if samples:
                ax.hist(samples, bins=60, histtype="step", density=True, label=name)
        ax.set_xlabel("distinct experts per layer in one decode step")
        ax.set_ylabel("density")
        ax.set_title(os.path.basename(hist_files[-1]).replace(".json", ""))
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "experts_per_step.png"), dpi=110)
    print(f"plots written to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
