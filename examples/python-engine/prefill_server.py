#!/usr/bin/env python3
"""Emulated prefill engine, in one of three flavors.

--flavor eldr (default): POST /v1/prefill runs a pretend prefill and pushes
the request's expert footprint to eldr, keyed by its request id, so that the
gateway can ask eldr for the decode worker.

  POST /v1/prefill {"request_id": "r1", "prompt_tokens": 128}
    -> 200 {"request_id": "r1", "tokens": 128,
            "decision": {"worker": 2, "similarity": 0.93, "band_size": 3,
                         "table_epoch": 1, "completion_token": 123...}}

The decision is eldr's for the request, so that a gateway on a node without
eldrd can route by it (examples/go-gateway with -instance ""). It is left
out when eldr has none within --decision-timeout-ms (the gateway may then
ask eldr itself) and always with --decision-timeout-ms 0 (push only).

prompt_tokens may also be the prompt's token ids (a list of ints); tokens is
then their count. A decode-first gateway also sends the prompt's text
(prompt; its words count as tokens when prompt_tokens is absent) and the
decode worker it chose before prefill (decode_worker); the engine pushes the
real footprint under the request id all the same, which is what eldr learns
from.

--flavor sglang / --flavor vllm: a stock engine started with
--enable-return-routed-experts. It knows nothing of eldr: POST /generate
(SGLang) or POST /v1/completions (vLLM) answers with the per-token routed
expert ids in exactly the fields those engines use (stock_protocols.py), and
the gateway builds the footprint from the response.

The footprint is a row of a trace file (int16 [N][layers][experts] .npy: see
make_trace.py, or the prefill.npy of `eldr synth`), picked by a hash of the
request id (SGLang: rid, vLLM: request_id) so that a retried request gets the
same footprint.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import zlib
from typing import Any, Dict

import numpy as np

import eldr
import stock_protocols
from engine_http import BadRequest, Reply, require_int, require_str, serve

MAX_PROMPT_TOKENS = 1 << 20
RING_FULL_RETRY_S = 0.5  # a full ring drains in microseconds; longer is a stuck daemon


def footprint_index(request_id: str, n: int) -> int:
    """The trace row a request id maps to (stable across processes and runs)."""
    return zlib.crc32(request_id.encode()) % n


def prompt_token_count(body: Dict[str, Any]) -> int:
    """prompt_tokens is a count, or the prompt's token ids (a list of ints);
    without it, the words of the prompt's text (prompt) stand for tokens."""
    value = body.get("prompt_tokens")
    if value is None and isinstance(body.get("prompt"), str) and body["prompt"].strip():
        return min(len(body["prompt"].split()), MAX_PROMPT_TOKENS)
    if isinstance(value, list):
        if not 1 <= len(value) <= MAX_PROMPT_TOKENS or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in value):
            raise BadRequest(f"'prompt_tokens' as a list must hold 1..{MAX_PROMPT_TOKENS} "
                             "integer token ids")
        return len(value)
    return require_int(body, "prompt_tokens", 1, MAX_PROMPT_TOKENS)


class PrefillEngine:
    def __init__(self, trace: np.ndarray, client: eldr.Client, us_per_token: float,
                 decision_timeout_ms: int = 1000) -> None:
        self.trace = trace
        self.client = client
        self.us_per_token = us_per_token
        self.decision_timeout_ms = decision_timeout_ms
        self.lock = threading.Lock()
        self.served = 0
        self.push_failures = 0

    def prefill(self, body: Dict[str, Any]) -> Reply:
        request_id = require_str(body, "request_id", 128)
        prompt_tokens = prompt_token_count(body)
        time.sleep(prompt_tokens * self.us_per_token / 1e6)  # the "forward pass"
        footprint = self.trace[footprint_index(request_id, len(self.trace))]
        try:
            self.push(request_id, footprint)
        except eldr.Error as err:
            with self.lock:
                self.push_failures += 1
            return 503, {"request_id": request_id, "error": f"eldr push failed: {err}",
                         "status": err.name}
        reply: Dict[str, Any] = {"request_id": request_id, "tokens": prompt_tokens}
        if self.decision_timeout_ms > 0:
            try:
                d = self.client.wait(request_id, timeout_ms=self.decision_timeout_ms)
                if d.ok:
                    reply["decision"] = {"worker": d.worker, "similarity": d.similarity,
                                         "band_size": d.band_size, "table_epoch": d.table_epoch,
                                         "completion_token": d.completion_token}
            except eldr.Error as err:  # the prefill ran: the gateway decides what to do
                reply["decision_error"] = str(err)
        with self.lock:
            self.served += 1
        return 200, reply

    def push(self, request_id: str, footprint: np.ndarray) -> None:
        deadline = time.monotonic() + RING_FULL_RETRY_S
        while True:
            try:
                self.client.push(request_id, footprint)  # int16 C-contiguous: no copy
                return
            except eldr.RingFull:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.0005)

    def stats(self) -> Reply:
        with self.lock:
            return 200, {"served": self.served, "push_failures": self.push_failures,
                         "trace_rows": len(self.trace)}


class StockEngine:
    """A stock SGLang or vLLM prefill server: answers with routed experts."""

    def __init__(self, trace: np.ndarray, flavor: str, top_k: int, dense_layers: int,
                 sglang_dtype: str, us_per_token: float) -> None:
        self.trace = trace
        self.flavor = flavor
        self.top_k = top_k
        self.dense_layers = dense_layers
        self.sglang_dtype = sglang_dtype
        self.us_per_token = us_per_token
        self.lock = threading.Lock()
        self.ids: Dict[int, np.ndarray] = {}
        self.served = 0
        # Every row must be expressible as per-token picks: checked up front.
        for i in range(len(trace)):
            self.ids[i] = stock_protocols.token_ids(trace[i], top_k)

    def ids_for(self, key: str) -> np.ndarray:
        return self.ids[footprint_index(key, len(self.trace))]

    def generate(self, body: Dict[str, Any]) -> Reply:  # SGLang
        reply = stock_protocols.sglang_generate(body, self.ids_for, self.dense_layers,
                                                self.sglang_dtype, "emulated prefill")
        return self.served_reply(reply["meta_info"]["prompt_tokens"], reply)

    def completions(self, body: Dict[str, Any]) -> Reply:  # vLLM
        reply = stock_protocols.vllm_completions(body, self.ids_for, self.dense_layers,
                                                 self.trace.shape[2], "emulated-moe",
                                                 "emulated prefill")
        return self.served_reply(reply["usage"]["prompt_tokens"], reply)

    def served_reply(self, prompt_tokens: int, reply: Dict[str, Any]) -> Reply:
        time.sleep(prompt_tokens * self.us_per_token / 1e6)  # the "forward pass"
        with self.lock:
            self.served += 1
        return 200, reply

    def stats(self) -> Reply:
        with self.lock:
            return 200, {"served": self.served, "trace_rows": len(self.trace),
                         "flavor": self.flavor}


def load_trace(path: str) -> np.ndarray:
    trace = np.load(path, mmap_mode="r", allow_pickle=False)
    if trace.ndim != 3 or trace.shape[0] == 0 or trace.dtype.kind not in "iu":
        raise SystemExit(f"{path}: need an integer array [N][layers][experts], got "
                         f"{trace.dtype} {trace.shape}")
    # Rows handed to eldr as they are: int16, C-contiguous.
    return np.ascontiguousarray(trace, dtype=np.int16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", required=True, help="footprints int16 [N][layers][experts] .npy")
    parser.add_argument("--instance", default="default", help="eldrd instance")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument("--us-per-token", type=float, default=2.0,
                        help="emulated prefill time per prompt token (microseconds)")
    parser.add_argument("--decision-timeout-ms", type=int, default=1000,
                        help="eldr flavor: wait this long for eldr's decision and return it "
                             "(0: push only)")
    parser.add_argument("--flavor", choices=("eldr", "sglang", "vllm"), default="eldr",
                        help="eldr: push to eldrd; sglang/vllm: answer as the stock engine")
    parser.add_argument("--top-k", type=int, default=4,
                        help="sglang/vllm: experts per token of the trace's model")
    parser.add_argument("--dense-layers", type=int, default=0,
                        help="sglang/vllm: leading hidden layers that are dense (not MoE)")
    parser.add_argument("--sglang-dtype", choices=("int32", "uint8", "uint16"), default="int32",
                        help="sglang: id dtype (newer versions name it in routed_experts_dtype)")
    args = parser.parse_args()

    trace = load_trace(args.trace)
    if args.flavor != "eldr":
        if not 1 <= args.top_k <= trace.shape[2] or args.dense_layers < 0:
            raise SystemExit("--top-k must be in [1, experts] and --dense-layers >= 0")
        try:
            stock = StockEngine(trace, args.flavor, args.top_k, args.dense_layers,
                                args.sglang_dtype, args.us_per_token)
        except ValueError as err:
            raise SystemExit(f"{args.trace}: {err}")
        route = {"sglang": {"/generate": stock.generate},
                 "vllm": {"/v1/completions": stock.completions}}[args.flavor]
        print(f"prefill: {args.flavor} flavor, {len(trace)} footprints "
              f"{trace.shape[1]}x{trace.shape[2]} k={args.top_k} from {args.trace}",
              file=sys.stderr, flush=True)
        serve("prefill", args.host, args.port, route,
              {"/stats": stock.stats, "/healthz": lambda: (200, {"ok": True})})
        return
    try:
        client = eldr.Client(args.instance, open_timeout_ms=5000)
    except eldr.Error as err:
        raise SystemExit(f"prefill: cannot reach eldrd '{args.instance}': {err}")
    engine = PrefillEngine(trace, client, args.us_per_token, max(0, args.decision_timeout_ms))
    print(f"prefill: {len(trace)} footprints {trace.shape[1]}x{trace.shape[2]} from {args.trace}",
          file=sys.stderr, flush=True)
    serve("prefill", args.host, args.port, {"/v1/prefill": engine.prefill},
          {"/stats": engine.stats, "/healthz": lambda: (200, {"ok": True})}, client.close)


if __name__ == "__main__":
    main()
