#!/usr/bin/env bash
# eldr fit with prompts: --prompts beside --prefill, --records (explicit
# footprints, an SGLang and a vLLM payload), --trace; bad records are refused
# with the file and line.
set -euo pipefail
ELDR="$1"
PY="${ELDR_PYTHON:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$ELDR" synth --model gpt-oss-20b --requests 120 --seed 3 --out-dir "$WORK" >/dev/null
"$PY" - "$WORK" <<'PY'
import base64, gzip, io, json, sys
import numpy as np
w = sys.argv[1]
labels = open(f"{w}/labels.txt").read().split()
prefill = np.load(f"{w}/prefill.npy")
words = {d: [f"{d}{i}" for i in range(8)] for d in set(labels)}
with open(f"{w}/prompts.jsonl", "w") as f:
    for i, d in enumerate(labels):
        f.write(json.dumps({"text": "system prompt " + " ".join(words[d][(i + j) % 8] for j in range(6))}) + "\n")
# Records: explicit footprints (as token ids), one SGLang and one vLLM payload.
L, E, K = prefill.shape[1], prefill.shape[2], 4
rng = np.random.default_rng(1)
with gzip.open(f"{w}/records.jsonl.gz", "wt") as f:
    for i in range(40):
        f.write(json.dumps({"token_ids": [7, 8, 9, 100 + i % 4], "footprint": prefill[i].tolist()}) + "\n")
    ids = np.stack([rng.permutation(E)[:K] for _ in range(10 * L)]).reshape(10, L, K).astype(np.int32)
    f.write(json.dumps({"text": "an sglang request", "meta_info": {
        "routed_experts": base64.b64encode(ids.tobytes()).decode(), "prompt_tokens": 6}}) + "\n")
    buf = io.BytesIO(); np.save(buf, ids.astype(np.uint8))
    f.write(json.dumps({"prompt": "a vllm request", "prompt_token_ids": [1, 2, 3, 4, 5],
                        "choices": [{"routed_experts": base64.b64encode(buf.getvalue()).decode()}]}) + "\n")
with open(f"{w}/bad.jsonl", "w") as f:
    f.write(json.dumps({"text": "fine", "footprint": prefill[0].tolist()}) + "\nnot json\n")
# A trace: decode rows, an index, prompts as token strings.
rows = np.stack([rng.permutation(E)[:K] for _ in range(60 * L)]).reshape(60, L, K).astype(np.uint8)
import os
os.makedirs(f"{w}/trace")
np.save(f"{w}/trace/token_experts.npy", rows)
np.save(f"{w}/trace/index.npy", np.array([[i * 6, 0, 6] for i in range(10)], np.int64))
with gzip.open(f"{w}/trace/tokens.jsonl.gz", "wt") as f:
    for i in range(10):
        f.write(json.dumps({"prompt": ["<|start|>", "user", f" question {i % 3}"], "decode": ["x"] * 6}) + "\n")
PY

"$ELDR" fit --prefill "$WORK/prefill.npy" --prompts "$WORK/prompts.jsonl" --workers 4 \
  --model gpt-oss-20b --pairs 2000 --out "$WORK/p.eldr" > "$WORK/fit.txt"
grep -q "predictor: 120 prototypes (text)" "$WORK/fit.txt" || fail "fit --prompts: $(cat "$WORK/fit.txt")"
"$ELDR" inspect --json "$WORK/p.eldr" | grep -q '"predictor":{' || fail "inspect shows no predictor"

"$ELDR" fit --records "$WORK/records.jsonl.gz" --experts 32 --layers 24 --top-k 4 --workers 4 \
  --out "$WORK/r.eldr" > "$WORK/fit_records.txt"
grep -q "predictor: 42 prototypes (tokens, text)" "$WORK/fit_records.txt" \
  || fail "fit --records: $(cat "$WORK/fit_records.txt")"
"$ELDR" fit --records "$WORK/records.jsonl.gz" --experts 32 --layers 24 --top-k 4 --workers 4 \
  --prompt-input text --out "$WORK/r2.eldr" 2> "$WORK/err.txt" \
  && fail "records without text accepted as text"
grep -q "records.jsonl.gz:1: no prompt text" "$WORK/err.txt" || fail "error: $(cat "$WORK/err.txt")"

if "$ELDR" fit --records "$WORK/bad.jsonl" --workers 1 --out "$WORK/x.eldr" 2> "$WORK/err.txt"; then
  fail "a bad record accepted"
fi
grep -q "bad.jsonl:2: not a JSON object" "$WORK/err.txt" || fail "error: $(cat "$WORK/err.txt")"
if "$ELDR" fit --prefill "$WORK/prefill.npy" --records "$WORK/bad.jsonl" --workers 1 \
     --out "$WORK/x.eldr" 2> /dev/null; then
  fail "two calibration sources accepted"
fi

"$ELDR" fit --trace "$WORK/trace" --workers 2 --out "$WORK/t.eldr" > "$WORK/fit_trace.txt"
grep -q "predictor: 10 prototypes (text)" "$WORK/fit_trace.txt" \
  || fail "fit --trace: $(cat "$WORK/fit_trace.txt")"
echo "cli.fit_prompts: ok"
