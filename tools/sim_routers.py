#!/usr/bin/env python3
"""Several routers sharing one decode fleet, each seeing the others' bookings
late (docs/design.md §7, "Several routers"). Every cell is one
`eldr sim --routers N --view-delay-ms D --json` run of every policy, so each
policy is compared with the baselines of the same run (same arrivals, same
delay).

Usage: sim_routers.py ELDR_BINARY [OUT_PREFIX] [REQUESTS] [JOBS]
Writes OUT_PREFIX.md (the tables) and OUT_PREFIX.json (every cell)."""
import concurrent.futures
import json
import subprocess
import sys

WORKLOADS = [("qwen3-30b-a3b", "task"), ("gpt-oss-120b", "language")]
UTILIZATIONS = [0.5, 0.75]
ROUTERS = [1, 2, 4, 8]
DELAYS_MS = [0, 10, 50, 200]
POLICIES = ["round_robin", "random", "jsq", "p2c", "eldr", "eldr_guard", "eldr_cost"]
BASELINES = ["round_robin", "random", "jsq", "p2c"]


def run(eldr, preset, workload, util, routers, delay, requests, variant="default"):
    cmd = [eldr, "sim", "--preset", preset, "--workload", workload, "--workers", "16",
           "--utilization", str(util), "--requests", str(requests), "--routers", str(routers),
           "--view-delay-ms", str(delay), "--json", "--policies", *POLICIES]
    if variant == "counts":
        cmd += ["--bookings", "counts"]
    elif variant == "no-anticipate":
        cmd += ["--no-anticipate"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return {p: {"p50_ms": r[p]["p50_ms"], "p99_ms": r[p]["p99_ms"]} for p in POLICIES}


def pct(new, old):
    return 100.0 * (new - old) / old


def main() -> int:
    eldr = sys.argv[1]
    prefix = sys.argv[2] if len(sys.argv) > 2 else "docs/sim_routers"
    requests = int(sys.argv[3]) if len(sys.argv) > 3 else 10000
    jobs = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    cells = [(p, w, u, n, d) for (p, w) in WORKLOADS for u in UTILIZATIONS for n in ROUTERS
             for d in DELAYS_MS if not (n == 1 and d != 0)]
    extra = [(p, w, u, n, d, v) for (p, w) in WORKLOADS for u in UTILIZATIONS
             for (n, d, v) in ((4, 50, "counts"), (4, 50, "no-anticipate"),
                               (8, 200, "no-anticipate"))]
    with concurrent.futures.ThreadPoolExecutor(jobs) as executor:
        futures = {c: executor.submit(run, eldr, *c, requests) for c in cells}
        futures.update({c: executor.submit(run, eldr, *c[:5], requests, c[5]) for c in extra})
        results = {c: f.result() for c, f in futures.items()}

    lines = [f"16 decode workers, {requests} requests per cell, one `eldr sim --json` run per "
             "cell (every policy, the same arrivals); bookings carry footprints and every "
             "router anticipates its peers' twins (both for every policy) unless noted. "
             "P99 TPOT in ms; change of `eldr_cost`'s P99 against one router with a live view, "
             "and against the best baseline (round_robin, random, jsq, p2c) and jsq of the same "
             "run (same routers, same delay). Negative = lower TPOT.", ""]
    for (preset, workload) in WORKLOADS:
        for util in UTILIZATIONS:
            live = results[(preset, workload, util, 1, 0)]["eldr_cost"]["p99_ms"]
            lines += [f"### {preset}, {workload}, utilization {util:.0%}", "",
                      "| routers | view delay | " + " | ".join(POLICIES) +
                      " | eldr_cost P99 vs 1 live router | vs best baseline | vs jsq |",
                      "|---|---|" + "---|" * len(POLICIES) + "---|---|---|"]
            for n in ROUTERS:
                for d in DELAYS_MS:
                    if n == 1 and d != 0:
                        continue
                    r = results[(preset, workload, util, n, d)]
                    best = min(r[b]["p99_ms"] for b in BASELINES)
                    cost = r["eldr_cost"]["p99_ms"]
                    lines.append(f"| {n} | {d} ms | " +
                                 " | ".join(f"{r[p]['p99_ms']:.2f}" for p in POLICIES) +
                                 f" | {pct(cost, live):+.1f}% | {pct(cost, best):+.1f}% | "
                                 f"{pct(cost, r['jsq']['p99_ms']):+.1f}% |")
            def p99(key):
                return results[key]["eldr_cost"]["p99_ms"]
            base = (preset, workload, util)
            lines += ["", "eldr_cost P99 without parts of the design: " + "; ".join(
                f"{label} {p99(base + k):.2f} ms ({pct(p99(base + k), live):+.1f}% vs 1 live "
                f"router; jsq of that run {results[base + k]['jsq']['p99_ms']:.2f} ms)"
                for label, k in (("4 routers, 50 ms, bookings with counts only", (4, 50, "counts")),
                                 ("4 routers, 50 ms, no anticipation", (4, 50, "no-anticipate")),
                                 ("8 routers, 200 ms, no anticipation", (8, 200, "no-anticipate")))
            ) + ".", ""]
    with open(prefix + ".md", "w") as out:
        out.write("\n".join(lines) + "\n")
    with open(prefix + ".json", "w") as out:
        json.dump([{"preset": k[0], "workload": k[1], "utilization": k[2], "routers": k[3],
                    "view_delay_ms": k[4], "variant": k[5] if len(k) > 5 else "default",
                    "policies": v} for k, v in results.items()], out, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
