#!/usr/bin/env python3
"""End-to-end test of the emulated engines (ctest example.python_engine):
eldrd on a private instance with a table fitted on a fresh synthetic trace,
the prefill and decode servers on free loopback ports, and this script as
the gateway: prefill -> eldr decision -> decode, for a few requests in
parallel. Checks every decision arrived, lies in the locality band, and that
the decode side served and completed exactly those requests."""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Tuple

import numpy as np

import eldr
from make_trace import synthetic_trace
from prefill_server import footprint_index

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, EXPERTS, TOP_K, WORKERS = 8, 32, 4, 4


def http(url: str, body: Any = None) -> Tuple[int, Dict[str, Any]]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def start_server(args: List[str]) -> Tuple[subprocess.Popen, str]:
    """Starts a server and returns it with the URL from its READY line."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=30)
        except queue.Empty:
            proc.kill()
            raise AssertionError(f"{args[1]} printed no READY line within 30 s")
        if line.startswith("READY "):
            return proc, line.split()[2]


def stop_all(running: List[Tuple[subprocess.Popen, str]]) -> None:
    """SIGTERM each process in turn; each must exit 0. Raises after all stopped."""
    failures = []
    for proc, name in running:
        proc.terminate()
        try:
            rc = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            failures.append(f"{name} did not stop on SIGTERM")
            continue
        if rc != 0:
            failures.append(f"{name} exited with {rc} on SIGTERM")
    assert not failures, "; ".join(failures)


def one_request(i: int, prefill: str, decode: str,
                gateway: eldr.Client) -> Tuple[str, eldr.Decision]:
    """Does what a gateway does for one request; returns its id and decision."""
    request_id = f"req-{i}-{uuid.uuid4().hex[:6]}"
    prompt_tokens = 16 + 8 * i
    status, reply = http(prefill + "/v1/prefill",
                         {"request_id": request_id, "prompt_tokens": prompt_tokens})
    assert status == 200, reply
    engine_decision = reply.pop("decision")  # what a gateway without eldrd routes by
    assert reply == {"request_id": request_id, "tokens": prompt_tokens}, reply
    decision = gateway.wait(request_id, 5000)
    assert engine_decision == {"worker": decision.worker, "similarity": decision.similarity,
                               "band_size": decision.band_size,
                               "table_epoch": decision.table_epoch,
                               "completion_token": decision.completion_token}, (
                                   engine_decision, decision)
    status, reply = http(decode + "/v1/decode",
                         {"request_id": request_id, "worker": decision.worker, "max_tokens": 24})
    assert status == 200, reply
    assert reply["request_id"] == request_id and reply["worker"] == decision.worker, reply
    assert isinstance(reply["text"], str) and reply["text"], reply
    return request_id, decision


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eldrd", required=True)
    parser.add_argument("--requests", type=int, default=24)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="eldr-pyengine-") as tmp:
        trace = synthetic_trace(64, LAYERS, EXPERTS, TOP_K, domains=4, seed=3)
        trace_path, table_path = os.path.join(tmp, "trace.npy"), os.path.join(tmp, "table.eldr")
        np.save(trace_path, trace)
        table = eldr.fit(trace, WORKERS, seed=1, top_k=TOP_K)
        table.save(table_path)
        instance = f"pyengine-{os.getpid()}-{uuid.uuid4().hex[:6]}"

        running: List[Tuple[subprocess.Popen, str]] = []
        try:
            # The paper's rule, so every decision can be checked against its band below
            # (the daemon's default, eldr_cost, is covered by the sidecar's tests).
            daemon = subprocess.Popen([args.eldrd, "--instance", instance, "--table", table_path,
                                       "--policy", "eldr", "--worker-report-timeout-ms", "5000",
                                       "--log-level", "warn"], stdin=subprocess.DEVNULL)
            running.append((daemon, "eldrd"))
            with eldr.Client(instance, open_timeout_ms=10000):
                pass  # READY
            prefill_proc, prefill = start_server(
                [sys.executable, "-u", os.path.join(HERE, "prefill_server.py"), "--trace",
                 trace_path, "--instance", instance])
            running.append((prefill_proc, "prefill_server"))
            decode_proc, decode = start_server(
                [sys.executable, "-u", os.path.join(HERE, "decode_server.py"), "--workers",
                 str(WORKERS), "--instance", instance, "--report-interval-ms", "200"])
            running.append((decode_proc, "decode_server"))

            # The contract's error answers.
            assert http(prefill + "/v1/prefill", {"request_id": "x"})[0] == 400
            status, reply = http(prefill + "/v1/prefill",
                                 {"request_id": "ids", "prompt_tokens": [101, 7, 9]})
            assert status == 200 and reply["tokens"] == 3, reply
            assert reply["decision"]["worker"] in table.worker_ids, reply
            assert http(decode + "/v1/decode",
                        {"request_id": "x", "worker": WORKERS, "max_tokens": 1})[0] == 400
            assert http(decode + "/v1/nothing", {})[0] == 404

            with eldr.Client(instance) as gateway, ThreadPoolExecutor(4) as pool:
                results = list(pool.map(lambda i: one_request(i, prefill, decode, gateway),
                                        range(args.requests)))

            # Every decision: a table worker inside the locality band of its footprint.
            per_worker: Dict[int, List[float]] = collections.defaultdict(list)
            for request_id, decision in results:
                assert decision.ok and decision.worker in table.worker_ids, decision
                scores = table.scores(trace[footprint_index(request_id, len(trace))])
                slot = list(table.worker_ids).index(decision.worker)
                assert abs(decision.similarity - scores[slot]) < 1e-4, (decision, scores)
                assert decision.similarity >= scores.max() - table.default_tau - 1e-5, (
                    f"{request_id}: worker {decision.worker} outside the band {scores}")
                per_worker[decision.worker].append(decision.similarity)

            status, prefill_stats = http(prefill + "/stats")
            assert prefill_stats["served"] == args.requests + 1, prefill_stats
            assert prefill_stats["push_failures"] == 0, prefill_stats
            status, decode_stats = http(decode + "/stats")
            expected = [len(per_worker.get(w, [])) for w in range(WORKERS)]
            assert decode_stats["served"] == expected, (decode_stats, expected)
            assert decode_stats["running"] == [0] * WORKERS, decode_stats
            assert decode_stats["complete_failures"] == 0, decode_stats
            assert decode_stats["report_failures"] == 0, decode_stats

            for worker in sorted(per_worker):
                sims = per_worker[worker]
                print(f"worker {worker}: {len(sims)} requests, mean similarity "
                      f"{sum(sims) / len(sims):.3f}")
        finally:
            # Servers first (they hold clients), the daemon last.
            stop_all(list(reversed(running)))
    print(f"python-engine example: {args.requests} requests routed and decoded")


if __name__ == "__main__":
    main()
