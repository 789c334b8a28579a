"""eldr.Client against a live, private eldrd serving a table fitted here."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import numpy as np
import pytest

import eldr
from conftest import EXPERTS, LAYERS, Workload


def rid(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:12]}"


def test_route_gets_a_decision_from_the_daemon(daemon: str, table: eldr.Table,
                                               workload: Workload) -> None:
    fp = workload.prefill[11]
    with eldr.Client(daemon) as sut:
        decision = sut.route(rid("route"), fp, timeout_ms=5000)
    assert decision.ok and decision.worker in table.worker_ids
    assert decision.band_size >= 1 and decision.policy == "eldr_cost"  # the daemon's default
    # The daemon scored with the table we fitted and saved.
    slot = list(table.worker_ids).index(decision.worker)
    assert decision.similarity == pytest.approx(float(table.scores(fp)[slot]), abs=1e-4)


def test_push_from_an_engine_wait_from_a_gateway(daemon: str, workload: Workload) -> None:
    request = rid("split")
    with eldr.Client(daemon) as engine, eldr.Client(daemon) as gateway:
        engine.push(request, workload.prefill[3])
        decision = gateway.wait(request, 5000)
        again = gateway.wait(request.encode(), 0)  # bytes ids; a published decision stays
        # The gateway presents the decision's token (a gateway in another
        # process needs it; the daemon refuses its complete without it).
        gateway.complete(request, token=decision.completion_token)
    assert decision.ok and again.worker == decision.worker
    assert decision.completion_token != 0
    assert again.completion_token == decision.completion_token
    assert decision.to_dict()["completion_token"] == decision.completion_token


def test_wait_releases_the_gil_while_blocked(daemon: str, workload: Workload) -> None:
    # The waiter blocks in C; if it held the GIL the push below could not run
    # before its wait ran out, and it would raise Timeout.
    request = rid("gil")
    result: dict = {}
    with eldr.Client(daemon) as gateway, eldr.Client(daemon) as engine:
        def waiter() -> None:
            try:
                result["decision"] = gateway.wait(request, 10000)
            except eldr.Error as err:  # reported below
                result["error"] = err

        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.1)  # let the waiter block first (if it has not, the test is merely weaker)
        engine.push(request, workload.prefill[0])
        thread.join()
    assert "error" not in result, result.get("error")
    assert result["decision"].ok


def test_unknown_request_times_out(daemon: str) -> None:
    with eldr.Client(daemon) as sut:
        with pytest.raises(eldr.Timeout) as info:
            sut.wait(rid("never-pushed"), 30)
    assert info.value.status == -13 and info.value.name == "ELDR_E_TIMEOUT"
    assert "never-pushed" in str(info.value)


def test_reports_and_worker_control(daemon: str, workload: Workload) -> None:
    with eldr.Client(daemon) as sut:
        sut.report(0, 3, 0.25)
        sut.drain_worker(1)
        sut.add_worker(1)
        decision = sut.route(rid("after-control"), workload.prefill[1], 5000)
        assert decision.ok
        sut.complete(rid("unknown"))  # counted by the daemon, not an error here


def test_step_reports_are_sent_and_bad_values_refused(daemon: str, workload: Workload) -> None:
    with eldr.Client(daemon) as sut:
        sut.report(0, 2, 0.5, batch_size=3, step_ms=4.5)  # eldr_client_report
        sut.report(1, 1, 0.25, batch_size=0, step_ms=0.0)  # nothing of _ex: the plain report
        for bad in ({"step_ms": -1.0}, {"step_ms": float("nan")}, {"step_ms": float("inf")}):
            with pytest.raises(eldr.InvalidArgument, match="step_ms"):
                sut.report(0, 1, 0.5, batch_size=2, **bad)
        with pytest.raises(eldr.InvalidArgument):
            sut.report(0, 1, 1.5, batch_size=2, step_ms=1.0)
        assert sut.route(rid("after-step-report"), workload.prefill[2], 5000).ok


def test_bad_arguments_raise_before_anything_is_sent(daemon: str) -> None:
    with eldr.Client(daemon) as sut:
        with pytest.raises(eldr.InvalidArgument, match="NUL"):
            sut.push("a\0b", np.zeros((LAYERS, EXPERTS), np.int16))
        with pytest.raises(eldr.InvalidArgument):
            sut.push("x" * 200, np.zeros((LAYERS, EXPERTS), np.int16))
        with pytest.raises(eldr.InvalidArgument):
            sut.push("", np.zeros((LAYERS, EXPERTS), np.int16))
        with pytest.raises(eldr.ShapeMismatch):
            sut.push(rid("flat"), np.zeros(LAYERS * EXPERTS, np.int16))
        with pytest.raises(TypeError):
            sut.push(rid("float"), np.zeros((LAYERS, EXPERTS), np.float64))
        with pytest.raises(TypeError):
            sut.wait(12345, 0)


def test_rejected_footprint_raises_with_the_decision(daemon: str) -> None:
    wrong_geometry = np.ones((LAYERS + 2, EXPERTS), np.int16)
    with eldr.Client(daemon) as sut:
        with pytest.raises(eldr.Error) as info:
            sut.route(rid("wrong-shape"), wrong_geometry, 5000)
    # Either the client checks the geometry itself, or the daemon's decision
    # says why it rejected the footprint; both must name a shape problem.
    assert isinstance(info.value, eldr.ShapeMismatch), repr(info.value)
    if info.value.decision is not None:
        assert not info.value.decision.ok


def test_closed_client_raises_state_error(daemon: str) -> None:
    sut = eldr.Client(daemon)
    assert not sut.closed and sut.instance == daemon
    sut.close()
    sut.close()  # idempotent
    assert sut.closed
    with pytest.raises(eldr.StateError, match="closed"):
        sut.wait("anything", 0)


def test_no_daemon_for_an_unknown_instance() -> None:
    with pytest.raises(eldr.NoDaemon) as info:
        eldr.Client(f"absent-{uuid.uuid4().hex[:8]}", open_timeout_ms=50)
    assert info.value.status == -14


class _Interrupted(Exception):
    pass


def test_a_long_wait_lets_signal_handlers_run(daemon: str) -> None:
    # The wait runs in slices and checks for signals between them, so a
    # handler (Ctrl-C's KeyboardInterrupt, here an alarm) ends it early
    # instead of the caller sitting out the whole timeout.
    def on_alarm(signum: int, frame: object) -> None:
        raise _Interrupted()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        with eldr.Client(daemon) as sut:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(_Interrupted):
                sut.wait(rid("interrupted"), 20000)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
