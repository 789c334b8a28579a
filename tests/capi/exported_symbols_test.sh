#!/usr/bin/env bash
# libeldr.so exports exactly the functions eldr.h (and eldr_gpu.h) declare, and nothing else
# (the version script hides the core and libstdc++):
#   - every name follows eldr_<object>_<verb> for one of the API's objects,
#     or is one of the version and status helpers;
#   - the stable calls carry the symbol version ELDR_2, the experimental GPU
#     calls ELDR_EXPERIMENTAL_GPU_0 (off the stable ABI).
set -euo pipefail
LIB="$1"
HEADERS=("$(dirname "$2")"/eldr*.h)  # eldr.h and the experimental eldr_gpu.h
exported="$(nm -D --defined-only "$LIB" | awk '$2 == "T" {print $3}' | sort)"
[ -n "$exported" ] || { echo "no exported functions in $LIB"; exit 1; }
declared="$(cat "${HEADERS[@]}" | grep -o '^ELDR_API [^(]*(' | awk '{print $NF}' | tr -d '(' | sort)"

fail=0
objects='client|client_options|pool|table|predictor_options|table_info|fit_options|router|router_options|decision|worker_report|routed_experts|routed_experts_options|routed_experts_info|gpu_footprints|policy'
helpers='eldr_version_number|eldr_version_string|eldr_abi_version|eldr_status_name|eldr_status_string|eldr_last_error_message|eldr_gpu_available'
while read -r sym; do
  name="${sym%%@*}"
  node="${sym#*@@}"
  if ! grep -qx "$name" <<< "$declared"; then
    echo "exported but not declared in eldr.h: $sym"; fail=1
  fi
  if ! grep -Eqx "eldr_($objects)_[a-z0-9_]+|$helpers" <<< "$name"; then
    echo "not named eldr_<object>_<verb>: $name"; fail=1
  fi
  want=ELDR_2
  [[ "$name" == eldr_gpu_footprints_* ]] && want=ELDR_EXPERIMENTAL_GPU_0
  if [ "$node" != "$want" ]; then
    echo "$name has symbol version '$node', expected $want"; fail=1
  fi
done <<< "$exported"
names="$(sed 's/@.*//' <<< "$exported")"
# A name only in a skipped block of eldr.h (none today) would show up here.
missing="$(comm -23 <(echo "$declared") <(echo "$names"))"
if [ -n "$missing" ]; then
  echo "declared in eldr.h but not exported:"; echo "$missing"; fail=1
fi
[ "$fail" = 0 ] || exit 1
echo "exported: $(wc -l <<< "$exported") functions, as eldr.h declares them"
