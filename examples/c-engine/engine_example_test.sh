#!/usr/bin/env bash
# End-to-end test of an engine example (C or Rust: same command line):
# synthetic footprints (eldr synth) -> cluster table (eldr fit) -> a private
# eldrd -> the example routes every footprint -> its output is checked. Then
# the failure paths: a truncated .npy and an instance with no daemon.
#   engine_example_test.sh ELDR_CLI ELDRD WORKDIR EXAMPLE [EXAMPLE_ARGS...]
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 ELDR_CLI ELDRD WORKDIR EXAMPLE [ARGS...]" >&2
  exit 2
fi
eldr_cli=$1 eldrd=$2 work=$3
shift 3
example=("$@")
requests=24
workers=4

rm -rf "$work" && mkdir -p "$work"
"$eldr_cli" synth --out-dir "$work" -n "$requests" --seed 5 > /dev/null
# No --decode: layer selection costs seconds and is not what this test is about.
"$eldr_cli" fit --prefill "$work/prefill.npy" -k "$workers" -o "$work/table.eldr" --threads 1 \
  > /dev/null

instance="example-$(basename "$work")-$$"
"$eldrd" --instance "$instance" --table "$work/table.eldr" 2> "$work/eldrd.log" &
daemon=$!
stop_daemon() {
  if kill -0 "$daemon" 2> /dev/null; then
    kill -TERM "$daemon"
    for _ in $(seq 100); do kill -0 "$daemon" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$daemon" 2> /dev/null || true
  fi
  wait "$daemon" 2> /dev/null || true
}
fail() {
  echo "FAIL: $*" >&2
  echo "--- eldrd log:" >&2
  cat "$work/eldrd.log" >&2 || true
  exit 1
}
trap stop_daemon EXIT

# 1. Every footprint gets a decision line.
"${example[@]}" --instance "$instance" --footprints "$work/prefill.npy" \
  --open-timeout-ms 10000 --timeout-ms 5000 --prefix req > "$work/out.txt" \
  || fail "example exited with $? (output: $(cat "$work/out.txt"))"
cat "$work/out.txt"
pattern="^req-[0-9]+ -> worker [0-$((workers - 1))] similarity (0|1)\.[0-9]{4} band [1-$workers]$"
good=$(grep -cE "$pattern" "$work/out.txt" || true)
[ "$good" -eq "$requests" ] || fail "$good of $requests lines match '$pattern'"
for i in $(seq 0 $((requests - 1))); do
  grep -q "^req-$i -> " "$work/out.txt" || fail "no decision for req-$i"
done
# Locality: the synthetic requests come from a few tasks, so the decisions
# spread over more than one worker but far fewer distinct ones than requests.
distinct=$(awk '{print $4}' "$work/out.txt" | sort -u | wc -l)
[ "$distinct" -ge 2 ] || fail "all requests went to one worker"

# 2. A truncated file is a clear error, not a crash.
head -c 5000 "$work/prefill.npy" > "$work/truncated.npy"
if "${example[@]}" --instance "$instance" --footprints "$work/truncated.npy" \
  > /dev/null 2> "$work/err.txt"; then
  fail "truncated .npy accepted"
fi
grep -q "payload" "$work/err.txt" || fail "truncated .npy: $(cat "$work/err.txt")"

# 3. No daemon for the instance: ELDR_E_NO_DAEMON, exit status 1.
status=0
"${example[@]}" --instance "absent-$instance" --footprints "$work/prefill.npy" \
  --open-timeout-ms 100 > /dev/null 2> "$work/err.txt" || status=$?
[ "$status" -eq 1 ] || fail "no daemon: exit status $status"
grep -q "ELDR_E_NO_DAEMON" "$work/err.txt" || fail "no daemon: $(cat "$work/err.txt")"

stop_daemon
trap - EXIT
echo "PASS: $requests requests routed over $distinct workers"
