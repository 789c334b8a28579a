# Type stubs for the eldr package (the _eldr extension and eldr._errors).
import enum
import os
from types import TracebackType
from typing import (
    Any,
    Dict,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
    overload,
)

import numpy as np
import numpy.typing as npt

from ._engines import RoutedExpertsInfo as RoutedExpertsInfo  # typed in _engines.py
from ._gpu import GpuFootprints as GpuFootprints  # experimental; typed in _gpu.py

__version__: str
ABI_VERSION: int

# A footprint: int16 [layers][experts] (borrowed without a copy when
# C-contiguous int16; other integer arrays are range-checked and converted).
Counts = Union[npt.NDArray[np.integer[Any]], Sequence[Sequence[int]]]
# Calibration footprints: int16 [requests][layers][experts].
CountsStack = Union[npt.NDArray[np.integer[Any]], Sequence[Sequence[Sequence[int]]]]
# In-flight count per worker slot: uint32 [slots].
Loads = Union[npt.NDArray[np.integer[Any]], Sequence[int]]
RequestId = Union[str, bytes]
PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

def version_number() -> int: ...
def abi_version() -> int: ...
def cuda_available() -> bool: ...
def status_name(status: int) -> str: ...
def status_string(status: int) -> str: ...
def policy_names() -> List[str]: ...

# Footprints from engines' routed-expert payloads (eldr/_engines.py): int16
# [L][E], or (footprint, RoutedExpertsInfo) with return_info=True.
@overload
def footprint_from_sglang(
    meta_info: Mapping[str, Any],
    *,
    num_experts: int,
    num_layers: int,
    top_k: int,
    moe_layers: Optional[Sequence[int]] = ...,
    prompt_tokens: Optional[int] = ...,
    return_info: Literal[False] = ...,
) -> npt.NDArray[np.int16]: ...
@overload
def footprint_from_sglang(
    meta_info: Mapping[str, Any],
    *,
    num_experts: int,
    num_layers: int,
    top_k: int,
    moe_layers: Optional[Sequence[int]] = ...,
    prompt_tokens: Optional[int] = ...,
    return_info: Literal[True],
) -> Tuple[npt.NDArray[np.int16], RoutedExpertsInfo]: ...
@overload
def footprint_from_vllm(
    routed_experts: Union[str, bytes, Sequence[Sequence[Sequence[int]]]],
    *,
    num_experts: int,
    prompt_tokens: int,
    moe_layers: Optional[Sequence[int]] = ...,
    return_info: Literal[False] = ...,
) -> npt.NDArray[np.int16]: ...
@overload
def footprint_from_vllm(
    routed_experts: Union[str, bytes, Sequence[Sequence[Sequence[int]]]],
    *,
    num_experts: int,
    prompt_tokens: int,
    moe_layers: Optional[Sequence[int]] = ...,
    return_info: Literal[True],
) -> Tuple[npt.NDArray[np.int16], RoutedExpertsInfo]: ...
def _check_abi(library_abi: int) -> None: ...

class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = -1
    SHAPE_MISMATCH = -2
    OUT_OF_RANGE = -3
    IO = -4
    CORRUPT = -5
    UNSUPPORTED = -6
    NOT_FOUND = -7
    NO_WORKER = -8
    CAPACITY = -9
    STATE = -10
    INTERNAL = -11
    RING_FULL = -12
    TIMEOUT = -13
    NO_DAEMON = -14
    INCOMPATIBLE = -15
    OUT_OF_MEMORY = -16
    CUDA = -17
    PERMISSION = -18

class Error(Exception):
    STATUS: int
    message: str
    status: int
    name: str
    decision: Optional[Decision]
    def __init__(self, message: str, status: Optional[int] = ...) -> None: ...

class InvalidArgument(Error, ValueError): ...
class ShapeMismatch(Error, ValueError): ...
class OutOfRange(Error, ValueError): ...
class IoError(Error): ...
class Corrupt(Error): ...
class Unsupported(Error): ...
class NotFound(Error): ...
class NoWorker(Error): ...
class Capacity(Error): ...
class StateError(Error): ...
class Internal(Error): ...
class RingFull(Error): ...
class Timeout(Error): ...
class NoDaemon(Error): ...
class Incompatible(Error): ...
class OutOfMemory(Error): ...
class CudaError(Error): ...
class PermissionDenied(Error): ...

def error_class(status: int) -> Type[Error]: ...

class Decision:
    @property
    def worker(self) -> int: ...
    @property
    def similarity(self) -> float: ...
    @property
    def band_size(self) -> int: ...
    @property
    def table_epoch(self) -> int: ...
    @property
    def policy(self) -> str: ...
    @property
    def status(self) -> int: ...
    @property
    def status_name(self) -> str: ...
    @property
    def latency_ns(self) -> int: ...
    @property
    def completion_token(self) -> int: ...
    @property
    def ok(self) -> bool: ...
    def to_dict(self) -> Dict[str, Any]: ...

class ClusterTable:
    @staticmethod
    def load(path: PathArg) -> ClusterTable: ...
    def save(self, path: PathArg) -> None: ...
    def signature(self, counts: Counts) -> npt.NDArray[np.float32]: ...
    def scores(self, counts: Counts) -> npt.NDArray[np.float32]: ...
    @property
    def layers(self) -> int: ...
    @property
    def experts(self) -> int: ...
    @property
    def top_k(self) -> int: ...
    @property
    def num_workers(self) -> int: ...
    @property
    def num_selected_layers(self) -> int: ...
    @property
    def default_tau(self) -> float: ...
    @property
    def worker_ids(self) -> npt.NDArray[np.int32]: ...

def fit(
    prefill_counts: CountsStack,
    num_workers: int,
    decode_counts: Optional[CountsStack] = None,
    seed: int = 1,
    *,
    top_k: int = 0,
    select_layers: bool = True,
    max_iterations: int = 50,
    threads: int = 0,
) -> ClusterTable: ...

class Router:
    def __init__(
        self,
        table: ClusterTable,
        policy: Union[str, int] = "eldr_cost",
        tau: Optional[float] = 0.1,
        seed: int = 0,
        *,
        min2_band: bool = False,
        max_workers: int = 256,
        # eldr_cost's step constants: all three or none (None: the table's).
        t0_ms: Optional[float] = None,
        tseq_ms: Optional[float] = None,
        alpha_us: Optional[float] = None,
        max_batch: Optional[int] = None,
        max_inflight: Optional[int] = None,
        fit_step_cost: bool = True,
    ) -> None: ...
    def route(
        self, counts: Counts, loads: Optional[Loads] = None, request_id: Optional[int] = None
    ) -> int: ...
    def route_decision(
        self, counts: Counts, loads: Optional[Loads] = None, request_id: Optional[int] = None
    ) -> Decision: ...
    # Per worker slot (workers() order).
    def scores(self, counts: Counts) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]: ...
    # The oldest request still in flight on worker finished.
    def complete(self, worker: int) -> None: ...
    # Raises NotFound for an id not in flight (unknown, or completed already).
    def complete_request(self, request_id: int) -> None: ...
    # None or 0: not reported.
    def report(
        self, worker: int, batch_size: Optional[int] = None, step_ms: Optional[float] = None
    ) -> None: ...
    # {"routed", "rejected", "completes_rejected", "completes_unknown",
    # "untracked", "step_samples": int; "t0_ms", "tseq_ms", "alpha_us": float}.
    def stats(self) -> Dict[str, Union[int, float]]: ...
    def set_load(self, worker: int, inflight: int) -> None: ...
    def add_worker(self, worker: int) -> None: ...
    def drain_worker(self, worker: int) -> None: ...
    def remove_worker(self, worker: int) -> None: ...
    def swap_table(self, table: ClusterTable) -> None: ...
    @property
    def table(self) -> ClusterTable: ...
    @property
    def worker_slots(self) -> int: ...
    # Per slot, in slot order: {"id": int, "state": "active" | "draining" |
    # "removed", "inflight": int}.
    def workers(self) -> List[Dict[str, Any]]: ...

class Client:
    def __init__(
        self,
        instance: str,
        open_timeout_ms: int = 2000,
        *,
        daemon_stale_ms: int = 3000,
        reattach: bool = True,
    ) -> None: ...
    def push(self, request_id: RequestId, counts: Counts) -> None: ...
    def wait(self, request_id: RequestId, timeout_ms: int = 1000) -> Decision: ...
    def route(self, request_id: RequestId, counts: Counts, timeout_ms: int = 1000) -> Decision: ...
    # token: the decision's completion_token (needed unless this process pushed it).
    def complete(self, request_id: RequestId, token: int = 0) -> None: ...
    def report(
        self,
        worker: int,
        running: int,
        kv_usage: float,
        *,
        batch_size: int = 0,
        step_ms: float = 0.0,
    ) -> None: ...
    def add_worker(self, worker: int) -> None: ...
    def drain_worker(self, worker: int) -> None: ...
    def remove_worker(self, worker: int) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def instance(self) -> str: ...
    def __enter__(self) -> Client: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
