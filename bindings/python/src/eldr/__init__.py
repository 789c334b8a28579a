"""eldr: expert-locality-aware routing for Mixture-of-Experts serving.

A thin binding over libeldr.so (the C API, eldr.h):

- embedded router, no daemon: ``fit``, ``Table``, ``Router``;
- sidecar client of the node's ``eldrd``: ``Client`` (push footprints, wait
  for decisions, report load and completions);
- experimental, with a CUDA build: ``GpuFootprints`` (footprints collected on
  the GPU from CUDA arrays, handed to ``eldrd`` from the GPU).

Footprints are int16 NumPy arrays [layers][experts]; a C-contiguous int16
array is used without a copy. Every failure raises ``eldr.Error`` (or a
subclass such as ``eldr.Timeout``) carrying ``.status`` and ``.name``.
"""

from ._errors import (
    Capacity,
    Corrupt,
    CudaError,
    Error,
    Incompatible,
    Internal,
    InvalidArgument,
    IoError,
    NoDaemon,
    NotFound,
    NoWorker,
    OutOfMemory,
    OutOfRange,
    PermissionDenied,
    RingFull,
    ShapeMismatch,
    StateError,
    Status,
    Timeout,
    Unsupported,
    error_class,
)
from ._eldr import (  # the extension checks the library's ABI version on import
    ABI_VERSION,
    Client,
    Table,
    Decision,
    Pool,
    Router,
    __version__,
    abi_version,
    cuda_available,
    fit,
    policy_names,
    status_name,
    status_string,
    version_number,
)
from ._engines import RoutedExpertsInfo, footprint_from_sglang, footprint_from_vllm
from ._gpu import GpuFootprints

__all__ = [
    "ABI_VERSION",
    "Capacity",
    "Client",
    "Table",
    "Corrupt",
    "CudaError",
    "Decision",
    "Error",
    "GpuFootprints",
    "Incompatible",
    "Internal",
    "InvalidArgument",
    "IoError",
    "NoDaemon",
    "NoWorker",
    "NotFound",
    "OutOfMemory",
    "OutOfRange",
    "Pool",
    "PermissionDenied",
    "RingFull",
    "Router",
    "ShapeMismatch",
    "StateError",
    "Status",
    "Timeout",
    "Unsupported",
    "__version__",
    "abi_version",
    "cuda_available",
    "error_class",
    "fit",
    "policy_names",
    "status_name",
    "status_string",
    "version_number",
]
