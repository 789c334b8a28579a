#!/usr/bin/env python3
"""The paper-shaped table: 3 models x 2 workloads, 16 decode workers, next to
the paper's figures (docs/design.md §7). Usage: sim_paper_table.py ELDR_BINARY [RATE] [REQUESTS]
Prints a Markdown table; every cell is one `eldr sim --json` run."""
import json
import subprocess
import sys

PAPER = {  # median (P99) TPOT reduction vs the best baseline, paper §7
    ("qwen3-30b-a3b", "task"): "13.9% (6.0%)",
    ("qwen3-30b-a3b", "language"): "10.0% (6.2%)",
    ("gpt-oss-120b", "task"): "7.0% (3.4%)",
    ("gpt-oss-120b", "language"): "7.3% (−1.5%)",
    ("gemma-4-26b-a4b", "task"): "9.4% (5.2%)",
    ("gemma-4-26b-a4b", "language"): "5.9% (−0.2%)",
}


def main() -> int:
    eldr = sys.argv[1]
    rate = sys.argv[2] if len(sys.argv) > 2 else "200"
    requests = sys.argv[3] if len(sys.argv) > 3 else "20000"
    print(f"16 decode workers, {rate} req/s, {requests} requests per cell; "
          "reduction of median (P99) TPOT vs the best of rr/random/jsq/p2c")
    print()
    print("| model | workload | paper (eldr) | eldr_cost (sim) | eldr (sim) | eldr_guard (sim) |")
    print("|---|---|---|---|---|---|")
    for model in ("qwen3-30b-a3b", "gpt-oss-120b", "gemma-4-26b-a4b"):
        for workload in ("task", "language"):
            out = subprocess.run(
                [eldr, "sim", "--preset", model, "--workload", workload, "--workers", "16",
                 "--rate", rate, "--requests", requests, "--json"],
                check=True, capture_output=True, text=True).stdout
            r = json.loads(out)
            cell = lambda p: f"{r[p]['p50_reduction_pct']:.1f}% ({r[p]['p99_reduction_pct']:.1f}%)"
            print(f"| {model} | {workload} | {PAPER[(model, workload)]} | {cell('eldr_cost')} | "
                  f"{cell('eldr')} | {cell('eldr_guard')} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
