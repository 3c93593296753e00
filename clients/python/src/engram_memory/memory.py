"""EngramMemory: the KAOS/PAIS ``Memory`` API backed by an Engram server (async)."""
from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Mapping
from datetime import timedelta
from typing import Any

from .client import DEFAULT_TARGET, MAX_PAGE_SIZE, EngramClient
from .errors import NotFoundError
from .models import MemoryEvent, SessionInfo

__all__ = ["EngramMemory"]


class EngramMemory:
    """Async drop-in for the KAOS ``Memory`` (LocalMemory/RedisMemory) API.

    Either pass a ``target`` (``host:port``) and any :class:`EngramClient`
    keyword arguments, or an existing ``client`` (then :meth:`close` leaves it
    open). Use as ``async with EngramMemory(...) as memory:``.
    """

    def __init__(self, target: str = DEFAULT_TARGET, *, client: EngramClient | None = None, **client_kwargs: Any):
        self._owns_client = client is None
        self.client = client if client is not None else EngramClient(target, **client_kwargs)

    async def close(self) -> None:
        if self._owns_client:
            await self.client.close()

    async def __aenter__(self) -> EngramMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- sessions -------------------------------------------------------------

    async def create_session(self, app_name: str, user_id: str, session_id: str | None = None) -> str:
        """Creates a session and returns its id (generated when omitted)."""
        return (await self.client.create_session(app_name, user_id, session_id)).session_id

    async def get_session(self, session_id: str, *, include_events: bool = True) -> SessionInfo | None:
        """The session with its events (as KAOS's SessionMemory), or None when absent."""
        try:
            info = await self.client.get_session(session_id)
            if include_events:
                info.events = [e async for e in self.client.iter_session_events(session_id)]
        except NotFoundError:
            return None
        return info

    async def get_or_create_session(self, session_id: str, app_name: str = "agent", user_id: str = "user") -> str:
        """Returns ``session_id``, creating the session when absent."""
        session, _created = await self.client.get_or_create_session(session_id, app_name, user_id)
        return session.session_id

    async def list_sessions(self, user_id: str | None = None, app_name: str | None = None) -> list[str]:
        """Ids of every session (of that user / app), in session_id order."""
        return [s.session_id async for s in self.client.list_sessions(app_name=app_name, user_id=user_id)]

    async def delete_session(self, session_id: str) -> bool:
        """Deletes the session; False when it did not exist."""
        return await self.client.delete_session(session_id)

    # ---- events ---------------------------------------------------------------

    def create_event(self, event_type: str, content: Any, metadata: dict[str, Any] | None = None) -> MemoryEvent:
        """A new (not yet stored) event with a fresh event_id and the current UTC time."""
        return MemoryEvent.create(event_type, content, metadata)

    async def add_event(
        self,
        session_id: str,
        event_or_type: MemoryEvent | str,
        content: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        """Appends an event; False when the session does not exist (as KAOS).

        Pass a :class:`MemoryEvent` (its event_id makes retries idempotent; its
        seq and session_id are filled in) or an event type with content and metadata.
        """
        event = event_or_type if isinstance(event_or_type, MemoryEvent) else self.create_event(
            event_or_type, content, metadata
        )
        try:
            stored = await self.client.append(session_id, event)
        except NotFoundError:
            return False
        event.seq, event.session_id = stored.seq, stored.session_id
        return True

    async def get_session_events(
        self, session_id: str, event_types: Iterable[str] | None = None, limit: int | None = None
    ) -> list[MemoryEvent]:
        """The session's events in order; the newest ``limit`` when given; [] for an unknown session."""
        types = list(event_types or ())
        try:
            if limit and limit <= MAX_PAGE_SIZE:
                return (await self.client.get_session_events(session_id, event_types=types, tail=limit)).events
            events = [e async for e in self.client.iter_session_events(session_id, event_types=types)]
        except NotFoundError:
            return []
        return events[-limit:] if limit and limit > 0 else events

    def stream_session_events(
        self, session_id: str, after_seq: int | None = 0, event_types: Iterable[str] | None = None
    ) -> AsyncGenerator[MemoryEvent, None]:
        """Replays the session after ``after_seq`` (None: from the oldest retained event), then
        follows it live, skipping heartbeats; resumes from the last seq after UNAVAILABLE or a
        broken connection (bounded retries, see :class:`StreamRetry`). Close it with ``aclose()``.
        """
        return self.client.stream_session_events(session_id, after_seq, event_types)

    # ---- context, stats, cleanup ----------------------------------------------

    async def build_conversation_context(
        self,
        session_id: str,
        max_events: int = 20,
        *,
        token_budget: int = 0,
        query: str = "",
        tokenizer: str = "",
        preserve_system: bool | None = None,
        section_budgets: Mapping[str, int] | None = None,
        section_priority: Iterable[str] | None = None,
        retrieval_threshold: int | None = None,
    ) -> str:
        """KAOS text form of the newest ``max_events`` events ("" for an unknown session).
        Keyword-only options as in :meth:`EngramClient.build_conversation_context`; pass
        ``max_events=0`` with a ``token_budget`` to let the server choose from the whole session."""
        try:
            ctx = await self.client.build_conversation_context(
                session_id,
                min(max(max_events, 0), MAX_PAGE_SIZE),
                token_budget=token_budget,
            query=query,
            tokenizer=tokenizer,
            preserve_system=preserve_system,
            section_budgets=section_budgets,
            section_priority=section_priority,
            retrieval_threshold=retrieval_threshold,
            )
        except NotFoundError:
            return ""
        return ctx.text

    async def get_memory_stats(self) -> dict[str, Any]:
        """total_sessions, total_events, avg_events_per_session and backend."""
        return (await self.client.get_stats()).to_dict()

    async def cleanup_old_sessions(self, max_age_hours: float = 24) -> int:
        """Removes sessions not updated for ``max_age_hours``; returns how many."""
        return await self.client.cleanup(timedelta(hours=max_age_hours))
