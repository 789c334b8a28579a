"""The checks install_test.sh runs in a fresh venv holding an installed eldr
wheel and no NumPy, from a clean environment outside the checkout: everything
that takes no arrays works, and the array calls say that they need NumPy.

Plain asserts, standard library only (the venv has no pytest)."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path


def main() -> None:
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD"):
        assert not os.environ.get(name), f"{name} is set: the check must run in a clean environment"
    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    else:
        raise AssertionError("this venv has NumPy: the check is for an interpreter without it")

    import eldr

    assert "numpy" not in sys.modules, "import eldr imported numpy"
    package = Path(eldr.__file__).resolve().parent
    assert Path(sys.prefix).resolve() in package.parents, f"eldr from {package}, not the venv"

    # The extension loaded the libeldr.so shipped next to it (RUNPATH $ORIGIN).
    with open("/proc/self/maps") as maps:
        loaded = {line.split()[-1] for line in maps if "libeldr.so" in line}
    assert loaded and all(Path(p).parent == package for p in loaded), f"libeldr.so from {loaded}"

    major, minor, patch = (int(x) for x in eldr.__version__.split("."))
    assert eldr.version_number() == major * 10000 + minor * 100 + patch
    assert eldr.abi_version() == eldr.ABI_VERSION
    assert eldr.status_name(-13) == "ELDR_E_TIMEOUT" and eldr.Status.TIMEOUT == -13
    assert eldr.status_string(-13)
    assert eldr.error_class(-14) is eldr.NoDaemon and issubclass(eldr.NoDaemon, eldr.Error)
    assert "eldr" in eldr.policy_names()

    # An error path through the C API: no eldrd serves this instance.
    instance = f"absent-{uuid.uuid4().hex[:8]}"
    try:
        eldr.Client(instance, open_timeout_ms=50)
    except eldr.NoDaemon as error:
        assert error.status == -14 and error.name == "ELDR_E_NO_DAEMON", repr(error)
    else:
        raise AssertionError(f"eldr.Client({instance!r}) did not raise eldr.NoDaemon")
    try:
        eldr.ClusterTable.load(os.path.join(os.getcwd(), "missing.eldr"))
    except eldr.IoError as error:
        assert error.status == -4
    else:
        raise AssertionError("ClusterTable.load of a missing file did not raise eldr.IoError")

    # An array call without NumPy: a clear ImportError, and still no numpy.
    try:
        eldr.fit([[[1, 2]]], 1)
    except ImportError as error:
        assert "needs NumPy" in str(error), str(error)
    else:
        raise AssertionError("eldr.fit without NumPy did not raise ImportError")
    assert "numpy" not in sys.modules

    print(f"eldr {eldr.__version__} on Python {sys.version.split()[0]} from {package}: ok")


if __name__ == "__main__":
    main()
