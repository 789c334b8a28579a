#!/usr/bin/env bash
# Installs the built tree into a scratch prefix, then builds consumers the way
# downstream projects would and runs them:
#   C++ on the static core: find_package(eldr) -> eldr::eldr, pkg-config eldr-core
#   C on libeldr.so:        find_package(eldr) -> eldr::capi, pkg-config eldr (what cgo uses)
#   Rust on libeldr.so:     eldr-sys finds it by pkg-config eldr, with no ELDR_LIB_DIR
set -euo pipefail
BUILD="$1"
SRC="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PREFIX="$WORK/prefix"
cmake --install "$BUILD" --prefix "$PREFIX" > /dev/null

# The routing library installs its own headers and the transport's, never the
# simulator's or any private one.
for h in eldr/router.hpp eldr/step_model.hpp eldr/shm.hpp eldr/eldr.h; do
  test -f "$PREFIX/include/$h" || { echo "package: $h is not installed"; exit 1; }
done
if find "$PREFIX/include" -name 'sim.hpp' -o -name 'synthetic.hpp' -o -path '*internal*' \
    -o -path '*/lab/*' | grep -q .; then
  echo "package: a simulator or private header is installed:"
  find "$PREFIX/include" -name 'sim.hpp' -o -name 'synthetic.hpp' -o -path '*internal*' -o -path '*/lab/*'
  exit 1
fi

cmake -S "$SRC/consumer" -B "$WORK/cmake" -DCMAKE_PREFIX_PATH="$PREFIX" > /dev/null
cmake --build "$WORK/cmake" > /dev/null
"$WORK/cmake/consumer"

cmake -S "$SRC/c_consumer" -B "$WORK/cmake_c" -DCMAKE_PREFIX_PATH="$PREFIX" > /dev/null
cmake --build "$WORK/cmake_c" > /dev/null
"$WORK/cmake_c/c_consumer"  # CMake's build RPATH finds the installed libeldr.so

export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig:$PREFIX/lib/x86_64-linux-gnu/pkgconfig"
# shellcheck disable=SC2046
c++ -std=c++20 "$SRC/consumer/main.cpp" -o "$WORK/pc_consumer" $(pkg-config --cflags --libs eldr-core)
"$WORK/pc_consumer"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -pedantic -Werror "$SRC/c_consumer/main.c" -o "$WORK/pc_c_consumer" \
  $(pkg-config --cflags --libs eldr)
LIBDIR="$(pkg-config --variable=libdir eldr)"
LD_LIBRARY_PATH="$LIBDIR" "$WORK/pc_c_consumer"
# The C program needs libeldr.so only (the C++ runtime comes in through it).
if readelf -d "$WORK/pc_c_consumer" | grep -q 'libstdc++'; then
  echo "the C consumer links libstdc++ directly"; exit 1
fi
# Rust (when cargo exists): the crates from the checkout, the library from the
# prefix, found by eldr-sys's pkg-config probe; crates offline, as fetched by
# scripts/install-deps.sh.
CARGO="$(command -v cargo || echo "$HOME/.cargo/bin/cargo")"
if [ -x "$CARGO" ]; then
  env -u ELDR_LIB_DIR CARGO_TARGET_DIR="$WORK/cargo" "$CARGO" build -q --offline --locked \
    --manifest-path "$SRC/rust_consumer/Cargo.toml"
  LD_LIBRARY_PATH="$LIBDIR" "$WORK/cargo/debug/eldr-rust-consumer"
else
  echo "package: no cargo: the Rust consumer is skipped"
fi
echo "package: ok"
