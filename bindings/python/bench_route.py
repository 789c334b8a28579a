#!/usr/bin/env python3
"""Binding overhead of one embedded route: eldr.Router.route from Python vs
eldr_router_route looped in C++ (eldr._eldr._bench_c_route), same router,
same footprint. Prints one JSON line:

  {"python_ns_p50": ..., "c_ns_p50": ..., "extra_ns_p50": ..., ...}

Each figure is the median over rounds of the mean time per call in a round;
Python and C rounds alternate so that machine noise hits both alike.

  PYTHONPATH=build/python .deps/venv/bin/python bindings/python/bench_route.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import eldr


def synthetic_footprints(rng: np.random.Generator, n: int, layers: int, experts: int,
                         top_k: int, domains: int) -> np.ndarray:
    """Domain-skewed footprints; each layer row sums to top_k * tokens."""
    prefer = rng.dirichlet(np.full(experts, 0.3), size=(domains, layers))
    out = np.empty((n, layers, experts), np.int16)
    for i in range(n):
        picks = top_k * int(rng.integers(32, 512))
        p = prefer[i % domains]
        for layer in range(layers):
            out[i, layer] = rng.multinomial(picks, p[layer])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--experts", type=int, default=128)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--iterations", type=int, default=2000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args()

    rng = np.random.default_rng(1)
    calibration = synthetic_footprints(rng, 256, args.layers, args.experts, args.top_k, 8)
    table = eldr.fit(calibration, args.workers, seed=1, top_k=args.top_k)
    router = eldr.Router(table)
    footprint = np.ascontiguousarray(calibration[0])
    route = router.route

    python_ns, c_ns = [], []
    for _ in range(args.rounds):
        start = time.perf_counter_ns()
        for _ in range(args.iterations):
            route(footprint)
        python_ns.append((time.perf_counter_ns() - start) / args.iterations)
        c_ns.append(eldr._eldr._bench_c_route(router, footprint, args.iterations, 1))

    python_p50, c_p50 = statistics.median(python_ns), statistics.median(c_ns)
    print(json.dumps({
        "python_ns_p50": round(python_p50, 1),
        "c_ns_p50": round(c_p50, 1),
        "extra_ns_p50": round(python_p50 - c_p50, 1),
        "geometry": f"{args.layers}x{args.experts} k={args.top_k}",
        "workers": args.workers,
        "calls": args.rounds * args.iterations,
    }))


if __name__ == "__main__":
    main()
