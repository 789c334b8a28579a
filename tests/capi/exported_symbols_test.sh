#!/usr/bin/env bash
# libeldr.so exports the C API and nothing else: every defined dynamic symbol
# is an eldr_* function (the version script hides the core and libstdc++).
set -euo pipefail
LIB="$1"
symbols="$(nm -D --defined-only "$LIB" | awk '{print $3}')"
[ -n "$symbols" ] || { echo "no exported symbols in $LIB"; exit 1; }
stray="$(grep -v '^eldr_' <<< "$symbols" || true)"
if [ -n "$stray" ]; then
  echo "symbols outside eldr_* exported from $LIB:"
  echo "$stray"
  exit 1
fi
for required in eldr_router_route eldr_client_open eldr_table_fit eldr_last_error_message \
                eldr_cuda_available eldr_gpu_footprints_new eldr_router_route_id \
                eldr_router_complete_request eldr_router_report eldr_router_stats \
                eldr_worker_report_init eldr_pool_open eldr_pool_route eldr_pool_complete \
                eldr_pool_close; do
  grep -qx "$required" <<< "$symbols" || { echo "$required is not exported"; exit 1; }
done
echo "exported: $(wc -l <<< "$symbols") eldr_* symbols"
