"""eldr.Error and its subclasses: one class per common ELDR_E_* status of eldr.h.

The extension raises these through ``_from_status``; they are plain Python
classes so that they pickle and subclass like any other exception.
"""

from __future__ import annotations

import enum
from typing import Any, Dict, Optional, Type


class Status(enum.IntEnum):
    """eldr.h status codes (pinned forever): ``Status.TIMEOUT == -13``."""

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


def status_name(status: int) -> str:
    """``"ELDR_E_TIMEOUT"`` style name of a status, ``"ELDR_E_UNKNOWN"`` if unknown."""
    try:
        member = Status(status)
    except ValueError:
        return "ELDR_E_UNKNOWN"
    return "ELDR_OK" if member is Status.OK else "ELDR_E_" + member.name


class Error(Exception):
    """A failed eldr call.

    ``status`` is the negative ELDR_E_* code, ``name`` its symbolic name and
    ``message`` the library's detail message for the failed call. Errors raised
    for a decision the daemon rejected carry it as ``decision``.
    """

    STATUS: int = Status.INTERNAL

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = int(type(self).STATUS if status is None else status)
        self.name = status_name(self.status)
        self.decision: Optional[Any] = None

    def __reduce__(self) -> Any:
        return (type(self), (self.message, self.status))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.name})"


class InvalidArgument(Error, ValueError):
    """NULL, bad size or bad value from the caller."""

    STATUS = Status.INVALID_ARGUMENT


class ShapeMismatch(Error, ValueError):
    """Footprint shape disagrees with the table or the geometry."""

    STATUS = Status.SHAPE_MISMATCH


class OutOfRange(Error, ValueError):
    """A value outside its legal range (a count, an expert id)."""

    STATUS = Status.OUT_OF_RANGE


class IoError(Error):
    """A file could not be opened, read or written."""

    STATUS = Status.IO


class Corrupt(Error):
    """Malformed or truncated data."""

    STATUS = Status.CORRUPT


class Unsupported(Error):
    """A version or feature this build does not handle."""

    STATUS = Status.UNSUPPORTED


class NotFound(Error):
    """Unknown worker or request id."""

    STATUS = Status.NOT_FOUND


class NoWorker(Error):
    """No routable worker (all draining, removed or stale)."""

    STATUS = Status.NO_WORKER


class Capacity(Error):
    """A bounded structure is full or a record too large."""

    STATUS = Status.CAPACITY


class StateError(Error):
    """Call not valid in the object's current state (e.g. a closed client)."""

    STATUS = Status.STATE


class Internal(Error):
    """A bug: an invariant broke."""

    STATUS = Status.INTERNAL


class RingFull(Error):
    """The client's ring has no room now; nothing was written: retry."""

    STATUS = Status.RING_FULL


class Timeout(Error):
    """A bounded wait ended first."""

    STATUS = Status.TIMEOUT


class NoDaemon(Error):
    """No ready eldrd for this instance."""

    STATUS = Status.NO_DAEMON


class Incompatible(Error):
    """A segment of another format (magic, ABI, layout)."""

    STATUS = Status.INCOMPATIBLE


class OutOfMemory(Error):
    """Host, shared or device memory exhausted."""

    STATUS = Status.OUT_OF_MEMORY


class CudaError(Error):
    """A CUDA runtime call failed."""

    STATUS = Status.CUDA


class PermissionDenied(Error):
    """The OS refused access (mode, group, lock file)."""

    STATUS = Status.PERMISSION


_BY_STATUS: Dict[int, Type[Error]] = {
    cls.STATUS: cls
    for cls in (
        InvalidArgument,
        ShapeMismatch,
        OutOfRange,
        IoError,
        Corrupt,
        Unsupported,
        NotFound,
        NoWorker,
        Capacity,
        StateError,
        Internal,
        RingFull,
        Timeout,
        NoDaemon,
        Incompatible,
        OutOfMemory,
        CudaError,
        PermissionDenied,
    )
}


def error_class(status: int) -> Type[Error]:
    """The exception class raised for a status (``Error`` for unknown codes)."""
    return _BY_STATUS.get(status, Error)


def _from_status(status: int, message: str) -> Error:
    """Called by the extension to build the exception for a failed call."""
    return error_class(status)(message, status)
