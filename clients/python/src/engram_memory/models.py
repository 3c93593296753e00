"""Plain Python types of the Engram client (no protobuf in sight)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, TypeAlias, TypedDict

__all__ = [
    "ChatMessage",
    "ContentPart",
    "ContextSection",
    "ConversationContext",
    "EventHit",
    "EventPage",
    "Fact",
    "KGFact",
    "LongTermMemory",
    "MemoryChange",
    "MemoryEvent",
    "MemorySource",
    "MemoryWrite",
    "RecallResult",
    "ScopeMatch",
    "ScoredMemory",
    "MemoryStats",
    "SessionInfo",
    "StreamFrame",
    "ToolCall",
    "utc_now",
]


def utc_now() -> datetime:
    """The current time, tz-aware UTC."""
    return datetime.now(timezone.utc)


def _as_utc(value: datetime) -> datetime:
    # Naive datetimes are taken as UTC (KAOS used naive datetime.now()).
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def parse_timestamp(value: str | datetime) -> datetime:
    """Parses an ISO 8601 string (``Z`` accepted) into a tz-aware UTC datetime."""
    if isinstance(value, datetime):
        return _as_utc(value)
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    return _as_utc(datetime.fromisoformat(text))


@dataclass
class MemoryEvent:
    """One event of a session's log (the KAOS ``MemoryEvent`` plus seq and session_id).

    ``seq`` and ``session_id`` are 0 and "" until the server stored the event.
    """

    event_id: str
    timestamp: datetime
    event_type: str
    content: Any
    metadata: dict[str, Any] = field(default_factory=dict)
    seq: int = 0
    session_id: str = ""
    #: State changes the event carried (ADK's model: "app:", "user:", "temp:"
    #: prefixes; None deletes a key unless state_nulls_are_values); None when it carried none.
    state_delta: dict[str, Any] | None = None
    #: State keys the event deleted, before its delta applied; None when none.
    state_removals: list[str] | None = None
    #: True when the delta's None values are stored as values (ADK's contract).
    state_nulls_are_values: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.timestamp, str):
            self.timestamp = parse_timestamp(self.timestamp)
        else:
            self.timestamp = _as_utc(self.timestamp)
        if self.metadata is None:
            self.metadata = {}

    @classmethod
    def create(cls, event_type: str, content: Any, metadata: dict[str, Any] | None = None) -> MemoryEvent:
        """A new event with a fresh UUID event_id (its idempotency key) and the current time."""
        now = utc_now()
        return cls(
            event_id=str(uuid.uuid4()),
            # Millisecond precision, as the server stores it.
            timestamp=now.replace(microsecond=now.microsecond // 1000 * 1000),
            event_type=event_type,
            content=content,
            metadata=dict(metadata or {}),
        )

    def to_dict(self, *, include_seq: bool = False) -> dict[str, Any]:
        """The KAOS dict form: event_id, timestamp (ISO 8601), event_type, content, metadata.

        With ``include_seq`` also seq and session_id.
        """
        out: dict[str, Any] = {
            "event_id": self.event_id,
            "timestamp": self.timestamp.isoformat(),
            "event_type": self.event_type,
            "content": self.content,
            "metadata": dict(self.metadata),
        }
        if include_seq:
            out["seq"] = self.seq
            out["session_id"] = self.session_id
        if self.state_delta is not None:
            out["state_delta"] = dict(self.state_delta)
        if self.state_removals is not None:
            out["state_removals"] = list(self.state_removals)
        if self.state_nulls_are_values:
            out["state_nulls_are_values"] = True
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryEvent:
        """Inverse of :meth:`to_dict` (seq and session_id are optional keys)."""
        return cls(
            event_id=str(data["event_id"]),
            timestamp=parse_timestamp(data["timestamp"]),
            event_type=str(data["event_type"]),
            content=data.get("content"),
            metadata=dict(data.get("metadata") or {}),
            seq=int(data.get("seq") or 0),
            session_id=str(data.get("session_id") or ""),
            state_delta=dict(data["state_delta"]) if data.get("state_delta") is not None else None,
            state_removals=list(data["state_removals"]) if data.get("state_removals") is not None else None,
            state_nulls_are_values=bool(data.get("state_nulls_are_values", False)),
        )


@dataclass
class SessionInfo:
    """A session as the server reports it (``events`` only when asked for)."""

    session_id: str
    app_name: str
    user_id: str
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    head_seq: int
    first_seq: int
    event_count: int
    events: list[MemoryEvent] = field(default_factory=list)
    #: The merged state: the session's keys, the app's as "app:<key>", the user's as "user:<key>".
    state: dict[str, Any] = field(default_factory=dict)
    #: Increases with each update_session and each append carrying a state delta.
    version: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "app_name": self.app_name,
            "user_id": self.user_id,
            "metadata": dict(self.metadata),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "head_seq": self.head_seq,
            "first_seq": self.first_seq,
            "event_count": self.event_count,
            "events": [e.to_dict() for e in self.events],
            "state": dict(self.state),
            "version": self.version,
        }


@dataclass(frozen=True)
class EventPage:
    """One page of GetSessionEvents."""

    events: list[MemoryEvent]
    next_page_token: str
    head_seq: int


@dataclass(frozen=True)
class ToolCall:
    """One tool invocation of an assistant message (OpenAI shape)."""

    id: str
    name: str
    arguments: str
    type: str = "function"

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": self.type, "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ContentPart:
    """One part of a multi-part message: ``text`` or ``image_url`` (OpenAI shape)."""

    type: str
    text: str = ""
    image_url: str = ""
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        if self.type == "image_url":
            image: dict[str, Any] = {"url": self.image_url}
            if self.detail:
                image["detail"] = self.detail
            return {"type": "image_url", "image_url": image}
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class ChatMessage:
    """A chat message in the OpenAI shape."""

    role: str
    content: str
    name: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    #: Only on messages that carry images: text and image parts (``content`` keeps the text).
    content_parts: tuple[ContentPart, ...] = ()

    def to_dict(self, *, vision: bool = False) -> dict[str, Any]:
        """The OpenAI chat dict; empty optional fields are left out. With ``vision=True``
        a message that carries images gets its parts as ``content`` (for vision models)."""
        content: Any = self.content
        if vision and self.content_parts:
            content = [p.to_dict() for p in self.content_parts]
        out: dict[str, Any] = {"role": self.role, "content": content}
        if self.name:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id:
            out["tool_call_id"] = self.tool_call_id
        return out


@dataclass(frozen=True)
class ContextSection:
    """What one section (metadata.section) contributed to a context."""

    name: str
    tokens_used: int
    events_included: int
    events_dropped: int
    retrieval_used: bool


@dataclass(frozen=True)
class ConversationContext:
    """BuildConversationContext's answer: KAOS text and chat messages."""

    text: str
    messages: list[ChatMessage]
    events_included: int
    events_dropped: int
    #: Events a summary in the context stands in for.
    events_summarized: int = 0
    #: Tokens the messages take, counted by ``tokenizer``.
    tokens_used: int = 0
    #: True when a section was ranked by BM25 relevance to the query.
    retrieval_used: bool = False
    #: The tokenizer that counted: o200k_base, cl100k_base or chars4 (also the fallback).
    tokenizer: str = ""
    #: Per-section usage, in priority order.
    sections: list[ContextSection] = field(default_factory=list)


@dataclass(frozen=True)
class MemoryStats:
    """Totals over the whole store."""

    total_sessions: int
    total_events: int
    avg_events_per_session: float
    backend: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_sessions": self.total_sessions,
            "total_events": self.total_events,
            "avg_events_per_session": self.avg_events_per_session,
            "backend": self.backend,
        }


@dataclass(frozen=True)
class UserDataErased:
    """What one delete_user_data call removed."""

    removed_sessions: int
    removed_events: int
    #: Long-term memories of the user (user_id equal to it) the call removed.
    removed_memories: int = 0


@dataclass(frozen=True)
class StreamFrame:
    """One frame of StreamSessionEvents: an event, the end of the replay, or a heartbeat."""

    kind: Literal["event", "caught_up", "heartbeat"]
    event: MemoryEvent | None = None
    head_seq: int = 0


# ---- long-term memory -------------------------------------------------------

#: How a scope filter (user_id, agent_id, session_id) selects memories:
#: "visible" (what a caller in that scope may recall: each dimension of the
#: memory unset or equal), "within" (each dimension given equals the memory's;
#: the others match anything) or "exact" (each dimension equal, unset matching
#: only unset). None: the RPC's default (visible to search and watch, within to
#: list and delete).
ScopeMatch: TypeAlias = Literal["visible", "within", "exact"]


@dataclass(frozen=True)
class Fact:
    """A fact as subject, predicate and object ("alice", "prefers", "tea")."""

    subject: str
    predicate: str
    object: str


@dataclass(frozen=True)
class MemorySource:
    """The events of a session a memory was drawn from (seqs inclusive; 0 when unknown)."""

    session_id: str
    from_seq: int = 0
    to_seq: int = 0


@dataclass
class LongTermMemory:
    """One long-term memory (engram.v1.Memory): text, optionally a fact, in a scope.

    ``memory_id`` is the idempotency key: the client assigns a UUID before the
    first try when it is empty. The scope is ``app_name`` plus any of
    ``user_id``, ``agent_id`` and ``session_id`` (None: shared across that
    dimension). ``created_at`` and ``superseded_by`` are set by the server;
    ``invalid_at`` is set when a newer memory with the same ``key`` (or fact
    subject and predicate) in the same scope supersedes this one.
    """

    app_name: str
    text: str
    memory_id: str = ""
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    fact: Fact | None = None
    key: str = ""
    topics: list[str] = field(default_factory=list)
    importance: float = 0.0
    pinned: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    source: MemorySource | None = None
    created_at: datetime | None = None
    valid_from: datetime | None = None
    invalid_at: datetime | None = None
    superseded_by: str = ""
    embedding: list[float] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """True while no newer memory superseded it and no invalid_at has passed."""
        return self.invalid_at is None or self.invalid_at > utc_now()


@dataclass(frozen=True)
class MemoryWrite:
    """What write_memories stored: the memories in request order (the originals of
    retried ids) and those whose validity the write closed, as they are now."""

    memories: list[LongTermMemory]
    superseded: list[LongTermMemory]


@dataclass(frozen=True)
class ScoredMemory:
    """A search result: the memory, its fused score, and the lexical and vector parts."""

    memory: LongTermMemory
    score: float
    lexical_score: float = 0.0
    vector_score: float = 0.0


@dataclass(frozen=True)
class MemoryChange:
    """One frame of watch_memories.

    ``kind`` is "started" (the watch is live: every change after ``cursor``
    comes; sent once), "written" or "superseded" (``memory`` as it is now),
    "deleted" (``memory_ids``) or "heartbeat" (idle keep-alive). ``cursor``
    is the change's number in its app (on "started": the number the watch
    starts after; 0 on heartbeats): ``watch_memories(after=...)`` resumes
    after it.
    """

    kind: Literal["started", "written", "superseded", "deleted", "heartbeat"]
    memory: LongTermMemory | None = None
    memory_ids: tuple[str, ...] = ()
    cursor: int = 0


@dataclass(frozen=True)
class EventHit:
    """One event matching search_events: where it is, a snippet around the match, its BM25 score."""

    session_id: str
    seq: int
    snippet: str
    score: float
    event: MemoryEvent


@dataclass(frozen=True)
class RecallResult:
    """Recall's answer: everything to know before the next model call, within one token budget.

    ``text`` renders every part as one block (for a system prompt); the parts
    are the ``pinned`` memories, the relevant ``memories`` and the session's
    ``context``, with the tokens each takes.
    """

    text: str
    pinned: list[LongTermMemory]
    memories: list[ScoredMemory]
    context: ConversationContext
    pinned_tokens: int
    memory_tokens: int
    context_tokens: int
    tokens_used: int
    tokenizer: str


@dataclass(frozen=True)
class KGFact:
    """A fact of a :class:`engram_memory.kg.KnowledgeGraph`: the triple, who stated it, and its memory.

    ``role`` is the conversational role the fact was attributed to when it
    was added ("user", "assistant", "system", "tool"...; "" when none), as in
    MARSYS's KGMemory. ``memory`` is the stored memory (validity, scope,
    topics, importance); ``score`` its relevance in a search, else 0.
    """

    subject: str
    predicate: str
    object: str
    role: str
    memory: LongTermMemory
    score: float = 0.0

    @property
    def valid_from(self) -> datetime | None:
        """From when the fact holds."""
        return self.memory.valid_from

    @property
    def invalid_at(self) -> datetime | None:
        """Until when it held; None while it still holds."""
        return self.memory.invalid_at

    def to_message(self) -> dict[str, str]:
        """The fact as a chat message, in the shape MARSYS's KGMemory retrieves it."""
        return {
            "role": self.role or "system",
            "content": f"Fact ({self.role or 'system'}): {self.subject} {self.predicate} {self.object}.",
        }


class MemoryListFilters(TypedDict, total=False):
    """What a memory listing selects besides its app (:meth:`EngramClient.list_memories_page`)."""

    user_id: str | None
    agent_id: str | None
    session_id: str | None
    scope_match: ScopeMatch | None
    topics: Iterable[str] | None
    as_of: datetime | str | None
    include_invalid: bool
    pinned: bool | None
    key: str | None
    subject: str | None
    predicate: str | None
    include_embeddings: bool
