"""The routed-expert responses of stock engines, emulated: what SGLang's
`/generate` and vLLM's `/v1/completions` return when the server runs with
`--enable-return-routed-experts`. The emulated prefill engine
(prefill_server.py --flavor sglang|vllm) answers with exactly these fields and
pushes nothing to eldr: as with a stock engine, the gateway builds the
footprint from the response.

Per-token expert ids come from a footprint row of the trace: its multiset of
(layer, expert) picks is dealt over the row's tokens, k distinct experts per
token and layer, so the ids of a prompt as long as the row's count back to
exactly that row.
"""

from __future__ import annotations

import base64
import io
import time
import zlib
from typing import Any, Callable, Dict

import numpy as np

from engine_http import BadRequest, require_int

MAX_PROMPT_TOKENS = 1 << 20
MAX_NEW_TOKENS = 65536
# The ids [T][L][k] of the trace row a request key maps to.
IdsFor = Callable[[str], np.ndarray]


def token_ids(row: np.ndarray, top_k: int) -> np.ndarray:
    """int32 [T][L][k] ids whose per-layer bincount is `row` (int16 [L][E]),
    T = the row's tokens (its layer sums over k)."""
    layers, experts = row.shape
    sums = row.astype(np.int64).sum(axis=1)
    tokens = int(sums[0]) // top_k
    if tokens < 1 or np.any(sums != top_k * tokens) or np.any(row > tokens) or np.any(row < 0):
        raise ValueError(f"a trace row must pick top_k={top_k} distinct experts per token in "
                         "every layer (each layer sums to top_k * tokens)")
    ids = np.empty((tokens, layers, top_k), np.int32)
    for layer in range(layers):
        picks = np.repeat(np.arange(experts, dtype=np.int32), row[layer])  # sorted by expert
        # Position p goes to token p mod T: an expert's copies (at most T, in
        # one run) land on distinct tokens, and every token gets k of them.
        ids[:, layer, :] = picks.reshape(top_k, tokens).T
    return ids


def prompt_rows(ids: np.ndarray, tokens: int) -> np.ndarray:
    """Rows for a prompt of `tokens` tokens: the row's tokens, cycled."""
    return ids[np.arange(tokens) % len(ids)]


def with_dense_layers(rows: np.ndarray, dense_layers: int) -> np.ndarray:
    """The layer axis as the engines send it (num_hidden_layers): `dense_layers`
    leading layers that route nothing (zeros, as a valid-looking expert 0)."""
    if dense_layers == 0:
        return rows
    pad = np.zeros((rows.shape[0], dense_layers, rows.shape[2]), rows.dtype)
    return np.concatenate([pad, rows], axis=1)


def count_prompt(value: Any, what: str) -> int:
    """A prompt as text (whitespace-separated words stand for tokens) or ids."""
    if isinstance(value, str) and value:
        return min(max(1, len(value.split())), MAX_PROMPT_TOKENS)
    if isinstance(value, list) and 1 <= len(value) <= MAX_PROMPT_TOKENS and all(
            isinstance(t, int) and not isinstance(t, bool) for t in value):
        return len(value)
    raise BadRequest(f"'{what}' must be a non-empty string or 1..{MAX_PROMPT_TOKENS} token ids")


def sglang_generate(body: Dict[str, Any], ids_for: IdsFor, dense_layers: int, dtype: str,
                    placeholder: str) -> Dict[str, Any]:
    """POST /generate. Body: text or input_ids, sampling_params.max_new_tokens,
    rid, return_routed_experts, routed_experts_start_len. meta_info carries
    routed_experts: base64 of raw ids [seqlen - 1][num_hidden_layers][k]
    (int32 unless `dtype` says otherwise, then routed_experts_dtype too)."""
    prompt = body.get("input_ids", body.get("text"))
    tokens = count_prompt(prompt, "input_ids" if "input_ids" in body else "text")
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise BadRequest("'sampling_params' must be an object")
    new_tokens = require_int(params, "max_new_tokens", 1, MAX_NEW_TOKENS) \
        if "max_new_tokens" in params else 1
    rid = body.get("rid")
    if rid is not None and (not isinstance(rid, str) or not rid):
        raise BadRequest("'rid' must be a non-empty string")
    key = rid if rid is not None else str(prompt)
    meta: Dict[str, Any] = {"id": rid or f"sglang-{zlib.crc32(key.encode()):08x}",
                            "prompt_tokens": tokens, "completion_tokens": new_tokens,
                            "finish_reason": {"type": "length", "length": new_tokens}}
    if body.get("return_routed_experts"):
        start = body.get("routed_experts_start_len", 0)
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise BadRequest("'routed_experts_start_len' must be a non-negative integer")
        seqlen = tokens + new_tokens
        # Rows for the prompt, then for the generated tokens but the last one
        # (the emulated decode reuses the prompt's experts, cycled).
        rows = with_dense_layers(prompt_rows(ids_for(key), seqlen - 1), dense_layers)[start:]
        meta["routed_experts"] = base64.b64encode(rows.astype(dtype).tobytes()).decode()
        if dtype != "int32":
            meta["routed_experts_dtype"] = dtype
    return {"text": placeholder, "meta_info": meta}


def vllm_completions(body: Dict[str, Any], ids_for: IdsFor, dense_layers: int, experts: int,
                     model: str, placeholder: str) -> Dict[str, Any]:
    """POST /v1/completions (non-streaming). choices[0].routed_experts: base64
    of a .npy [num_tokens - 1][num_hidden_layers][k], uint8 when experts <= 256
    else uint16, covering prompt and generated tokens."""
    if body.get("stream"):
        raise BadRequest("routed experts come only with non-streaming completions")
    prompt = body.get("prompt")
    tokens = count_prompt(prompt, "prompt")
    new_tokens = require_int(body, "max_tokens", 1, MAX_NEW_TOKENS) if "max_tokens" in body else 16
    request_id = body.get("request_id")
    if request_id is not None and (not isinstance(request_id, str) or not request_id):
        raise BadRequest("'request_id' must be a non-empty string")
    key = request_id if request_id is not None else str(prompt)
    rows = with_dense_layers(prompt_rows(ids_for(key), tokens + new_tokens - 1), dense_layers)
    buf = io.BytesIO()
    np.save(buf, rows.astype(np.uint8 if experts <= 256 else np.uint16), allow_pickle=False)
    choice: Dict[str, Any] = {"index": 0, "text": placeholder, "logprobs": None,
                              "finish_reason": "length", "stop_reason": None,
                              "routed_experts": base64.b64encode(buf.getvalue()).decode()}
    return {"id": f"cmpl-{request_id or 'x'}", "object": "text_completion",
            "created": int(time.time()), "model": model, "choices": [choice],
            "usage": {"prompt_tokens": tokens, "completion_tokens": new_tokens,
                      "total_tokens": tokens + new_tokens}}
