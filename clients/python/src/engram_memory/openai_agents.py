"""OpenAI Agents SDK bridge: an Engram session as the SDK's ``Session`` (install the ``openai-agents`` extra).

Each conversation item is one event, its content the item as it is (JSON);
the event type names what it is, so the server's context assembly and other
readers see the conversation: a user message is ``user_message``, an
assistant message ``agent_response``, a function call ``tool_call``, its
output ``tool_result``, anything else ``openai_item``.

Engram's log is append-only, so :meth:`EngramSession.pop_item` appends an
``item_removed`` marker naming the popped event's seq (under optimistic
concurrency: a pop that races another write is retried on the new head);
:meth:`EngramSession.get_items` leaves removed items out.
:meth:`EngramSession.clear_session` deletes the session; the next
:meth:`EngramSession.add_items` creates it again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, cast

import grpc
from agents.items import TResponseInputItem
from agents.memory import SessionABC, SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit

try:  # the SDK's compaction snapshot (private to it, so optional here)
    from agents.memory.session import _CompactionSnapshot
except ImportError:  # pragma: no cover - another SDK version
    _CompactionSnapshot = None  # type: ignore[misc,assignment]

from .client import EngramClient
from .errors import EngramError, FailedPreconditionError, NotFoundError
from .models import MemoryEvent

__all__ = ["EngramSession"]

#: Event type of the marker that removes one item (its content: ``{"seq": <removed seq>}``).
REMOVED = "item_removed"
_SOURCE = {"source": "openai_agents"}
#: How often a pop retries when other writes keep moving the session's head.
_POP_ATTEMPTS = 8


def _event_type(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind in (None, "message"):
        role = item.get("role")
        return "user_message" if role == "user" else "agent_response" if role == "assistant" else "system"
    if kind == "function_call":
        return "tool_call"
    if kind == "function_call_output":
        return "tool_result"
    return "openai_item"


class EngramSession(SessionABC):
    """The SDK's ``Session`` protocol over one Engram session.

    ``Runner.run(agent, input, session=EngramSession("chat-1", client))`` loads the
    history before the turn and stores the turn's items after it. The session is
    created (``app_name``, ``user_id``) on the first write. ``session_settings``
    (a :class:`agents.memory.SessionSettings` or its dict) sets the default
    ``limit`` of :meth:`get_items`, as the SDK's own sessions do.
    """

    def __init__(
        self,
        session_id: str,
        client: EngramClient,
        *,
        app_name: str = "agent",
        user_id: str = "user",
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ):
        self.session_id = session_id
        self.client = client
        self.app_name = app_name
        self.user_id = user_id
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )

    async def _events(self) -> list[MemoryEvent]:
        try:
            return [e async for e in self.client.iter_session_events(self.session_id)]
        except NotFoundError:
            return []

    @staticmethod
    def _live(events: list[MemoryEvent]) -> list[MemoryEvent]:
        """The item events not removed by a later marker, in order."""
        removed = {int(e.content["seq"]) for e in events if e.event_type == REMOVED and isinstance(e.content, dict)}
        return [e for e in events if e.event_type != REMOVED and e.seq not in removed]

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation's items in order; the newest ``limit`` (else ``session_settings.limit``) when set."""
        limit = resolve_session_limit(limit, self.session_settings)
        live = self._live(await self._events())
        if limit is not None:
            live = live[-limit:] if limit > 0 else []
        return [cast(TResponseInputItem, e.content) for e in live]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Appends the items as one atomic batch (creating the session when absent).

        An item that is not JSON raises ``TypeError`` and nothing is written.
        """
        for item in items:
            # The SDK's own sessions store items as JSON and refuse any that is not:
            # nothing is written, rather than an object kept as its str().
            json.dumps(item)
        if not items:
            return
        events = [MemoryEvent.create(_event_type(dict(item)), dict(item), dict(_SOURCE)) for item in items]
        try:
            await self.client.add_events(self.session_id, events)
        except NotFoundError:
            await self.client.get_or_create_session(self.session_id, self.app_name, self.user_id)
            await self.client.add_events(self.session_id, events)

    async def pop_item(self) -> TResponseInputItem | None:
        """Removes and returns the newest item; None when there is none."""
        for _ in range(_POP_ATTEMPTS):
            events = await self._events()
            live = self._live(events)
            if not live:
                return None
            newest = live[-1]
            marker = MemoryEvent.create(REMOVED, {"seq": newest.seq}, dict(_SOURCE))
            try:
                await self.client.add_events(self.session_id, [marker], expected_seq=events[-1].seq)
            except FailedPreconditionError:
                continue  # another write moved the head: look again
            return cast(TResponseInputItem, newest.content)
        raise EngramError(
            grpc.StatusCode.ABORTED, f"{self.session_id}: pop_item lost {_POP_ATTEMPTS} races with other writes"
        )

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[TResponseInputItem], bool] | None = None
    ) -> Any:
        """The newest ``limit`` items, for the SDK's compaction to replace a suffix of atomically.

        The hook the SDK's compaction looks for on a session (SQLiteSession has
        one; without it the SDK rewrites the whole history). ``replace_suffix``
        removes the snapshot's items from ``start`` on (and the oldest items
        ``prune_prefix`` accepts, up to the first it refuses) and appends
        ``output``, as one batch under ``expected_seq``: it returns False,
        changing nothing, when anything was written since the snapshot.
        """
        if _CompactionSnapshot is None:
            return None
        events = await self._events()
        live = self._live(events)
        head = events[-1].seq if events else 0
        window = live[-limit:] if limit > 0 else []
        complete = len(window) == len(live)

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            replaced = window[start:]
            if not replaced:
                return False
            pruned: list[MemoryEvent] = []
            if prune_prefix is not None:
                for event in live[: len(live) - len(replaced)]:
                    if not prune_prefix(cast(TResponseInputItem, event.content)):
                        break
                    pruned.append(event)
            batch = [MemoryEvent.create(REMOVED, {"seq": e.seq}, dict(_SOURCE)) for e in pruned + replaced]
            for item in output:
                json.dumps(item)
                batch.append(MemoryEvent.create(_event_type(dict(item)), dict(item), dict(_SOURCE)))
            try:
                await self.client.add_events(self.session_id, batch, expected_seq=head)
            except FailedPreconditionError:
                return False
            return True

        return _CompactionSnapshot([cast(TResponseInputItem, e.content) for e in window], complete, replace_suffix)

    async def clear_session(self) -> None:
        """Deletes the session and all its items."""
        await self.client.delete_session(self.session_id)
