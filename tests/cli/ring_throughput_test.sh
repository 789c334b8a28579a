#!/usr/bin/env bash
# eldr bench ring-throughput end to end: an eldrd started here on a private
# instance, two producer processes pushing a fixed count flat out, collectors
# accounting for every request. Asserts the account (nothing missing, every
# decision ok, the daemon published exactly what was pushed), never the time.
# Also the first errors a user meets: no daemon, a table of another geometry.
set -euo pipefail
ELDR="$1"
ELDRD="$2"
WORK="$(mktemp -d)"
INSTANCE="cli-tput-$$"
DAEMON=""
cleanup() {
  if [ -n "$DAEMON" ]; then
    kill "$DAEMON" 2>/dev/null || true
    wait "$DAEMON" 2>/dev/null || true
  fi
  rm -f "/dev/shm/eldr-v2-$INSTANCE" "/dev/shm/eldr-v2-$INSTANCE.lock" \
    "/dev/shm/eldr-v2-$INSTANCE.sock" "/dev/shm/eldr-v1-$INSTANCE"
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  [ -f "$WORK/eldrd.log" ] && tail -n 20 "$WORK/eldrd.log" >&2
  exit 1
}

if "$ELDR" bench ring-throughput --instance "$INSTANCE" --count 10 2> "$WORK/err.txt"; then
  fail "ran without a daemon"
fi
grep -q "no_daemon" "$WORK/err.txt" || fail "no-daemon message: $(cat "$WORK/err.txt")"

# A small geometry keeps the synthetic fit at start quick in Debug and sanitizer builds.
printf 'synthetic_table = "8x32x2:4"\nmax_clients = 8\n' > "$WORK/eldrd.toml"
"$ELDRD" --config "$WORK/eldrd.toml" --instance "$INSTANCE" > "$WORK/eldrd.log" 2>&1 &
DAEMON=$!
for _ in $(seq 1 600); do
  "$ELDR" status --instance "$INSTANCE" > /dev/null 2>&1 && break
  kill -0 "$DAEMON" 2> /dev/null || fail "eldrd exited at start"
  sleep 0.1
done
"$ELDR" status --instance "$INSTANCE" > /dev/null || fail "eldrd did not become ready"

"$ELDR" bench ring-throughput --instance "$INSTANCE" --model 8x32x2 --producers 2 --count 10000 \
  --json > "$WORK/run.json" || fail "bench: $(cat "$WORK/run.json")"
for field in '"bench":"ring_throughput"' '"producers":2' '"pushed":20000' '"decided":20000' \
             '"errors":0' '"missing":0' '"failed_producers":0' '"daemon_published":20000'; do
  grep -q "$field" "$WORK/run.json" || fail "expected $field in $(cat "$WORK/run.json")"
done
grep -q '"footprints_per_s"' "$WORK/run.json" || fail "no rate in $(cat "$WORK/run.json")"

# As engines run it: a complete after each decision (two records per request).
"$ELDR" bench ring-throughput --instance "$INSTANCE" --model 8x32x2 --count 2000 --complete \
  --json > "$WORK/complete.json" || fail "bench --complete: $(cat "$WORK/complete.json")"
for field in '"pushed":4000' '"decided":4000' '"missing":0' '"completes_failed":0'; do
  grep -q "$field" "$WORK/complete.json" || fail "expected $field in $(cat "$WORK/complete.json")"
done

if "$ELDR" bench ring-throughput --instance "$INSTANCE" --model 16x32x2 --count 10 \
  2> "$WORK/err.txt"; then
  fail "a footprint of another geometry was accepted"
fi
grep -q "is its table for --model 16x32x2" "$WORK/err.txt" || fail "geometry message: $(cat "$WORK/err.txt")"
kill -0 "$DAEMON" 2> /dev/null || fail "eldrd died during the bench"
echo "ring throughput: ok"
