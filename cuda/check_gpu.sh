#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (sm_90: H100/H200): builds the CUDA footprint
# kernels in Release, runs their correctness suites against the CPU reference
# (every case must run: a skip because no device was found is a failure here),
# then times them at the paper's shapes and prints a markdown table.
# Exits nonzero on any build error, mismatch or missing device.
#
#   cuda/check_gpu.sh [build-dir]     (default: build-gpu-check)
#
# Needs the project's build dependencies (scripts/install-deps.sh) and nvcc
# (CUDA 12+; CUDACXX or /usr/local/cuda/bin/nvcc). Takes a few minutes on a
# 16-core machine; ELDR_GPU_BENCH_RUNS sets the timed runs per figure (200).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-gpu-check}"
runs="${ELDR_GPU_BENCH_RUNS:-200}"
jobs="$(nproc 2>/dev/null || echo 4)"

step() { printf '\n== %s\n' "$*"; }

step "device"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L; then
  echo "check_gpu.sh: no NVIDIA GPU visible (nvidia-smi)" >&2
  exit 1
fi

step "configure ($build, Release, CUDA on)"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DELDR_ENABLE_CUDA=ON \
  -DELDR_BUILD_TESTS=ON -DELDR_BUILD_BENCH=OFF -DELDR_BUILD_BINDINGS=OFF \
  -DELDR_BUILD_EXAMPLES=OFF -DELDR_BUILD_TOOLS=OFF >"$build.configure.log" 2>&1 || {
  tail -40 "$build.configure.log" >&2
  echo "check_gpu.sh: configure failed (full log: $build.configure.log)" >&2
  exit 1
}

step "build"
start=$(date +%s)
cmake --build "$build" -j"$jobs" --target eldr_cuda_tests eldr_cuda_capi_tests eldr_gpu_bench
echo "built in $(($(date +%s) - start)) s"

step "correctness: kernels vs the CPU reference"
# A GTEST_SKIP here would mean the device was not usable: fail instead.
for suite in "$build/tests/cuda/eldr_cuda_tests" "$build/tests/cuda/eldr_cuda_capi_tests"; do
  log="$(mktemp)"
  "$suite" --gtest_color=no 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  if [[ $status -ne 0 ]]; then
    echo "check_gpu.sh: $(basename "$suite") failed" >&2
    exit 1
  fi
  # The two no-device cases skip by design on a GPU machine; anything else must run.
  skipped="$(grep -E '^\[  SKIPPED \] [A-Za-z]' "$log" | grep -v -E \
    'create_without_a_device_is_a_cuda_error_not_a_crash|valid_options_without_a_device_are_a_cuda_error' || true)"
  rm -f "$log"
  if [[ -n "$skipped" ]]; then
    echo "check_gpu.sh: GPU cases were skipped:" >&2
    echo "$skipped" >&2
    exit 1
  fi
done

step "timing (median of $runs runs after warm-up)"
"$build/cuda/eldr_gpu_bench" --runs "$runs"
