"""The checks install_test.sh runs in a fresh venv that holds an installed eldr
wheel and NumPy (its one dependency) and nothing else, from a clean
environment outside the checkout: the package is the venv's, its libeldr is
the one in the wheel, the metadata is right, and a table fits and routes.

Plain asserts, standard library and NumPy only (the venv has no pytest)."""

from __future__ import annotations

import os
import sys
import uuid
from importlib import metadata
from pathlib import Path


def main() -> None:
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD"):
        assert not os.environ.get(name), f"{name} is set: the check must run in a clean environment"

    import numpy as np

    import eldr

    package = Path(eldr.__file__).resolve().parent
    assert Path(sys.prefix).resolve() in package.parents, f"eldr from {package}, not the venv"
    # The venv holds eldr and NumPy only: the wheel declared no other dependency.
    installed = {d.metadata["Name"].lower() for d in metadata.distributions()}
    assert installed <= {"eldr", "numpy", "pip", "setuptools"}, f"installed: {sorted(installed)}"
    assert metadata.requires("eldr") == ["numpy"], metadata.requires("eldr")

    # The extension loaded the libeldr shipped in the wheel (RUNPATH $ORIGIN),
    # and what libeldr needs beyond the C runtime came in the wheel too.
    with open("/proc/self/maps") as maps:
        mapped = {line.split()[-1] for line in maps if "/" in line.split()[-1]}
    ours = [Path(p) for p in mapped if "libeldr.so" in p or "libnats" in p]
    assert ours and all(package in p.parents or p.parent.name == "eldr.libs" for p in ours), ours

    major, minor, patch = (int(x) for x in eldr.__version__.split("."))
    assert metadata.version("eldr") == eldr.__version__
    assert eldr.version_number() == major * 10000 + minor * 100 + patch
    assert eldr.abi_version() == eldr.ABI_VERSION
    assert eldr.status_name(-13) == "ELDR_E_TIMEOUT" and eldr.Status.TIMEOUT == -13
    assert eldr.error_class(-14) is eldr.NoDaemon and issubclass(eldr.NoDaemon, eldr.Error)

    # A route: requests of two groups, in random order, that use different
    # experts; a table fitted on them; an embedded router that sends each
    # group to its own worker.
    rng = np.random.default_rng(5)
    layers, experts, n = 4, 16, 40
    group = rng.integers(0, 2, size=n)
    prefill = np.zeros((n, layers, experts), np.int16)
    for i in range(n):
        lo = int(group[i]) * (experts // 2)
        for layer in range(layers):
            picks = rng.integers(lo, lo + experts // 2, size=24)
            prefill[i, layer] = np.bincount(picks, minlength=experts)
    table = eldr.fit(prefill, 2, seed=1, top_k=1)
    router = eldr.Router(table, policy="eldr")
    picked = [router.route(prefill[i]).worker for i in range(n)]
    assert set(picked) <= {0, 1}
    worker_of = {int(group[i]): picked[i] for i in range(n)}
    assert sorted(worker_of.values()) == [0, 1], picked
    assert all(picked[i] == worker_of[int(group[i])] for i in range(n)), (list(group), picked)

    # An error path through the C API: no eldrd serves this instance.
    instance = f"absent-{uuid.uuid4().hex[:8]}"
    try:
        eldr.Client(instance, open_timeout_ms=50)
    except eldr.NoDaemon as error:
        assert error.status == -14 and error.name == "ELDR_E_NO_DAEMON", repr(error)
    else:
        raise AssertionError(f"eldr.Client({instance!r}) did not raise eldr.NoDaemon")

    print(f"eldr {eldr.__version__} on Python {sys.version.split()[0]} from {package}: ok")


if __name__ == "__main__":
    main()
