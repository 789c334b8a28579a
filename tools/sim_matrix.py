#!/usr/bin/env python3
"""The simulator matrix of issue 16: every policy x {3 presets x 2 synthetic
workloads, the real dev trace} x utilization x expert share, fleets of 8 and 32,
router constants off by a factor, drift. Each job is one `eldr sim --json`
run (all policies of a cell in one process: the same arrivals and workload);
jobs run in parallel.

Usage:
  sim_matrix.py ELDR [--out-dir docs] [--jobs 2] [--seeds 3] [--requests N]
  sim_matrix.py ELDR --route-from-only   # only the footprint vs prompt vs text rows
  sim_matrix.py ELDR --slice     # a few small cells; exit 1 if eldr_cost misses the bar
  sim_matrix.py ELDR --from-json docs/sim_matrix.json   # re-render the table and plots

Utilization U: arrivals = U x the fleet's capacity, capacity = workers x max_batch
/ (mean output tokens x S_full), S_full the step of a full batch of random
requests (eldr sim --help). Expert share S: alpha x D_rand / S_full, T0 and TSEQ
kept. Changes are against the best of round_robin/random/jsq/p2c in the same
run, in percent (negative = faster), the median over seeds with the min..max.
The standard library (+ matplotlib for the plots: the project's venv)."""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

POLICIES = ["eldr_cost", "eldr", "eldr_guard", "round_robin", "random", "jsq", "p2c"]
BASELINES = POLICIES[3:]
PRESETS = ["qwen3-30b-a3b", "gpt-oss-120b", "gemma-4-26b-a4b"]
SYNTHETIC = ["task", "language"]
UTILS = [0.10, 0.25, 0.50, 0.75, 0.90]
SHARES = [0.2, 0.5, 0.8]
ERRORS = [0.1, 0.3, 3.0, 10.0]
DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                            "data", "gpt-oss-20b-dev")
BAR_P50, BAR_P99 = 0.5, 1.0  # issue 16: eldr_cost at most this much worse (percent)
BAR_DRIFT_LOAD = 1.5  # ... and in drift mode no worker above this x the mean load
# Routing from the prompt (issue 29): eldr_cost routed from the prefill
# footprint, from the prompt's token ids and from its text (the predictor
# fitted on the calibration requests), against the best baseline, in the
# expert-heavy (80 %) and the light (20 %) regimes.
ROUTE_FROM = ["footprint", "prompt", "text"]
ROUTE_FROM_ROWS = ["eldr_cost", "eldr_cost/prompt", "eldr_cost/text"]
ROUTE_FROM_UTILS = [0.05, 0.1, 0.25, 0.5, 0.75, 0.9]
ROUTE_FROM_CALIBRATION = 120  # the reference experiment (the trace: 41 % of it)


def workloads(data):
    rows = [(f"{p} {w}", ["--preset", p, "--workload", w]) for p in PRESETS for w in SYNTHETIC]
    if data:
        # No --preset: the trace's geometry (24 x 32, top-4) picks gpt-oss-20b.
        rows.append(("gpt-oss-20b trace", ["--workload", data]))
    return rows


def utils_arg(us):
    return ["--utilization", ",".join(f"{u:g}" for u in us)]


def full_jobs(data):
    """(row, kind, param, workers, extra args) per eldr sim run."""
    jobs = []
    for row, wargs in workloads(data):
        for s in SHARES:
            jobs.append((row, "share", s, 16, wargs + utils_arg(UTILS) + ["--expert-share", str(s)]))
        jobs.append((row, "share", "own", 16, wargs + utils_arg(UTILS)))
        for k in (8, 32):
            jobs.append((row, "fleet", k, k, wargs + utils_arg([0.5]) + ["--workers", str(k)]))
        for e in ERRORS:
            jobs.append((row, "model_error", e, 16, wargs + utils_arg([0.5, 0.75]) +
                         ["--model-error", str(e)]))
            # The same wrong constants with engines reporting their steps, so
            # the router's online fit corrects them (eldr_client_report).
            jobs.append((row, "model_error_fit", e, 16, wargs + utils_arg([0.5, 0.75]) +
                         ["--model-error", str(e), "--report-steps"]))
        jobs.append((row, "drift", "drift", 16, wargs + utils_arg([0.5, 0.75]) + ["--drift"]))
    return jobs


def route_from_jobs(data):
    """eldr_cost from footprint / prompt / text against the baselines."""
    rows = [("qwen3-30b-a3b task", ["--preset", "qwen3-30b-a3b", "--workload", "task"]),
            ("gpt-oss-120b language", ["--preset", "gpt-oss-120b", "--workload", "language"])]
    if data:
        rows.append(("gpt-oss-20b trace", ["--workload", data, "--calibration-max-share", "0.5"]))
    return [(row, "route_from", sh, 16, wargs + utils_arg(ROUTE_FROM_UTILS) +
             ["--expert-share", str(sh), "--route-from", *ROUTE_FROM])
            for row, wargs in rows for sh in (0.8, 0.2)]


def run_route_from_job(eldr, job, common):
    row, kind, param, workers, extra = job
    policies = BASELINES + ["eldr_cost"]
    cmd = [eldr, "sim", "--json", "--policies", *policies, "--workers", str(workers)] + common + extra
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr}")
    out = json.loads(p.stdout)
    cells = []
    for i, first in enumerate(out["eldr_cost"]["by_rate"]):
        cell = {"row": row, "kind": kind, "param": param, "workers": workers,
                "utilization": first["utilization"], "rate": first["rate"],
                "expert_share": first["expert_share"], "seeds": first["seeds"], "rows": {}}
        for name in ROUTE_FROM_ROWS:
            e = out[name]["by_rate"][i]
            cell["rows"][name] = {"p50_change": -e["p50_reduction_pct"],
                                  "p99_change": -e["p99_reduction_pct"],
                                  "p50_change_max": -e["p50_reduction_pct_min"],
                                  "p99_change_max": -e["p99_reduction_pct_min"],
                                  "confidence": e.get("mean_confidence", 1.0)}
        cells.append(cell)
    return cells, time.monotonic() - t, " ".join(cmd)


def route_from_markdown(cells):
    if not cells:
        return []
    out = ["", "## Routing from the prompt: eldr_cost from footprint / prompt / text",
           "", f"The predictor is fitted on the calibration requests ({ROUTE_FROM_CALIBRATION}; "
           "the trace: its first 120 of 292, `--calibration-max-share 0.5`). Median / P99 TPOT "
           "change against the best baseline of the same run, median over seeds, worst seed in "
           "brackets; conf = the predictor's mean confidence.", "",
           "| workload | expert share | U | rate req/s | footprint | prompt | text | conf prompt / text |",
           "|---|---|---|---|---|---|---|---|"]
    for c in cells:
        r = c["rows"]
        def f(name):
            e = r[name]
            return (f"{fmt(e['p50_change'])} / {fmt(e['p99_change'])} "
                    f"[{fmt(e['p50_change_max'])} / {fmt(e['p99_change_max'])}]")
        out.append(f"| {c['row']} | {c['param']:.0%} | {c['utilization']:.0%} | {c['rate']:.1f} | "
                   f"{f('eldr_cost')} | {f('eldr_cost/prompt')} | {f('eldr_cost/text')} | "
                   f"{r['eldr_cost/prompt']['confidence']:.2f} / "
                   f"{r['eldr_cost/text']['confidence']:.2f} |")
    return out


def slice_jobs(data):
    """A few cells across presets, loads, shares, a wrong model and drift."""
    jobs = [
        ("qwen3-30b-a3b task", "share", "own", 16,
         ["--preset", "qwen3-30b-a3b", "--workload", "task"] + utils_arg([0.25, 0.75])),
        ("gpt-oss-120b language", "share", 0.8, 16,
         ["--preset", "gpt-oss-120b", "--workload", "language"] + utils_arg([0.5]) +
         ["--expert-share", "0.8"]),
        ("gemma-4-26b-a4b task", "share", 0.2, 16,
         ["--preset", "gemma-4-26b-a4b", "--workload", "task"] + utils_arg([0.1]) +
         ["--expert-share", "0.2"]),
        ("qwen3-30b-a3b language", "model_error", 3.0, 16,
         ["--preset", "qwen3-30b-a3b", "--workload", "language"] + utils_arg([0.5]) +
         ["--model-error", "3"]),
    ]
    if data:
        jobs.append(("gpt-oss-20b trace", "share", 0.2, 16,
                     ["--workload", data] + utils_arg([0.5]) + ["--expert-share", "0.2"]))
        jobs.append(("gpt-oss-20b trace", "drift", "drift", 16,
                     ["--workload", data] + utils_arg([0.75]) + ["--drift"]))
    return jobs


def run_job(eldr, job, common):
    row, kind, param, workers, extra = job
    cmd = [eldr, "sim", "--json", "--policies", *POLICIES] + common + extra
    if "--workers" not in extra:
        cmd += ["--workers", str(workers)]
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stderr}")
    out = json.loads(p.stdout)
    cells = []
    for i, first in enumerate(out[POLICIES[0]]["by_rate"]):
        cell = {"row": row, "kind": kind, "param": param, "workers": workers,
                "utilization": first["utilization"], "rate": first["rate"],
                "expert_share": first["expert_share"], "preset": first["preset"],
                "requests": first["requests"], "seeds": first["seeds"], "policies": {}}
        for pol in POLICIES:
            e = out[pol]["by_rate"][i]
            cell["policies"][pol] = {
                k: e[k] for k in ("p50_ms", "p99_ms", "load_max_over_mean",
                                  "load_max_over_mean_max", "experts_per_step")}
            # Change = -reduction: positive means slower than the best baseline.
            for q in ("p50", "p99"):
                cell["policies"][pol][f"{q}_change"] = -e[f"{q}_reduction_pct"]
                cell["policies"][pol][f"{q}_change_min"] = -e[f"{q}_reduction_pct_max"]
                cell["policies"][pol][f"{q}_change_max"] = -e[f"{q}_reduction_pct_min"]
        cells.append(cell)
    return cells, time.monotonic() - t, " ".join(cmd)


def fmt(v):
    return f"{v:+.1f}"


def share_name(par):
    return "own" if par == "own" else f"{par:.0%}"


def where(c):
    if c["kind"] == "share":
        p = f"share {share_name(c['param'])}"
    elif c["kind"] == "fleet":
        p = f"{c['workers']} workers"
    elif c["kind"] == "model_error":
        p = f"model error {c['param']:g}x"
    elif c["kind"] == "model_error_fit":
        p = f"model error {c['param']:g}x, step reports"
    else:
        p = "drift"
    return f"{c['row']}, {p}, U {c['utilization']:.0%}"


def misses_bar(c):
    e = c["policies"]["eldr_cost"]
    drift_miss = c["kind"] == "drift" and e["load_max_over_mean_max"] > BAR_DRIFT_LOAD
    return e["p50_change"] > BAR_P50 or e["p99_change"] > BAR_P99 or drift_miss


def policy_cell(c, pol, spread=False):
    e = c["policies"][pol]
    s = f"{fmt(e['p50_change'])} / {fmt(e['p99_change'])}"
    if spread and c["seeds"] > 1:
        s += (f" [{fmt(e['p50_change_min'])}..{fmt(e['p50_change_max'])} / "
              f"{fmt(e['p99_change_min'])}..{fmt(e['p99_change_max'])}]")
    if pol == "eldr_cost" and misses_bar(c):
        s = f"**{s}**"
    return s


def markdown(cells, header, rows, from_cells=()):
    out = [header, ""]
    out.append("Each policy cell: median / P99 TPOT change in % against the best of "
               "round_robin, random, jsq and p2c in the same run (negative = faster), the "
               "median over seeds; eldr_cost also shows the [min..max] over seeds. **Bold**: "
               f"eldr_cost misses the bar (median > +{BAR_P50}%, P99 > +{BAR_P99}%, in drift a "
               f"worker above {BAR_DRIFT_LOAD}x the mean load).")
    out.append("")
    out.append("## Headline: each policy's worst cell")
    out.append("")
    out.append("| policy | worst median change | where | worst P99 change | where |")
    out.append("|---|---|---|---|---|")
    for pol in POLICIES:
        w50 = max(cells, key=lambda c: c["policies"][pol]["p50_change"])
        w99 = max(cells, key=lambda c: c["policies"][pol]["p99_change"])
        out.append(f"| {pol} | {fmt(w50['policies'][pol]['p50_change'])} | {where(w50)} | "
                   f"{fmt(w99['policies'][pol]['p99_change'])} | {where(w99)} |")
    missed = [c for c in cells if misses_bar(c)]
    out.append("")
    out.append(f"- eldr_cost meets the bar in {len(cells) - len(missed)} of {len(cells)} cells"
               + (": misses at " + "; ".join(where(c) for c in missed) if missed else "") + ".")
    for kind, what in (("model_error", "without step reports"),
                       ("model_error_fit", "with step reports (the online fit)")):
        for lo, hi in ((0.3, 3.0), (0.1, 10.0)):
            sel = [c for c in cells if c["kind"] == kind and lo - 1e-9 <= c["param"] <= hi + 1e-9]
            if sel:
                out.append(f"- Router constants {lo:g}x to {hi:g}x off, {what}: the bar holds in "
                           f"{sum(not misses_bar(c) for c in sel)} of {len(sel)} cells.")
    gains = [c for c in cells if -c["policies"]["eldr"]["p50_change"] >= 5.0]
    short = [c for c in gains if -c["policies"]["eldr_cost"]["p50_change"] <
             -c["policies"]["eldr"]["p50_change"] - 1.0]
    if gains:
        w = max(short or gains, key=lambda c: c["policies"]["eldr_cost"]["p50_change"] -
                c["policies"]["eldr"]["p50_change"])
        out.append(f"- Where eldr gains >= 5 % median ({len(gains)} cells), eldr_cost gains at "
                   f"least eldr's gain minus 1 point in {len(gains) - len(short)}; the largest "
                   f"shortfall: {where(w)} (eldr {fmt(w['policies']['eldr']['p50_change'])}, "
                   f"eldr_cost {fmt(w['policies']['eldr_cost']['p50_change'])}).")
    own = [c for c in cells if c["kind"] == "share" and c["param"] == "own" and
           c["utilization"] >= 0.5 - 1e-9 and not c["row"].endswith("trace")]
    if own:
        w = max(own, key=lambda c: c["policies"]["eldr_cost"]["p50_change"])
        n8 = sum(-c["policies"]["eldr_cost"]["p50_change"] >= 8.0 for c in own)
        out.append(f"- Synthetic presets, own constants, U >= 50 %: eldr_cost gains >= 8 % median "
                   f"in {n8} of {len(own)} cells (least: {fmt(w['policies']['eldr_cost']['p50_change'])}"
                   f" at {where(w)}).")
    drift = [c for c in cells if c["kind"] == "drift"]
    if drift:
        worst = max(drift, key=lambda c: c["policies"]["eldr_cost"]["load_max_over_mean_max"])
        out.append(f"- Drift: eldr_cost's most loaded worker carries "
                   f"{worst['policies']['eldr_cost']['load_max_over_mean_max']:.2f}x the mean "
                   f"load at worst over seeds ({where(worst)}; the bar: 1.5x).")
    cols = "| workload | setting | U | rate req/s | " + " | ".join(POLICIES) + " |"
    sep = "|---" * (4 + len(POLICIES)) + "|"

    def section(title, pick, extra_col=None):
        sel = [c for c in cells if pick(c)]
        if not sel:
            return
        out.extend(["", f"## {title}", ""])
        head = cols if not extra_col else cols[:-1] + f" {extra_col[0]} |"
        out.extend([head, sep + ("---|" if extra_col else "")])
        for c in sel:
            setting = where(c).split(", ")[1]
            line = (f"| {c['row']} | {setting} | {c['utilization']:.0%} | {c['rate']:.1f} | " +
                    " | ".join(policy_cell(c, p, p == "eldr_cost") for p in POLICIES) + " |")
            if extra_col:
                line += f" {extra_col[1](c)} |"
            out.append(line)

    section("Utilization x expert share, 16 workers (own = the preset's constants)",
            lambda c: c["kind"] == "share")
    section("Fleets of 8 and 32 workers, 50 % utilization, the preset's constants",
            lambda c: c["kind"] == "fleet")
    section("Router constants off by a factor (the router's alpha = factor x the simulator's)",
            lambda c: c["kind"] == "model_error")
    section("The same wrong constants, with every simulated step reported to the router "
            "(its online fit, --report-steps)",
            lambda c: c["kind"] == "model_error_fit")
    section("Drift: calibrated on half of the label groups, routing the others",
            lambda c: c["kind"] == "drift",
            ("eldr_cost load max/mean (worst seed)",
             lambda c: f"{c['policies']['eldr_cost']['load_max_over_mean_max']:.2f}"))
    out.extend(route_from_markdown(list(from_cells)))
    out.append("")
    out.extend(rows)
    return "\n".join(out) + "\n"


def plots(cells, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    grid = [c for c in cells if c["kind"] == "share"]
    rows = sorted({c["row"] for c in grid}, key=lambda r: [c["row"] for c in grid].index(r))
    params = [s for s in SHARES] + ["own"]
    paths = []
    for q, title in (("p50", "median"), ("p99", "P99")):
        fig, axes = plt.subplots(len(rows), len(params), figsize=(4 * len(params), 2.6 * len(rows)),
                                 sharex=True, squeeze=False)
        for i, row in enumerate(rows):
            for j, par in enumerate(params):
                ax = axes[i][j]
                sel = sorted((c for c in grid if c["row"] == row and c["param"] == par),
                             key=lambda c: c["utilization"])
                for pol in POLICIES:
                    style = "-" if pol.startswith("eldr") else "--"
                    ax.plot([100 * c["utilization"] for c in sel],
                            [c["policies"][pol][f"{q}_change"] for c in sel], style, marker="o",
                            markersize=3, label=pol)
                ax.axhline(0, color="grey", lw=0.5)
                ax.set_title(f"{row}, share {share_name(par)}", fontsize=8)
                ax.grid(alpha=0.3)
                if j == 0:
                    ax.set_ylabel(f"{title} TPOT change %", fontsize=8)
                if i == len(rows) - 1:
                    ax.set_xlabel("utilization %", fontsize=8)
        axes[0][-1].legend(fontsize=7)
        fig.tight_layout()
        path = os.path.join(out_dir, f"sim_matrix_{q}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("eldr")
    ap.add_argument("--out-dir", default="docs")
    ap.add_argument("--data", default=DEFAULT_DATA, help="the real dev trace directory")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--requests", type=int, default=None)
    ap.add_argument("--trace-requests", type=int, default=None)
    ap.add_argument("--calibration", type=int, default=None)
    ap.add_argument("--slice", action="store_true",
                    help="a few small cells, 1 seed; exit 1 if eldr_cost misses the bar")
    ap.add_argument("--from-json", help="only rewrite the Markdown and plots from this JSON")
    ap.add_argument("--route-from-only", action="store_true",
                    help="only the footprint vs prompt vs text cells (printed as Markdown)")
    a = ap.parse_args()
    if a.from_json:
        return rerender(a.from_json, a.out_dir)
    data = a.data if os.path.isfile(os.path.join(a.data, "index.npy")) else None
    if not data:
        print(f"sim_matrix: no trace at {a.data}: the real-trace rows are skipped", file=sys.stderr)
    seeds = a.seeds or (1 if a.slice else 3)
    # Measured on 2 shared cores: the full matrix at 6000 requests, 3 seeds, 2
    # processes takes about 10 minutes; fewer requests leave the warm-up
    # transient in the percentiles (the slice's 4000 are the least that agree
    # with the full runs).
    requests = a.requests or (4000 if a.slice else 6000)
    trace_requests = a.trace_requests or requests
    calibration = a.calibration or (300 if a.slice else 500)
    jobs = [] if a.route_from_only else slice_jobs(data) if a.slice else full_jobs(data)
    from_jobs = route_from_jobs(data) if not a.slice else []

    def common(job):
        n = trace_requests if job[0].endswith("trace") else requests
        cal = ROUTE_FROM_CALIBRATION if job[1] == "route_from" else calibration
        return ["--seeds", str(seeds), "--requests", str(n), "--calibration", str(cal)]

    t0 = time.monotonic()
    cells, from_cells, log = [], [], []
    with ThreadPoolExecutor(max_workers=a.jobs) as executor:
        futures = [executor.submit(run_job, a.eldr, j, common(j)) for j in jobs]
        futures += [executor.submit(run_route_from_job, a.eldr, j, common(j)) for j in from_jobs]
        jobs = jobs + from_jobs
        for i, f in enumerate(futures):
            c, secs, cmd = f.result()
            (from_cells if jobs[i][1] == "route_from" else cells).extend(c)
            log.append((secs, cmd))
            if not a.slice:
                print(f"[{i + 1}/{len(jobs)}] {secs:.0f} s  {jobs[i][0]} {jobs[i][1]} "
                      f"{jobs[i][2]}", file=sys.stderr, flush=True)
    total = time.monotonic() - t0
    if a.route_from_only:
        print("\n".join(route_from_markdown(from_cells)))
        if a.out_dir:
            os.makedirs(a.out_dir, exist_ok=True)
            with open(os.path.join(a.out_dir, "sim_route_from.json"), "w") as f:
                json.dump({"cells": from_cells, "seconds": total,
                           "runs": [{"seconds": s, "command": c} for s, c in log]}, f)
        return 0
    if a.slice:
        bad = 0
        for c in cells:
            e = c["policies"]["eldr_cost"]
            miss = misses_bar(c)
            bad += miss
            print(f"{'MISS' if miss else 'ok  '} {where(c)}: eldr_cost median "
                  f"{fmt(e['p50_change'])}%, P99 {fmt(e['p99_change'])}% vs best baseline, "
                  f"load max/mean {e['load_max_over_mean_max']:.2f} "
                  f"(eldr {fmt(c['policies']['eldr']['p50_change'])}% / "
                  f"{fmt(c['policies']['eldr']['p99_change'])}%)")
        print(f"sim matrix slice: {len(cells) - bad}/{len(cells)} cells within the bar "
              f"(median +{BAR_P50}%, P99 +{BAR_P99}%), {total:.0f} s")
        return 1 if bad else 0
    os.makedirs(a.out_dir, exist_ok=True)
    argv = " ".join(["tools/sim_matrix.py"] + [os.path.relpath(a.eldr)] + sys.argv[2:])
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    meta = {"command": argv, "date": date, "seconds": total, "jobs": a.jobs, "runs_count": len(jobs),
            "seeds": seeds, "requests": requests, "trace_requests": trace_requests,
            "calibration": calibration, "trace": bool(data)}
    with open(os.path.join(a.out_dir, "sim_matrix.json"), "w") as f:
        json.dump({**meta, "cells": cells, "route_from_cells": from_cells,
                   "runs": [{"seconds": s, "command": c} for s, c in log]},
                  f, separators=(",", ":"))
    write_report(meta, cells, a.out_dir, from_cells)
    return 0


def write_report(meta, cells, out_dir, from_cells=()):
    header = (f"# eldr sim matrix (generated)\n\n`{meta['command']}` (make sim-matrix), "
              f"{meta['date']}; {meta['runs_count']} eldr sim runs, {len(cells)} cells, "
              f"{meta['seeds']} seeds each, {meta['requests']} requests per synthetic cell, "
              f"{meta['trace_requests']} per trace cell (the trace's requests resampled), "
              f"{meta['calibration']} calibration requests; {meta['seconds'] / 60:.1f} min with "
              f"{meta['jobs']} processes." +
              ("" if meta["trace"] else "\n\nNo trace data: the real-trace rows are skipped."))
    paths = []
    try:
        paths = plots(cells, out_dir)
    except ImportError as e:
        print(f"sim_matrix: no plots ({e}); run it with the project's venv (.deps/venv/bin/python)", file=sys.stderr)
    rows = ["Plots: " + ", ".join(f"`{os.path.basename(p)}`" for p in paths)] if paths else []
    md = os.path.join(out_dir, "sim_matrix.md")
    with open(md, "w") as f:
        f.write(markdown(cells, header, rows, from_cells))
    print(f"sim_matrix: {md}, sim_matrix.json and {len(paths)} plots in {out_dir} "
          f"({meta['seconds'] / 60:.1f} min)")


def rerender(path, out_dir):
    """The Markdown and plots again from a results JSON (no simulation)."""
    with open(path) as f:
        d = json.load(f)
    write_report({k: v for k, v in d.items() if k not in ("cells", "runs", "route_from_cells")},
                 d["cells"], out_dir, d.get("route_from_cells", []))
    return 0


if __name__ == "__main__":
    sys.exit(main())
