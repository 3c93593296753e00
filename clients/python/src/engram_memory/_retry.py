"""The retry policy shared by the Engram clients (Go, TypeScript, Python: same defaults)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

from .errors import EngramError

__all__ = ["DEFAULT_RETRIES", "StreamRetry"]

#: Retries of a call that is safe to repeat (reads, get_or_create_session and
#: appends without expected_seq) after UNAVAILABLE.
DEFAULT_RETRIES = 2
#: First wait before a retry (seconds); doubles per failure up to MAX_BACKOFF.
INITIAL_BACKOFF = 0.1
#: Longest wait between retries (seconds).
MAX_BACKOFF = 2.0


def unary_backoff(failures: int) -> float:
    """Seconds to wait before the ``failures``-th consecutive retry of a unary call (1-based)."""
    return min(MAX_BACKOFF, INITIAL_BACKOFF * 2.0 ** max(0, failures - 1))


@dataclass(frozen=True)
class StreamRetry:
    """How a stream resumes after UNAVAILABLE or a broken connection.

    A stream reopens at most ``max_attempts`` times in a row (the count resets
    once a frame arrives), sleeping an exponential, jittered backoff between
    ``initial_backoff`` and ``max_backoff`` seconds. ``max_attempts=0``
    disables resuming.
    """

    # 8 waits of 0.1+0.2+0.4+0.8+1.6+2+2+2 s ride out about 9 s of outage (a
    # server restart or failover), then report it instead of hiding it.
    max_attempts: int = 8
    initial_backoff: float = INITIAL_BACKOFF
    max_backoff: float = MAX_BACKOFF
    multiplier: float = 2.0
    jitter: float = 0.2

    def retryable(self, err: EngramError) -> bool:
        if err.code == grpc.StatusCode.UNAVAILABLE:
            return True
        # A connection torn down mid-stream can surface as INTERNAL/UNKNOWN
        # with an HTTP/2 reset; those are transport failures too.
        if err.code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
            text = err.message.lower()
            return any(s in text for s in ("rst_stream", "stream removed", "socket closed", "connection reset"))
        return False

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before reopening for the ``attempt``-th time in a row (1-based)."""
        base = min(self.max_backoff, self.initial_backoff * self.multiplier ** max(0, attempt - 1))
        return max(0.0, base * (1 + random.uniform(-self.jitter, self.jitter)))
