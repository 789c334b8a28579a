"""Routing from the prompt: eldr.fit(prompts=...), Router.route_prompt,
Router.learn, the predictor in the table file, and bad prompts."""

from __future__ import annotations

import os
import subprocess
import uuid
import warnings
from typing import Iterator

import numpy as np
import pytest

import eldr
from conftest import DOMAINS, TOP_K, WORKERS, Workload

WORDS = [
    ["integral", "derivative", "matrix", "theorem", "proof", "lemma"],
    ["function", "compile", "pointer", "class", "segfault", "rust"],
    ["court", "statute", "contract", "plaintiff", "tort", "appeal"],
    ["patient", "dose", "symptom", "diagnosis", "clinic", "fever"],
]


def text_of(domain: int, i: int) -> str:
    words = WORDS[domain]
    body = " ".join(words[(i * 5 + j) % len(words)] for j in range(8))
    return f"You are a helpful assistant. {body}? Request {i}."


def tokens_of(domain: int, i: int) -> np.ndarray:
    boilerplate = [1, 2, 3, 4, 5, 6]
    body = [1000 * (domain + 1) + (i * 3 + j) % 12 for j in range(10)]
    return np.array(boilerplate + body + [50000 + i], dtype=np.uint32)


@pytest.fixture(scope="module")
def prompt_table(workload: Workload) -> eldr.Table:
    texts = [text_of(int(d), i) for i, d in enumerate(workload.domain)]
    return eldr.fit(workload.prefill, WORKERS, workload.decode, seed=1, top_k=TOP_K, prompts=texts)


def home_workers(table: eldr.Table, workload: Workload) -> dict:
    """The worker a domain's own footprints go to with tau 0."""
    router = eldr.Router(table, "eldr", tau=0.0)
    homes = {}
    for d in range(DOMAINS):
        picks = [router.route(f).worker for f in workload.prefill[workload.domain == d][:10]]
        homes[d] = max(set(picks), key=picks.count)
    return homes


def test_a_table_fitted_with_prompts_carries_a_predictor(prompt_table: eldr.Table,
                                                         table: eldr.Table) -> None:
    info = prompt_table.predictor
    assert info is not None and info["kinds"] == ["text"]
    assert info["prototypes"] == len(WORDS) * 30
    assert info["demand_bytes"] > 0 and info["index_bytes"] > 0
    assert table.predictor is None


def test_route_prompt_sends_a_domain_where_its_footprints_go(prompt_table: eldr.Table,
                                                             workload: Workload) -> None:
    homes = home_workers(prompt_table, workload)
    router = eldr.Router(prompt_table, "eldr", tau=0.0)
    hits = 0
    for d in range(DOMAINS):
        for i in range(100, 110):
            decision = router.route_prompt(text_of(d, i))
            assert 0.0 <= decision.confidence <= 1.0
            hits += decision.worker == homes[d]
    assert hits >= 36  # of 40


def test_route_prompt_among_workers_chooses_only_them(prompt_table: eldr.Table,
                                                       workload: Workload) -> None:
    homes = home_workers(prompt_table, workload)
    router = eldr.Router(prompt_table, "eldr", tau=0.0)
    ids = [w["id"] for w in router.workers()]
    home = homes[1]
    others = [w for w in ids if w != home]
    for i in range(100, 106):
        d = router.route_prompt(text_of(1, i), workers=others + [999])  # 999: unknown, skipped
        assert d.worker in others
    d = router.route_prompt(text_of(1, 100), request_id=5, workers=[home])
    assert d.worker == home
    router.complete(5)
    with pytest.raises(eldr.NoWorker):
        router.route_prompt(text_of(1, 100), workers=[])
    with pytest.raises(eldr.NoWorker):
        router.route_prompt(text_of(1, 100), workers=[999])


def test_token_ids_route_like_text(workload: Workload) -> None:
    ids = [tokens_of(int(d), i) for i, d in enumerate(workload.domain)]
    table = eldr.fit(workload.prefill, WORKERS, workload.decode, seed=1, top_k=TOP_K, prompts=ids)
    assert table.predictor["kinds"] == ["tokens"]
    homes = home_workers(table, workload)
    router = eldr.Router(table, "eldr", tau=0.0)
    hits = sum(router.route_prompt(tokens_of(d, i)).worker == homes[d]
               for d in range(DOMAINS) for i in range(100, 110))
    assert hits >= 36
    # A plain list of ints is a prompt too; text is not (fitted on tokens).
    assert router.route_prompt([1, 2, 3, 1001]).ok
    with pytest.raises(eldr.Unsupported):
        router.route_prompt("hello there")


def test_a_decision_stands_for_its_worker(prompt_table: eldr.Table) -> None:
    router = eldr.Router(prompt_table)
    d = router.route_prompt(text_of(0, 3))
    assert int(d) == d.worker and d == d.worker
    assert list(range(1000))[d] == d.worker  # an index
    assert {d: 1}[d.worker] == 1


def test_learn_needs_a_routed_prompt_and_is_counted(prompt_table: eldr.Table,
                                                    workload: Workload) -> None:
    router = eldr.Router(prompt_table)
    router.route_prompt(text_of(1, 7), request_id=42)
    router.learn(42, workload.prefill[0])
    with pytest.raises(eldr.NotFound):
        router.learn(42, workload.prefill[0])  # learned once
    with pytest.raises(eldr.NotFound):
        router.learn(43, workload.prefill[0])
    router.route_prompt(text_of(1, 8), request_id=44)
    with pytest.raises(eldr.ShapeMismatch):
        router.learn(44, np.zeros((2, 2), np.int16))
    router.complete(42)
    router.complete(44)
    st = router.stats()
    assert st["prompts_routed"] == 2 and st["learned"] == 1 and st["learn_rejected"] == 2


def test_the_predictor_learns_a_new_domain_and_saves_it(workload: Workload, tmp_path) -> None:
    # Calibrated without domain 3's prompts: its words are unknown.
    keep = workload.domain != 3
    texts = [text_of(int(d), i) for i, d in enumerate(workload.domain) if d != 3]
    table = eldr.fit(workload.prefill[keep], WORKERS, workload.decode[keep], seed=1, top_k=TOP_K,
                     prompts=texts)
    router = eldr.Router(table)
    before = router.route_prompt(text_of(3, 500)).confidence
    fp3 = workload.prefill[workload.domain == 3]
    for i in range(20):
        router.route_prompt(text_of(3, i), request_id=i)
        router.learn(i, fp3[i])
        router.complete(i)
    after = router.route_prompt(text_of(3, 501)).confidence
    assert after > before
    path = tmp_path / "learned.eldr"
    table.save(path)
    loaded = eldr.Table.load(path)
    assert loaded.predictor["prototypes"] == table.predictor["prototypes"] == len(texts) + 20


def test_bad_prompts_raise_and_routing_goes_on(prompt_table: eldr.Table) -> None:
    router = eldr.Router(prompt_table)
    for bad, error in [("", eldr.InvalidArgument), ([], eldr.InvalidArgument),
                       ([1 << 20], eldr.InvalidArgument), (np.array([-1]), eldr.OutOfRange),
                       ("a" * (1 << 20), eldr.InvalidArgument), (b"bytes", TypeError),
                       ("\udcff", UnicodeEncodeError)]:
        with pytest.raises(error):
            router.route_prompt(bad)
    assert router.stats()["prompts_rejected"] == 4
    assert router.route_prompt(text_of(2, 1)).ok


def test_a_table_without_a_predictor_says_so(table: eldr.Table) -> None:
    with pytest.raises(eldr.Unsupported, match="predictor"):
        eldr.Router(table).route_prompt("hello")


def test_fit_checks_the_prompts(workload: Workload) -> None:
    texts = [text_of(int(d), i) for i, d in enumerate(workload.domain)]
    with pytest.raises(eldr.ShapeMismatch):
        eldr.fit(workload.prefill, WORKERS, top_k=TOP_K, prompts=texts[:-1])
    with pytest.raises(TypeError):
        eldr.fit(workload.prefill, WORKERS, top_k=TOP_K, prompts="not a list")
    bad = list(texts)
    bad[0] = ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = eldr.fit(workload.prefill, WORKERS, top_k=TOP_K, prompts=bad)
    assert any("1 calibration records were skipped" in str(w.message) for w in caught)
    assert table.predictor["prototypes"] == len(texts) - 1
    with pytest.raises(eldr.InvalidArgument, match="neighbours"):
        eldr.fit(workload.prefill, WORKERS, top_k=TOP_K, prompts=texts,
                 predictor={"neighbours": 0})
    with pytest.raises(eldr.InvalidArgument, match="unknown predictor option"):
        eldr.fit(workload.prefill, WORKERS, top_k=TOP_K, prompts=texts, predictor={"k": 1})


def test_complete_request_is_a_deprecated_complete(prompt_table: eldr.Table) -> None:
    router = eldr.Router(prompt_table)
    router.route_prompt(text_of(0, 1), request_id=5)
    with pytest.warns(DeprecationWarning):
        router.complete_request(5)
    assert all(w["inflight"] == 0 for w in router.workers())


@pytest.fixture(scope="module")
def prompt_daemon(eldrd_binary: str, prompt_table: eldr.Table, tmp_path_factory) -> Iterator[str]:
    """A private eldrd serving the table with a predictor."""
    path = tmp_path_factory.mktemp("prompt") / "table.eldr"
    prompt_table.save(path)
    instance = f"pytest-prompt-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen([eldrd_binary, "--instance", instance, "--table", str(path),
                             "--log-level", "warn"], stdin=subprocess.DEVNULL)
    try:
        with eldr.Client(instance, open_timeout_ms=10000):
            pass
        yield instance
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0


def test_the_daemon_routes_prompts_and_learns_from_the_later_footprint(
        prompt_daemon: str, workload: Workload) -> None:
    with eldr.Client(prompt_daemon) as client:
        for d in range(DOMAINS):
            decision = client.route_prompt(f"p-{d}", text_of(d, 200))
            assert decision.ok and decision.confidence > 0.5
            # The engine's real footprint after prefill: learned, not routed again.
            client.push(f"p-{d}", workload.prefill[workload.domain == d][0])
            client.complete(f"p-{d}")
        # The daemon's verdicts: token ids against a text-fitted predictor, an
        # empty prompt; the daemon goes on routing.
        with pytest.raises(eldr.Unsupported):
            client.route_prompt("ids", tokens_of(1, 3))
        with pytest.raises(eldr.InvalidArgument):
            client.route_prompt("empty", "")
        assert client.route_prompt("after", text_of(0, 300)).ok
