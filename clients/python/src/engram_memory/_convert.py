"""Conversions between the generated protobuf messages and the client's types."""

from __future__ import annotations

import dataclasses
import json
import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from google.protobuf import duration_pb2, struct_pb2, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from ._gen.engram.v1 import memories_pb2 as mpb
from ._gen.engram.v1 import memory_pb2 as pb
from .models import (
    ChatMessage,
    ContentPart,
    ContextSection,
    ConversationContext,
    EventHit,
    EventPage,
    Fact,
    LongTermMemory,
    MemoryChange,
    MemoryEvent,
    MemoryListFilters,
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
    parse_timestamp,
)

if TYPE_CHECKING:
    # Only in annotations (postponed by `from __future__ import annotations`): no runtime dependency.
    from typing_extensions import Unpack

_MAX_SAFE_INT = 2**53


def _json_default(obj: Any) -> Any:
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, date):
        return obj.isoformat()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(obj, (set, frozenset)):
        raise TypeError(f"a {type(obj).__name__} is not JSON (it has no order): pass a list")
    if isinstance(obj, tuple):
        return list(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    return str(obj)


def jsonable(value: Any, field: str = "content") -> Any:
    """Makes ``value`` plain JSON (dict/list/str/number/bool/None); errors name ``field``."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{field}: NaN and infinities are not JSON")
        return value
    try:
        return json.loads(json.dumps(value, default=_json_default, allow_nan=False))
    except TypeError as err:
        raise TypeError(f"{field}: {err}") from None
    except ValueError as err:
        raise ValueError(f"{field}: NaN and infinities are not JSON ({err})") from None


_Message = TypeVar("_Message", bound=Message)

_FIELD_TYPES = {
    FieldDescriptor.TYPE_STRING: "str",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_DOUBLE: "float",
    FieldDescriptor.TYPE_FLOAT: "float",
    FieldDescriptor.TYPE_BYTES: "bytes",
    FieldDescriptor.TYPE_ENUM: "int",
}


def message(cls: Callable[..., _Message], **fields: Any) -> _Message:
    """``cls(**fields)``, but a value of the wrong type raises a TypeError naming its field
    (protobuf's own says "bad argument type for built-in operation")."""
    try:
        return cls(**fields)
    except (TypeError, ValueError):
        descriptor = getattr(cls, "DESCRIPTOR", None)
        for name, value in fields.items():
            try:
                cls(**{name: value})
            except (TypeError, ValueError) as err:
                field = descriptor.fields_by_name.get(name) if descriptor is not None else None
                expected = _FIELD_TYPES.get(field.type, "int") if field is not None else "another type"
                if field is not None and field.type == FieldDescriptor.TYPE_MESSAGE:
                    expected = field.message_type.name
                if field is not None and field.is_repeated:
                    expected = f"an iterable of {expected}"
                raise TypeError(f"{name}: expected {expected}, got {type(value).__name__} {value!r}") from err
        raise


def _fill_value(v: struct_pb2.Value, obj: Any) -> None:
    if obj is None:
        v.null_value = struct_pb2.NULL_VALUE
    elif isinstance(obj, bool):
        v.bool_value = obj
    elif isinstance(obj, (int, float)):
        v.number_value = float(obj)
    elif isinstance(obj, str):
        v.string_value = obj
    elif isinstance(obj, Mapping):
        _fill_struct(v.struct_value, obj)
    elif isinstance(obj, list):
        lv = v.list_value
        lv.SetInParent()
        for item in obj:
            _fill_value(lv.values.add(), item)
    else:  # pragma: no cover - jsonable() leaves nothing else
        raise TypeError(f"not JSON: {type(obj).__name__}")


def _fill_struct(s: struct_pb2.Struct, obj: Mapping[str, Any]) -> None:
    s.SetInParent()
    for key, item in obj.items():
        _fill_value(s.fields[str(key)], item)


def set_field(msg: Message, name: str, value: Any) -> None:
    """``msg.<name> = value``, but a value of the wrong type raises a TypeError naming the field."""
    try:
        setattr(msg, name, value)
    except (TypeError, ValueError):
        message(type(msg), **{name: value})  # raises, naming the field
        raise


def to_value(obj: Any, field: str = "content") -> struct_pb2.Value:
    v = struct_pb2.Value()
    _fill_value(v, jsonable(obj, field))
    return v


def to_struct(obj: Mapping[str, Any] | None, field: str = "metadata") -> struct_pb2.Struct | None:
    if obj is None:
        return None
    if not isinstance(obj, Mapping):
        raise TypeError(f"{field}: expected a mapping, got {type(obj).__name__}")
    plain = jsonable(dict(obj), field)
    s = struct_pb2.Struct()
    _fill_struct(s, plain)
    return s


def from_value(v: struct_pb2.Value) -> Any:
    kind = v.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return None
    if kind == "bool_value":
        return v.bool_value
    if kind == "number_value":
        n = v.number_value
        # JSON has one number type; give back ints for integral values.
        if n.is_integer() and abs(n) <= _MAX_SAFE_INT:
            return int(n)
        return n
    if kind == "string_value":
        return v.string_value
    if kind == "struct_value":
        return from_struct(v.struct_value)
    return [from_value(item) for item in v.list_value.values]


def from_struct(s: struct_pb2.Struct) -> dict[str, Any]:
    return {key: from_value(item) for key, item in s.fields.items()}


def to_timestamp(value: datetime | str) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(parse_timestamp(value))
    return ts


def from_timestamp(ts: timestamp_pb2.Timestamp) -> datetime:
    return ts.ToDatetime(tzinfo=timezone.utc)


def to_duration(value: timedelta | float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    if isinstance(value, timedelta):
        d.FromTimedelta(value)
    else:
        d.FromTimedelta(timedelta(seconds=float(value)))
    return d


def event_from_pb(e: pb.Event) -> MemoryEvent:
    return MemoryEvent(
        event_id=e.event_id,
        timestamp=from_timestamp(e.timestamp),
        event_type=e.event_type,
        content=from_value(e.content) if e.HasField("content") else None,
        metadata=from_struct(e.metadata),
        seq=e.seq,
        session_id=e.session_id,
        state_delta=from_struct(e.state_delta) if e.HasField("state_delta") else None,
        state_removals=list(e.state_removals) or None,
        state_nulls_are_values=e.state_nulls_are_values,
    )


def session_from_pb(s: pb.Session) -> SessionInfo:
    return SessionInfo(
        session_id=s.session_id,
        app_name=s.app_name,
        user_id=s.user_id,
        metadata=from_struct(s.metadata),
        created_at=from_timestamp(s.created_at),
        updated_at=from_timestamp(s.updated_at),
        head_seq=s.head_seq,
        first_seq=s.first_seq,
        event_count=s.event_count,
        state=from_struct(s.state),
        version=s.version,
    )


#: What add_events accepts for one event.
EventLike = MemoryEvent | Mapping[str, Any]


def event_input(
    event_type: str,
    content: Any = None,
    metadata: Mapping[str, Any] | None = None,
    event_id: str | None = None,
    timestamp: datetime | str | None = None,
    state_delta: Mapping[str, Any] | None = None,
    state_removals: Iterable[str] | None = None,
    state_nulls_are_values: bool = False,
) -> pb.EventInput:
    # An id assigned here, once, before the first try, is the idempotency key
    # every retry of the append carries: a retry after a lost response then
    # returns the stored original instead of storing the event twice.
    msg = pb.EventInput(event_type=event_type, event_id=event_id or str(uuid.uuid4()))
    msg.content.CopyFrom(to_value(content))
    if metadata:
        s = to_struct(metadata)
        assert s is not None
        msg.metadata.CopyFrom(s)
    if timestamp is not None:
        msg.timestamp.CopyFrom(to_timestamp(timestamp))
    if state_delta is not None:
        delta = to_struct(state_delta, "state_delta")
        assert delta is not None
        msg.state_delta.CopyFrom(delta)
    set_state_options(msg, state_removals, state_nulls_are_values)
    return msg


def set_state_options(
    msg: pb.EventInput | pb.UpdateSessionRequest, removals: Iterable[str] | None, nulls_are_values: bool
) -> None:
    """Sets state_removals (each key a str, else TypeError naming it) and state_nulls_are_values."""
    if removals is not None:
        if isinstance(removals, (str, bytes)):
            raise TypeError("state_removals: expected an iterable of str, got a single string")
        keys = list(removals)
        for i, key in enumerate(keys):
            if not isinstance(key, str):
                raise TypeError(f"state_removals[{i}]: expected str, got {type(key).__name__}")
        msg.state_removals.extend(keys)
    if not isinstance(nulls_are_values, bool):
        raise TypeError(f"state_nulls_are_values: expected bool, got {type(nulls_are_values).__name__}")
    msg.state_nulls_are_values = nulls_are_values


def event_input_of(event: EventLike) -> pb.EventInput:
    if isinstance(event, MemoryEvent):
        return event_input(
            event.event_type,
            event.content,
            event.metadata,
            event.event_id,
            event.timestamp,
            event.state_delta,
            event.state_removals,
            event.state_nulls_are_values,
        )
    if isinstance(event, Mapping):
        if "event_type" not in event:
            raise ValueError("event: event_type is required")
        return event_input(
            str(event["event_type"]),
            event.get("content"),
            event.get("metadata"),
            event.get("event_id"),
            event.get("timestamp"),
            event.get("state_delta"),
            event.get("state_removals"),
            bool(event.get("state_nulls_are_values", False)),
        )
    raise TypeError(f"event: expected a MemoryEvent or a mapping, got {type(event).__name__}")


def event_inputs(events: Iterable[EventLike]) -> list[pb.EventInput]:
    return [event_input_of(e) for e in events]


def page_from_pb(r: pb.GetSessionEventsResponse) -> EventPage:
    return EventPage([event_from_pb(e) for e in r.events], r.next_page_token, r.head_seq)


def context_request(
    session_id: str,
    max_events: int = 0,
    *,
    token_budget: int = 0,
    query: str = "",
    tokenizer: str = "",
    preserve_system: bool | None = None,
    section_budgets: Mapping[str, int] | None = None,
    section_priority: Iterable[str] | None = None,
    retrieval_threshold: int | None = None,
) -> pb.BuildConversationContextRequest:
    """The request of build_conversation_context; unset options take the server's defaults."""
    req = message(
        pb.BuildConversationContextRequest,
        session_id=session_id,
        max_events=max_events,
        token_budget=token_budget,
        query=query,
        tokenizer=tokenizer,
        section_budgets=dict(section_budgets or {}),
        section_priority=list(section_priority or []),
    )
    if preserve_system is not None:
        set_field(req, "preserve_system", preserve_system)
    if retrieval_threshold is not None:
        set_field(req, "retrieval_threshold", retrieval_threshold)
    return req


def _part_from_pb(p: pb.ContentPart) -> ContentPart:
    return ContentPart(type=p.type, text=p.text, image_url=p.image_url.url, detail=p.image_url.detail)


def context_from_pb(r: pb.BuildConversationContextResponse) -> ConversationContext:
    return ConversationContext(
        text=r.text,
        messages=[
            ChatMessage(
                role=m.role,
                content=m.content,
                name=m.name,
                tool_calls=tuple(
                    ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments, type=c.type or "function")
                    for c in m.tool_calls
                ),
                tool_call_id=m.tool_call_id,
                content_parts=tuple(_part_from_pb(p) for p in m.content_parts),
            )
            for m in r.messages
        ],
        events_included=r.events_included,
        events_dropped=r.events_dropped,
        events_summarized=r.events_summarized,
        tokens_used=r.tokens_used,
        retrieval_used=r.retrieval_used,
        tokenizer=r.tokenizer,
        sections=[
            ContextSection(s.name, s.tokens_used, s.events_included, s.events_dropped, s.retrieval_used)
            for s in r.sections
        ],
    )


def stats_from_pb(r: pb.GetStatsResponse) -> MemoryStats:
    return MemoryStats(r.total_sessions, r.total_events, r.avg_events_per_session, r.backend)


def frame_from_pb(r: pb.StreamSessionEventsResponse) -> StreamFrame | None:
    kind = r.WhichOneof("frame")
    if kind == "event":
        return StreamFrame("event", event_from_pb(r.event), r.event.seq)
    if kind == "caught_up":
        return StreamFrame("caught_up", None, r.caught_up.head_seq)
    if kind == "heartbeat":
        return StreamFrame("heartbeat", None, r.heartbeat.head_seq)
    return None  # an unknown frame kind from a newer server


# ---- request builders shared by the async and sync clients ----------------


def create_session_request(
    app_name: str, user_id: str, session_id: str | None, metadata: Mapping[str, Any] | None
) -> pb.CreateSessionRequest:
    req = message(pb.CreateSessionRequest, app_name=app_name, user_id=user_id)
    if session_id is not None:
        set_field(req, "session_id", session_id)
    s = to_struct(metadata)
    if s is not None:
        req.metadata.CopyFrom(s)
    return req


def get_or_create_request(
    session_id: str, app_name: str, user_id: str, metadata: Mapping[str, Any] | None
) -> pb.GetOrCreateSessionRequest:
    req = message(pb.GetOrCreateSessionRequest, session_id=session_id, app_name=app_name, user_id=user_id)
    s = to_struct(metadata)
    if s is not None:
        req.metadata.CopyFrom(s)
    return req


def list_sessions_request(
    app_name: str | None, user_id: str | None, page_size: int, page_token: str
) -> pb.ListSessionsRequest:
    req = message(pb.ListSessionsRequest, page_size=page_size, page_token=page_token)
    if app_name is not None:
        set_field(req, "app_name", app_name)
    if user_id is not None:
        set_field(req, "user_id", user_id)
    return req


def add_event_request(session_id: str, event: pb.EventInput, expected_seq: int | None) -> pb.AddEventRequest:
    req = message(pb.AddEventRequest, session_id=session_id, event=event)
    if expected_seq is not None:
        set_field(req, "expected_seq", expected_seq)
    return req


def update_session_request(
    session_id: str,
    metadata: Mapping[str, Any] | None,
    state_delta: Mapping[str, Any] | None,
    expected_version: int | None,
    state_removals: Iterable[str] | None = None,
    state_nulls_are_values: bool = False,
) -> pb.UpdateSessionRequest:
    req = message(pb.UpdateSessionRequest, session_id=session_id)
    if metadata is not None:
        meta = to_struct(metadata)
        assert meta is not None
        req.metadata.CopyFrom(meta)
    if state_delta is not None:
        delta = to_struct(state_delta, "state_delta")
        assert delta is not None
        req.state_delta.CopyFrom(delta)
    set_state_options(req, state_removals, state_nulls_are_values)
    if expected_version is not None:
        set_field(req, "expected_version", expected_version)
    return req


def add_events_request(session_id: str, events: Iterable[EventLike], expected_seq: int | None) -> pb.AddEventsRequest:
    req = message(pb.AddEventsRequest, session_id=session_id, events=event_inputs(events))
    if expected_seq is not None:
        set_field(req, "expected_seq", expected_seq)
    return req


def get_session_events_request(
    session_id: str,
    event_types: Iterable[str] | None,
    after_seq: int | None,
    limit: int,
    page_token: str,
    tail: int,
) -> pb.GetSessionEventsRequest:
    req = message(
        pb.GetSessionEventsRequest,
        session_id=session_id,
        event_types=list(event_types or ()),
        limit=limit,
        page_token=page_token,
        tail=tail,
    )
    if after_seq is not None:
        set_field(req, "after_seq", after_seq)
    return req


def list_events_request(session_id: str | None, limit: int) -> pb.ListEventsRequest:
    req = message(pb.ListEventsRequest, limit=limit)
    if session_id is not None:
        set_field(req, "session_id", session_id)
    return req


def stream_request(
    session_id: str, after_seq: int | None, event_types: Iterable[str] | None
) -> pb.StreamSessionEventsRequest:
    req = message(pb.StreamSessionEventsRequest, session_id=session_id, event_types=list(event_types or ()))
    if after_seq is not None:
        set_field(req, "after_seq", after_seq)
    return req


def cleanup_request(
    max_age: timedelta | float, app_name: str | None = None, user_id: str | None = None
) -> pb.CleanupRequest:
    # Unset (None) filters stay absent on the wire: an empty string would be a filter the server refuses.
    return message(pb.CleanupRequest, max_age=to_duration(max_age), app_name=app_name, user_id=user_id)


def erased_from_pb(r: pb.DeleteUserDataResponse) -> UserDataErased:
    return UserDataErased(r.removed_sessions, r.removed_events, r.removed_memories)


def normalize_target(target: str) -> str:
    """Accepts host:port, or an http(s):// URL as KAOS configurations spell it."""
    for scheme in ("http://", "https://", "grpc://"):
        if target.startswith(scheme):
            return target[len(scheme) :].rstrip("/")
    return target


# ---- long-term memory ------------------------------------------------------

#: What write_memories accepts for one memory: a LongTermMemory or a mapping with its field names.
MemoryLike = LongTermMemory | Mapping[str, Any]

_SCOPE_MATCHES: dict[str, mpb.ScopeMatch.ValueType] = {
    "visible": mpb.SCOPE_MATCH_VISIBLE,
    "within": mpb.SCOPE_MATCH_WITHIN,
    "exact": mpb.SCOPE_MATCH_EXACT,
}


def scope_match_pb(value: ScopeMatch | None) -> mpb.ScopeMatch.ValueType:
    if value is None:
        return mpb.SCOPE_MATCH_UNSPECIFIED
    try:
        return _SCOPE_MATCHES[value]
    except KeyError:
        raise ValueError(f"scope_match: expected one of {sorted(_SCOPE_MATCHES)}, got {value!r}") from None


def _fact_of(value: Fact | Sequence[str] | Mapping[str, str] | None) -> Fact | None:
    if value is None or isinstance(value, Fact):
        return value
    if isinstance(value, Mapping):
        return Fact(str(value["subject"]), str(value["predicate"]), str(value["object"]))
    subject, predicate, obj = value
    return Fact(subject, predicate, obj)


def long_term_memory_of(memory: MemoryLike) -> LongTermMemory:
    """A LongTermMemory from itself or from a mapping of its field names (fact as a Fact, triple or mapping)."""
    if isinstance(memory, LongTermMemory):
        return memory
    if not isinstance(memory, Mapping):
        raise TypeError(f"memory: expected a LongTermMemory or a mapping, got {type(memory).__name__}")
    known = {f.name for f in dataclasses.fields(LongTermMemory)}
    unknown = sorted(set(memory) - known)
    if unknown:
        raise ValueError(f"memory: unknown field {unknown[0]!r}")
    fields = dict(memory)
    fields["fact"] = _fact_of(fields.get("fact"))
    source = fields.get("source")
    if isinstance(source, Mapping):
        fields["source"] = MemorySource(**source)
    return LongTermMemory(**fields)


def memory_to_pb(m: LongTermMemory) -> mpb.Memory:
    # An id assigned here, once, before the first try, is the idempotency key
    # every retry of the write carries: a retry after a lost response then
    # returns the stored original instead of storing the memory twice.
    msg = mpb.Memory(
        memory_id=m.memory_id or str(uuid.uuid4()),
        app_name=m.app_name,
        user_id=m.user_id,
        agent_id=m.agent_id,
        session_id=m.session_id,
        text=m.text,
        key=m.key,
        topics=list(m.topics),
        importance=m.importance,
        pinned=m.pinned,
        embedding=list(m.embedding),
    )
    if m.fact is not None:
        msg.fact.CopyFrom(mpb.MemoryFact(subject=m.fact.subject, predicate=m.fact.predicate, object=m.fact.object))
    if m.metadata:
        s = to_struct(m.metadata)
        assert s is not None
        msg.metadata.CopyFrom(s)
    if m.source is not None:
        msg.source.CopyFrom(
            mpb.MemorySource(session_id=m.source.session_id, from_seq=m.source.from_seq, to_seq=m.source.to_seq)
        )
    if m.valid_from is not None:
        msg.valid_from.CopyFrom(to_timestamp(m.valid_from))
    if m.invalid_at is not None:
        msg.invalid_at.CopyFrom(to_timestamp(m.invalid_at))
    return msg


def memory_from_pb(m: mpb.Memory) -> LongTermMemory:
    return LongTermMemory(
        app_name=m.app_name,
        text=m.text,
        memory_id=m.memory_id,
        user_id=m.user_id if m.HasField("user_id") else None,
        agent_id=m.agent_id if m.HasField("agent_id") else None,
        session_id=m.session_id if m.HasField("session_id") else None,
        fact=Fact(m.fact.subject, m.fact.predicate, m.fact.object) if m.HasField("fact") else None,
        key=m.key,
        topics=list(m.topics),
        importance=m.importance,
        pinned=m.pinned,
        metadata=from_struct(m.metadata),
        source=MemorySource(m.source.session_id, m.source.from_seq, m.source.to_seq) if m.HasField("source") else None,
        created_at=from_timestamp(m.created_at) if m.HasField("created_at") else None,
        valid_from=from_timestamp(m.valid_from) if m.HasField("valid_from") else None,
        invalid_at=from_timestamp(m.invalid_at) if m.HasField("invalid_at") else None,
        superseded_by=m.superseded_by,
        embedding=list(m.embedding),
    )


def write_memories_request(memories: Iterable[MemoryLike]) -> mpb.WriteMemoriesRequest:
    return message(mpb.WriteMemoriesRequest, memories=[memory_to_pb(long_term_memory_of(m)) for m in memories])


def written_from_pb(r: mpb.WriteMemoriesResponse) -> MemoryWrite:
    return MemoryWrite([memory_from_pb(m) for m in r.memories], [memory_from_pb(m) for m in r.superseded])


def scored_from_pb(s: mpb.ScoredMemory) -> ScoredMemory:
    return ScoredMemory(memory_from_pb(s.memory), s.score, s.lexical_score, s.vector_score)


def search_memories_request(
    app_name: str,
    query: str,
    *,
    user_id: str | None,
    agent_id: str | None,
    session_id: str | None,
    scope: ScopeMatch | None,
    top_k: int,
    topics: Iterable[str] | None,
    as_of: datetime | str | None,
    include_invalid: bool,
    pinned: bool | None,
    query_embedding: Iterable[float] | None,
    include_embeddings: bool = False,
) -> mpb.SearchMemoriesRequest:
    # Unset (None) filters stay absent on the wire: an empty string would be a filter the server refuses.
    req = message(
        mpb.SearchMemoriesRequest,
        app_name=app_name,
        user_id=user_id,
        agent_id=agent_id,
        session_id=session_id,
        scope_match=scope_match_pb(scope),
        query=query,
        top_k=top_k,
        topics=list(topics or ()),
        include_invalid=include_invalid,
        pinned=pinned,
        query_embedding=list(query_embedding or ()),
        include_embeddings=include_embeddings,
    )
    if as_of is not None:
        req.as_of.CopyFrom(to_timestamp(as_of))
    return req


def list_memories_request(
    app_name: str, *, page_size: int, page_token: str, **filters: Unpack[MemoryListFilters]
) -> mpb.ListMemoriesRequest:
    fields: dict[str, Any] = dict(filters)
    as_of = fields.pop("as_of", None)
    fields["scope_match"] = scope_match_pb(fields.get("scope_match"))
    fields["topics"] = list(fields.get("topics") or ())
    req = message(mpb.ListMemoriesRequest, app_name=app_name, page_size=page_size, page_token=page_token, **fields)
    if as_of is not None:
        req.as_of.CopyFrom(to_timestamp(as_of))
    return req


def delete_memories_request(
    app_name: str,
    memory_ids: Iterable[str] | None,
    *,
    user_id: str | None,
    agent_id: str | None,
    session_id: str | None,
    scope: ScopeMatch | None,
) -> mpb.DeleteMemoriesRequest:
    return message(
        mpb.DeleteMemoriesRequest,
        app_name=app_name,
        memory_ids=list(memory_ids or ()),
        user_id=user_id,
        agent_id=agent_id,
        session_id=session_id,
        scope_match=scope_match_pb(scope),
    )


def watch_memories_request(
    app_name: str,
    *,
    user_id: str | None,
    agent_id: str | None,
    session_id: str | None,
    scope: ScopeMatch | None,
    after: int | None = None,
) -> mpb.WatchMemoriesRequest:
    return message(
        mpb.WatchMemoriesRequest,
        app_name=app_name,
        user_id=user_id,
        agent_id=agent_id,
        session_id=session_id,
        scope_match=scope_match_pb(scope),
        after=after,
    )


def change_from_pb(r: mpb.WatchMemoriesResponse) -> MemoryChange | None:
    kind = r.WhichOneof("frame")
    if kind == "started":
        return MemoryChange("started", cursor=r.started.cursor)
    if kind == "written":
        return MemoryChange("written", memory_from_pb(r.written), cursor=r.cursor)
    if kind == "superseded":
        return MemoryChange("superseded", memory_from_pb(r.superseded), cursor=r.cursor)
    if kind == "deleted":
        return MemoryChange("deleted", memory_ids=tuple(r.deleted.memory_ids), cursor=r.cursor)
    if kind == "heartbeat":
        return MemoryChange("heartbeat")
    return None  # an unknown frame kind from a newer server


def search_events_request(
    app_name: str, query: str, *, user_id: str | None, top_k: int, event_types: Iterable[str] | None
) -> pb.SearchEventsRequest:
    return message(
        pb.SearchEventsRequest,
        app_name=app_name,
        user_id=user_id,
        query=query,
        top_k=top_k,
        event_types=list(event_types or ()),
    )


def hit_from_pb(h: pb.EventHit) -> EventHit:
    return EventHit(h.session_id, h.seq, h.snippet, h.score, event_from_pb(h.event))


def recall_request(
    session_id: str,
    query: str,
    *,
    token_budget: int,
    agent_id: str | None,
    tokenizer: str,
    top_k: int,
    query_embedding: Iterable[float] | None,
    include_embeddings: bool = False,
) -> pb.RecallRequest:
    return message(
        pb.RecallRequest,
        session_id=session_id,
        query=query,
        token_budget=token_budget,
        agent_id=agent_id,
        tokenizer=tokenizer,
        top_k=top_k,
        query_embedding=list(query_embedding or ()),
        include_embeddings=include_embeddings,
    )


def recall_from_pb(r: pb.RecallResponse) -> RecallResult:
    return RecallResult(
        text=r.text,
        pinned=[memory_from_pb(m) for m in r.pinned],
        memories=[scored_from_pb(s) for s in r.memories],
        context=context_from_pb(r.context),
        pinned_tokens=r.pinned_tokens,
        memory_tokens=r.memory_tokens,
        context_tokens=r.context_tokens,
        tokens_used=r.tokens_used,
        tokenizer=r.tokenizer,
    )
