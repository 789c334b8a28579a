"""Shared fixtures: a small synthetic MoE workload with labelled domains, a
table fitted on it, and a private eldrd for the client tests."""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pytest

import eldr

LAYERS, EXPERTS, TOP_K, WORKERS, DOMAINS = 6, 16, 2, 4, 4


@dataclass
class Workload:
    prefill: np.ndarray  # int16 [n][L][E]
    decode: np.ndarray  # int16 [n][L][E]
    domain: np.ndarray  # [n]
    tokens: np.ndarray  # [n]


def synthetic_workload(n_per_domain: int, seed: int) -> Workload:
    """Each domain favours its own experts in every layer; every token picks
    TOP_K distinct experts per layer (Gumbel top-k), so each [layer] row of a
    footprint sums to TOP_K * tokens."""
    rng = np.random.default_rng(seed)
    model = np.random.default_rng(1234)  # the "model": fixed across workloads
    affinity = np.full((DOMAINS, LAYERS, EXPERTS), 0.2)
    for d in range(DOMAINS):
        for layer in range(LAYERS):
            affinity[d, layer, model.choice(EXPERTS, EXPERTS // DOMAINS, replace=False)] = 3.0
    n = n_per_domain * DOMAINS
    domain = np.repeat(np.arange(DOMAINS), n_per_domain)
    tokens = rng.integers(8, 40, size=n)
    prefill = np.zeros((n, LAYERS, EXPERTS), np.int16)
    decode = np.zeros((n, LAYERS, EXPERTS), np.int16)
    for i in range(n):
        for out, t in ((prefill, tokens[i]), (decode, 16)):
            logits = np.log(affinity[domain[i]])[:, None, :]  # [L][1][E]
            gumbel = rng.gumbel(size=(LAYERS, t, EXPERTS))
            picks = np.argpartition(-(logits + gumbel), TOP_K, axis=2)[:, :, :TOP_K]
            for layer in range(LAYERS):
                out[i, layer] = np.bincount(picks[layer].ravel(), minlength=EXPERTS)
    return Workload(prefill, decode, domain, tokens)


@pytest.fixture(scope="session")
def workload() -> Workload:
    return synthetic_workload(n_per_domain=30, seed=7)


@pytest.fixture(scope="session")
def table(workload: Workload) -> eldr.Table:
    return eldr.fit(workload.prefill, WORKERS, workload.decode, seed=1, top_k=TOP_K)


@pytest.fixture(scope="session")
def table_path(table: eldr.Table, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("table") / "table.eldr"
    table.save(path)
    return str(path)


@pytest.fixture(scope="session")
def eldrd_binary() -> str:
    path = os.environ.get("ELDR_ELDRD")
    if not path:
        pytest.skip("no eldrd in this build (the eldrd target does not exist): client tests skipped")
    assert os.access(path, os.X_OK), f"ELDR_ELDRD={path} is not an executable"
    return path


@pytest.fixture(scope="module")
def daemon(eldrd_binary: str, table_path: str) -> Iterator[str]:
    """A private eldrd serving the fitted table; yields its instance name."""
    instance = f"pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(
        [eldrd_binary, "--instance", instance, "--table", table_path, "--log-level", "warn"],
        stdin=subprocess.DEVNULL,
    )
    try:
        # Client() waits (bounded) for the segment to be READY.
        with eldr.Client(instance, open_timeout_ms=10000):
            pass
        yield instance
    finally:
        proc.terminate()
        try:
            rc = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("eldrd did not stop on SIGTERM")
        assert rc == 0, f"eldrd exited with {rc} on SIGTERM"
