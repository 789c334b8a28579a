"""Footprints from stock engines' routed-expert payloads (SGLang, vLLM).

Both engines can return, per request, the experts every token was routed to:
ids ``[rows][num_hidden_layers][top_k]``, one row per token. These functions
count the prompt's rows into an eldr footprint, int16 ``[L][E]`` with ``L``
the MoE layers among the hidden layers (``moe_layers``, default all). The
decoding runs in libeldr (streaming, no decoded copy); a malformed payload
raises an ``eldr.Error`` subclass, never returns a wrong footprint.

NumPy is imported inside the functions only: ``import eldr`` does not need it.
"""

from __future__ import annotations

import operator
from typing import (
    TYPE_CHECKING,
    Any,
    List,
    Literal,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
    overload,
)

from . import _eldr
from ._errors import InvalidArgument, OutOfRange, ShapeMismatch

if TYPE_CHECKING:  # NumPy for the annotations only: imported lazily at run time
    import numpy as np
    import numpy.typing as npt

# ELDR_DTYPE_* of eldr.h, by SGLang's routed_experts_dtype names.
_DTYPES = {"uint8": 1, "uint16": 2, "int16": 3, "int32": 4, "int64": 5}
_DTYPE_NAMES = {code: name for name, code in _DTYPES.items()}
_DTYPE_AUTO = 0


class RoutedExpertsInfo(NamedTuple):
    """What a decode saw (``return_info=True``)."""

    dtype: str  # the payload's element type: "uint8", "int32", ...
    num_hidden_layers: int  # the payload's layer axis
    top_k: int
    layers: int  # footprint layers (the MoE layers)
    rows_in_payload: int
    rows_counted: int
    cached_entries: int  # -1 (prefix-cache) entries skipped in the counted rows


def _info(d: Mapping[str, int]) -> RoutedExpertsInfo:
    return RoutedExpertsInfo(
        _DTYPE_NAMES.get(d["dtype"], "?"),
        d["num_hidden_layers"],
        d["top_k"],
        d["layers"],
        d["rows_in_payload"],
        d["rows_counted"],
        d["cached_entries"],
    )


def _count(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise InvalidArgument(f"{name} must be an integer, not bool")
    try:
        v = operator.index(value)
    except TypeError:
        raise InvalidArgument(f"{name} must be an integer, not {type(value).__name__}") from None
    if v < 0:
        raise OutOfRange(f"{name} is negative ({v})")
    return v


def _layers(moe_layers: Optional[Sequence[int]]) -> Optional[List[int]]:
    if moe_layers is None:
        return None
    return [_count(h, "moe_layers entry") for h in moe_layers]


def _result(raw: bytearray, info: Mapping[str, int], num_experts: int, return_info: bool) -> Any:
    import numpy as np

    fp = np.frombuffer(raw, dtype="<i2").reshape(info["layers"], num_experts)
    return (fp, _info(info)) if return_info else fp


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
def footprint_from_sglang(
    meta_info: Mapping[str, Any],
    *,
    num_experts: int,
    num_layers: int,
    top_k: int,
    moe_layers: Optional[Sequence[int]] = None,
    prompt_tokens: Optional[int] = None,
    return_info: bool = False,
) -> Any:
    """The footprint of an SGLang response's ``meta_info``.

    ``meta_info["routed_experts"]`` is base64 of raw ids ``[seqlen - 1,
    num_layers, top_k]`` of ``meta_info.get("routed_experts_dtype", "int32")``;
    ``num_layers`` is the model's num_hidden_layers. Only the first
    ``prompt_tokens`` rows (default ``meta_info["prompt_tokens"]``) are counted.
    Returns int16 ``[L][E]``, or ``(footprint, RoutedExpertsInfo)`` with
    ``return_info=True``.
    """
    if not isinstance(meta_info, Mapping):
        raise InvalidArgument(f"meta_info must be a mapping, not {type(meta_info).__name__}")
    if "routed_experts" not in meta_info or meta_info["routed_experts"] is None:
        raise InvalidArgument(
            "meta_info has no routed_experts (start SGLang with --enable-return-routed-experts "
            "and send return_routed_experts=True)"
        )
    dtype_name = meta_info.get("routed_experts_dtype", "int32")
    if dtype_name not in _DTYPES:
        raise InvalidArgument(
            f"unknown routed_experts_dtype {dtype_name!r} (expected one of {sorted(_DTYPES)})"
        )
    if prompt_tokens is None:
        if "prompt_tokens" not in meta_info:
            raise InvalidArgument("meta_info has no prompt_tokens: pass prompt_tokens=")
        prompt_tokens = meta_info["prompt_tokens"]
    e = _count(num_experts, "num_experts")
    raw, info = _eldr._footprint_from_base64_ids(
        meta_info["routed_experts"],
        _DTYPES[dtype_name],
        e,
        _count(num_layers, "num_layers"),
        _count(top_k, "top_k"),
        _layers(moe_layers),
        0,
        _count(prompt_tokens, "prompt_tokens"),
    )
    return _result(raw, info, e, return_info)


@overload
def footprint_from_vllm(
    routed_experts: Union[str, bytes, Sequence[Any]],
    *,
    num_experts: int,
    prompt_tokens: int,
    moe_layers: Optional[Sequence[int]] = ...,
    return_info: Literal[False] = ...,
) -> npt.NDArray[np.int16]: ...
@overload
def footprint_from_vllm(
    routed_experts: Union[str, bytes, Sequence[Any]],
    *,
    num_experts: int,
    prompt_tokens: int,
    moe_layers: Optional[Sequence[int]] = ...,
    return_info: Literal[True],
) -> Tuple[npt.NDArray[np.int16], RoutedExpertsInfo]: ...
def footprint_from_vllm(
    routed_experts: Union[str, bytes, Sequence[Any]],
    *,
    num_experts: int,
    prompt_tokens: int,
    moe_layers: Optional[Sequence[int]] = None,
    return_info: bool = False,
) -> Any:
    """The footprint of a vLLM response's routed experts.

    ``routed_experts`` is either ``choices[i].routed_experts`` (base64 of a
    ``.npy`` ``[num_tokens - 1, num_hidden_layers, top_k]``, uint8 or uint16)
    or v0.21's ``prompt_routed_experts`` (nested int lists ``[rows][layers][k]``
    where -1 marks a prefix-cache hit: skipped, counted in the info's
    ``cached_entries``). The first ``prompt_tokens`` rows are counted.
    """
    e = _count(num_experts, "num_experts")
    rows = _count(prompt_tokens, "prompt_tokens")
    layers = _layers(moe_layers)
    if isinstance(routed_experts, (str, bytes)):
        raw, info = _eldr._footprint_from_base64_npy(
            routed_experts, _DTYPE_AUTO, e, layers, 0, rows
        )
        return _result(raw, info, e, return_info)

    import numpy as np

    try:
        ids = np.asarray(routed_experts)
    except ValueError as exc:  # ragged lists
        raise ShapeMismatch(
            f"prompt_routed_experts is not a [rows][layers][k] array: {exc}"
        ) from None
    if ids.ndim != 3:
        raise ShapeMismatch(
            f"prompt_routed_experts must be [rows][layers][k], got {ids.ndim} dimension(s)"
        )
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise InvalidArgument(f"prompt_routed_experts must hold integers, got {ids.dtype}")
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < -1 or hi > np.iinfo(np.int16).max:
            bad = lo if lo < -1 else hi
            raise OutOfRange(f"prompt_routed_experts holds {bad}: not an int16 expert id or -1")
    cells = np.ascontiguousarray(ids, dtype="<i2")
    raw, info = _eldr._footprint_from_ids(
        cells, _DTYPES["int16"], e, ids.shape[1], ids.shape[2], layers, 0, rows
    )
    return _result(raw, info, e, return_info)
