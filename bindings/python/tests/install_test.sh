#!/usr/bin/env bash
# The installable package (ctest: python.install). For CPython 3.10 and 3.12
# (pyenv's; a version that is absent is skipped with a message):
#   1. a fresh venv under a temp dir, `PIP_NO_INDEX=1 pip install
#      ./bindings/python` into it (offline; ELDR_BUILD_DIR reuses this build's
#      libeldr.so), then install_check.py in a clean environment (no
#      PYTHONPATH, no LD_LIBRARY_PATH, cwd outside the checkout, no NumPy);
#   2. the wheel `make wheel` builds (the same backend command, for the first
#      interpreter found, reusing that install's extension build) installed
#      into a second fresh venv, checked the same way.
# Usage: install_test.sh BUILD_DIR. Env: ELDR_INSTALL_TEST_PYTHONS ("3.10 3.12"),
# PYENV_ROOT (/root/.pyenv), ELDR_BUILD_TYPE (the extension's, default None here:
# no -O, no -g: the compile is most of the time this test takes).
set -euo pipefail

build=$(cd "$1" && pwd)
tests=$(cd "$(dirname "$0")" && pwd)
project=$(dirname "$tests")
pyenv_root=${PYENV_ROOT:-/root/.pyenv}
export ELDR_BUILD_TYPE=${ELDR_BUILD_TYPE:-None}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/eldr-install-test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ ! -f "$build/lib/libeldr.so" ]; then
  echo "install_test: $build/lib/libeldr.so missing (build eldr_capi first)" >&2
  exit 1
fi

# The newest pyenv X.Y.*: a CPython that is not Debian's.
find_python() {
  local dir
  for dir in $(ls -d "$pyenv_root/versions/$1".* 2>/dev/null | sort -V -r); do
    if [ -x "$dir/bin/python$1" ]; then
      echo "$dir/bin/python$1"
      return 0
    fi
  done
  return 1
}

# Runs install_check.py with the venv's python: empty environment, cwd and
# script outside the checkout, -I (no script dir, no user site, no PYTHON*).
check_venv() {
  local venv=$1 run=$tmp/run-$(basename "$venv")
  mkdir -p "$run"
  cp "$tests/install_check.py" "$run/"
  (cd "$run" && env -i HOME="$run" PATH=/usr/bin:/bin "$venv/bin/python" -I install_check.py)
}

# Offline pip: no index, no cache, no version check.
pip_offline() {
  PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 "$@"
}

tested=0
wheel_python=""
wheel_version=""
for version in ${ELDR_INSTALL_TEST_PYTHONS:-3.10 3.12}; do
  if ! python=$(find_python "$version"); then
    echo "install_test: SKIP Python $version (no $pyenv_root/versions/$version.*)"
    continue
  fi
  venv=$tmp/venv-$version
  echo "install_test: Python $version: $python -> venv, pip install $project"
  "$python" -m venv "$venv"
  (cd "$tmp" && ELDR_BUILD_DIR=$build ELDR_PYTHON_BUILD_DIR=$tmp/ext-$version \
    pip_offline "$venv/bin/python" -m pip install -q "$project")
  check_venv "$venv"
  tested=$((tested + 1))
  wheel_python=${wheel_python:-$python}
  wheel_version=${wheel_version:-$version}
done

if [ -n "$wheel_python" ]; then
  echo "install_test: make wheel's command with $wheel_python, the wheel into a fresh venv"
  # The extension's build folder of the pip install above: packing, no recompile.
  ELDR_PYTHON_BUILD_DIR=$tmp/ext-$wheel_version \
    "$wheel_python" "$project/build_backend/eldr_build_backend.py" --out "$tmp/wheels" --build-dir "$build"
  venv=$tmp/venv-wheel
  "$wheel_python" -m venv "$venv"
  pip_offline "$venv/bin/python" -m pip install -q "$tmp"/wheels/eldr-*.whl
  check_venv "$venv"
fi

if [ "$tested" -eq 0 ]; then
  echo "install_test: SKIP: none of ${ELDR_INSTALL_TEST_PYTHONS:-3.10 3.12} under $pyenv_root"
  exit 77
fi
echo "install_test: ok ($tested interpreter(s))"
