#!/usr/bin/env bash
# The type stubs (ctest python.stubs), run in the folder holding the built
# package (build/python): eldr/_eldr.pyi must match the extension module
# (stubtest; pybind11's unavoidable differences are in the allowlist), and the
# package must type-check under mypy --strict.
# Usage: stubs_test.sh PYTHON (an interpreter with mypy: the project's venv).
set -euo pipefail
python=$1
here=$(cd "$(dirname "$0")" && pwd)
"$python" -m mypy.stubtest eldr._eldr --allowlist "$here/stubtest_allowlist.txt"
"$python" -m mypy --strict -p eldr
