#!/usr/bin/env bash
# Installs what eldr builds and tests with, only what is missing; quick when
# everything is present (each step keeps a stamp of the pins it installed).
#
#   scripts/install-deps.sh [STEP...]     default: every step, in this order
#
#   apt         Debian packages: one `apt-get update`, one `apt-get install -y`
#   python      the project's venv, $ELDR_DEPS_DIR/venv, from PyPI
#               (scripts/deps/python-dev.txt and the build backend pinned in
#               bindings/python/pyproject.toml), made by `python3` on PATH or $ELDR_VENV_PYTHON
#   cuda        CUDA 13 from PyPI (scripts/deps/cuda.txt) in $ELDR_DEPS_DIR/cuda,
#               unless the machine has a CUDA toolkit (CUDACXX, /usr/local/cuda,
#               nvcc on PATH) or ELDR_CUDA=off
#   wheelhouse  wheels for the offline install test of the Python package: the
#               test pins and the build backend, for each pyenv CPython 3.10-3.13
#   go          staticcheck, pinned by scripts/deps/go.mod, in $ELDR_DEPS_DIR/bin;
#               every Go module's dependencies in the module cache
#   rust        clippy and rustfmt (rustup), bindgen-cli (crates.io, --locked)
#               in $ELDR_DEPS_DIR/bin, every Cargo workspace's crates fetched
#
# Everything but the Debian packages lives in ELDR_DEPS_DIR (default: .deps in
# the checkout): delete it to start over. Builds after this step are offline.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="${ELDR_DEPS_DIR:-$root/.deps}"
pins="$root/scripts/deps"
BINDGEN_CLI_VERSION=0.73.2
APT_PACKAGES=(
  build-essential cmake pkg-config clang clang-format libclang-dev libclang-rt-14-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libflatbuffers-dev flatbuffers-compiler libxxhash-dev nlohmann-json3-dev libcli11-dev
  libboost-dev libmimalloc-dev libtomlplusplus-dev libsystemd-dev libcpp-httplib-dev zlib1g-dev
  librapidcheck-dev
  python3-dev python3-venv systemd curl
  libnats-dev nats-server
)

say() { echo "eldr deps: $*"; }
die() {
  echo "eldr deps: $*" >&2
  exit 1
}

# stamp_ok NAME INPUT...: the step NAME last ran with these inputs.
stamp_of() { { cat "$@" 2>/dev/null || true; } | sha256sum | cut -c1-16; }
stamp_ok() {
  local name=$1
  shift
  [[ -f "$deps/$name.stamp" && "$(cat "$deps/$name.stamp")" == "$(stamp_of "$@")" ]]
}
stamp_write() {
  local name=$1
  shift
  stamp_of "$@" >"$deps/$name.stamp"
}

# Go and cargo where their installers put them, also when PATH lacks them.
PATH="$PATH:/usr/local/go/bin:${CARGO_HOME:-$HOME/.cargo}/bin"

step_apt() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [[ ${#missing[@]} -eq 0 ]]; then return 0; fi
  say "installing missing Debian packages: ${missing[*]}"
  local sudo=""
  if [[ "$(id -u)" -ne 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The build backend's requirements, as written in pyproject.toml's [build-system].
build_requires() {
  sed -n '/^\[build-system\]/,/^\[/{s/^requires *= *\[\(.*\)\]/\1/p}' \
    "$root/bindings/python/pyproject.toml" | tr -d '" ' | tr ',' '\n'
}

step_python() {
  local python="${ELDR_VENV_PYTHON:-python3}" venv="$deps/venv" inputs
  command -v "$python" >/dev/null || die "no $python on PATH (set ELDR_VENV_PYTHON to a CPython >= 3.10)"
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "$python is $("$python" --version 2>&1); eldr needs CPython >= 3.10 (set ELDR_VENV_PYTHON)"
  inputs=("$pins/python-dev.txt" "$pins/python-test.txt" "$root/bindings/python/pyproject.toml")
  if [[ -x "$venv/bin/python" ]] && stamp_ok python "${inputs[@]}"; then return 0; fi
  say "Python venv $venv ($("$python" --version 2>&1)) from PyPI"
  [[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    -r "$pins/python-dev.txt" $(build_requires)
  stamp_write python "${inputs[@]}"
}

system_cuda() {
  [[ -n "${CUDACXX:-}" || -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc >/dev/null
}

step_cuda() {
  if [[ "${ELDR_CUDA:-}" == off ]]; then return 0; fi
  if system_cuda; then return 0; fi
  local prefix="$deps/cuda"
  if [[ -x "$prefix/bin/nvcc" ]] && stamp_ok cuda "$pins/cuda.txt"; then return 0; fi
  [[ -x "$deps/venv/bin/python" ]] || step_python
  say "CUDA from PyPI into $prefix"
  rm -rf "$deps/cuda-pkgs" "$prefix"
  "$deps/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    --target "$deps/cuda-pkgs" -r "$pins/cuda.txt"
  # The wheels lay out one toolkit root (bin, include, lib, nvvm) under
  # nvidia/cu13. CMake's FindCUDAToolkit looks for an unversioned libcudart.so.
  ln -s cuda-pkgs/nvidia/cu13 "$prefix"
  [[ -x "$prefix/bin/nvcc" ]] || die "no bin/nvcc in the CUDA wheels ($pins/cuda.txt)"
  ln -sf libcudart.so.13 "$prefix/lib/libcudart.so"
  "$prefix/bin/nvcc" --version | tail -2
  stamp_write cuda "$pins/cuda.txt"
}

step_wheelhouse() {
  local house="$deps/wheelhouse" version python found=()
  for version in 3.10 3.11 3.12 3.13; do
    if python=$("$root/scripts/pyenv-python.sh" "$version"); then found+=("$python"); fi
  done
  if [[ ${#found[@]} -eq 0 ]]; then return 0; fi
  local inputs=("$pins/python-test.txt" "$root/bindings/python/pyproject.toml")
  if stamp_ok wheelhouse "${inputs[@]}" <(printf '%s\n' "${found[@]}"); then return 0; fi
  say "wheelhouse $house for ${#found[@]} interpreter(s)"
  mkdir -p "$house"
  for python in "${found[@]}"; do
    "$python" -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$house" \
      -r "$pins/python-test.txt" $(build_requires)
  done
  stamp_write wheelhouse "${inputs[@]}" <(printf '%s\n' "${found[@]}")
}

step_go() {
  command -v go >/dev/null || {
    say "no go: the Go binding, the gateway example and their lint are skipped"
    return 0
  }
  local mods=("$root/bindings/go" "$root/examples/go-gateway" "$root/epp" "$pins")
  local inputs=() m
  for m in "${mods[@]}"; do inputs+=("$m/go.mod" "$m/go.sum"); done
  if [[ -x "$deps/bin/staticcheck" ]] && stamp_ok go "${inputs[@]}" <(go version); then return 0; fi
  say "Go modules and staticcheck from the module proxy"
  for m in "${mods[@]}"; do
    if [[ -f "$m/go.sum" ]]; then (cd "$m" && GOFLAGS=-mod=readonly go mod download); fi
  done
  GOFLAGS=-mod=readonly go build -C "$pins" -o "$deps/bin/staticcheck" honnef.co/go/tools/cmd/staticcheck
  stamp_write go "${inputs[@]}" <(go version)
}

step_rust() {
  command -v cargo >/dev/null || {
    say "no cargo: the Rust binding, its example and their lint are skipped"
    return 0
  }
  if command -v rustup >/dev/null; then
    local have
    have=$(rustup component list --installed 2>/dev/null)
    for c in clippy rustfmt; do
      grep -q "^$c" <<<"$have" || rustup component add "$c"
    done
  fi
  if ! "$deps/bin/bindgen" --version 2>/dev/null | grep -qx "bindgen $BINDGEN_CLI_VERSION"; then
    say "bindgen-cli $BINDGEN_CLI_VERSION from crates.io (cargo install --locked)"
    # The dev profile: it compiles in a third of the time, and generating
    # the bindings of one header takes it under a second.
    cargo install -q --locked --debug --root "$deps/cargo" bindgen-cli --version "$BINDGEN_CLI_VERSION"
    mkdir -p "$deps/bin"
    ln -sf ../cargo/bin/bindgen "$deps/bin/bindgen"
  fi
  local locks=("$root/bindings/rust/Cargo.lock" "$root/examples/rust-engine/Cargo.lock"
    "$root/tests/package/rust_consumer/Cargo.lock") l
  if stamp_ok rust "${locks[@]}"; then return 0; fi
  for l in "${locks[@]}"; do cargo fetch -q --locked --manifest-path "$(dirname "$l")/Cargo.toml"; done
  stamp_write rust "${locks[@]}"
}

steps=("$@")
if [[ ${#steps[@]} -eq 0 ]]; then steps=(apt python cuda wheelhouse go rust); fi
mkdir -p "$deps"
for s in "${steps[@]}"; do
  case "$s" in
    apt | python | cuda | wheelhouse | go | rust) "step_$s" ;;
    *) die "unknown step '$s' (apt python cuda wheelhouse go rust)" ;;
  esac
done
