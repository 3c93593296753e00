"""Pydantic AI bridge: a session's events as a message history, and back.

Install with the ``pydantic-ai`` extra. Messages map to events as follows
(the shapes Engram's BuildConversationContext pairs by ``tool_call_id``):

=====================  ======================================================
``UserPromptPart``     ``user_message``, content: the prompt text
``SystemPromptPart``   ``system``, content: the prompt text
``TextPart``           ``agent_response``, content: the text
``ToolCallPart``       ``tool_call``, content: ``{tool_name, args, tool_call_id}``
``ToolReturnPart``     ``tool_result``, content: ``{tool_name, content, tool_call_id}``
``RetryPromptPart``    ``tool_result`` (metadata ``retry: true``) when it answers a
                       tool call, else ``user_message`` (metadata ``retry: true``)
=====================  ======================================================

Other parts (thinking, files, native tools, ...) are not stored. Loading keeps
tool calls and returns paired: a call whose return is missing (or a return
whose call is missing) is left out, as LLM APIs reject either.

:meth:`EngramMemory.build_message_history` and
:meth:`EngramMemory.store_pydantic_message` are PAIS's (KAOS's Pydantic AI
server's) own narrower pair, built on :func:`kaos_message_history` and
:func:`kaos_tool_events` here: its agent server stores the prompt and the
answer itself and replays only those, and records tool calls and returns as
``{"tool", "arguments"}`` / ``{"tool", "result"}`` events (``delegation_*``
for its ``delegate_to_*`` tools).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_core import to_jsonable_python

from .client import EngramClient
from .errors import NotFoundError
from .memory import EngramMemory
from .models import MemoryEvent, parse_timestamp

__all__ = [
    "events_to_messages",
    "kaos_message_history",
    "kaos_tool_events",
    "load_message_history",
    "messages_to_events",
    "save_new_messages",
]

#: Event types PAIS replays as the user's side of a turn.
KAOS_PROMPT_TYPES = ("user_message", "task_delegation_received")
#: Tools whose name starts so are PAIS's delegations to sub-agents.
KAOS_DELEGATION_PREFIX = "delegate_to_"

#: Metadata key grouping the events of one ModelMessage.
MESSAGE_KEY = "pydantic_ai_message"
_SOURCE = {"source": "pydantic_ai"}


def _client(memory: EngramMemory | EngramClient) -> EngramClient:
    return memory.client if isinstance(memory, EngramMemory) else memory


def _jsonable(value: Any) -> Any:
    return to_jsonable_python(value, fallback=str)


def _user_content(content: Any) -> Any:
    if isinstance(content, str):
        return content
    items = [item if isinstance(item, str) else _jsonable(item) for item in content]
    return items[0] if len(items) == 1 and isinstance(items[0], str) else items


def messages_to_events(messages: Sequence[ModelMessage]) -> list[MemoryEvent]:
    """The events :func:`save_new_messages` stores for ``messages`` (not yet stored)."""
    events: list[MemoryEvent] = []

    def add(event_type: str, content: Any, meta: dict[str, Any], when: datetime | None) -> None:
        event = MemoryEvent.create(event_type, content, meta)
        if when is not None:
            event.timestamp = parse_timestamp(when)
        events.append(event)

    for message in messages:
        group = uuid.uuid4().hex
        base = {**_SOURCE, MESSAGE_KEY: group}
        if isinstance(message, ModelRequest):
            for part in message.parts:
                when = getattr(part, "timestamp", None) or message.timestamp
                if isinstance(part, UserPromptPart):
                    add("user_message", _user_content(part.content), dict(base), when)
                elif isinstance(part, SystemPromptPart):
                    add("system", part.content, dict(base), when)
                elif isinstance(part, ToolReturnPart):
                    content = {
                        "tool_name": part.tool_name,
                        "content": _jsonable(part.content),
                        "tool_call_id": part.tool_call_id,
                    }
                    add("tool_result", content, dict(base), when)
                elif isinstance(part, RetryPromptPart):
                    if part.tool_name:
                        content = {
                            "tool_name": part.tool_name,
                            "content": _jsonable(part.content),
                            "tool_call_id": part.tool_call_id,
                        }
                        add("tool_result", content, {**base, "retry": True}, when)
                    else:
                        add("user_message", _jsonable(part.content), {**base, "retry": True}, when)
        elif isinstance(message, ModelResponse):
            meta = dict(base)
            if message.model_name:
                meta["model_name"] = message.model_name
            for rpart in message.parts:
                if isinstance(rpart, TextPart):
                    add("agent_response", rpart.content, dict(meta), message.timestamp)
                elif isinstance(rpart, ToolCallPart):
                    content = {
                        "tool_name": rpart.tool_name,
                        "args": _jsonable(rpart.args_as_dict()),
                        "tool_call_id": rpart.tool_call_id,
                    }
                    add("tool_call", content, dict(meta), message.timestamp)
    return events


async def save_new_messages(
    memory: EngramMemory | EngramClient, session_id: str, messages: Sequence[ModelMessage]
) -> list[MemoryEvent]:
    """Appends a run's messages (``result.new_messages()``) to the session as one atomic batch.

    The session is created (app "agent", user "user") when it does not exist.
    Returns the stored events.
    """
    events = messages_to_events(messages)
    if not events:
        return []
    client = _client(memory)
    stored: list[MemoryEvent] = []
    for start in range(0, len(events), 500):
        chunk = events[start : start + 500]
        try:
            stored += await client.add_events(session_id, chunk)
        except NotFoundError:
            await client.get_or_create_session(session_id)
            stored += await client.add_events(session_id, chunk)
    return stored


def _obj(content: Any) -> dict[str, Any]:
    return content if isinstance(content, dict) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _call_id(event: MemoryEvent) -> str | None:
    c = _obj(event.content)
    return _str(c.get("tool_call_id")) or _str(c.get("id")) or _str(event.metadata.get("tool_call_id"))


def _tool_name(event: MemoryEvent) -> str:
    c = _obj(event.content)
    for key in ("tool_name", "tool", "name", "function"):
        if _str(c.get(key)):
            return str(c[key])
    return _str(event.metadata.get("tool")) or "tool"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    c = _obj(content)
    for key in ("text", "content", "message"):
        if _str(c.get(key)):
            return str(c[key])
    return json.dumps(content, separators=(",", ":"), ensure_ascii=False)


def _pair_tools(events: Sequence[MemoryEvent]) -> dict[int, str]:
    """Index -> tool_call_id of every tool_call/tool_result event that has its counterpart."""
    open_calls: list[tuple[int, str, str]] = []
    paired: dict[int, str] = {}
    for i, e in enumerate(events):
        if e.event_type == "tool_call":
            open_calls.append((i, _call_id(e) or f"call_{e.seq}", _tool_name(e)))
        elif e.event_type == "tool_result":
            cid, name = _call_id(e), _tool_name(e)
            match = next(
                (k for k, c in enumerate(open_calls) if (c[1] == cid if cid else c[2] == name or name == "tool")),
                None,
            )
            if match is None:
                continue
            call_index, call_id, _ = open_calls.pop(match)
            paired[call_index] = call_id
            paired[i] = call_id
    return paired


def events_to_messages(events: Sequence[MemoryEvent]) -> list[ModelMessage]:
    """Turns a session's events (in seq order) into Pydantic AI messages."""
    paired = _pair_tools(events)
    messages: list[ModelMessage] = []
    req_parts: list[ModelRequestPart] = []
    resp_parts: list[ModelResponsePart] = []
    group: tuple[str, Any] | None = None
    model_name: str | None = None
    resp_time: datetime | None = None

    def flush() -> None:
        nonlocal req_parts, resp_parts, model_name, resp_time
        if req_parts:
            messages.append(ModelRequest(parts=req_parts))
        if resp_parts:
            kwargs: dict[str, Any] = {"model_name": model_name}
            if resp_time is not None:
                kwargs["timestamp"] = resp_time
            messages.append(ModelResponse(parts=resp_parts, **kwargs))
        req_parts, resp_parts, model_name, resp_time = [], [], None, None

    for i, e in enumerate(events):
        c = _obj(e.content)
        retry = bool(e.metadata.get("retry"))
        side: str
        part: Any
        if e.event_type == "user_message":
            side = "request"
            if retry:
                part = RetryPromptPart(
                    content=e.content if isinstance(e.content, (str, list)) else _text(e.content), timestamp=e.timestamp
                )
            elif isinstance(e.content, list) and all(isinstance(x, str) for x in e.content):
                part = UserPromptPart(content=list(e.content), timestamp=e.timestamp)
            else:
                part = UserPromptPart(content=_text(e.content), timestamp=e.timestamp)
        elif e.event_type == "system":
            side, part = "request", SystemPromptPart(content=_text(e.content), timestamp=e.timestamp)
        elif e.event_type in ("delegation_response", "task_delegation_received"):
            label = "Delegation response" if e.event_type == "delegation_response" else "Task delegated"
            side, part = "request", UserPromptPart(content=f"[{label}] {_text(e.content)}", timestamp=e.timestamp)
        elif e.event_type == "tool_result":
            if i not in paired:
                continue
            result = (
                c["content"]
                if "content" in c
                else c["result"]
                if "result" in c
                else c["output"]
                if "output" in c
                else e.content
            )
            side = "request"
            if retry:
                part = RetryPromptPart(
                    content=result if isinstance(result, (str, list)) else _text(result),
                    tool_name=_tool_name(e),
                    tool_call_id=paired[i],
                    timestamp=e.timestamp,
                )
            else:
                part = ToolReturnPart(
                    tool_name=_tool_name(e), content=result, tool_call_id=paired[i], timestamp=e.timestamp
                )
        elif e.event_type == "agent_response":
            side, part = "response", TextPart(content=_text(e.content))
        elif e.event_type == "delegation_request":
            side, part = "response", TextPart(content=f"[Delegation request] {_text(e.content)}")
        elif e.event_type == "tool_call":
            if i not in paired:
                continue
            args = c["args"] if "args" in c else c["arguments"] if "arguments" in c else c.get("input")
            if not isinstance(args, (str, dict)):
                args = None if args is None else {"value": args}
            side, part = "response", ToolCallPart(tool_name=_tool_name(e), args=args, tool_call_id=paired[i])
        else:
            continue
        # Events of one stored message share its key; others group by side.
        key = (side, e.metadata.get(MESSAGE_KEY))
        if group is not None and key != group:
            flush()
        group = key
        if side == "request":
            req_parts.append(part)
        else:
            resp_parts.append(part)
            model_name = model_name or _str(e.metadata.get("model_name"))
            resp_time = resp_time or e.timestamp
    flush()
    return messages


async def load_message_history(
    memory: EngramMemory | EngramClient, session_id: str, *, limit: int | None = None
) -> list[ModelMessage]:
    """The session as a Pydantic AI message history ([] for an unknown session).

    ``limit`` keeps only the newest events (tool pairs cut by it are dropped).
    """
    client = _client(memory)
    try:
        if limit:
            events = (await client.get_session_events(session_id, tail=min(limit, 1000))).events
        else:
            events = [e async for e in client.iter_session_events(session_id)]
    except NotFoundError:
        return []
    return events_to_messages(events)


def kaos_message_history(events: Sequence[MemoryEvent], context_limit: int = 6) -> list[ModelMessage] | None:
    """PAIS's message history of a session's events, or None when there is nothing to replay.

    The newest prompt (``user_message`` or ``task_delegation_received``) is the turn
    being answered, so it is left out; of the rest the newest ``context_limit``
    events are kept (all when 0). Prompts become user prompts and
    ``agent_response`` events text answers; other events count toward the limit
    but are not replayed. A session of at most one event has no history (None).
    """
    if len(events) <= 1:
        return None
    current = next((i for i in range(len(events) - 1, -1, -1) if events[i].event_type in KAOS_PROMPT_TYPES), None)
    replayable = [e for i, e in enumerate(events) if i != current]
    if context_limit and len(replayable) > context_limit:
        replayable = replayable[-context_limit:]
    history: list[ModelMessage] = []
    for event in replayable:
        if event.event_type in KAOS_PROMPT_TYPES:
            history.append(ModelRequest(parts=[UserPromptPart(content=str(event.content))]))
        elif event.event_type == "agent_response":
            history.append(ModelResponse(parts=[TextPart(content=str(event.content))]))
    return history or None


def _kaos_result(content: Any) -> Any:
    """A tool's return as PAIS stores it: JSON text parsed, other scalars as text."""
    if isinstance(content, (dict, list)):
        return _jsonable(content)
    if isinstance(content, str):
        try:
            return json.loads(content)
        except ValueError:
            return content
    return str(content)


def kaos_tool_events(message: ModelMessage) -> list[MemoryEvent]:
    """The events PAIS stores for one message of a run: its tool calls and tool returns only.

    A call is ``tool_call`` ``{"tool", "arguments"}`` and a return ``tool_result``
    ``{"tool", "result"}``; for ``delegate_to_*`` tools ``delegation_request`` and
    ``delegation_response``. Prompts and text answers give none (the agent
    server stores those itself).
    """
    events: list[MemoryEvent] = []
    if isinstance(message, ModelResponse):
        for rpart in message.parts:
            if isinstance(rpart, ToolCallPart):
                delegation = rpart.tool_name.startswith(KAOS_DELEGATION_PREFIX)
                events.append(
                    MemoryEvent.create(
                        "delegation_request" if delegation else "tool_call",
                        {"tool": rpart.tool_name, "arguments": _jsonable(rpart.args)},
                    )
                )
    else:
        for part in message.parts:
            if isinstance(part, ToolReturnPart):
                delegation = part.tool_name.startswith(KAOS_DELEGATION_PREFIX)
                events.append(
                    MemoryEvent.create(
                        "delegation_response" if delegation else "tool_result",
                        {"tool": part.tool_name, "result": _kaos_result(part.content)},
                    )
                )
    return events
