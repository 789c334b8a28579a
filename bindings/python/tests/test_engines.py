"""eldr.footprint_from_sglang / footprint_from_vllm against payloads built
here the way the engines build them (numpy + base64 + np.save), and the
expected footprint computed with np.bincount."""

import base64
import io
import subprocess
import sys

import numpy as np
import pytest

import eldr

ROWS, LAYERS, K, E = 41, 6, 4, 64


def ids(seed=0, rows=ROWS, layers=LAYERS, k=K, e=E):
    rng = np.random.default_rng(seed)
    # Distinct experts per token and layer, as a real top-k gate picks them.
    return np.argsort(rng.random((rows, layers, e)), axis=-1)[..., :k]


def bincount(topk, prompt, moe=None, e=E):
    layers = range(topk.shape[1]) if moe is None else moe
    rows = topk[:prompt]
    return np.stack(
        [np.bincount(rows[:, h].ravel()[rows[:, h].ravel() >= 0], minlength=e) for h in layers]
    ).astype(np.int16)


def sglang_meta(topk, dtype="int32", prompt=None, with_dtype=True):
    meta = {
        "routed_experts": base64.b64encode(topk.astype(dtype).tobytes()).decode(),
        "prompt_tokens": topk.shape[0] if prompt is None else prompt,
    }
    if with_dtype:
        meta["routed_experts_dtype"] = dtype
    return meta


def vllm_npy(topk, dtype):
    buf = io.BytesIO()
    np.save(buf, topk.astype(dtype))
    return base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize("dtype", ["int32", "uint8", "uint16", "int16", "int64"])
def test_sglang_each_dtype(dtype):
    topk = ids(1)
    meta = sglang_meta(topk, dtype, prompt=30)
    fp, info = eldr.footprint_from_sglang(
        meta, num_experts=E, num_layers=LAYERS, top_k=K, return_info=True
    )
    assert fp.dtype == np.int16 and fp.shape == (LAYERS, E)
    np.testing.assert_array_equal(fp, bincount(topk, 30))
    assert info.rows_in_payload == ROWS and info.rows_counted == 30
    assert info.dtype == dtype and info.cached_entries == 0


def test_sglang_default_dtype_and_explicit_prompt_tokens():
    topk = ids(2)
    meta = sglang_meta(topk, "int32", with_dtype=False)
    fp = eldr.footprint_from_sglang(
        meta, num_experts=E, num_layers=LAYERS, top_k=K, prompt_tokens=7
    )
    np.testing.assert_array_equal(fp, bincount(topk, 7))


def test_sglang_dense_layers():
    topk = ids(3)
    topk[:, 0] = 0  # hidden layer 0 is dense: whatever the engine wrote
    moe = [1, 2, 3, 5]
    fp = eldr.footprint_from_sglang(
        sglang_meta(topk), num_experts=E, num_layers=LAYERS, top_k=K, moe_layers=moe
    )
    np.testing.assert_array_equal(fp, bincount(topk, ROWS, moe))
    assert fp.shape == (4, E)


def test_sglang_errors():
    topk = ids(4)
    meta = sglang_meta(topk)
    with pytest.raises(eldr.Corrupt):
        bad = dict(meta, routed_experts=meta["routed_experts"][:-1])
        eldr.footprint_from_sglang(bad, num_experts=E, num_layers=LAYERS, top_k=K)
    with pytest.raises(eldr.Corrupt, match="base64"):
        s = meta["routed_experts"]
        bad = dict(meta, routed_experts=s[:8] + "*" + s[9:])
        eldr.footprint_from_sglang(bad, num_experts=E, num_layers=LAYERS, top_k=K)
    with pytest.raises(eldr.Corrupt, match="whole"):  # wrong geometry: not whole rows
        eldr.footprint_from_sglang(meta, num_experts=E, num_layers=LAYERS, top_k=K + 1)
    with pytest.raises(eldr.OutOfRange, match="expert id"):
        eldr.footprint_from_sglang(meta, num_experts=E - 1, num_layers=LAYERS, top_k=K)
    with pytest.raises(eldr.OutOfRange, match="past the payload"):
        eldr.footprint_from_sglang(
            meta, num_experts=E, num_layers=LAYERS, top_k=K, prompt_tokens=ROWS + 1
        )
    with pytest.raises(eldr.InvalidArgument):
        eldr.footprint_from_sglang(
            dict(meta, routed_experts_dtype="float32"), num_experts=E, num_layers=LAYERS, top_k=K
        )
    with pytest.raises(eldr.InvalidArgument):
        eldr.footprint_from_sglang({"prompt_tokens": 3}, num_experts=E, num_layers=LAYERS, top_k=K)
    with pytest.raises(eldr.OutOfRange):
        eldr.footprint_from_sglang(
            meta, num_experts=E, num_layers=LAYERS, top_k=K, moe_layers=[0, LAYERS]
        )
    with pytest.raises(eldr.InvalidArgument):
        eldr.footprint_from_sglang(
            meta, num_experts=E, num_layers=LAYERS, top_k=K, moe_layers=[2, 1]
        )


@pytest.mark.parametrize("dtype", ["uint8", "uint16"])
def test_vllm_npy(dtype):
    topk = ids(5)
    fp, info = eldr.footprint_from_vllm(
        vllm_npy(topk, dtype), num_experts=E, prompt_tokens=25, return_info=True
    )
    np.testing.assert_array_equal(fp, bincount(topk, 25))
    assert info.dtype == dtype
    assert (info.num_hidden_layers, info.top_k, info.rows_in_payload) == (LAYERS, K, ROWS)


def test_vllm_npy_more_than_256_experts_and_dense_layers():
    topk = ids(6, e=300)
    fp = eldr.footprint_from_vllm(
        vllm_npy(topk, "uint16"), num_experts=300, prompt_tokens=ROWS, moe_layers=[2, 4]
    )
    np.testing.assert_array_equal(fp, bincount(topk, ROWS, [2, 4], e=300))


def b64(raw):
    return base64.b64encode(raw).decode()


def test_vllm_npy_errors():
    topk = ids(7)
    good = vllm_npy(topk, "uint8")
    with pytest.raises(eldr.Unsupported):
        eldr.footprint_from_vllm(vllm_npy(topk, "float32"), num_experts=E, prompt_tokens=1)
    buf = io.BytesIO()
    np.save(buf, np.asfortranarray(topk.astype("uint8")))
    with pytest.raises(eldr.Unsupported, match="fortran"):
        eldr.footprint_from_vllm(b64(buf.getvalue()), num_experts=E, prompt_tokens=1)
    buf = io.BytesIO()
    np.save(buf, topk.reshape(ROWS, -1).astype("uint8"))
    with pytest.raises(eldr.ShapeMismatch):
        eldr.footprint_from_vllm(b64(buf.getvalue()), num_experts=E, prompt_tokens=1)
    raw = base64.b64decode(good)
    with pytest.raises(eldr.Corrupt):  # truncated data
        eldr.footprint_from_vllm(b64(raw[:-5]), num_experts=E, prompt_tokens=1)
    with pytest.raises(eldr.Corrupt):  # truncated header
        eldr.footprint_from_vllm(b64(raw[:40]), num_experts=E, prompt_tokens=1)
    with pytest.raises(eldr.OutOfRange):
        eldr.footprint_from_vllm(good, num_experts=E - 1, prompt_tokens=1)


def test_vllm_v021_nested_lists_with_cached_entries():
    topk = ids(8).astype(np.int64)
    topk[:10] = -1  # a prefix-cache hit: the first 10 rows were not recomputed
    topk[12, 3, 1] = -1
    nested = topk.tolist()
    fp, info = eldr.footprint_from_vllm(
        nested, num_experts=E, prompt_tokens=ROWS, return_info=True
    )
    np.testing.assert_array_equal(fp, bincount(topk, ROWS))
    assert info.cached_entries == 10 * LAYERS * K + 1
    assert info.dtype == "int16"
    # Never counted as expert 0.
    assert fp[:, 0].sum() == (topk == 0).sum()
    with pytest.raises(eldr.OutOfRange):
        eldr.footprint_from_vllm([[[0, -2]]], num_experts=E, prompt_tokens=1)
    with pytest.raises(eldr.ShapeMismatch):
        eldr.footprint_from_vllm([[0, 1]], num_experts=E, prompt_tokens=1)
    with pytest.raises(eldr.ShapeMismatch):
        eldr.footprint_from_vllm([[[0, 1]], [[0]]], num_experts=E, prompt_tokens=1)


def test_import_eldr_does_not_import_numpy():
    code = "import sys, eldr; eldr.footprint_from_sglang; assert 'numpy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
