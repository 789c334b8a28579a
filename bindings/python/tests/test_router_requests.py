"""eldr.Router: the eldr_cost default, step constants, requests by id,
complete(worker) oldest first, engine reports and stats."""

from __future__ import annotations

import math

import numpy as np
import pytest

import eldr
from conftest import WORKERS, Workload

STATS_KEYS = {"routed", "rejected", "completes_rejected", "completes_unknown", "untracked",
              "step_samples", "t0_ms", "tseq_ms", "alpha_us", "prompts_routed",
              "prompts_rejected", "learned", "learn_rejected", "prompts_dropped"}


def inflight(router: eldr.Router) -> dict:
    return {w["id"]: w["inflight"] for w in router.workers()}


def locality(table: eldr.Table, **kwargs) -> eldr.Router:
    """tau 0: every request goes to its most similar worker."""
    return eldr.Router(table, "eldr", tau=0.0, **kwargs)


def test_the_default_policy_is_eldr_cost(table: eldr.Table, workload: Workload) -> None:
    assert "eldr_cost" in eldr.policy_names()
    assert eldr.policy_names().index("eldr_cost") == 7
    assert eldr.Router(table).route(workload.prefill[0]).policy == "eldr_cost"
    assert eldr.Router(table, 7).route(workload.prefill[0]).policy == "eldr_cost"


def test_stats_start_at_zero_with_the_constants_in_force(table: eldr.Table) -> None:
    st = eldr.Router(table).stats()
    assert set(st) == STATS_KEYS
    assert all(st[k] == 0 for k in STATS_KEYS - {"t0_ms", "tseq_ms", "alpha_us"})
    assert all(isinstance(st[k], float) and math.isfinite(st[k]) and st[k] >= 0
               for k in ("t0_ms", "tseq_ms", "alpha_us"))


def test_step_constants_as_given(table: eldr.Table) -> None:
    st = eldr.Router(table, t0_ms=2.5, tseq_ms=0.125, alpha_us=3.0, max_batch=32).stats()
    assert (st["t0_ms"], st["tseq_ms"], st["alpha_us"]) == (2.5, 0.125, 3.0)
    zeros = eldr.Router(table, t0_ms=0, tseq_ms=0, alpha_us=0).stats()
    assert zeros["t0_ms"] == zeros["tseq_ms"] == zeros["alpha_us"] == 0.0


@pytest.mark.parametrize("kwargs", [
    {"t0_ms": 1.0},
    {"t0_ms": 1.0, "tseq_ms": 0.1},
    {"alpha_us": 2.0},
    {"max_batch": 16},
    {"t0_ms": -1.0, "tseq_ms": 0.1, "alpha_us": 2.0},
    {"t0_ms": float("nan"), "tseq_ms": 0.1, "alpha_us": 2.0},
    {"t0_ms": float("inf"), "tseq_ms": 0.1, "alpha_us": 2.0},
    {"t0_ms": 1.0, "tseq_ms": 0.1, "alpha_us": 2.0, "max_batch": 0},
    {"max_inflight": 0},
    {"max_inflight": 2**32 - 1},
])
def test_bad_step_options_raise(table: eldr.Table, kwargs: dict) -> None:
    with pytest.raises(eldr.InvalidArgument):
        eldr.Router(table, **kwargs)


def test_route_with_request_id_and_complete(table: eldr.Table,
                                                   workload: Workload) -> None:
    sut = locality(table)
    fp = workload.prefill[3]
    worker = sut.route(fp, request_id=1).worker
    assert isinstance(worker, int) and worker in table.worker_ids
    decision = sut.route(fp, request_id=2)
    assert decision.worker == worker and decision.policy == "eldr"
    assert inflight(sut)[worker] == 2
    sut.complete(1)
    assert inflight(sut)[worker] == 1
    # Completed already, and never routed: NotFound, counted, counts unchanged.
    with pytest.raises(eldr.NotFound) as info:
        sut.complete(1)
    assert info.value.status == eldr.Status.NOT_FOUND
    assert "eldr_router_complete" in info.value.message
    with pytest.raises(eldr.NotFound):
        sut.complete(12345)
    assert inflight(sut)[worker] == 1
    st = sut.stats()
    assert (st["routed"], st["completes_unknown"], st["completes_rejected"]) == (2, 2, 2)
    sut.complete(2)
    assert inflight(sut)[worker] == 0
    sut.route(fp, request_id=1)  # a finished id may come back
    assert inflight(sut)[worker] == 1


def test_an_id_in_flight_is_refused(table: eldr.Table, workload: Workload) -> None:
    sut = locality(table)
    sut.route(workload.prefill[0], request_id=9)
    with pytest.raises(eldr.StateError):
        sut.route(workload.prefill[1], request_id=9)
    assert sum(inflight(sut).values()) == 1
    assert sut.stats()["rejected"] == 1


def test_request_id_is_not_taken_with_loads(table: eldr.Table,
                                            workload: Workload) -> None:
    sut = locality(table)
    with pytest.raises(eldr.InvalidArgument, match="loads"):
        sut.route(workload.prefill[0], loads=np.zeros(WORKERS, np.uint32), request_id=1)
    with pytest.raises(TypeError):
        sut.route(workload.prefill[0], request_id=-1)
    with pytest.raises(TypeError):
        sut.complete(-1)
    assert sum(inflight(sut).values()) == 0


def test_complete_worker_takes_the_oldest_request_on_it(table: eldr.Table,
                                                        workload: Workload) -> None:
    sut = locality(table)
    fp = workload.prefill[5]
    worker = [sut.route(fp, request_id=i).worker for i in (31, 32, 33)][0]
    sut.complete_worker(worker)  # 31
    with pytest.raises(eldr.NotFound):
        sut.complete(31)
    sut.complete(33)
    sut.complete_worker(worker)  # 32
    with pytest.raises(eldr.NotFound):
        sut.complete(32)
    with pytest.raises(eldr.StateError):
        sut.complete_worker(worker)
    # Routes without ids complete by worker.
    sut.route(fp)
    sut.complete_worker(worker)
    assert inflight(sut)[worker] == 0


def test_routes_past_max_inflight_are_untracked(table: eldr.Table,
                                                workload: Workload) -> None:
    sut = locality(table, max_inflight=1)
    fp = workload.prefill[2]
    worker = sut.route(fp, request_id=1).worker
    sut.route(fp, request_id=2)
    assert inflight(sut)[worker] == 2
    assert sut.stats()["untracked"] == 1
    with pytest.raises(eldr.NotFound):
        sut.complete(2)
    sut.complete(1)
    sut.complete_worker(worker)
    assert inflight(sut)[worker] == 0


def test_a_report_sets_the_in_flight_count(table: eldr.Table, workload: Workload) -> None:
    sut = locality(table)
    fp = workload.prefill[6]
    worker = sut.route(fp, request_id=1).worker
    sut.report(worker, batch_size=6)
    assert inflight(sut)[worker] == 6
    sut.route(fp, request_id=2)
    assert inflight(sut)[worker] == 7
    sut.report(worker, step_ms=3.0)  # no batch size: the count stays
    sut.report(worker, batch_size=0, step_ms=0.0)  # 0 = not reported
    sut.report(worker)
    assert inflight(sut)[worker] == 7
    sut.complete(2)
    assert inflight(sut)[worker] == 6
    assert all(n == 0 for w, n in inflight(sut).items() if w != worker)


def test_step_reports_feed_the_fit_unless_it_is_off(table: eldr.Table,
                                                   workload: Workload) -> None:
    for fit in (True, False):
        sut = eldr.Router(table, t0_ms=2.0, tseq_ms=0.05, alpha_us=1.5, fit_step_cost=fit)
        sut.route(workload.prefill[0], request_id=1)
        for i in range(48):
            sut.report(0, batch_size=1 + i % 6, step_ms=30.0 + 4.0 * (i % 6))
        st = sut.stats()
        if fit:
            assert st["step_samples"] == 48 and st["t0_ms"] != 2.0
        else:
            assert st["step_samples"] == 0
            assert (st["t0_ms"], st["tseq_ms"], st["alpha_us"]) == (2.0, 0.05, 1.5)


@pytest.mark.parametrize("step_ms", [-1.0, float("nan"), float("inf")])
def test_bad_step_times_raise(table: eldr.Table, step_ms: float) -> None:
    sut = eldr.Router(table)
    with pytest.raises(eldr.InvalidArgument):
        sut.report(0, batch_size=2, step_ms=step_ms)
    assert sum(inflight(sut).values()) == 0


def test_report_of_an_unknown_or_bad_worker_raises(table: eldr.Table) -> None:
    sut = eldr.Router(table)
    with pytest.raises(eldr.NotFound):
        sut.report(4000, batch_size=1)
    with pytest.raises(eldr.InvalidArgument):
        sut.report(-1, batch_size=1)
    with pytest.raises(TypeError):
        sut.report(0, batch_size=-1)
