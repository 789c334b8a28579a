"""eldr.fit and eldr.Table through the binding."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import eldr
from conftest import EXPERTS, LAYERS, TOP_K, WORKERS, Workload


def test_synthetic_footprints_sum_to_top_k_times_tokens_per_layer(workload: Workload) -> None:
    sums = workload.prefill.sum(axis=2, dtype=np.int64)
    np.testing.assert_array_equal(sums, np.repeat(TOP_K * workload.tokens[:, None], LAYERS, 1))


def test_fit_reports_the_geometry_and_workers(table: eldr.Table) -> None:
    assert (table.layers, table.experts, table.top_k, table.num_workers) == (
        LAYERS, EXPERTS, TOP_K, WORKERS)
    assert 1 <= table.num_selected_layers <= LAYERS
    assert table.worker_ids.dtype == np.int32
    np.testing.assert_array_equal(table.worker_ids, np.arange(WORKERS))
    assert 0.0 < table.default_tau < 1.0
    assert "num_workers=4" in repr(table)


def test_fit_without_decode_counts_keeps_every_layer(workload: Workload) -> None:
    sut = eldr.fit(workload.prefill, WORKERS)
    assert sut.num_selected_layers == LAYERS
    assert sut.top_k == 0  # unknown unless given


def test_fit_clusters_follow_the_domains(table: eldr.Table, workload: Workload) -> None:
    best = np.array([int(np.argmax(table.scores(fp))) for fp in workload.prefill])
    purity = sum(np.bincount(best[workload.domain == d]).max() for d in range(4)) / len(best)
    assert purity >= 0.9, f"clusters do not follow the domains (purity {purity:.2f})"


def test_fit_is_deterministic_for_a_seed_and_accepts_any_integer_array(
        table: eldr.Table, workload: Workload) -> None:
    as_int32 = eldr.fit(workload.prefill.astype(np.int32), WORKERS,
                        workload.decode.astype(np.int64), seed=1, top_k=TOP_K)
    as_fortran = eldr.fit(np.asfortranarray(workload.prefill), WORKERS,
                          workload.decode, seed=1, top_k=TOP_K)
    probe = workload.prefill[5]
    for sut in (as_int32, as_fortran):
        np.testing.assert_array_equal(sut.scores(probe), table.scores(probe))


def test_save_load_round_trip(table: eldr.Table, workload: Workload,
                              tmp_path: pathlib.Path) -> None:
    path = tmp_path / "t.eldr"
    table.save(path)  # os.PathLike
    sut = eldr.Table.load(str(path))
    assert (sut.layers, sut.experts, sut.top_k, sut.num_workers, sut.num_selected_layers) == (
        table.layers, table.experts, table.top_k, table.num_workers, table.num_selected_layers)
    np.testing.assert_array_equal(sut.worker_ids, table.worker_ids)
    for fp in workload.prefill[:10]:
        np.testing.assert_array_equal(sut.scores(fp), table.scores(fp))
        np.testing.assert_array_equal(sut.signature(fp), table.signature(fp))


def test_signature_is_unit_norm_float32_over_the_selected_layers(
        table: eldr.Table, workload: Workload) -> None:
    sig = table.signature(workload.prefill[0])
    assert sig.dtype == np.float32
    assert sig.shape == (table.num_selected_layers * EXPERTS,)
    assert np.linalg.norm(sig) == pytest.approx(1.0, abs=1e-5)


def test_scores_one_per_worker_within_cosine_range(table: eldr.Table,
                                                   workload: Workload) -> None:
    scores = table.scores(workload.prefill[0])
    assert scores.dtype == np.float32 and scores.shape == (WORKERS,)
    assert np.all(scores >= -1.0 - 1e-5) and np.all(scores <= 1.0 + 1e-5)


def test_read_only_and_strided_inputs_give_the_same_scores(table: eldr.Table,
                                                           workload: Workload) -> None:
    fp = workload.prefill[3].copy()
    read_only = fp.copy()
    read_only.flags.writeable = False
    wide = np.zeros((LAYERS, 2 * EXPERTS), np.int16)
    wide[:, ::2] = fp  # a non-contiguous view of the same counts
    expected = table.scores(fp)
    np.testing.assert_array_equal(table.scores(read_only), expected)
    np.testing.assert_array_equal(table.scores(wide[:, ::2]), expected)
    np.testing.assert_array_equal(table.scores(fp.tolist()), expected)


def test_load_missing_file_raises_io_error_naming_the_path(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nope.eldr"
    with pytest.raises(eldr.IoError) as info:
        eldr.Table.load(missing)
    assert info.value.status == eldr.Status.IO == -4
    assert info.value.name == "ELDR_E_IO"
    assert "nope.eldr" in str(info.value)


def test_load_garbage_raises_corrupt(tmp_path: pathlib.Path) -> None:
    garbage = tmp_path / "garbage.eldr"
    garbage.write_bytes(b"\x00\x01not a flatbuffer" * 10)
    with pytest.raises(eldr.Corrupt) as info:
        eldr.Table.load(garbage)
    assert info.value.name == "ELDR_E_CORRUPT"


def test_wrong_footprint_shapes_raise_shape_mismatch(table: eldr.Table) -> None:
    with pytest.raises(eldr.ShapeMismatch, match="2-D"):
        table.scores(np.zeros(LAYERS * EXPERTS, np.int16))
    with pytest.raises(eldr.ShapeMismatch):
        table.scores(np.zeros((LAYERS + 1, EXPERTS), np.int16))  # checked by the library
    with pytest.raises(ValueError):  # ShapeMismatch is a ValueError too
        table.signature(np.zeros((LAYERS, EXPERTS - 1), np.int16))


def test_bad_dtypes_and_values_raise(table: eldr.Table) -> None:
    with pytest.raises(TypeError, match="integer"):
        table.scores(np.zeros((LAYERS, EXPERTS), np.float32))
    too_big = np.zeros((LAYERS, EXPERTS), np.int32)
    too_big[0, 0] = 40000
    with pytest.raises(eldr.OutOfRange, match="40000"):
        table.scores(too_big)
    negative = np.zeros((LAYERS, EXPERTS), np.int16)
    negative[1, 2] = -1
    with pytest.raises(eldr.OutOfRange):
        table.scores(negative)
    with pytest.raises(TypeError):
        table.scores("not an array")


def test_fit_rejects_bad_arguments(workload: Workload) -> None:
    with pytest.raises(eldr.InvalidArgument):
        eldr.fit(workload.prefill, 0)
    with pytest.raises(eldr.ShapeMismatch, match="decode_counts"):
        eldr.fit(workload.prefill, WORKERS, workload.decode[:-1])
    with pytest.raises(eldr.ShapeMismatch, match="3-D"):
        eldr.fit(workload.prefill[0], WORKERS)
    with pytest.raises(TypeError):
        eldr.fit(workload.prefill.astype(np.float64), WORKERS)
