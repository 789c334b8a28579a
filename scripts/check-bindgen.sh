#!/usr/bin/env bash
# Regenerates the Rust FFI bindings from the public C headers (eldr.h and
# eldr_prompt.h, through bindings/rust/eldr-sys/wrapper.h) and compares them
# with the committed bindings/rust/eldr-sys/src/bindings.rs.
#   scripts/check-bindgen.sh           check: exit 1 on drift (diff printed)
#   scripts/check-bindgen.sh --write   regenerate the committed file
# bindgen is bindgen-cli from crates.io at the version scripts/install-deps.sh
# pins (in ELDR_DEPS_DIR/bin; BINDGEN overrides); exit 77 (ctest: skipped)
# when it or rustfmt is not installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
header="$root/bindings/rust/eldr-sys/wrapper.h"
committed="$root/bindings/rust/eldr-sys/src/bindings.rs"
# The crates' oldest Rust and edition, as their workspace states them.
workspace_field() {
  local value
  value=$(sed -n "s/^$1 = \"\(.*\)\"\$/\1/p" "$root/bindings/rust/Cargo.toml")
  [ -n "$value" ] || { echo "check-bindgen: no $1 in bindings/rust/Cargo.toml" >&2; exit 1; }
  echo "$value"
}
rust_version=$(workspace_field rust-version)
edition=$(workspace_field edition)
BINDGEN="${BINDGEN:-${ELDR_DEPS_DIR:-$root/.deps}/bin/bindgen}"
RUSTFMT="${RUSTFMT:-$(command -v rustfmt || echo "$HOME/.cargo/bin/rustfmt")}"
if ! command -v "$BINDGEN" >/dev/null 2>&1; then
  echo "check-bindgen: bindgen not installed, skipped"; exit 77
fi
if ! [ -x "$RUSTFMT" ] && ! command -v "$RUSTFMT" >/dev/null 2>&1; then
  echo "check-bindgen: rustfmt not installed, skipped"; exit 77
fi

generate() {
  # Statuses stay plain i32 constants (--default-macro-constant-type signed);
  # layout checks are kept (compile-time asserts); the code is for the
  # crates' edition and oldest Rust (rust-version); the experimental GPU
  # section is in (every libeldr exports it: without CUDA its calls return
  # ELDR_E_UNSUPPORTED).
  # Formatting is done by an explicit rustfmt call so the output does not
  # depend on whether bindgen finds rustfmt on PATH.
  "$BINDGEN" "$header" \
    --allowlist-function 'eldr_.*' --allowlist-type 'eldr_.*' --allowlist-var 'ELDR_.*' \
    --default-macro-constant-type signed --merge-extern-blocks \
    --rust-target "$rust_version" --rust-edition "$edition" --formatter none \
    -- -std=c11 -DELDR_EXPERIMENTAL_GPU -I"$root/capi/include" \
    | "$RUSTFMT" --edition "$edition" --emit stdout
}

if [ "${1:-}" = "--write" ]; then
  generate > "$committed.tmp"
  mv "$committed.tmp" "$committed"
  echo "check-bindgen: wrote $committed"
  exit 0
fi
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
generate > "$tmp"
if diff -u "$committed" "$tmp"; then
  echo "check-bindgen: $committed matches the C headers"
else
  echo "check-bindgen: DRIFT: regenerate with scripts/check-bindgen.sh --write" >&2
  exit 1
fi
