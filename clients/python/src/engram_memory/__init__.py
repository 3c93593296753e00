"""Engram memory client: KAOS-compatible async/sync APIs over gRPC.

>>> from engram_memory import EngramMemory
>>> async with EngramMemory("127.0.0.1:8000") as memory: ...
"""

from __future__ import annotations

from ._retry import StreamRetry
from .client import DEFAULT_TARGET, EngramClient
from .errors import (
    AlreadyExistsError,
    CancelledError,
    DeadlineExceededError,
    EngramError,
    FailedPreconditionError,
    FieldViolation,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    from_rpc_error,
)
from .kg import KnowledgeGraph
from .memory import EngramMemory
from .models import (
    ChatMessage,
    ContentPart,
    ContextSection,
    ConversationContext,
    EventHit,
    EventPage,
    Fact,
    KGFact,
    LongTermMemory,
    MemoryChange,
    MemoryEvent,
    MemorySource,
    MemoryStats,
    MemoryWrite,
    RecallResult,
    ScopeMatch,
    ScoredMemory,
    SessionInfo,
    StreamFrame,
    ToolCall,
    UserDataErased,
)
from .sync import EngramClientSync, EngramMemorySync, KnowledgeGraphSync

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_TARGET",
    "AlreadyExistsError",
    "CancelledError",
    "ChatMessage",
    "ContentPart",
    "ContextSection",
    "ConversationContext",
    "DeadlineExceededError",
    "EngramClient",
    "EngramClientSync",
    "EngramError",
    "EngramMemory",
    "EngramMemorySync",
    "EventHit",
    "EventPage",
    "Fact",
    "FailedPreconditionError",
    "FieldViolation",
    "InternalError",
    "InvalidArgumentError",
    "KGFact",
    "KnowledgeGraph",
    "KnowledgeGraphSync",
    "LongTermMemory",
    "MemoryChange",
    "MemoryEvent",
    "MemorySource",
    "MemoryStats",
    "MemoryWrite",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "RecallResult",
    "ResourceExhaustedError",
    "UnauthenticatedError",
    "ScopeMatch",
    "ScoredMemory",
    "SessionInfo",
    "StreamFrame",
    "StreamRetry",
    "ToolCall",
    "UnavailableError",
    "UserDataErased",
    "__version__",
    "from_rpc_error",
]
