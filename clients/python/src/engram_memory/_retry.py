"""Resume policy of the event streams."""
from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

from .errors import EngramError

__all__ = ["StreamRetry"]


@dataclass(frozen=True)
class StreamRetry:
    """How a stream resumes after UNAVAILABLE or a broken connection.

    A stream reopens at most ``max_attempts`` times in a row (the count resets
    once a frame arrives), sleeping an exponential, jittered backoff between
    ``initial_backoff`` and ``max_backoff`` seconds. ``max_attempts=0``
    disables resuming.
    """

    max_attempts: int = 8
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
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
