#!/usr/bin/env python3
"""Writes a small synthetic footprint trace for the emulated prefill engine:
int16 [N][layers][experts] .npy where each request belongs to a domain that
favours its own experts in every layer, and each prompt token picks top_k
distinct experts per layer (so every layer row sums to top_k * tokens).
With --table-out it also fits a matching eldr cluster table on the trace
(calibration = the trace itself), ready for `eldrd --table`.

  make_trace.py --out trace.npy --table-out table.eldr --workers 4
"""

from __future__ import annotations

import argparse

import numpy as np


def synthetic_trace(requests: int, layers: int, experts: int, top_k: int, domains: int,
                    seed: int, min_tokens: int = 16, max_tokens: int = 128) -> np.ndarray:
    model = np.random.default_rng(1000 + domains)  # the "model": domain expert preferences
    weight = np.full((domains, layers, experts), 0.15)
    favoured = max(top_k, experts // domains)
    for d in range(domains):
        for layer in range(layers):
            weight[d, layer, model.choice(experts, favoured, replace=False)] = 3.0
    rng = np.random.default_rng(seed)
    trace = np.zeros((requests, layers, experts), np.int16)
    for i in range(requests):
        tokens = int(rng.integers(min_tokens, max_tokens + 1))
        logits = np.log(weight[i % domains])[:, None, :]  # [L][1][E]
        # Gumbel top-k = top_k distinct experts per token, drawn by weight.
        noisy = logits + rng.gumbel(size=(layers, tokens, experts))
        picks = np.argpartition(-noisy, top_k - 1, axis=2)[:, :, :top_k]
        for layer in range(layers):
            trace[i, layer] = np.bincount(picks[layer].ravel(), minlength=experts)
    return trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="trace .npy to write")
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--experts", type=int, default=32)
    parser.add_argument("--top-k", type=int, default=4)
    parser.add_argument("--domains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--table-out", help="also fit and save a cluster table on the trace")
    parser.add_argument("--workers", type=int, default=4, help="decode workers of the table")
    args = parser.parse_args()
    if not 1 <= args.top_k <= args.experts:
        raise SystemExit("--top-k must be in [1, experts]")

    trace = synthetic_trace(args.requests, args.layers, args.experts, args.top_k, args.domains,
                            args.seed)
    np.save(args.out, trace, allow_pickle=False)
    print(f"wrote {args.out}: {trace.shape[0]} footprints {args.layers}x{args.experts} "
          f"k={args.top_k}, {args.domains} domains")
    if args.table_out:
        import eldr  # only needed for the table

        table = eldr.fit(trace, args.workers, seed=args.seed, top_k=args.top_k)
        table.save(args.table_out)
        print(f"wrote {args.table_out}: {table}")


if __name__ == "__main__":
    main()
