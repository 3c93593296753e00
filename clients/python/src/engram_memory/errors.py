"""Errors: every failed RPC surfaces as an :class:`EngramError` subclass.

The server attaches ``google.rpc`` details to errors (a ``BadRequest`` field
violation, an ``ErrorInfo`` reason with metadata, a ``RetryInfo`` delay) in the
``grpc-status-details-bin`` trailer; :func:`from_rpc_error` reads them with
grpcio-status into :attr:`EngramError.field_violations`, :attr:`~EngramError.reason`,
:attr:`~EngramError.metadata` and :attr:`~EngramError.retry_delay`, so nothing
is parsed out of the message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

__all__ = [
    "CURRENT_SEQ_TRAILER",
    "LAST_SEQ_TRAILER",
    "AlreadyExistsError",
    "CancelledError",
    "DeadlineExceededError",
    "EngramError",
    "FailedPreconditionError",
    "FieldViolation",
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
#: Trailer carrying the session's version on an UpdateSession ``expected_version`` mismatch.
CURRENT_VERSION_TRAILER = "engram-current-version"


@dataclass(frozen=True)
class FieldViolation:
    """One request field an error is about (a ``google.rpc.BadRequest`` violation)."""

    #: The field's path in the request: ``"session_id"``, ``"events[1].event_id"``, ``"body"``.
    field: str
    #: What is wrong with it.
    description: str


class EngramError(Exception):
    """A failed Engram call, with its gRPC status code and the server's details.

    ``field_violations`` (and ``field``, the first one's path) say which
    request field is at fault; ``reason`` why the call failed, stable for
    machines (``"SEQ_CONFLICT"``, ``"SESSION_NOT_FOUND"``, ``"RATE_LIMITED"``,
    ``"SHUTTING_DOWN"``...), with its facts in ``metadata``; ``retry_delay``
    how many seconds to wait before retrying. ``current_seq`` is set on
    FAILED_PRECONDITION from an ``expected_seq`` mismatch (the session's head
    seq); ``last_seq`` when the server ended a stream (the last seq it
    delivered).
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
        field_violations: list[FieldViolation] | None = None,
        reason: str | None = None,
        metadata: dict[str, str] | None = None,
        retry_delay: float | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.current_seq = current_seq
        self.last_seq = last_seq
        self.trailers: dict[str, str] = dict(trailers or {})
        self.field_violations: list[FieldViolation] = list(field_violations or [])
        self.reason = reason
        self.metadata: dict[str, str] = dict(metadata or {})
        self.retry_delay = retry_delay

    @property
    def current_version(self) -> int | None:
        """The session's version on FAILED_PRECONDITION from an ``expected_version`` mismatch, if reported."""
        return _int(self.metadata.get("current_version") or self.trailers.get(CURRENT_VERSION_TRAILER))

    @property
    def field(self) -> str | None:
        """The request field the error is about (its first BadRequest violation's path), if any."""
        return self.field_violations[0].field if self.field_violations else None

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


class _Details:
    """What a google.rpc.Status's details say."""

    def __init__(self) -> None:
        self.field_violations: list[FieldViolation] = []
        self.reason: str | None = None
        self.metadata: dict[str, str] = {}
        self.retry_delay: float | None = None


def _details(err: Any) -> _Details:
    out = _Details()
    try:
        status = rpc_status.from_call(err)
    except Exception:  # noqa: BLE001 - a status whose code or message disagrees with the call's, or no call at all
        return out
    if status is None:
        return out
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            out.field_violations.extend(FieldViolation(v.field, v.description) for v in bad.field_violations)
        elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            out.reason = info.reason or None
            out.metadata = dict(info.metadata)
        elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            detail.Unpack(retry)
            out.retry_delay = retry.retry_delay.ToTimedelta().total_seconds()
    return out


def from_rpc_error(err: grpc.RpcError) -> EngramError:
    """Converts a ``grpc.RpcError`` (sync or aio) into the matching EngramError."""
    code_fn = getattr(err, "code", None)
    code = code_fn() if callable(code_fn) else grpc.StatusCode.UNKNOWN
    details_fn = getattr(err, "details", None)
    message = (details_fn() if callable(details_fn) else None) or str(err)
    trailers = _trailers(err)
    details = _details(err)
    cls = _BY_CODE.get(code, EngramError)
    # The seqs come from ErrorInfo's metadata; the trailers are read for servers that predate the details.
    exc = cls(
        code,
        message,
        _int(details.metadata.get("current_seq") or trailers.get(CURRENT_SEQ_TRAILER)),
        last_seq=_int(details.metadata.get("last_seq") or trailers.get(LAST_SEQ_TRAILER)),
        trailers=trailers,
        field_violations=details.field_violations,
        reason=details.reason,
        metadata=details.metadata,
        retry_delay=details.retry_delay,
    )
    exc.__cause__ = err
    return exc
