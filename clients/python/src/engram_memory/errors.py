"""Errors: every failed RPC surfaces as an :class:`EngramError` subclass."""
from __future__ import annotations

from typing import Any

import grpc

__all__ = [
    "CURRENT_SEQ_TRAILER",
    "LAST_SEQ_TRAILER",
    "AlreadyExistsError",
    "CancelledError",
    "DeadlineExceededError",
    "EngramError",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "UnavailableError",
    "from_rpc_error",
]

#: Trailer carrying the session's head seq on an expected_seq mismatch.
CURRENT_SEQ_TRAILER = "engram-current-seq"
#: Trailer carrying the last seq a stream delivered when the server ended it.
LAST_SEQ_TRAILER = "engram-last-seq"


class EngramError(Exception):
    """A failed Engram call, with its gRPC status code.

    ``current_seq`` is set on FAILED_PRECONDITION from an ``expected_seq``
    mismatch (the session's head seq); ``last_seq`` when the server ended a
    stream (the last seq it delivered).
    """

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self,
        code: grpc.StatusCode | None,
        message: str,
        current_seq: int | None = None,
        *,
        last_seq: int | None = None,
        trailers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.current_seq = current_seq
        self.last_seq = last_seq
        self.trailers: dict[str, str] = dict(trailers or {})

    @property
    def field(self) -> str | None:
        """The request field an INVALID_ARGUMENT names ("field: problem"), if any."""
        head, sep, _ = self.message.partition(":")
        return head if sep and head and " " not in head else None

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r}, current_seq={self.current_seq!r})"


class InvalidArgumentError(EngramError, ValueError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(EngramError, LookupError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(EngramError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(EngramError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class OutOfRangeError(EngramError):
    code = grpc.StatusCode.OUT_OF_RANGE


class ResourceExhaustedError(EngramError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(EngramError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(EngramError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class CancelledError(EngramError):
    code = grpc.StatusCode.CANCELLED


class InternalError(EngramError):
    code = grpc.StatusCode.INTERNAL


class UnauthenticatedError(EngramError, PermissionError):
    """The server requires an API key (MEMORY_AUTH=true) and got none, or a bad or revoked one."""

    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(EngramError, PermissionError):
    """The API key's role or apps do not allow the call."""

    code = grpc.StatusCode.PERMISSION_DENIED


_BY_CODE: dict[grpc.StatusCode, type[EngramError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        FailedPreconditionError,
        OutOfRangeError,
        ResourceExhaustedError,
        UnavailableError,
        DeadlineExceededError,
        CancelledError,
        InternalError,
        UnauthenticatedError,
        PermissionDeniedError,
    )
}


def _trailers(err: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        md = err.trailing_metadata()
    except Exception:  # noqa: BLE001 - not every RpcError carries metadata
        return out
    for item in md or ():
        key, value = item[0], item[1]
        if isinstance(value, bytes):
            continue
        out[str(key).lower()] = str(value)
    return out


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def from_rpc_error(err: grpc.RpcError) -> EngramError:
    """Converts a ``grpc.RpcError`` (sync or aio) into the matching EngramError."""
    code_fn = getattr(err, "code", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    details_fn = getattr(err, "details", None)
    message = (details_fn() if callable(details_fn) else None) or str(err)
    trailers = _trailers(err)
    cls = _BY_CODE.get(code, EngramError)
    exc = cls(
        code,
        message,
        _int(trailers.get(CURRENT_SEQ_TRAILER)),
        last_seq=_int(trailers.get(LAST_SEQ_TRAILER)),
        trailers=trailers,
    )
    exc.__cause__ = err
    return exc
