# Type stubs of the extension module eldr._eldr (pybind11, py_*.cpp), checked
# against the built module by mypy's stubtest (ctest python.stubs). The
# package's pure-Python modules carry their own annotations.
import os
from types import TracebackType
from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np
import numpy.typing as npt

__version__: str
ABI_VERSION: int
GPU_ERR_SLOT: int
GPU_ERR_EXPERT_ID: int
GPU_ERR_BLOCK_ROW: int
GPU_ERR_FOOTPRINT: int
GPU_ERR_BLOCK_ID: int

# A footprint: int16 [layers][experts] (borrowed without a copy when
# C-contiguous int16; other integer arrays are range-checked and converted).
_Counts = Union[npt.NDArray[np.integer[Any]], Sequence[Sequence[int]]]
# Calibration footprints: int16 [requests][layers][experts].
_CountsStack = Union[npt.NDArray[np.integer[Any]], Sequence[Sequence[Sequence[int]]]]
# In-flight count per worker slot: uint32 [slots].
_Loads = Union[npt.NDArray[np.integer[Any]], Sequence[int]]
_RequestId = Union[str, bytes]
# A prompt: text, or token ids (each < 2**20) as a 1-D integer array or sequence.
_Prompt = Union[str, npt.NDArray[np.integer[Any]], Sequence[int]]
_PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

def version_number() -> int: ...
def abi_version() -> int: ...
def cuda_available() -> bool: ...
def status_name(status: int) -> str: ...
def status_string(status: int) -> str: ...
def policy_names() -> List[str]: ...
def _check_abi(library_abi: int) -> None: ...

# The decoders behind eldr._engines: (int16 cells as a bytearray, info dict).
def _footprint_from_base64_ids(
    text: Union[str, bytes],
    dtype: int,
    num_experts: int,
    num_hidden_layers: int,
    top_k: int,
    moe_layers: Optional[Sequence[int]],
    first_row: int,
    row_count: Optional[int],
) -> Tuple[bytearray, Dict[str, int]]: ...
def _footprint_from_ids(
    ids: Any,  # a C-contiguous buffer
    dtype: int,
    num_experts: int,
    num_hidden_layers: int,
    top_k: int,
    moe_layers: Optional[Sequence[int]],
    first_row: int,
    row_count: Optional[int],
) -> Tuple[bytearray, Dict[str, int]]: ...
def _footprint_from_base64_npy(
    text: Union[str, bytes],
    dtype: int,
    num_experts: int,
    moe_layers: Optional[Sequence[int]],
    first_row: int,
    row_count: Optional[int],
) -> Tuple[bytearray, Dict[str, int]]: ...

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
    def confidence(self) -> float: ...
    @property
    def ok(self) -> bool: ...
    def to_dict(self) -> Dict[str, Any]: ...
    # A decision stands for its worker id: as an index, int(), == an int.
    def __index__(self) -> int: ...
    def __int__(self) -> int: ...
    def __hash__(self) -> int: ...
    def __eq__(self, other: object) -> bool: ...

class Table:
    @staticmethod
    def load(path: _PathArg) -> Table: ...
    def save(self, path: _PathArg) -> None: ...
    def signature(self, counts: _Counts) -> npt.NDArray[np.float32]: ...
    def scores(self, counts: _Counts) -> npt.NDArray[np.float32]: ...
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
    # None, or {"prototypes", "learned", "demand_bytes", "feature_bytes",
    # "index_bytes": int; "kinds": ["tokens" | "text", ...]}.
    @property
    def predictor(self) -> Optional[Dict[str, Any]]: ...

def fit(
    prefill_counts: _CountsStack,
    num_workers: int,
    decode_counts: Optional[_CountsStack] = None,
    seed: int = 1,
    *,
    top_k: int = 0,
    select_layers: bool = True,
    max_iterations: int = 50,
    threads: int = 0,
    prompts: Optional[Sequence[_Prompt]] = None,
    # {"capacity", "neighbours", "max_features": int; "bandwidth": float}
    predictor: Optional[Dict[str, Union[int, float]]] = None,
) -> Table: ...

class Router:
    def __init__(
        self,
        table: Table,
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
        self, counts: _Counts, loads: Optional[_Loads] = None, request_id: Optional[int] = None
    ) -> Decision: ...
    # From the prompt, with the table's footprint predictor (decode before prefill).
    def route_prompt(self, prompt: _Prompt, request_id: Optional[int] = None) -> Decision: ...
    # The real footprint of a request routed with route_prompt(request_id=...).
    def learn(self, request_id: int, footprint: _Counts) -> None: ...
    # Deprecated: complete.
    def complete_request(self, request_id: int) -> None: ...
    # Per worker slot (workers() order).
    def scores(self, counts: _Counts) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]: ...
    # The oldest request still in flight on worker finished.
    # Raises NotFound for an id not in flight (unknown, or completed already).
    def complete(self, request_id: int) -> None: ...
    # The oldest request in flight on worker (routes made without a request_id).
    def complete_worker(self, worker: int) -> None: ...
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
    def swap_table(self, table: Table) -> None: ...
    @property
    def table(self) -> Table: ...
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
    def push(self, request_id: _RequestId, counts: _Counts) -> None: ...
    def wait(self, request_id: _RequestId, timeout_ms: int = 1000) -> Decision: ...
    def route(self, request_id: _RequestId, counts: _Counts, timeout_ms: int = 1000) -> Decision: ...
    def push_prompt(self, request_id: _RequestId, prompt: _Prompt) -> None: ...
    def route_prompt(
        self, request_id: _RequestId, prompt: _Prompt, timeout_ms: int = 1000
    ) -> Decision: ...
    # token: the decision's completion_token (needed unless this process pushed it).
    def complete(self, request_id: _RequestId, token: int = 0) -> None: ...
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

# Routing through any eldrd node of a pool over NATS (no local eldrd needed).
class Pool:
    # TLS and credentials by file: ca_file turns TLS on; cert_file with
    # key_file; then creds_file, or user with password_file, or token_file.
    # inbox_prefix (default _INBOX): where the answers come, one per gateway user.
    def __init__(
        self,
        nats: str,
        pool: str = "default",
        timeout_ms: int = 2000,
        *,
        ca_file: Optional[str] = None,
        cert_file: Optional[str] = None,
        key_file: Optional[str] = None,
        creds_file: Optional[str] = None,
        user: Optional[str] = None,
        password_file: Optional[str] = None,
        token_file: Optional[str] = None,
        inbox_prefix: Optional[str] = None,
    ) -> None: ...
    def route(self, request_id: _RequestId, counts: _Counts, timeout_ms: int = 2000) -> Decision: ...
    def route_prompt(
        self, request_id: _RequestId, prompt: _Prompt, timeout_ms: int = 2000
    ) -> Decision: ...
    # token: the decision's completion_token (required over NATS).
    def complete(self, request_id: _RequestId, token: int) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def name(self) -> str: ...
    def __enter__(self) -> Pool: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

# Median ns of one eldr_router_route call looped in C++ (bench_route.py's baseline).
def _bench_c_route(router: Router, counts: _Counts, iterations: int = 10000, rounds: int = 21) -> float: ...

# The C handle behind eldr.GpuFootprints (eldr/_gpu.py): device and stream
# arguments are raw addresses.
class _GpuFootprints:
    def __init__(
        self,
        layers: int,
        experts: int,
        top_k: int,
        block_size: int,
        num_blocks: int,
        max_requests_per_step: int,
        device: int,
    ) -> None: ...
    def update_blocks(
        self, expert_ids: int, id_bytes: int, tokens: int, layer: int, slot_mapping: int, stream: int
    ) -> None: ...
    def sum_requests(
        self, block_table: int, max_blocks: int, num_blocks: int, requests: int, out: int, stream: int
    ) -> None: ...
    def push_requests(
        self,
        client: Client,
        request_ids: Sequence[_RequestId],
        block_table: int,
        max_blocks: int,
        num_blocks: int,
        stream: int,
    ) -> None: ...
    def take_errors(self, stream: int) -> int: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
