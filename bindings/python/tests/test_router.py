"""eldr.Router: the embedded router through the binding."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import eldr
from conftest import EXPERTS, LAYERS, WORKERS, Workload

WIDE = 2.0  # a band wider than any score gap: every active worker is in it


def test_route_returns_a_worker_and_counts_it_in_flight(table: eldr.Table,
                                                        workload: Workload) -> None:
    sut = eldr.Router(table)
    worker = sut.route(workload.prefill[0]).worker
    assert worker in table.worker_ids
    slots = sut.workers()
    assert [w["id"] for w in slots] == list(table.worker_ids)
    assert {w["id"]: w["inflight"] for w in slots}[worker] == 1
    sut.complete_worker(worker)
    assert all(w["inflight"] == 0 for w in sut.workers())


def test_narrow_band_routes_to_the_most_similar_worker(table: eldr.Table,
                                                       workload: Workload) -> None:
    sut = eldr.Router(table, "eldr", tau=0.0)  # the band policy (the default is eldr_cost)
    for fp in workload.prefill[::7]:
        best = int(table.worker_ids[np.argmax(table.scores(fp))])
        assert sut.route(fp, loads=np.zeros(WORKERS, np.uint32)).worker == best


def test_loads_steer_the_decision_without_counting(table: eldr.Table,
                                                   workload: Workload) -> None:
    sut = eldr.Router(table, "eldr", tau=WIDE)
    fp = workload.prefill[0]
    for idle in range(WORKERS):
        loads = np.full(WORKERS, 10, np.uint32)
        loads[idle] = 0
        assert sut.route(fp, loads=loads).worker == table.worker_ids[idle]
        assert sut.route(fp, loads=loads.tolist()).worker == table.worker_ids[idle]  # any int sequence
    assert all(w["inflight"] == 0 for w in sut.workers())


def test_set_load_steers_later_routes(table: eldr.Table, workload: Workload) -> None:
    sut = eldr.Router(table, "eldr", tau=WIDE)
    for worker in table.worker_ids:
        sut.set_load(int(worker), 50)
    sut.set_load(2, 0)
    assert sut.route(workload.prefill[0]).worker == 2


def test_a_decision_carries_the_details(table: eldr.Table, workload: Workload) -> None:
    sut = eldr.Router(table, policy="eldr")
    fp = workload.prefill[4]
    decision = sut.route(fp)
    assert decision.ok and decision.status == 0 and decision.status_name == "ELDR_OK"
    assert decision.policy == "eldr"
    assert decision.band_size >= 1
    slot = list(table.worker_ids).index(decision.worker)
    assert decision.similarity == pytest.approx(float(table.scores(fp)[slot]), abs=1e-5)
    assert decision.to_dict()["worker"] == decision.worker
    assert "Decision(worker=" in repr(decision)


def test_scores_match_the_table_and_the_band(table: eldr.Table, workload: Workload) -> None:
    sut = eldr.Router(table, tau=0.0)
    fp = workload.prefill[9]
    scores, in_band = sut.scores(fp)
    assert scores.dtype == np.float32 and in_band.dtype == np.bool_
    assert scores.shape == in_band.shape == (sut.worker_slots,) == (WORKERS,)
    np.testing.assert_allclose(scores, table.scores(fp), atol=1e-5)
    assert in_band[np.argmax(scores)] and in_band.sum() >= 1
    _, everyone = eldr.Router(table, tau=WIDE).scores(fp)
    assert everyone.all()


def test_policies_by_name_and_id(table: eldr.Table, workload: Workload) -> None:
    names = eldr.policy_names()
    assert names[0] == "eldr" and "jsq" in names and "round_robin" in names
    for policy_id, name in enumerate(names):
        if name == "domain":
            continue  # needs a table fitted with labels
        assert eldr.Router(table, name).route(workload.prefill[0]).policy == name
        assert eldr.Router(table, policy_id).route(workload.prefill[0]).policy == name
    with pytest.raises(eldr.InvalidArgument, match="known: eldr"):
        eldr.Router(table, "fastest")
    with pytest.raises(eldr.InvalidArgument):
        eldr.Router(table, 99)


def test_tau_none_uses_the_table_default(table: eldr.Table, workload: Workload) -> None:
    sut = eldr.Router(table, tau=None)
    assert sut.route(workload.prefill[0]).worker in table.worker_ids


def test_membership_changes(table: eldr.Table, workload: Workload) -> None:
    sut = eldr.Router(table, tau=WIDE)
    fp = workload.prefill[0]
    sut.drain_worker(1)
    sut.remove_worker(3)
    picks = {sut.route(fp).worker for _ in range(40)}
    assert picks <= {0, 2}
    states = {w["id"]: w["state"] for w in sut.workers()}
    assert states == {0: "active", 1: "draining", 2: "active", 3: "removed"}
    sut.add_worker(1)
    assert {w["id"]: w["state"] for w in sut.workers()}[1] == "active"
    sut.add_worker(7)  # a new worker: a new slot
    assert sut.worker_slots == WORKERS + 1
    with pytest.raises(eldr.NotFound) as info:
        sut.drain_worker(42)
    assert info.value.status == -7 and info.value.name == "ELDR_E_NOT_FOUND"


def test_extra_complete_is_rejected(table: eldr.Table) -> None:
    with pytest.raises(eldr.StateError, match="no request in flight"):
        eldr.Router(table).complete_worker(0)


def test_bad_loads_raise(table: eldr.Table, workload: Workload) -> None:
    sut = eldr.Router(table)
    fp = workload.prefill[0]
    with pytest.raises(eldr.InvalidArgument):
        sut.route(fp, loads=np.zeros(WORKERS + 1, np.uint32))  # not one per slot
    with pytest.raises(eldr.OutOfRange):
        sut.route(fp, loads=[1, -1, 0, 0])
    with pytest.raises(TypeError):
        sut.route(fp, loads=np.zeros(WORKERS, np.float64))
    with pytest.raises(eldr.ShapeMismatch):
        sut.route(fp, loads=np.zeros((WORKERS, 1), np.uint32))


def test_bad_footprints_raise_and_leave_no_load(table: eldr.Table) -> None:
    sut = eldr.Router(table)
    with pytest.raises(eldr.ShapeMismatch):
        sut.route(np.zeros((LAYERS, EXPERTS + 1), np.int16))
    with pytest.raises(TypeError):
        sut.route(np.zeros((LAYERS, EXPERTS), np.float32))
    assert all(w["inflight"] == 0 for w in sut.workers())


def test_swap_table_bumps_the_epoch(table: eldr.Table, workload: Workload) -> None:
    sut = eldr.Router(table)
    before = sut.route(workload.prefill[0]).table_epoch
    other = eldr.fit(workload.prefill, WORKERS, seed=2)
    sut.swap_table(other)
    assert sut.table is other
    assert sut.route(workload.prefill[0]).table_epoch > before


def test_c_route_benchmark_helper(table: eldr.Table, workload: Workload) -> None:
    sut = eldr.Router(table)
    assert eldr._eldr._bench_c_route(sut, workload.prefill[0], iterations=10, rounds=3) > 0
    with pytest.raises(eldr.InvalidArgument):
        eldr._eldr._bench_c_route(sut, workload.prefill[0], iterations=0)


def test_one_router_shared_by_threads_counts_every_route(table: eldr.Table,
                                                         workload: Workload) -> None:
    sut = eldr.Router(table, tau=WIDE)
    errors: list = []

    def worker_thread(offset: int) -> None:
        try:
            for i in range(200):
                sut.route(workload.prefill[(offset + i) % len(workload.prefill)])
        except Exception as err:  # reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=worker_thread, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert sum(w["inflight"] for w in sut.workers()) == 800
