"""NumPy is imported by the first array call, never by ``import eldr``: an
engine's venv without NumPy can still use the calls that take no arrays."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run_without_numpy(code: str, *args: str) -> str:
    """Runs code in a fresh interpreter where ``import numpy`` fails."""
    prelude = "import sys\nsys.modules['numpy'] = None  # import numpy raises ImportError\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_import_eldr_does_not_import_numpy() -> None:
    out = _run_without_numpy(
        """
        sys.modules.pop("numpy")
        import eldr
        print(sorted(m for m in sys.modules if m == "numpy" or m.startswith("numpy.")))
        """
    )
    assert out.strip() == "[]"


def test_calls_without_arrays_work_and_array_calls_say_they_need_numpy() -> None:
    out = _run_without_numpy(
        """
        import eldr
        assert eldr.status_name(-13) == "ELDR_E_TIMEOUT" and eldr.__version__
        try:
            eldr.Client("absent-lazy-numpy", open_timeout_ms=10)
        except eldr.NoDaemon:
            pass
        try:
            eldr.fit([[[1, 2]]], 1)
        except ImportError as error:
            print(error)
        """
    )
    assert "needs NumPy" in out and "prefill_counts" in out


def test_a_saved_table_loads_and_routes_setup_without_numpy(table_path: str) -> None:
    out = _run_without_numpy(
        """
        import eldr
        table = eldr.Table.load(sys.argv[1])
        router = eldr.Router(table, policy="eldr", tau=0.1, seed=0)
        assert table.num_workers > 0 and router.workers()
        try:
            table.worker_ids
        except ImportError as error:
            print(error)
        assert "numpy" not in {m for m, v in sys.modules.items() if v is not None}
        """,
        table_path,
    )
    assert "Table.worker_ids needs NumPy" in out
