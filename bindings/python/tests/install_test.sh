#!/usr/bin/env bash
# The Python package as users get it (ctest python.install), for each pyenv
# CPython of ELDR_INSTALL_TEST_PYTHONS (default "3.10 3.12 3.13": the oldest
# and the newest, and 3.12; the in-tree suites run on the venv's 3.11;
# "3.10 3.11 3.12 3.13" for all four. One that is absent is skipped with a
# message):
#   1. `pip wheel ./bindings/python`, offline: the build backend
#      (scikit-build-core, pybind11) comes from the wheelhouse that
#      scripts/install-deps.sh fills, into pip's isolated build environment.
#      The first interpreter builds libeldr from the checkout, as a user's pip
#      does; the others take this build's (--config-settings=cmake.define.ELDR_LIBRARY), which
#      saves the compile;
#   2. `auditwheel repair`: the libraries libeldr needs beyond the C runtime
#      (libnats and its own) go into the wheel, which gets a manylinux tag;
#   3. a fresh venv and `pip install eldr` with PIP_NO_INDEX=1 and nothing at
#      hand but the wheel and NumPy's wheel; install_check.py from a clean
#      environment outside the checkout (the installed package, a route);
#   4. pytest from the wheelhouse, then the binding's tests against the
#      installed package (the daemon's with $ELDR_ELDRD).
# Usage: install_test.sh BUILD_DIR. Env: ELDR_DEPS_DIR (.deps), PYENV_ROOT,
# ELDR_INSTALL_TEST_PYTHONS, ELDR_JOBS.
set -euo pipefail

build=$(cd "$1" && pwd)
tests=$(cd "$(dirname "$0")" && pwd)
project=$(dirname "$tests")
checkout=$(cd "$project/../.." && pwd)
deps=${ELDR_DEPS_DIR:-$checkout/.deps}
house=$deps/wheelhouse
tmp=$(mktemp -d "${TMPDIR:-/tmp}/eldr-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

for need in "$build/lib/libeldr.so" "$deps/venv/bin/auditwheel" "$house"; do
  if [ ! -e "$need" ]; then
    echo "install_test: $need missing (build eldr_capi; scripts/install-deps.sh)" >&2
    exit 1
  fi
done

# pip with no index: only the folders named by --find-links.
offline() {
  PIP_NO_INDEX=1 PIP_FIND_LINKS= PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"
}

tested=0
for version in ${ELDR_INSTALL_TEST_PYTHONS:-3.10 3.12 3.13}; do
  if ! python=$("$checkout/scripts/pyenv-python.sh" "$version"); then
    echo "install_test: SKIP Python $version (pyenv has none)"
    continue
  fi
  tag=cp${version/./}
  library=()
  how="libeldr built from the checkout"
  if [ "$tested" -gt 0 ]; then
    library=(--config-settings=cmake.define.ELDR_LIBRARY="$build/lib/libeldr.so")
    how="this build's libeldr"
  fi
  echo "install_test: Python $version: pip wheel ./bindings/python ($how)"
  (cd "$tmp" && CMAKE_BUILD_PARALLEL_LEVEL=${ELDR_JOBS:-2} offline "$python" -m pip wheel -q \
    --no-deps --find-links "$house" -w "$tmp/dist-$version" "$project" \
    --config-settings=build-dir="$tmp/build-$version" "${library[@]}")

  echo "install_test: Python $version: auditwheel repair"
  PATH="$deps/venv/bin:$PATH" auditwheel repair -w "$tmp/only-$version" \
    "$tmp/dist-$version"/eldr-*-"$tag"-"$tag"-linux_x86_64.whl >"$tmp/repair-$version.log" 2>&1 ||
    { cat "$tmp/repair-$version.log"; exit 1; }
  cp "$house"/numpy-*-"$tag"-"$tag"-*manylinux*.whl "$tmp/only-$version/"
  ls "$tmp/only-$version"

  venv=$tmp/venv-$version
  "$python" -m venv "$venv"
  offline "$venv/bin/python" -m pip install -q --find-links "$tmp/only-$version" eldr
  run=$tmp/run-$version
  mkdir -p "$run"
  cp "$tests/install_check.py" "$run/"
  (cd "$run" && env -i HOME="$run" PATH=/usr/bin:/bin "$venv/bin/python" -I install_check.py)

  echo "install_test: Python $version: the binding's tests against the installed package"
  offline "$venv/bin/python" -m pip install -q --find-links "$house" \
    -r "$checkout/scripts/deps/python-test.txt"
  cp "$tests"/conftest.py "$tests"/test_*.py "$run/"
  (cd "$run" && env -u PYTHONPATH PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/python" -m pytest -q -p no:cacheprovider .)
  tested=$((tested + 1))
done

if [ "$tested" -eq 0 ]; then
  echo "install_test: SKIP: none of ${ELDR_INSTALL_TEST_PYTHONS:-3.10 3.12 3.13} in pyenv"
  exit 77
fi
echo "install_test: ok ($tested interpreter(s))"
