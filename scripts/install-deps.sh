#!/usr/bin/env bash
# Installs the Debian packages eldr builds and tests with, only those missing:
# one `apt-get update`, then one `apt-get install -y`; nothing when all are present.
set -euo pipefail
PACKAGES=(
  build-essential cmake pkg-config clang clang-format
  libgtest-dev libgmock-dev libbenchmark-dev
  libflatbuffers-dev flatbuffers-compiler libxxhash-dev nlohmann-json3-dev libcli11-dev
  libboost-dev libmimalloc-dev libtomlplusplus-dev libsystemd-dev libcpp-httplib-dev
  librapidcheck-dev
  python3-dev python3-pybind11 python3-numpy python3-pytest python3-matplotlib
  golang-go bindgen systemd curl
  libnats-dev nats-server
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "eldr: installing missing packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
