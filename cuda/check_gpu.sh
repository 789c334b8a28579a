#!/usr/bin/env bash
# The GPU check of the CUDA footprint kernels (sm_90: H100/H200): builds them
# in Release, runs their correctness suites against the CPU reference (every
# case must run: a skip because no device was found is a failure here), then
# times them at the paper's shapes and prints a markdown table.
# Exits nonzero on any build error, mismatch or missing device.
#
#   cuda/check_gpu.sh [build-dir]      build, check and time, on a GPU machine
#                                      with the build dependencies
#                                      (scripts/install-deps.sh) and nvcc
#   cuda/check_gpu.sh --stage DIR      build (in build-gpu-check; no GPU needed)
#                                      and copy the three programs into DIR
#   cuda/check_gpu.sh --from DIR       check and time the programs staged in DIR,
#                                      on a GPU machine that has only the NVIDIA
#                                      driver (no compiler, no network)
#
# The staged programs link the CUDA runtime, GoogleTest and xxHash statically
# and need only glibc, libstdc++ and the driver (580+ for a CUDA 13 build).
# Default build-dir: build-gpu-check. nvcc (CUDA 12+): CUDACXX, else
# /usr/local/cuda/bin/nvcc, else CUDA 13 from PyPI in .deps/cuda
# (scripts/install-deps.sh cuda), as the normal build finds it.
# ELDR_GPU_BENCH_RUNS sets the timed runs per figure (200).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The library's soname: libeldr.so.<ELDR_ABI_VERSION> (eldr.h).
soname="libeldr.so.$(awk '/^#define ELDR_ABI_VERSION /{print $3}' "$root/capi/include/eldr/eldr.h")"
runs="${ELDR_GPU_BENCH_RUNS:-200}"
jobs="$(nproc 2>/dev/null || echo 4)"
programs=(eldr_cuda_tests eldr_cuda_capi_tests eldr_gpu_bench)

step() { printf '\n== %s\n' "$*"; }
die() {
  echo "check_gpu.sh: $*" >&2
  exit 1
}

mode=all
case "${1:-}" in
  --stage | --from)
    mode="${1#--}"
    [[ $# -eq 2 ]] || die "usage: cuda/check_gpu.sh $1 DIR"
    dir="$(mkdir -p "$2" && cd "$2" && pwd)"
    ;;
  -*) die "unknown option $1 (see the header of cuda/check_gpu.sh)" ;;
  *) build="${1:-$root/build-gpu-check}" ;;
esac

require_gpu() {
  step "device"
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L; then
    die "no NVIDIA GPU visible (nvidia-smi)"
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
}

# Builds the three programs in Release into $build.
build_programs() {
  step "configure ($build, Release, CUDA on)"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DELDR_ENABLE_CUDA=ON \
    -DELDR_BUILD_TESTS=ON -DELDR_BUILD_BENCH=OFF -DELDR_BUILD_BINDINGS=OFF \
    -DELDR_BUILD_EXAMPLES=OFF -DELDR_BUILD_TOOLS=OFF >"$build.configure.log" 2>&1 || {
    tail -40 "$build.configure.log" >&2
    die "configure failed (full log: $build.configure.log)"
  }
  step "build"
  local start
  start=$(date +%s)
  cmake --build "$build" -j"$jobs" --target "${programs[@]}"
  echo "built in $(($(date +%s) - start)) s"
}

# Runs the suites and the bench found in $bin ($soname beside them).
check_and_time() {
  local bin="$1" suite log
  step "correctness: kernels vs the CPU reference"
  for suite in eldr_cuda_tests eldr_cuda_capi_tests; do
    log="$(mktemp)"
    if ! LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin/$suite" \
      --gtest_color=no 2>&1 | tee "$log"; then
      rm -f "$log"
      die "$suite failed"
    fi
    # The two no-device cases skip by design on a GPU machine; anything else
    # skipped means the device was not usable.
    skipped="$(grep -E '^\[  SKIPPED \] [A-Za-z]' "$log" | grep -v -E \
      'create_without_a_device_is_a_cuda_error_not_a_crash|valid_options_without_a_device_are_a_cuda_error' || true)"
    rm -f "$log"
    [[ -z "$skipped" ]] || die "GPU cases were skipped (is the driver older than the CUDA build?):
$skipped"
  done
  step "timing (median of $runs runs after warm-up)"
  "$bin/eldr_gpu_bench" --runs "$runs"
}

# Copies the built programs and the $soname they load into $1.
collect_programs() {
  local p
  mkdir -p "$1"
  for p in "${programs[@]}"; do
    case "$p" in
      eldr_gpu_bench) cp "$build/cuda/$p" "$1/" ;;
      *) cp "$build/tests/cuda/$p" "$1/" ;;
    esac
  done
  cp -L "$(find "$build" -name "$soname" -print -quit)" "$1/$soname"
}

case "$mode" in
  all)
    require_gpu
    build_programs
    collect_programs "$build/checked"
    check_and_time "$build/checked"
    ;;
  stage)
    build="$root/build-gpu-check"
    build_programs
    collect_programs "$dir"
    {
      echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
      nvcc=$(sed -n 's/^set(CMAKE_CUDA_COMPILER "\(.*\)")$/\1/p' \
        "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake | head -1)
      echo "nvcc $nvcc"
      "$nvcc" --version | tail -2
    } >"$dir/BUILD_INFO"
    step "staged in $dir ($(du -sh "$dir" | cut -f1))"
    cat "$dir/BUILD_INFO"
    echo "On the GPU machine: cuda/check_gpu.sh --from $dir"
    ;;
  from)
    for p in "${programs[@]}" "$soname"; do
      [[ -f "$dir/$p" ]] || die "$dir/$p is missing: stage with cuda/check_gpu.sh --stage $dir"
    done
    [[ -f "$dir/BUILD_INFO" ]] && cat "$dir/BUILD_INFO"
    require_gpu
    check_and_time "$dir"
    ;;
esac
