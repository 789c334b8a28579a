"""eldr.GpuFootprints without a GPU: what reaches the C API, and what never does.

The kernels themselves are checked against the CPU reference by the C++ GPU
suites (cuda/check_gpu.sh); here the Python layer's reading of CUDA array
interfaces and streams is checked with stand-in arrays, and the extension's
calls are recorded.
"""

import numpy as np
import pytest

import eldr
from eldr import _gpu


class CudaArray:
    """A stand-in for a torch CUDA tensor: only __cuda_array_interface__."""

    def __init__(self, shape, typestr, address=0x7F0000001000, strides=None, readonly=False):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (address, readonly),
            "strides": strides,
            "version": 3,
        }


class Recorder:
    """Records the extension calls GpuFootprints makes."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, args))


def recorded(layers=4, experts=16, top_k=2):
    """A GpuFootprints whose extension object records instead of launching."""
    gpu = object.__new__(eldr.GpuFootprints)
    gpu._layers, gpu._experts, gpu._top_k = layers, experts, top_k
    gpu._gpu = Recorder()
    return gpu


def test_without_a_device_the_constructor_raises_a_clear_error():
    if eldr.cuda_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises((eldr.CudaError, eldr.Unsupported)) as raised:
        eldr.GpuFootprints(48, 128, 8, 16, 1024)
    assert "CUDA" in str(raised.value) or "cuda" in str(raised.value)


def test_bad_options_are_refused_before_any_device_is_touched():
    with pytest.raises((eldr.InvalidArgument, eldr.Unsupported)) as raised:
        eldr.GpuFootprints(48, 128, 8, 0, 1024)  # block_size 0
    if isinstance(raised.value, eldr.InvalidArgument):
        assert "block_size" in str(raised.value)


def test_arrays_reach_the_extension_as_addresses_with_their_extents():
    gpu = recorded()
    ids = CudaArray((5, 4, 2), "<i8", address=0x1000)
    slots = CudaArray((5,), "<i8", address=0x2000)
    gpu.update_blocks(ids, slots, stream=7)
    gpu.update_blocks(CudaArray((5, 2), "<i4", address=0x3000), slots, layer=3)
    table = CudaArray((3, 10), "<i4", address=0x4000)
    counts = CudaArray((3,), "<i4", address=0x5000)
    pinned = np.zeros((3, 4, 16), dtype=np.int16)  # host memory: the C API checks it is mapped
    gpu.sum_requests(table, counts, pinned)
    client = object()
    gpu.push_requests(client, ["a", "b", "c"], table, counts, stream=9)
    assert gpu._gpu.calls == [
        ("update_blocks", (0x1000, 8, 5, -1, 0x2000, 7)),
        ("update_blocks", (0x3000, 4, 5, 3, 0x2000, 0)),
        ("sum_requests", (0x4000, 10, 0x5000, 3, pinned.__array_interface__["data"][0], 0)),
        ("push_requests", (client, ["a", "b", "c"], 0x4000, 10, 0x5000, 9)),
    ]


def test_streams_are_read_from_torch_and_cupy_objects():
    class TorchStream:
        cuda_stream = 0x55

    class CupyStream:
        ptr = 0x66

    assert _gpu._stream(None) == 0
    assert _gpu._stream(0x44) == 0x44
    assert _gpu._stream(TorchStream()) == 0x55
    assert _gpu._stream(CupyStream()) == 0x66
    for bad in (-1, "0", 1.5, True):
        with pytest.raises(eldr.InvalidArgument, match="stream"):
            _gpu._stream(bad)


@pytest.mark.parametrize(
    "ids, slots, error, words",
    [
        (np.zeros((5, 4, 2), np.int64), CudaArray((5,), "<i8"), eldr.InvalidArgument, "CUDA array"),
        (CudaArray((5, 4, 2), "<f4"), CudaArray((5,), "<i8"), eldr.InvalidArgument, "dtype"),
        (CudaArray((5, 4, 2), "<i8"), CudaArray((5,), "<i4"), eldr.InvalidArgument, "dtype"),
        (CudaArray((5, 8), "<i8"), CudaArray((5,), "<i8"), eldr.ShapeMismatch, "dimensions"),
        (CudaArray((5, 3, 2), "<i8"), CudaArray((5,), "<i8"), eldr.ShapeMismatch, "(5, 4, 2)"),
        (CudaArray((5, 4, 3), "<i8"), CudaArray((5,), "<i8"), eldr.ShapeMismatch, "(5, 4, 2)"),
        (CudaArray((5, 4, 2), "<i8"), CudaArray((6,), "<i8"), eldr.ShapeMismatch, "one slot"),
        (
            CudaArray((5, 4, 2), "<i8", strides=(8, 40, 160)),
            CudaArray((5,), "<i8"),
            eldr.InvalidArgument,
            "C-contiguous",
        ),
    ],
)
def test_bad_step_arrays_raise_before_the_extension_is_called(ids, slots, error, words):
    gpu = recorded()
    with pytest.raises(error) as raised:
        gpu.update_blocks(ids, slots)
    assert words in str(raised.value)
    assert gpu._gpu.calls == []


def test_bad_request_tables_raise_before_the_extension_is_called():
    gpu = recorded()
    table = CudaArray((3, 10), "<i4")
    counts = CudaArray((3,), "<i4")
    out = CudaArray((3, 4, 16), "<i2")
    with pytest.raises(eldr.ShapeMismatch, match="one count per block_table row"):
        gpu.sum_requests(table, CudaArray((2,), "<i4"), out)
    with pytest.raises(eldr.ShapeMismatch, match=r"\(3, 4, 16\)"):
        gpu.sum_requests(table, counts, CudaArray((3, 4, 17), "<i2"))
    with pytest.raises(eldr.InvalidArgument, match="dtype"):
        gpu.sum_requests(table, counts, np.zeros((3, 4, 16), np.int32))
    with pytest.raises(eldr.ShapeMismatch, match="2 request ids for 3"):
        gpu.push_requests(object(), ["a", "b"], table, counts)
    with pytest.raises(eldr.InvalidArgument, match="CUDA array"):
        gpu.push_requests(object(), ["a", "b", "c"], np.zeros((3, 10), np.int32), counts)
    with pytest.raises(eldr.InvalidArgument, match="not one id"):
        gpu.push_requests(object(), "abc", table, counts)  # would be three 1-byte ids
    with pytest.raises(eldr.InvalidArgument, match="read-only"):
        gpu.sum_requests(table, counts, CudaArray((3, 4, 16), "<i2", readonly=True))
    masked = CudaArray((3, 4, 16), "<i2")
    masked.__cuda_array_interface__["mask"] = CudaArray((3, 4, 16), "|b1")
    with pytest.raises(eldr.InvalidArgument, match="masked"):
        gpu.sum_requests(table, counts, masked)
    assert gpu._gpu.calls == []


@pytest.mark.parametrize("layer", [-1, 4, 1 << 40])
def test_a_layer_outside_the_model_is_refused_never_read_as_all_layers(layer):
    gpu = recorded()  # 4 layers
    with pytest.raises(eldr.OutOfRange, match="layer"):
        gpu.update_blocks(CudaArray((5, 2), "<i4"), CudaArray((5,), "<i8"), layer=layer)
    assert gpu._gpu.calls == []


def test_contiguous_strides_and_empty_arrays_are_accepted():
    gpu = recorded()
    ids = CudaArray((5, 4, 2), "<i4", address=0x1000, strides=(32, 8, 4))
    gpu.update_blocks(ids, CudaArray((5,), "<i8", address=0x2000, strides=(8,)))
    empty = CudaArray((0, 4, 2), "<i4", address=None)
    gpu.update_blocks(empty, CudaArray((0,), "<i8", address=None))
    assert [call[1][:3] for call in gpu._gpu.calls] == [(0x1000, 4, 5), (0, 4, 0)]


def test_the_error_bits_match_the_c_header():
    assert eldr.GpuFootprints.ERR_EXPERT_ID == 1
    assert eldr.GpuFootprints.ERR_SLOT == 2
    assert eldr.GpuFootprints.ERR_BLOCK_ROW == 4
    assert eldr.GpuFootprints.ERR_FOOTPRINT == 8
    assert eldr.GpuFootprints.ERR_BLOCK_ID == 16
