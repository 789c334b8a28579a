"""Helpers the loopback benchmarks share (bench-pool.py, bench-cluster.py):
a free port, and stopping the processes a run started."""
import signal
import socket
import subprocess


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_all(procs, grace_s=10):
    """SIGTERM to every process still running, then each waited for; one that
    outlives grace_s is killed."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
