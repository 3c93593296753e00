"""Defaults and limits shared by the async and sync clients (no I/O)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._retry import DEFAULT_RETRIES

__all__ = ["DEFAULT_CHANNEL_OPTIONS", "DEFAULT_TARGET", "MAX_PAGE_SIZE", "Metadata", "channel_options"]

#: Where `npm start` serves by default.
DEFAULT_TARGET = "127.0.0.1:8000"
#: Largest page the server accepts (limit / page_size / tail).
MAX_PAGE_SIZE = 1000

#: Methods without side effects, retried by gRPC itself on UNAVAILABLE
#: (DEFAULT_RETRIES retries, backoff 0.1 s doubling up to 2 s).
_READ_METHODS = (
    "GetSession",
    "ListSessions",
    "GetSessionEvents",
    "ListEvents",
    "BuildConversationContext",
    "GetStats",
    "GetMemory",
    "SearchMemories",
    "ListMemories",
    "SearchEvents",
    "Recall",
)
#: Default channel options: read-only calls retry transient failures, and the
#: channel reconnects within seconds after a server restart.
DEFAULT_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    (
        "grpc.service_config",
        json.dumps(
            {
                "methodConfig": [
                    {
                        "name": [{"service": "engram.v1.MemoryService", "method": m} for m in _READ_METHODS],
                        "retryPolicy": {
                            "maxAttempts": DEFAULT_RETRIES + 1,
                            "initialBackoff": "0.1s",
                            "maxBackoff": "2s",
                            "backoffMultiplier": 2,
                            "retryableStatusCodes": ["UNAVAILABLE"],
                        },
                    }
                ]
            },
            separators=(",", ":"),
        ),
    ),
    ("grpc.max_reconnect_backoff_ms", 5000),
)

#: Request metadata: (key, value) pairs sent with a call.
Metadata = Sequence[tuple[str, str]]


def channel_options(options: Sequence[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
    """The default options overridden by ``options``."""
    given = list(options or ())
    names = {name for name, _ in given}
    return [opt for opt in DEFAULT_CHANNEL_OPTIONS if opt[0] not in names] + given
