"""eldr.Pool: routing over NATS through an eldrd node of a pool, against a real
nats-server and eldrd started here (on loopback ports, stopped at the end)."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import subprocess
import time
import uuid
from typing import Iterator, Tuple

import numpy as np
import pytest

import eldr
from conftest import Workload


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def pool_node(eldrd_binary: str, table_path: str) -> Iterator[Tuple[str, str, str]]:
    """(nats url, pool, instance) of one eldrd node in a pool of its own."""
    server = shutil.which("nats-server") or "/usr/sbin/nats-server"
    if not os.access(server, os.X_OK):
        pytest.skip("nats-server is not installed (scripts/install-deps.sh installs it)")
    port = free_port()
    url = f"nats://127.0.0.1:{port}"
    pool = f"py{os.getpid()}"
    instance = f"pytest-pool-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    nats = subprocess.Popen([server, "-a", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    node = subprocess.Popen([eldrd_binary, "--instance", instance, "--table", table_path,
                             "--nats", url, "--node", "py", "--pool", pool, "--log-level", "warn"],
                            stdin=subprocess.DEVNULL)
    try:
        with eldr.Client(instance, open_timeout_ms=10000):
            pass
        yield url, pool, instance
    finally:
        for p in (node, nats):
            p.terminate()
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def open_pool(url: str, pool: str, **auth: str) -> eldr.Pool:
    # The node subscribes right after it started: retry until it answers.
    deadline = time.monotonic() + 10
    while True:
        try:
            return eldr.Pool(url, pool, **auth)
        except eldr.Unsupported:
            pytest.skip("this build has no NATS support")
        except eldr.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_route_and_complete_through_the_pool(pool_node: Tuple[str, str, str],
                                             table: eldr.Table,
                                             workload: Workload) -> None:
    url, pool, instance = pool_node
    with open_pool(url, pool) as sut:
        assert sut.name == pool
        fp = workload.prefill[5]
        rid = f"pool-{uuid.uuid4().hex[:8]}"
        deadline = time.monotonic() + 10
        while True:
            try:
                decision = sut.route(rid, fp)
                break
            except eldr.NoDaemon:  # no responder yet: the node is still subscribing
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert decision.ok and decision.worker in table.worker_ids
        assert decision.completion_token != 0
        with pytest.raises(eldr.InvalidArgument):
            sut.complete(rid, 0)
        with pytest.raises(eldr.NotFound):
            sut.complete("never-routed", 1)
        sut.complete(rid, decision.completion_token)
        # A footprint of another shape is the node's error.
        with pytest.raises(eldr.ShapeMismatch):
            sut.route("bad-shape", np.ones((3, 5), dtype=np.int16))
    assert sut.closed
    with pytest.raises(eldr.Error):
        sut.route("after-close", fp)


def test_a_pool_without_a_server_is_an_error() -> None:
    try:
        with pytest.raises(eldr.Error):
            eldr.Pool(f"nats://127.0.0.1:{free_port()}", "nobody", timeout_ms=200)
    except eldr.Unsupported:
        pytest.skip("this build has no NATS support")


def test_pool_credentials_are_checked_before_connecting(tmp_path: pathlib.Path) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    try:
        # A password file that is not there, a user without one: refused
        # before any server is tried, naming the file, never a secret.
        with pytest.raises(eldr.IoError) as missing:
            eldr.Pool(url, "p", timeout_ms=200, user="gw", password_file=str(tmp_path / "nope"))
        assert "nope" in str(missing.value)
        with pytest.raises(eldr.InvalidArgument):
            eldr.Pool(url, "p", timeout_ms=200, user="gw")
        pw = tmp_path / "pw"
        pw.write_text("s3cret\n")
        with pytest.raises(eldr.Error) as unreachable:
            eldr.Pool(url, "p", timeout_ms=200, user="gw", password_file=str(pw))
        assert "s3cret" not in str(unreachable.value)
    except eldr.Unsupported:
        pytest.skip("this build has no NATS support")


def test_a_pool_listens_under_its_own_inbox_prefix(pool_node: Tuple[str, str, str],
                                                   workload: Workload) -> None:
    url, pool, _ = pool_node
    with open_pool(url, pool, inbox_prefix="_INBOX.py-gw") as sut:
        rid = f"inbox-{uuid.uuid4().hex[:8]}"
        d = sut.route(rid, workload.prefill[3])
        sut.complete(rid, d.completion_token)
    # Under the pool's own subjects: no inbox, refused before connecting.
    with pytest.raises(eldr.InvalidArgument, match="inbox prefix"):
        eldr.Pool(url, pool, inbox_prefix="eldr." + pool)
