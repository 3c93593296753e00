"""Google ADK bridge: Engram as ADK's session service and memory service (install the ``adk`` extra).

:class:`EngramSessionService` keeps ADK sessions, their events and their state
in Engram. An ADK session is the Engram session :func:`engram_session_id` names; each ADK
event is one Engram event whose content is the event itself (ADK's JSON form,
so every field round-trips) and whose event type says who wrote it
(``user_message`` for the user, else ``agent_response``), so the server's
context assembly, streams and other clients see the conversation. State is
the server's (ADK's model): an event's ``state_delta`` is applied atomically
with its append, ``app:`` keys are shared by the app, ``user:`` keys by the
user's sessions, ``temp:`` keys are never stored, and a ``None`` value is
stored as ``None`` (every delta is sent with ``state_nulls_are_values``).

:class:`EngramMemoryService` is ADK's long-term memory over Engram's:
``add_session_to_memory`` and ``add_events_to_memory`` write each text event
as a memory of the user (its id derived from the event's, so adding the same
session twice stores it once), ``add_memory`` writes entries as they are, and
``search_memory`` ranks the user's memories (SearchMemories) together with the
events of the user's sessions (SearchEvents).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from google.adk.errors.already_exists_error import AlreadyExistsError as AdkAlreadyExistsError
from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig, ListSessionsResponse
from google.adk.sessions.session import Session
from google.adk.sessions.state import State
from google.genai import types

from . import _convert as cv
from ._gen.engram.v1 import memory_pb2 as pb
from .client import EngramClient
from .errors import AlreadyExistsError, InvalidArgumentError, NotFoundError
from .models import LongTermMemory, MemoryEvent

__all__ = ["EngramMemoryService", "EngramSessionService", "engram_session_id"]

#: Metadata marking the events this bridge wrote (other events of a session are not ADK events).
SOURCE = "adk"
_PAGE = 1000
#: Session metadata holding the ADK session id of a session this bridge created.
ADK_SESSION_ID = "adk_session_id"


def engram_session_id(app_name: str, user_id: str, session_id: str) -> str:
    """The Engram session id of ADK's (app, user, session id): ADK ids are per app and user, Engram's global."""
    return "adk-" + hashlib.sha256(json.dumps([app_name, user_id, session_id]).encode()).hexdigest()[:40]


def _adk_id(s: pb.Session) -> str:
    """The ADK id of a stored session (sessions stored before namespacing kept the ADK id itself)."""
    stored = cv.from_struct(s.metadata).get(ADK_SESSION_ID)
    return stored if isinstance(stored, str) else s.session_id


def _event_of(stored: MemoryEvent) -> Event | None:
    if stored.metadata.get("source") != SOURCE or not isinstance(stored.content, dict):
        return None
    return Event.model_validate(stored.content)


def _session_of(s: pb.Session, events: list[Event] | None = None, newest: float | None = None) -> Session:
    """The ADK session; ``newest``: the timestamp of its newest event, when known."""
    return Session(
        id=_adk_id(s),
        app_name=s.app_name,
        user_id=s.user_id,
        state=cv.from_struct(s.state),
        events=events or [],
        # As ADK's own services: a session was last updated when its newest event happened.
        last_update_time=newest if newest is not None else cv.from_timestamp(s.updated_at).timestamp(),
    )


class EngramSessionService(BaseSessionService):
    """ADK's ``BaseSessionService`` over an Engram server.

    ``Runner(agent=..., app_name=..., session_service=EngramSessionService(client))``.
    As in ADK, session ids are per app and user: the Engram session of ADK's
    (app, user, id) is :func:`engram_session_id` of the three, and keeps the
    ADK id in its metadata. Sessions stored before that, under the ADK id
    itself, are still read, appended to and deleted.
    """

    def __init__(self, client: EngramClient):
        self.client = client

    async def _get_pb(self, app_name: str, user_id: str, session_id: str) -> pb.Session | None:
        for engram_id in (engram_session_id(app_name, user_id, session_id), session_id):
            try:
                resp: pb.GetSessionResponse = await self.client._call(
                    self.client.stub.GetSession, pb.GetSessionRequest(session_id=engram_id)
                )
            except NotFoundError:
                continue
            except InvalidArgumentError:
                continue  # an ADK id that is no valid Engram id has only the namespaced session
            # Another app's or user's session under this id is not this caller's.
            if resp.session.app_name == app_name and resp.session.user_id == user_id:
                return resp.session
        return None

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Creates the session with its initial state (ADK's AlreadyExistsError for an id the user has)."""
        sid = session_id.strip() if session_id and session_id.strip() else str(uuid.uuid4())
        taken = AdkAlreadyExistsError(f"Session with id {sid} already exists.")
        if session_id and await self._get_pb(app_name, user_id, sid) is not None:
            raise taken  # also one stored before namespacing
        engram_id = engram_session_id(app_name, user_id, sid)
        try:
            created: pb.CreateSessionResponse = await self.client._call(
                self.client.stub.CreateSession,
                cv.create_session_request(app_name, user_id, engram_id, {ADK_SESSION_ID: sid}),
            )
        except AlreadyExistsError as err:
            raise taken from err
        session = created.session
        delta = {k: v for k, v in (state or {}).items() if not k.startswith(State.TEMP_PREFIX)}
        if delta:
            updated: pb.UpdateSessionResponse = await self.client._call(
                self.client.stub.UpdateSession,
                pb.UpdateSessionRequest(
                    session_id=engram_id, state_delta=cv.to_struct(delta), state_nulls_are_values=True
                ),
            )
            session = updated.session
        return _session_of(session)

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        """The session with its events (``config``: only the newest N, only from a timestamp), or None."""
        found = await self._get_pb(app_name, user_id, session_id.strip())
        if found is None:
            return None
        recent = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        if recent is None:
            stored = [e async for e in self.client.iter_session_events(found.session_id, page_size=_PAGE)]
        else:
            # The newest events only (at least one, for the update time); events other tools wrote count too.
            stored = (await self.client.get_session_events(found.session_id, tail=min(max(recent, 1), _PAGE))).events
        events = [e for e in (_event_of(s) for s in stored) if e is not None]
        newest = events[-1].timestamp if events else None
        if recent is not None:
            events = events[-recent:] if recent > 0 else []
        if after is not None:
            events = [e for e in events if e.timestamp >= after]
        return _session_of(found, events, newest)

    async def list_sessions(self, *, app_name: str, user_id: str | None = None) -> ListSessionsResponse:
        """The app's sessions (of ``user_id`` when given) with their state, without events, oldest update first."""
        token = ""
        sessions: list[Session] = []
        while True:
            resp: pb.ListSessionsResponse = await self.client._call(
                self.client.stub.ListSessions,
                cv.list_sessions_request(app_name, user_id, _PAGE, token),
            )
            sessions += [_session_of(s) for s in resp.sessions]
            token = resp.next_page_token
            if not token or not resp.sessions:
                # ADK lists sessions oldest update first (Engram pages them in id order).
                return ListSessionsResponse(sessions=sorted(sessions, key=lambda s: s.last_update_time))

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        """Deletes the session and its events (nothing when absent or another user's)."""
        found = await self._get_pb(app_name, user_id, session_id.strip())
        if found is not None:
            await self.client.delete_session(found.session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        """The user's state (keys without ``user:``), read through one of the user's sessions; {} without one."""
        resp: pb.ListSessionsResponse = await self.client._call(
            self.client.stub.ListSessions, cv.list_sessions_request(app_name, user_id, 1, "")
        )
        if not resp.sessions:
            return {}
        state = cv.from_struct(resp.sessions[0].state)
        return {k[len(State.USER_PREFIX) :]: v for k, v in state.items() if k.startswith(State.USER_PREFIX)}

    async def append_event(self, session: Session, event: Event) -> Event:
        """Stores the event and its state delta in one atomic append, then adds both to ``session``."""
        if event.partial:
            return event
        delta = {k: v for k, v in (event.actions.state_delta or {}).items() if not k.startswith(State.TEMP_PREFIX)}
        stored = event.model_copy(deep=True)
        stored.actions.state_delta = delta
        msg = cv.event_input(
            "user_message" if event.author == "user" else "agent_response",
            stored.model_dump(mode="json", exclude_none=True),
            {"source": SOURCE, "author": event.author, "invocation_id": event.invocation_id},
            event.id,
            datetime.fromtimestamp(event.timestamp, timezone.utc),
        )
        struct = cv.to_struct(delta) if delta else None
        if struct is not None:
            msg.state_delta.CopyFrom(struct)
            # ADK stores None as a value; without the flag the server would delete the key.
            msg.state_nulls_are_values = True
        engram_id = engram_session_id(session.app_name, session.user_id, session.id)
        try:
            await self.client._call(self.client.stub.AddEvent, cv.add_event_request(engram_id, msg, None), retry=True)
        except NotFoundError:
            legacy = await self._get_pb(session.app_name, session.user_id, session.id)
            if legacy is None or legacy.session_id == engram_id:
                raise
            await self.client._call(
                self.client.stub.AddEvent, cv.add_event_request(legacy.session_id, msg, None), retry=True
            )
        event = await super().append_event(session, event)
        session.last_update_time = event.timestamp
        return event


def _text(content: types.Content | None) -> str:
    if content is None or not content.parts:
        return ""
    return "\n".join(p.text for p in content.parts if p.text)


def _entry_of_memory(m: LongTermMemory) -> MemoryEntry:
    return MemoryEntry(
        id=m.memory_id,
        content=types.Content(role=str(m.metadata.get("role", "user")), parts=[types.Part(text=m.text)]),
        author=m.metadata.get("author"),
        timestamp=m.metadata.get("timestamp") or (m.created_at.isoformat() if m.created_at else None),
        custom_metadata={k: v for k, v in m.metadata.items() if k not in ("role", "author", "timestamp", "event_id")},
    )


def _added_order(m: LongTermMemory) -> tuple[datetime, str]:
    when = m.created_at or datetime.min.replace(tzinfo=timezone.utc)
    return when, str(m.metadata.get("timestamp", ""))


class EngramMemoryService(BaseMemoryService):
    """ADK's ``BaseMemoryService`` over Engram's long-term memory and event search.

    Memories are scoped to the app and the user. ``top_k`` bounds each of the
    two searches ``search_memory`` combines (memories first, then events not
    already found as memories).
    """

    def __init__(self, client: EngramClient, *, top_k: int = 10):
        self.client = client
        self.top_k = top_k

    async def _write_events(self, app_name: str, user_id: str, session_id: str | None, events: Sequence[Event]) -> None:
        memories: list[LongTermMemory] = []
        for e in events:
            text = _text(e.content)
            if not text:
                continue
            memories.append(
                LongTermMemory(
                    app_name=app_name,
                    user_id=user_id,
                    # Derived from the event's id and text: adding the same event again stores it
                    # once; adding it with edited text supersedes the earlier version (same key).
                    memory_id=f"adk-{e.id}-{hashlib.sha256(text.encode()).hexdigest()[:16]}",
                    key=f"adk-event:{e.id}",
                    text=text,
                    metadata={
                        "source": SOURCE,
                        "event_id": e.id,
                        "author": e.author,
                        "role": e.content.role if e.content and e.content.role else "user",
                        "timestamp": datetime.fromtimestamp(e.timestamp, timezone.utc).isoformat(),
                        **({"session_id": session_id} if session_id else {}),
                    },
                )
            )
        for start in range(0, len(memories), 100):
            await self.client.write_memories(memories[start : start + 100])

    async def add_session_to_memory(self, session: Session) -> None:
        """Remembers each text event of the session (again adding it stores nothing twice)."""
        await self._write_events(session.app_name, session.user_id, session.id, session.events)

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Remembers each text event given (a delta: earlier ones are kept)."""
        await self._write_events(app_name, user_id, session_id, events)

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Writes the entries as memories of the user (an entry's ``id`` is its memory id)."""
        batch = [
            LongTermMemory(
                app_name=app_name,
                user_id=user_id,
                memory_id=m.id or "",
                text=_text(m.content),
                metadata={
                    **m.custom_metadata,
                    **({"author": m.author} if m.author else {}),
                    **({"timestamp": m.timestamp} if m.timestamp else {}),
                    "role": m.content.role or "user",
                },
            )
            for m in memories
        ]
        for start in range(0, len(batch), 100):
            await self.client.write_memories(batch[start : start + 100])

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """The user's memories and session events best matching ``query``, memories first."""
        hits = await self.client.search_memories(app_name, query, user_id=user_id, top_k=self.top_k)
        # As ADK's own services: equally good matches in the order they were added (the server's
        # fused score also weighs recency, which would put the newest first).
        hits.sort(key=lambda h: (-round(h.lexical_score or h.score, 9), _added_order(h.memory)))
        entries: list[MemoryEntry] = []
        seen: set[Any] = set()
        for hit in hits:
            event_id = hit.memory.metadata.get("event_id")
            if event_id is not None and event_id in seen:
                continue  # an event stored before ids carried its text: one entry per event
            seen.add(event_id)
            entries.append(_entry_of_memory(hit.memory))
        adk_ids: dict[str, str] = {}
        for event_hit in await self.client.search_events(app_name, query, user_id=user_id, top_k=self.top_k):
            event = _event_of(event_hit.event) if event_hit.event is not None else None
            if event is None or event.id in seen or not _text(event.content):
                continue
            seen.add(event.id)
            if event_hit.session_id not in adk_ids:
                info = await self.client.get_session(event_hit.session_id)
                stored_id = info.metadata.get(ADK_SESSION_ID)
                adk_ids[event_hit.session_id] = stored_id if isinstance(stored_id, str) else info.session_id
            entries.append(
                MemoryEntry(
                    id=event.id,
                    content=event.content or types.Content(),
                    author=event.author,
                    timestamp=datetime.fromtimestamp(event.timestamp, timezone.utc).isoformat(),
                    custom_metadata={"session_id": adk_ids[event_hit.session_id]},
                )
            )
        return SearchMemoryResponse(memories=entries)

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: str | None = None) -> None:
        """Forgets one memory by the id ``search_memory`` reported."""
        if memory_id:
            await self.client.delete_memories(app_name, [memory_id])
