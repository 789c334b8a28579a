#!/usr/bin/env bash
# Prints the newest pyenv CPython X.Y (a CPython that is not Debian's), or
# exits 1 when pyenv has none: scripts/install-deps.sh (the wheelhouse) and
# bindings/python/tests/install_test.sh (the wheel test) pick theirs with it.
#   scripts/pyenv-python.sh 3.12      -> /root/.pyenv/versions/3.12.1/bin/python3.12
set -euo pipefail
version=${1:?usage: pyenv-python.sh X.Y}
root=${PYENV_ROOT:-$HOME/.pyenv}
for dir in $(ls -d "$root/versions/$version".* 2>/dev/null | sort -V -r); do
  if [[ -x "$dir/bin/python$version" ]]; then
    echo "$dir/bin/python$version"
    exit 0
  fi
done
exit 1
