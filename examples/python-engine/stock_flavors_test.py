#!/usr/bin/env python3
"""The emulated stock engines against the Python decoders (ctest
example.python_stock_flavors): prefill_server.py --flavor sglang and
--flavor vllm answer as SGLang's /generate and vLLM's /v1/completions do,
and eldr.footprint_from_sglang / footprint_from_vllm turn each answer back
into exactly the trace row the engine's ids were dealt from, dense layers
dropped. No eldrd: a stock engine knows nothing of eldr."""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

import eldr
from make_trace import synthetic_trace
from prefill_server import footprint_index
from run_example_test import http, start_server

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, EXPERTS, TOP_K, DENSE = 8, 32, 4, 2


def check(flavor: str, trace_path: str, trace: np.ndarray, extra: list) -> None:
    proc, url = start_server([sys.executable, os.path.join(HERE, "prefill_server.py"),
                              "--trace", trace_path, "--flavor", flavor, "--top-k", str(TOP_K),
                              "--dense-layers", str(DENSE), "--us-per-token", "0"] + extra)
    moe_layers = list(range(DENSE, DENSE + LAYERS))
    try:
        for i in range(12):
            rid = f"{flavor}-{i}"
            row = trace[footprint_index(rid, len(trace))]
            tokens = int(row[0].sum()) // TOP_K
            if flavor == "sglang":
                status, reply = http(url + "/generate", {
                    "rid": rid, "input_ids": list(range(tokens)), "return_routed_experts": True,
                    "sampling_params": {"max_new_tokens": 1 + i % 3}})
                assert status == 200, reply
                meta = reply["meta_info"]
                assert meta["prompt_tokens"] == tokens, meta
                got, info = eldr.footprint_from_sglang(
                    meta, num_experts=EXPERTS, num_layers=DENSE + LAYERS, top_k=TOP_K,
                    moe_layers=moe_layers, return_info=True)
            else:
                status, reply = http(url + "/v1/completions", {
                    "model": "m", "request_id": rid, "prompt": list(range(tokens)),
                    "max_tokens": 1 + i % 3})
                assert status == 200, reply
                choice = reply["choices"][0]
                got, info = eldr.footprint_from_vllm(
                    choice["routed_experts"], num_experts=EXPERTS,
                    prompt_tokens=reply["usage"]["prompt_tokens"], moe_layers=moe_layers,
                    return_info=True)
            # Prompt rows plus the generated ones but the last: only the
            # prompt's are counted.
            assert info.rows_in_payload == tokens + i % 3, info
            assert info.rows_counted == tokens, info
            assert got.dtype == np.int16 and got.shape == (LAYERS, EXPERTS), got.shape
            assert np.array_equal(got, row), f"{flavor} request {rid}: footprint differs"
        # What the engines refuse or leave out.
        if flavor == "sglang":
            status, reply = http(url + "/generate", {"rid": "no-experts", "input_ids": [1, 2]})
            assert status == 200 and "routed_experts" not in reply["meta_info"], reply
            try:
                eldr.footprint_from_sglang(reply["meta_info"], num_experts=EXPERTS,
                                           num_layers=DENSE + LAYERS, top_k=TOP_K)
                raise AssertionError("a reply without routed_experts decoded")
            except eldr.InvalidArgument:
                pass
        else:
            status, reply = http(url + "/v1/completions",
                                 {"prompt": [1, 2], "max_tokens": 1, "stream": True})
            assert status == 400, reply
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> None:
    trace = synthetic_trace(16, LAYERS, EXPERTS, TOP_K, 4, seed=3)
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "trace.npy")
        np.save(path, trace, allow_pickle=False)
        check("sglang", path, trace, [])
        check("sglang", path, trace, ["--sglang-dtype", "uint16"])
        check("vllm", path, trace, [])
    print("stock flavors: ok")


if __name__ == "__main__":
    main()
