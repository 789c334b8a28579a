#!/usr/bin/env bash
# End-to-end check of the eldr CLI: synth -> fit -> inspect -> route -> bench,
# plus the error paths a user hits first (truncated file, bad policy).
set -euo pipefail
ELDR="$1"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$ELDR" synth --model gpt-oss-20b --requests 120 --seed 3 --out-dir "$WORK" >/dev/null
"$ELDR" fit --prefill "$WORK/prefill.npy" --decode "$WORK/decode.npy" --labels "$WORK/labels.txt" \
  --workers 4 --model gpt-oss-20b --pairs 2000 --out "$WORK/table.eldr" > "$WORK/fit.txt"
grep -q "cluster sizes (cap 30)" "$WORK/fit.txt" || fail "fit summary: $(cat "$WORK/fit.txt")"

"$ELDR" inspect --json "$WORK/table.eldr" > "$WORK/inspect.json"
grep -q '"workers":4' "$WORK/inspect.json" || fail "inspect: $(cat "$WORK/inspect.json")"
grep -q '"top_k":4' "$WORK/inspect.json" || fail "inspect top_k: $(cat "$WORK/inspect.json")"

for policy in eldr round_robin random jsq p2c; do
  "$ELDR" route --table "$WORK/table.eldr" --footprints "$WORK/prefill.npy" --policy "$policy" \
    > "$WORK/route_$policy.csv" 2>/dev/null
  lines=$(($(wc -l < "$WORK/route_$policy.csv") - 1))
  [ "$lines" -eq 120 ] || fail "$policy routed $lines of 120"
done
"$ELDR" route --table "$WORK/table.eldr" --footprints "$WORK/prefill.npy" --policy domain \
  --labels "$WORK/labels.txt" --json > "$WORK/route_domain.jsonl" 2>/dev/null
[ "$(wc -l < "$WORK/route_domain.jsonl")" -eq 120 ] || fail "domain routing"

"$ELDR" bench route --layers 4 --experts 16 --workers 4 --decisions 200 --calibration 64 --json \
  > "$WORK/bench.json"
grep -q '"p50_ns"' "$WORK/bench.json" && grep -q '"p99_ns"' "$WORK/bench.json" || fail "bench json"

"$ELDR" sim --preset gpt-oss-20b --workload task --workers 4 --rate 50 80 --requests 300 \
  --calibration 200 --json > "$WORK/sim.json"
for key in round_robin random jsq p2c domain eldr eldr_guard p50_ms p99_ms experts_per_step \
           p50_reduction_pct p99_reduction_pct; do
  grep -q "\"$key\"" "$WORK/sim.json" || fail "sim json lacks $key"
done
# Load as a share of capacity, a set expert share, seeds, drift, step reports.
"$ELDR" sim --preset gpt-oss-20b --workload language --workers 4 --utilization 0.3,0.6 \
  --expert-share 0.5 --seeds 2 --drift --report-steps --requests 200 --calibration 200 \
  --policies jsq eldr_cost --json > "$WORK/sim_modes.json"
"${ELDR_PYTHON:-python3}" - "$WORK/sim_modes.json" <<'PY' || fail "sim modes json"
import json, sys
d = json.load(open(sys.argv[1]))
runs = d["eldr_cost"]["by_rate"]
assert [round(r["utilization"], 6) for r in runs] == [0.3, 0.6], runs
assert abs(runs[0]["rate"] - 0.3 * runs[0]["capacity_rps"]) < 1e-6
assert abs(runs[0]["expert_share"] - 0.5) < 1e-9 and runs[0]["drift"] and runs[0]["seeds"] == 2
assert len(runs[0]["per_seed"]) == 2
assert runs[0]["p50_reduction_pct_min"] <= runs[0]["p50_reduction_pct"] <= runs[0]["p50_reduction_pct_max"]
PY
if "$ELDR" sim --workload task --rate 10 --utilization 0.5 --requests 10 2> "$WORK/err.txt"; then
  fail "--rate with --utilization accepted"
fi
"$ELDR" sim --preset gpt-oss-20b --workload language --workers 4 --rate 50 --requests 200 \
  --calibration 200 --ablation tau > "$WORK/ablation.txt"
grep -q "eldr tau=0.3" "$WORK/ablation.txt" || fail "tau ablation"
# The plot script is embedded in the binary: a copy far from the checkout
# plots into a folder whose name needs quoting.
cp "$ELDR" "$WORK/eldr-copy"
mkdir -p "$WORK/plot dir's"
"$WORK/eldr-copy" sim --preset gpt-oss-20b --workload task --workers 4 --rate 50 --requests 200 \
  --calibration 200 --policies jsq eldr --plot-dir "$WORK/plot dir's" > /dev/null
test -s "$WORK/plot dir's/tpot_vs_rate.png" || fail "sim --plot-dir drew no plot"

# Error paths: clear message, non-zero exit, no crash.
head -c 100 "$WORK/prefill.npy" > "$WORK/truncated.npy"
if "$ELDR" fit --prefill "$WORK/truncated.npy" --workers 2 --out "$WORK/x.eldr" 2> "$WORK/err.txt"; then
  fail "fit accepted a truncated file"
fi
grep -q "eldr: corrupt" "$WORK/err.txt" || fail "truncated message: $(cat "$WORK/err.txt")"
if "$ELDR" route --table "$WORK/table.eldr" --footprints "$WORK/prefill.npy" --policy best 2> "$WORK/err.txt"; then
  fail "unknown policy accepted"
fi
head -c 64 "$WORK/table.eldr" > "$WORK/short.eldr"
if "$ELDR" inspect "$WORK/short.eldr" 2> "$WORK/err.txt"; then fail "short table accepted"; fi
if "$ELDR" sim --preset llama --requests 10 2> "$WORK/err.txt"; then fail "unknown preset accepted"; fi
grep -q "unknown model preset" "$WORK/err.txt" || fail "preset message: $(cat "$WORK/err.txt")"
echo "cli smoke: ok"
