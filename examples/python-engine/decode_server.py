#!/usr/bin/env python3
"""Emulated decode engines: one HTTP port serves N decode workers (the worker
id is in the body). A decode takes time proportional to its tokens; each
worker reports its load to eldr (running requests, KV usage) when a request
starts and ends and every --report-interval-ms, and tells eldr when a request
completes so its in-flight count drops.

  POST /v1/decode {"request_id": "r1", "worker": 2, "max_tokens": 64}
    -> 200 {"request_id": "r1", "worker": 2, "text": "..."}
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any, Dict, List

import eldr
from engine_http import Reply, require_int, require_str, serve

MAX_DECODE_TOKENS = 1 << 16
COMPLETE_RETRY_S = 0.5
WORDS = ("the", "expert", "routes", "tokens", "to", "a", "worker", "whose", "cache", "is", "warm")


class DecodeWorkers:
    def __init__(self, workers: int, client: eldr.Client, us_per_token: float,
                 kv_capacity_tokens: int) -> None:
        self.client = client
        self.us_per_token = us_per_token
        self.kv_capacity_tokens = kv_capacity_tokens
        self.lock = threading.Lock()
        self.running: List[int] = [0] * workers
        self.kv_tokens: List[int] = [0] * workers
        self.served: List[int] = [0] * workers
        self.report_failures = 0
        self.complete_failures = 0

    def decode(self, body: Dict[str, Any]) -> Reply:
        request_id = require_str(body, "request_id", 128)
        worker = require_int(body, "worker", 0, len(self.running) - 1)
        max_tokens = require_int(body, "max_tokens", 1, MAX_DECODE_TOKENS)
        # The decision's completion token, forwarded by the gateway: this
        # process did not push the footprint, so eldr wants it to complete.
        token = require_int(body, "completion_token", 0, 2**64 - 1) if "completion_token" in body else 0
        self._admit(worker, max_tokens, +1)
        try:
            time.sleep(max_tokens * self.us_per_token / 1e6)  # the decode steps
            text = " ".join(WORDS[(worker + i) % len(WORDS)] for i in range(min(max_tokens, 32)))
        finally:
            self._admit(worker, max_tokens, -1)
        self._complete(request_id, token)
        with self.lock:
            self.served[worker] += 1
        return 200, {"request_id": request_id, "worker": worker, "text": text}

    def _admit(self, worker: int, tokens: int, sign: int) -> None:
        with self.lock:
            self.running[worker] += sign
            self.kv_tokens[worker] += sign * tokens
            running, usage = self.running[worker], self._usage(worker)
        self._report(worker, running, usage)

    def _usage(self, worker: int) -> float:
        return min(1.0, self.kv_tokens[worker] / self.kv_capacity_tokens)

    def _report(self, worker: int, running: int, usage: float) -> None:
        try:
            self.client.report(worker, running, usage)
        except eldr.Error as err:  # the next periodic report corrects the load
            with self.lock:
                self.report_failures += 1
            print(f"decode: load report for worker {worker} failed: {err}", file=sys.stderr)

    def _complete(self, request_id: str, token: int) -> None:
        deadline = time.monotonic() + COMPLETE_RETRY_S
        while True:
            try:
                self.client.complete(request_id, token)
                return
            except eldr.RingFull as err:
                if time.monotonic() < deadline:
                    time.sleep(0.0005)
                    continue
                failure: eldr.Error = err
            except eldr.Error as err:
                failure = err
            # The decode itself succeeded; eldr's in-flight count for the
            # worker stays one too high until the next load report.
            with self.lock:
                self.complete_failures += 1
            print(f"decode: complete({request_id}) failed: {failure}", file=sys.stderr)
            return

    def report_all(self) -> None:
        with self.lock:
            loads = [(w, self.running[w], self._usage(w)) for w in range(len(self.running))]
        for worker, running, usage in loads:
            self._report(worker, running, usage)

    def stats(self) -> Reply:
        with self.lock:
            return 200, {"served": list(self.served), "running": list(self.running),
                         "report_failures": self.report_failures,
                         "complete_failures": self.complete_failures}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4, help="decode workers served, ids 0..N-1")
    parser.add_argument("--instance", default="default", help="eldrd instance")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 = any free port")
    parser.add_argument("--us-per-token", type=float, default=50.0,
                        help="emulated decode time per generated token (microseconds)")
    parser.add_argument("--kv-capacity-tokens", type=int, default=65536,
                        help="KV cache size per worker, for the reported usage")
    parser.add_argument("--report-interval-ms", type=int, default=500,
                        help="periodic load reports (keep workers alive in eldrd)")
    args = parser.parse_args()
    if args.workers < 1 or args.kv_capacity_tokens < 1 or args.report_interval_ms < 1:
        raise SystemExit("decode: --workers, --kv-capacity-tokens, --report-interval-ms must be > 0")

    try:
        client = eldr.Client(args.instance, open_timeout_ms=5000)
    except eldr.Error as err:
        raise SystemExit(f"decode: cannot reach eldrd '{args.instance}': {err}")
    workers = DecodeWorkers(args.workers, client, args.us_per_token, args.kv_capacity_tokens)
    stopping = threading.Event()

    def report_loop() -> None:
        while not stopping.wait(args.report_interval_ms / 1000):
            workers.report_all()

    workers.report_all()  # announce every worker before the first request
    reporter = threading.Thread(target=report_loop, name="load-reports", daemon=True)
    reporter.start()

    def on_stop() -> None:
        stopping.set()
        reporter.join()
        client.close()

    serve("decode", args.host, args.port, {"/v1/decode": workers.decode},
          {"/stats": workers.stats, "/healthz": lambda: (200, {"ok": True})}, on_stop)


if __name__ == "__main__":
    main()
