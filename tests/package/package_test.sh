#!/usr/bin/env bash
# Installs the built tree into a scratch prefix, then builds a consumer with
# find_package(eldr) and another with pkg-config, and runs both.
set -euo pipefail
BUILD="$1"
SRC="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD" --prefix "$WORK/prefix" > /dev/null
cmake -S "$SRC/consumer" -B "$WORK/cmake" -DCMAKE_PREFIX_PATH="$WORK/prefix" > /dev/null
cmake --build "$WORK/cmake" > /dev/null
"$WORK/cmake/consumer"
export PKG_CONFIG_PATH="$WORK/prefix/lib/pkgconfig:$WORK/prefix/lib/x86_64-linux-gnu/pkgconfig"
# shellcheck disable=SC2046
c++ -std=c++20 "$SRC/consumer/main.cpp" -o "$WORK/pc_consumer" $(pkg-config --cflags --libs eldr)
"$WORK/pc_consumer"
echo "package: ok"
