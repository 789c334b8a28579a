#!/usr/bin/env bash
# The sidecar demo: eldrd on a private instance with its embedded default
# (a table fitted on the synthetic workload, no files needed), an example
# engine (`eldr loadgen`) pushing footprints through shared memory and printing
# live decisions, then the daemon's metrics and `eldr status`; everything is
# stopped cleanly on exit, error or Ctrl-C.
#   scripts/demo-sidecar.sh [BUILD_DIR]      (default: build)
set -euo pipefail

build=${1:-build}
eldrd=${ELDRD:-$build/sidecar/eldrd}
eldr=${ELDR:-$build/tools/eldr}
requests=${DEMO_REQUESTS:-2000}
for bin in "$eldrd" "$eldr"; do
  [[ -x $bin ]] || { echo "demo-sidecar: $bin not built (make build)" >&2; exit 1; }
done

instance="demo-$$"
workdir=$(mktemp -d)
log="$workdir/eldrd.log"
port=$("${ELDR_PYTHON:-python3}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 0)
daemon=""

cleanup() {
  local rc=$?
  if [[ -n $daemon ]] && kill -0 "$daemon" 2>/dev/null; then
    kill -TERM "$daemon"
    for _ in $(seq 100); do kill -0 "$daemon" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$daemon" 2>/dev/null && kill -KILL "$daemon"
    wait "$daemon" 2>/dev/null || true
    echo "== eldrd stopped (log: $(grep -c . "$log") lines; last: $(tail -n 1 "$log" | cut -c1-100))"
  fi
  rm -rf "$workdir"
  exit "$rc"
}
trap cleanup EXIT INT TERM

echo "== 1. eldrd --instance $instance (embedded default table), metrics on 127.0.0.1:$port"
"$eldrd" --instance "$instance" --metrics-port "$port" 2>"$log" &
daemon=$!
for _ in $(seq 600); do
  "$eldr" status --instance "$instance" >/dev/null 2>&1 && break
  kill -0 "$daemon" 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
"$eldr" status --instance "$instance" >/dev/null || { cat "$log" >&2; exit 1; }
sed 's/^/   eldrd: /' "$log"

echo "== 2. example engine: eldr loadgen, $requests synthetic footprints (first 12 decisions live)"
"$eldr" loadgen --instance "$instance" --requests "$requests" --print 12 --complete

echo "== 3. eldr status --instance $instance"
"$eldr" status --instance "$instance" | sed 's/^/   /'

if [[ $port != 0 ]] && command -v curl >/dev/null; then
  echo "== 4. metrics (curl 127.0.0.1:$port/metrics, a selection)"
  curl -s "http://127.0.0.1:$port/metrics" |
    grep -E '^eldr_(routed_total|rejected_total\{reason="(shape_mismatch|bad_payload)"|decision_latency_seconds_(count|sum)|clients|table_epoch|worker_inflight)' |
    sed 's/^/   /'
fi
