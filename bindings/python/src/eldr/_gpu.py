"""eldr.GpuFootprints: expert footprints collected on the GPU (experimental).

Arrays are any objects with ``__cuda_array_interface__`` (PyTorch CUDA
tensors, CuPy and Numba arrays), C-contiguous, of the exact dtypes below; they
must be ready on ``stream``. Streams are a ``cudaStream_t`` as an integer, an
object with ``cuda_stream`` (``torch.cuda.Stream``) or ``ptr`` (CuPy), or
``None`` for the legacy default stream. Every call only enqueues work.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence, Tuple

from . import _eldr
from ._errors import InvalidArgument, OutOfRange, ShapeMismatch


class _Array(NamedTuple):
    """What the C API needs of an array: its address, extents and item size."""

    address: int
    shape: Tuple[int, ...]
    itemsize: int


_ITEMSIZE = {"<i2": 2, "<i4": 4, "<i8": 8}


def _array(
    obj: Any,
    name: str,
    typestrs: Tuple[str, ...],
    ndim: int,
    host: bool = False,
    written: bool = False,
) -> _Array:
    """Reads ``obj``'s CUDA array interface (or, where ``host`` allows pinned
    host memory, its NumPy array interface) and checks dtype, rank, layout
    and, for an array the GPU writes, that it is writable."""
    interface = getattr(obj, "__cuda_array_interface__", None)
    if interface is None and host:
        interface = getattr(obj, "__array_interface__", None)
    if not isinstance(interface, dict):
        where = "a CUDA array" + (" or pinned host memory" if host else "")
        pinned = " or a pinned torch CPU tensor's .numpy()" if host else ""
        raise InvalidArgument(
            f"{name} must be {where} (an object with __cuda_array_interface__, "
            f"such as a torch CUDA tensor{pinned}), got {type(obj).__name__}"
        )
    typestr = interface.get("typestr")
    if typestr not in typestrs:
        expected = ", ".join(typestrs)
        raise InvalidArgument(f"{name} has dtype {typestr!r}, expected one of {expected}")
    shape = tuple(int(n) for n in interface.get("shape", ()))
    if len(shape) != ndim:
        raise ShapeMismatch(f"{name} has {len(shape)} dimensions {shape}, expected {ndim}")
    itemsize = _ITEMSIZE[typestr]
    strides = interface.get("strides")
    if strides is not None:
        contiguous = []
        step = itemsize
        for extent in reversed(shape):
            contiguous.append(step)
            step *= extent
        if tuple(strides) != tuple(reversed(contiguous)) and 0 not in shape:
            raise InvalidArgument(
                f"{name} is not C-contiguous (strides {tuple(strides)}): pass .contiguous()"
            )
    if interface.get("mask") is not None:
        raise InvalidArgument(f"{name} is a masked array: pass its data")
    data = interface.get("data")
    if not isinstance(data, tuple) or len(data) != 2:
        raise InvalidArgument(f"{name}'s array interface has no data pointer")
    if written and data[1]:
        raise InvalidArgument(f"{name} is read-only, and the GPU writes it")
    address = data[0] or 0  # None: an empty array
    return _Array(int(address), shape, itemsize)


def _expect_shape(array: _Array, name: str, want: Tuple[int, ...], why: str = "") -> None:
    if array.shape != want:
        raise ShapeMismatch(
            f"{name} has shape {array.shape}, expected {want}" + (f" ({why})" if why else "")
        )


def _stream(stream: Any) -> int:
    """A ``cudaStream_t`` as an integer."""
    if stream is None:
        return 0
    for attribute in ("cuda_stream", "ptr"):
        handle = getattr(stream, attribute, None)
        if isinstance(handle, int):
            return handle
    if isinstance(stream, int) and not isinstance(stream, bool) and stream >= 0:
        return stream
    raise InvalidArgument(
        "stream must be None, a cudaStream_t as an int, or an object with cuda_stream "
        f"(torch.cuda.Stream) or ptr (cupy), got {type(stream).__name__}"
    )


class GpuFootprints:
    """Signature rows of every physical KV block, updated on the GPU each
    engine step, and the footprints of the requests whose prefill ends,
    summed on the GPU and handed to eldrd without a host round trip.

    Needs a libeldr built with CUDA and a device: otherwise the constructor
    raises ``Unsupported`` or ``CudaError``. Calls from several threads run one
    at a time (the rows and scratch are shared; issue a step's calls on one
    stream); ``close()`` or a ``with`` block frees the device memory.
    """

    ERR_EXPERT_ID = _eldr.GPU_ERR_EXPERT_ID
    ERR_SLOT = _eldr.GPU_ERR_SLOT
    ERR_BLOCK_ROW = _eldr.GPU_ERR_BLOCK_ROW
    ERR_FOOTPRINT = _eldr.GPU_ERR_FOOTPRINT
    ERR_BLOCK_ID = _eldr.GPU_ERR_BLOCK_ID

    def __init__(
        self,
        layers: int,
        experts: int,
        top_k: int,
        block_size: int,
        num_blocks: int,
        *,
        max_requests_per_step: int = 256,
        device: int = 0,
    ) -> None:
        self._layers = layers
        self._experts = experts
        self._top_k = top_k
        self._gpu = _eldr._GpuFootprints(
            layers, experts, top_k, block_size, num_blocks, max_requests_per_step, device
        )

    def update_blocks(
        self, expert_ids: Any, slot_mapping: Any, *, layer: Optional[int] = None, stream: Any = None
    ) -> None:
        """One engine step: router top-k ``expert_ids`` int32/int64
        [tokens][layers][top_k] (or [tokens][top_k] for one ``layer``) and
        ``slot_mapping`` int64 [tokens] (physical KV slot; negative: padding)."""
        if layer is not None and not 0 <= layer < self._layers:
            raise OutOfRange(f"layer {layer} is outside [0, {self._layers}) (None: all layers)")
        ids = _array(expert_ids, "expert_ids", ("<i4", "<i8"), 3 if layer is None else 2)
        slots = _array(slot_mapping, "slot_mapping", ("<i8",), 1)
        layers = (self._layers,) if layer is None else ()
        _expect_shape(ids, "expert_ids", (ids.shape[0],) + layers + (self._top_k,))
        _expect_shape(slots, "slot_mapping", (ids.shape[0],), "one slot per token")
        self._gpu.update_blocks(
            ids.address,
            ids.itemsize,
            ids.shape[0],
            -1 if layer is None else layer,
            slots.address,
            _stream(stream),
        )

    def _tables(self, block_table: Any, num_blocks: Any) -> Tuple[_Array, _Array]:
        table = _array(block_table, "block_table", ("<i4",), 2)
        counts = _array(num_blocks, "num_blocks", ("<i4",), 1)
        _expect_shape(counts, "num_blocks", (table.shape[0],), "one count per block_table row")
        return table, counts

    def sum_requests(
        self, block_table: Any, num_blocks: Any, out: Any, *, stream: Any = None
    ) -> None:
        """Footprints of requests: ``block_table`` int32 [requests][max_blocks]
        and ``num_blocks`` int32 [requests] on the device; ``out`` int16
        [requests][layers][experts] in device or mapped pinned host memory."""
        table, counts = self._tables(block_table, num_blocks)
        target = _array(out, "out", ("<i2",), 3, host=True, written=True)
        _expect_shape(target, "out", (table.shape[0], self._layers, self._experts))
        self._gpu.sum_requests(
            table.address, table.shape[1], counts.address, table.shape[0], target.address,
            _stream(stream),
        )

    def push_requests(
        self,
        client: Any,
        request_ids: Sequence[str],
        block_table: Any,
        num_blocks: Any,
        *,
        stream: Any = None,
    ) -> None:
        """Sums the requests' footprints and writes them from the GPU into
        ``client``'s ring (an ``eldr.Client`` of this object's alone), one
        record per id; all or none (``RingFull``: retry later)."""
        if isinstance(request_ids, (str, bytes)):
            raise InvalidArgument("request_ids must be a sequence of ids, not one id")
        table, counts = self._tables(block_table, num_blocks)
        if len(request_ids) != table.shape[0]:
            rows = table.shape[0]
            raise ShapeMismatch(f"{len(request_ids)} request ids for {rows} block_table rows")
        self._gpu.push_requests(
            client, list(request_ids), table.address, table.shape[1], counts.address,
            _stream(stream),
        )

    def take_errors(self, *, stream: Any = None) -> int:
        """Reads and clears the sticky ``ERR_*`` bits (synchronises ``stream``)."""
        return int(self._gpu.take_errors(_stream(stream)))

    def close(self) -> None:
        """Synchronises the device (hand-offs may still be in flight), then
        frees the device memory. Idempotent; the GIL is released meanwhile."""
        self._gpu.close()

    def __del__(self) -> None:
        # Freeing synchronises the device: never with the GIL held.
        gpu = getattr(self, "_gpu", None)
        if gpu is not None:
            gpu.close()

    @property
    def closed(self) -> bool:
        return bool(self._gpu.closed)

    def __enter__(self) -> "GpuFootprints":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
