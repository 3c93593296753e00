# Generated from engram_memory/client.py by clients/python/scripts/generate_sync.py (unasync). DO NOT EDIT.
"""EngramClient: every RPC of engram.v1.MemoryService over grpc.aio, with Pythonic arguments.

This module is also the source of the blocking ``EngramClientSync``:
scripts/generate_sync.py derives engram_memory._gen.sync.client from it with
unasync (``async``/``await`` dropped, :mod:`engram_memory._async_io` swapped for
:mod:`engram_memory._sync_io`), so write I/O only through ``_async_io`` and
regenerate after a change. Imports of shared modules are absolute because the
generated copy lives in another package.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from engram_memory import _convert as cv
from engram_memory._sync_io import Channel, Connections, UnaryMethod, channel_ready, open_channel, sleep
from engram_memory._defaults import DEFAULT_CHANNEL_OPTIONS as DEFAULT_CHANNEL_OPTIONS  # importable here as before
from engram_memory._defaults import DEFAULT_TARGET, MAX_PAGE_SIZE, Metadata, channel_options
from engram_memory._gen.engram.v1 import memories_pb2 as mpb
from engram_memory._gen.engram.v1 import memory_pb2 as pb
from engram_memory._gen.engram.v1 import memory_pb2_grpc as pb_grpc
from engram_memory._retry import DEFAULT_RETRIES, StreamRetry, unary_backoff
from engram_memory.errors import EngramError, from_rpc_error
from engram_memory.models import (
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
    UserDataErased,
    parse_timestamp,
)

if TYPE_CHECKING:
    # Only in annotations (postponed by `from __future__ import annotations`): no runtime dependency.
    from typing_extensions import Unpack

__all__ = ["DEFAULT_TARGET", "EngramClientSync"]


_Request = TypeVar("_Request")
_Response = TypeVar("_Response")


class EngramClientSync:
    """Low-level client of the Engram memory service: every RPC, with Pythonic arguments.

    ``EngramClient`` is async (grpc.aio): it may be used from any event loop
    and any thread, each running loop getting its own channel on its first
    call there. ``EngramClientSync`` (generated from it) blocks, and its one
    channel serves every thread. Failed calls raise
    :class:`engram_memory.EngramError` subclasses.

    Args:
        target: ``host:port`` (an ``http://`` prefix is accepted).
        channel: an existing channel to use instead (``grpc.aio.Channel``, then
            usable only in its loop, or ``grpc.Channel`` for the sync client;
            not closed by :meth:`close`).
        credentials: channel credentials for TLS; plaintext (h2c) when omitted.
        options: gRPC channel options.
        timeout: deadline in seconds of every unary call (None: no deadline).
        metadata: request metadata sent with every call.
        stream_retry: how streams resume after UNAVAILABLE.
        retries: how often an append without ``expected_seq`` is retried after
            UNAVAILABLE (default 2, backoff 0.1 s doubling to 2 s; 0: never).
            Its events carry an event_id assigned before the first try, so a
            retry after a lost response returns the stored original.
        api_key: API key of a server running with ``MEMORY_AUTH=true`` (sent as
            ``authorization: Bearer <key>``); a missing or bad key raises
            :class:`UnauthenticatedError`, a key without the right role or app
            :class:`PermissionDeniedError`.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        channel: Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] | None = None,
        timeout: float | None = 30.0,
        metadata: Metadata | None = None,
        stream_retry: StreamRetry | None = None,
        api_key: str | None = None,
        retries: int = DEFAULT_RETRIES,
    ) -> None:
        self.target = cv.normalize_target(target)
        self._credentials = credentials
        self._options = channel_options(options)
        self._connections: Connections[pb_grpc.MemoryServiceStub] = Connections(
            lambda: open_channel(self.target, self._credentials, self._options), pb_grpc.MemoryServiceStub, channel
        )
        self.timeout = timeout
        # api_key: a server with MEMORY_AUTH=true wants ``authorization: Bearer <key>`` on every call.
        auth = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self.metadata: tuple[tuple[str, str], ...] = auth + tuple(metadata or ())
        self.stream_retry = stream_retry or StreamRetry()
        #: Retries of an append without expected_seq, a memory write or deletion after UNAVAILABLE (0: none).
        self.retries = max(0, retries)

    # ---- plumbing -----------------------------------------------------------

    @property
    def stub(self) -> pb_grpc.MemoryServiceStub:
        """The generated stub (opens the channel when needed)."""
        return self._connections.current()[1]

    def _call(
        self, method: UnaryMethod[_Request, _Response], request: _Request, *, retry: bool = False
    ) -> _Response:
        # retry: only for requests whose repetition cannot change the outcome
        # (appends and memory writes carry an id assigned before the first try;
        # a repeated deletion finds nothing more to delete).
        failures = 0
        while True:
            try:
                return method(request, timeout=self.timeout, metadata=self.metadata)
            except grpc.RpcError as err:
                failures += 1
                if not retry or failures > self.retries or err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise from_rpc_error(err) from err
            sleep(unary_backoff(failures))

    def close(self) -> None:
        """Closes the channels this client opened (a later call opens a new one)."""
        self._connections.close()

    def __enter__(self) -> EngramClientSync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_for_ready(self, timeout: float = 10.0) -> None:
        """Waits until the channel is connected (raises EngramError UNAVAILABLE on timeout)."""
        if not channel_ready(self._connections.current()[0], timeout):
            raise EngramError(grpc.StatusCode.UNAVAILABLE, f"{self.target}: not ready after {timeout}s")

    # ---- sessions -------------------------------------------------------------

    def create_session(
        self,
        app_name: str,
        user_id: str,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """Creates a session (ALREADY_EXISTS for an existing session_id)."""
        req = cv.create_session_request(app_name, user_id, session_id, metadata)
        resp: pb.CreateSessionResponse = self._call(self.stub.CreateSession, req)
        return cv.session_from_pb(resp.session)

    def get_or_create_session(
        self,
        session_id: str,
        app_name: str = "agent",
        user_id: str = "user",
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[SessionInfo, bool]:
        """Returns ``(session, created)``; race-free on the server."""
        req = cv.get_or_create_request(session_id, app_name, user_id, metadata)
        resp: pb.GetOrCreateSessionResponse = self._call(self.stub.GetOrCreateSession, req)
        return cv.session_from_pb(resp.session), resp.created

    def get_session(self, session_id: str) -> SessionInfo:
        """One session (NotFoundError when absent)."""
        resp = self._call(self.stub.GetSession, cv.message(pb.GetSessionRequest, session_id=session_id))
        return cv.session_from_pb(resp.session)

    def list_sessions_page(
        self,
        *,
        app_name: str | None = None,
        user_id: str | None = None,
        page_size: int = 0,
        page_token: str = "",
    ) -> tuple[list[SessionInfo], str]:
        """One page of sessions in session_id order and the next page token ("" on the last)."""
        req = cv.list_sessions_request(app_name, user_id, page_size, page_token)
        resp: pb.ListSessionsResponse = self._call(self.stub.ListSessions, req)
        return [cv.session_from_pb(s) for s in resp.sessions], resp.next_page_token

    def list_sessions(
        self, *, app_name: str | None = None, user_id: str | None = None, page_size: int = MAX_PAGE_SIZE
    ) -> Iterator[SessionInfo]:
        """Every matching session, paging through the server's pages."""
        token = ""
        while True:
            sessions, token = self.list_sessions_page(
                app_name=app_name, user_id=user_id, page_size=page_size, page_token=token
            )
            for s in sessions:
                yield s
            if not token or not sessions:
                return

    def update_session(
        self,
        session_id: str,
        *,
        metadata: Mapping[str, Any] | None = None,
        state_delta: Mapping[str, Any] | None = None,
        expected_version: int | None = None,
        state_removals: Iterable[str] | None = None,
        state_nulls_are_values: bool = False,
    ) -> SessionInfo:
        """Replaces the metadata and/or applies a state delta; returns the session with its merged state.

        ``state_removals`` deletes keys before the delta applies; with
        ``state_nulls_are_values`` a None in the delta is stored as the key's
        value instead of deleting it (ADK's meaning). With
        ``expected_version`` only at that version, else
        FailedPreconditionError (read the session and try again). Not
        retried on a lost connection: the update may have been applied.
        """
        req = cv.update_session_request(
            session_id, metadata, state_delta, expected_version, state_removals, state_nulls_are_values
        )
        resp: pb.UpdateSessionResponse = self._call(self.stub.UpdateSession, req, retry=False)
        return cv.session_from_pb(resp.session)

    def delete_session(self, session_id: str) -> bool:
        """Removes a session and its events; False when it did not exist."""
        resp: pb.DeleteSessionResponse = self._call(
            self.stub.DeleteSession, cv.message(pb.DeleteSessionRequest, session_id=session_id)
        )
        return resp.deleted

    # ---- events ---------------------------------------------------------------

    def add_event(
        self,
        session_id: str,
        event_type: str,
        content: Any = None,
        *,
        metadata: Mapping[str, Any] | None = None,
        event_id: str | None = None,
        timestamp: datetime | str | None = None,
        expected_seq: int | None = None,
        state_delta: Mapping[str, Any] | None = None,
        state_removals: Iterable[str] | None = None,
        state_nulls_are_values: bool = False,
    ) -> MemoryEvent:
        """Appends one event and returns it as stored (with its seq).

        ``event_id`` is an idempotency key: retrying with the same id and
        content returns the original event. With ``expected_seq`` the append
        only succeeds when the session's head seq equals it, else
        FailedPreconditionError with ``current_seq``. ``state_delta`` is
        applied atomically with the append ("app:" keys to the app's state,
        "user:" keys to the user's, "temp:" keys never stored, None deletes
        unless ``state_nulls_are_values``, which stores it as the value);
        ``state_removals`` lists keys deleted before the delta applies.
        """
        msg = cv.event_input(
            event_type, content, metadata, event_id, timestamp, state_delta, state_removals, state_nulls_are_values
        )
        resp: pb.AddEventResponse = self._call(
            self.stub.AddEvent, cv.add_event_request(session_id, msg, expected_seq), retry=expected_seq is None
        )
        return cv.event_from_pb(resp.event)

    def append(self, session_id: str, event: cv.EventLike, *, expected_seq: int | None = None) -> MemoryEvent:
        """Appends a :class:`MemoryEvent` (or a mapping with its keys) as it is, event_id included."""
        resp: pb.AddEventResponse = self._call(
            self.stub.AddEvent,
            cv.add_event_request(session_id, cv.event_input_of(event), expected_seq),
            retry=expected_seq is None,
        )
        return cv.event_from_pb(resp.event)

    def add_events(
        self, session_id: str, events: Iterable[cv.EventLike], *, expected_seq: int | None = None
    ) -> list[MemoryEvent]:
        """Appends a batch atomically (all or none); events are MemoryEvents or mappings."""
        resp: pb.AddEventsResponse = self._call(
            self.stub.AddEvents, cv.add_events_request(session_id, events, expected_seq), retry=expected_seq is None
        )
        return [cv.event_from_pb(e) for e in resp.events]

    def get_session_events(
        self,
        session_id: str,
        *,
        event_types: Iterable[str] | None = None,
        after_seq: int | None = None,
        limit: int = 0,
        page_token: str = "",
        tail: int = 0,
    ) -> EventPage:
        """One page of a session's events in seq order (see GetSessionEventsRequest)."""
        req = cv.get_session_events_request(session_id, event_types, after_seq, limit, page_token, tail)
        resp: pb.GetSessionEventsResponse = self._call(self.stub.GetSessionEvents, req)
        return cv.page_from_pb(resp)

    def iter_session_events(
        self,
        session_id: str,
        *,
        event_types: Iterable[str] | None = None,
        after_seq: int | None = None,
        page_size: int = MAX_PAGE_SIZE,
    ) -> Iterator[MemoryEvent]:
        """Every stored event after ``after_seq`` (all retained when None), paging as needed."""
        types = list(event_types or ())
        page = self.get_session_events(session_id, event_types=types, after_seq=after_seq, limit=page_size)
        while True:
            for e in page.events:
                yield e
            if not page.next_page_token or not page.events:
                return
            page = self.get_session_events(
                session_id, event_types=types, limit=page_size, page_token=page.next_page_token
            )

    def list_events(self, session_id: str | None = None, limit: int = 0) -> list[MemoryEvent]:
        """The newest ``limit`` events (100 when 0) of one session or all, oldest first."""
        resp: pb.ListEventsResponse = self._call(self.stub.ListEvents, cv.list_events_request(session_id, limit))
        return [cv.event_from_pb(e) for e in resp.events]

    def stream_frames(
        self,
        session_id: str,
        after_seq: int | None = 0,
        event_types: Iterable[str] | None = None,
        *,
        resume: bool = True,
        retry: StreamRetry | None = None,
    ) -> Generator[StreamFrame, None]:
        """Every frame of StreamSessionEvents: events, caught_up and heartbeats.

        With ``resume`` the stream reopens after UNAVAILABLE or a broken
        connection from the last seq delivered, within ``retry``'s bounds; a
        resumed stream sends ``caught_up`` again.
        """
        policy = retry or self.stream_retry
        types = list(event_types or ())
        cursor = after_seq
        failures = 0
        while True:
            call = self.stub.StreamSessionEvents(cv.stream_request(session_id, cursor, types), metadata=self.metadata)
            try:
                for msg in call:
                    frame = cv.frame_from_pb(msg)
                    if frame is None:
                        continue
                    failures = 0
                    if frame.event is not None:
                        cursor = frame.event.seq
                    yield frame
                return
            except grpc.RpcError as rpc_err:
                err = from_rpc_error(rpc_err)
                if not resume or failures >= policy.max_attempts or not policy.retryable(err):
                    raise err from rpc_err
                if err.last_seq is not None and (cursor is None or err.last_seq > cursor):
                    cursor = err.last_seq
                failures += 1
            finally:
                call.cancel()
            sleep(policy.backoff(failures))

    def stream_session_events(
        self,
        session_id: str,
        after_seq: int | None = 0,
        event_types: Iterable[str] | None = None,
        *,
        resume: bool = True,
        retry: StreamRetry | None = None,
    ) -> Generator[MemoryEvent, None]:
        """The session's events after ``after_seq`` (None: from the oldest retained), then live ones.

        Heartbeats and caught_up frames are skipped; see :meth:`stream_frames`.
        """
        frames = self.stream_frames(session_id, after_seq, event_types, resume=resume, retry=retry)
        try:
            for frame in frames:
                if frame.event is not None:
                    yield frame.event
        finally:
            frames.close()

    # ---- context, stats, cleanup ----------------------------------------------

    def build_conversation_context(
        self,
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
    ) -> ConversationContext:
        """The context for the session's next model call as KAOS text and chat messages:
        the newest ``max_events`` events (server default when 0), or what fits the budgets.

        Options (keyword-only; unset ones take the server's defaults): ``token_budget``
        (most tokens, 0: none), ``query`` (rank large sections by BM25 relevance),
        ``tokenizer`` ("o200k_base", "cl100k_base" or "chars4"), ``preserve_system``
        (system events first; default True), ``section_budgets`` ({section: tokens}),
        ``section_priority`` (highest first; the lowest are trimmed first) and
        ``retrieval_threshold`` (rank a section once it holds more items; default 20).
        With a budget, section budgets or a query and ``max_events=0`` the server
        chooses from the newest 1000 events.
        """
        req = cv.context_request(
            session_id,
            max_events,
            token_budget=token_budget,
            query=query,
            tokenizer=tokenizer,
            preserve_system=preserve_system,
            section_budgets=section_budgets,
            section_priority=section_priority,
            retrieval_threshold=retrieval_threshold,
        )
        resp: pb.BuildConversationContextResponse = self._call(self.stub.BuildConversationContext, req)
        return cv.context_from_pb(resp)

    def get_stats(self) -> MemoryStats:
        """Totals over the whole store."""
        resp: pb.GetStatsResponse = self._call(self.stub.GetStats, pb.GetStatsRequest())
        return cv.stats_from_pb(resp)

    def cleanup(
        self, max_age: timedelta | float, *, app_name: str | None = None, user_id: str | None = None
    ) -> int:
        """Removes sessions not updated within ``max_age`` (a timedelta or seconds), only
        those of ``app_name`` and/or ``user_id`` when given; returns how many."""
        resp: pb.CleanupResponse = self._call(self.stub.Cleanup, cv.cleanup_request(max_age, app_name, user_id))
        return resp.removed_sessions

    def delete_user_data(self, app_name: str, user_id: str) -> UserDataErased:
        """Erases one user of one app: every session, event and long-term memory of theirs.

        Safe to repeat: a call that fails midway leaves whole sessions, and
        calling again removes the rest (its counts are what that call removed).
        """
        resp: pb.DeleteUserDataResponse = self._call(
            self.stub.DeleteUserData, cv.message(pb.DeleteUserDataRequest, app_name=app_name, user_id=user_id)
        )
        return cv.erased_from_pb(resp)

    # ---- long-term memory -------------------------------------------------------

    def write_memories(self, memories: Iterable[cv.MemoryLike]) -> MemoryWrite:
        """Stores a batch of 1..100 memories atomically (all or none).

        Memories are :class:`LongTermMemory` objects or mappings with their
        field names. One without a ``memory_id`` gets a UUID before the first
        try, so a retry after a lost response returns the stored original;
        writing an id again with other content raises AlreadyExistsError. A
        memory with the same ``key`` (or fact subject and predicate) as a valid
        one of exactly the same scope supersedes it: the older one's validity
        is closed (returned in ``superseded``), not deleted.
        """
        resp: mpb.WriteMemoriesResponse = self._call(
            self.stub.WriteMemories, cv.write_memories_request(memories), retry=True
        )
        return cv.written_from_pb(resp)

    def write_memory(
        self,
        app_name: str,
        text: str,
        *,
        memory_id: str = "",
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        fact: Fact | tuple[str, str, str] | None = None,
        key: str = "",
        topics: Iterable[str] = (),
        importance: float = 0.0,
        pinned: bool = False,
        metadata: Mapping[str, Any] | None = None,
        source: MemorySource | None = None,
        valid_from: datetime | str | None = None,
        invalid_at: datetime | str | None = None,
        embedding: Iterable[float] = (),
    ) -> LongTermMemory:
        """Stores one memory (see :meth:`write_memories`) and returns it as stored.

        ``fact`` is a :class:`Fact` or a (subject, predicate, object) triple;
        ``importance`` 0..1 raises its rank; ``pinned`` makes it a core memory
        that :meth:`recall` always includes.
        """
        memory = LongTermMemory(
            app_name=app_name,
            text=text,
            memory_id=memory_id,
            user_id=user_id,
            agent_id=agent_id,
            session_id=session_id,
            fact=Fact(*fact) if isinstance(fact, tuple) else fact,
            key=key,
            topics=list(topics),
            importance=importance,
            pinned=pinned,
            metadata=dict(metadata or {}),
            source=source,
            valid_from=None if valid_from is None else parse_timestamp(valid_from),
            invalid_at=None if invalid_at is None else parse_timestamp(invalid_at),
            embedding=list(embedding),
        )
        return (self.write_memories([memory])).memories[0]

    def get_memory(self, app_name: str, memory_id: str) -> LongTermMemory:
        """One memory, valid or superseded (NotFoundError when absent or outside the key's scope)."""
        resp: mpb.GetMemoryResponse = self._call(
            self.stub.GetMemory, cv.message(mpb.GetMemoryRequest, app_name=app_name, memory_id=memory_id)
        )
        return cv.memory_from_pb(resp.memory)

    def search_memories(
        self,
        app_name: str,
        query: str = "",
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        scope_match: ScopeMatch | None = None,
        top_k: int = 0,
        topics: Iterable[str] | None = None,
        as_of: datetime | str | None = None,
        include_invalid: bool = False,
        pinned: bool | None = None,
        query_embedding: Iterable[float] | None = None,
        include_embeddings: bool = False,
    ) -> list[ScoredMemory]:
        """The memories best matching ``query``, best first (lexical and, with embeddings,
        vector similarity, fused with importance and recency; an empty query ranks by those alone).

        The scope (``user_id``, ``agent_id``, ``session_id``) selects what a caller
        in it may see unless ``scope_match`` says otherwise ("within", "exact").
        ``top_k`` 1..100 (10 when 0); ``topics``: at least one of them; ``as_of``:
        what was valid then (now when None); ``include_invalid``: superseded
        memories too (not with ``as_of``); ``pinned``: only pinned or unpinned ones.
        The memories come without their embeddings unless ``include_embeddings`` is set.
        """
        req = cv.search_memories_request(
            app_name,
            query,
            user_id=user_id,
            agent_id=agent_id,
            session_id=session_id,
            scope=scope_match,
            top_k=top_k,
            topics=topics,
            as_of=as_of,
            include_invalid=include_invalid,
            pinned=pinned,
            query_embedding=query_embedding,
            include_embeddings=include_embeddings,
        )
        resp: mpb.SearchMemoriesResponse = self._call(self.stub.SearchMemories, req)
        return [cv.scored_from_pb(r) for r in resp.results]

    def list_memories_page(
        self,
        app_name: str,
        *,
        page_size: int = 0,
        page_token: str = "",
        **filters: Unpack[MemoryListFilters],
    ) -> tuple[list[LongTermMemory], str]:
        """One page of memories, newest first, and the next page token ("" on the last).

        The scope selects every memory inside it unless ``scope_match`` says
        otherwise ("visible", "exact"); the other filters are as in
        :meth:`search_memories`, plus ``key`` and the fact's ``subject`` and
        ``predicate``. A page token only continues the filters it was issued for.
        The memories come without their embeddings unless ``include_embeddings``
        is set (an export, a re-index).
        """
        req = cv.list_memories_request(app_name, page_size=page_size, page_token=page_token, **filters)
        resp: mpb.ListMemoriesResponse = self._call(self.stub.ListMemories, req)
        return [cv.memory_from_pb(m) for m in resp.memories], resp.next_page_token

    def list_memories(
        self, app_name: str, *, page_size: int = MAX_PAGE_SIZE, **filters: Unpack[MemoryListFilters]
    ) -> Iterator[LongTermMemory]:
        """Every matching memory, newest first, paging through the server's pages
        (filters as in :meth:`list_memories_page`)."""
        # The topics may be an iterator, read once: every page asks with the same list.
        filters["topics"] = list(filters.get("topics") or ())
        token = ""
        while True:
            memories, token = self.list_memories_page(app_name, page_size=page_size, page_token=token, **filters)
            for m in memories:
                yield m
            if not token or not memories:
                return

    def delete_memories(
        self,
        app_name: str,
        memory_ids: Iterable[str] | None = None,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        scope_match: ScopeMatch | None = None,
    ) -> int:
        """Forgets memories by id (1..1000 ids) or by scope (every memory within it unless
        ``scope_match`` says otherwise); returns how many this call removed.

        Ids and a scope cannot be combined. To forget every memory of the app,
        pass no id and no scope with ``scope_match="within"`` (``"exact"``: only
        the app-wide ones). Safe to repeat: absent ids count nothing.
        """
        req = cv.delete_memories_request(
            app_name, memory_ids, user_id=user_id, agent_id=agent_id, session_id=session_id, scope=scope_match
        )
        resp: mpb.DeleteMemoriesResponse = self._call(self.stub.DeleteMemories, req, retry=True)
        return resp.deleted_count

    def watch_memories(
        self,
        app_name: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        session_id: str | None = None,
        scope_match: ScopeMatch | None = None,
        heartbeats: bool = False,
        resume: bool = True,
        retry: StreamRetry | None = None,
        after: int | None = None,
    ) -> Generator[MemoryChange, None]:
        """Changes to the memories of a scope (by default: those a caller in it may see).

        The first change is ``started``; with ``after`` (a ``cursor`` of an
        earlier change), the changes the server still retains after it are
        replayed first, then every write, supersession and deletion follows
        live, each with its ``cursor``. Heartbeats are skipped unless
        ``heartbeats``. With ``resume`` the watch reopens after UNAVAILABLE
        or a broken connection, within ``retry``'s bounds, after the last
        cursor it saw: nothing is skipped or repeated, and ``started`` comes
        once. A resume point older than the server's change log (the newest
        10,000 changes per app) raises OUT_OF_RANGE naming ``after``: list
        or search, then watch again. Close it with ``aclose()`` (``close()`` sync).
        """
        policy = retry or self.stream_retry
        cursor = after
        started = False
        failures = 0
        while True:
            req = cv.watch_memories_request(
                app_name, user_id=user_id, agent_id=agent_id, session_id=session_id, scope=scope_match, after=cursor
            )
            call = self.stub.WatchMemories(req, metadata=self.metadata)
            try:
                for msg in call:
                    change = cv.change_from_pb(msg)
                    if change is None:
                        continue
                    failures = 0
                    if change.kind == "started":
                        if cursor is None:
                            cursor = change.cursor
                        if started:
                            continue
                        started = True
                    elif change.kind != "heartbeat":
                        if cursor is not None and change.cursor <= cursor:
                            continue  # never repeat
                        cursor = change.cursor
                    if change.kind != "heartbeat" or heartbeats:
                        yield change
                return
            except grpc.RpcError as rpc_err:
                err = from_rpc_error(rpc_err)
                if not resume or failures >= policy.max_attempts or not policy.retryable(err):
                    raise err from rpc_err
                failures += 1
            finally:
                call.cancel()
            sleep(policy.backoff(failures))

    def search_events(
        self,
        app_name: str,
        query: str,
        *,
        user_id: str | None = None,
        top_k: int = 0,
        event_types: Iterable[str] | None = None,
    ) -> list[EventHit]:
        """Episodic recall: the events of the app's (or the user's) sessions best matching
        ``query`` (BM25), best first, each with its session, seq and a snippet; ``top_k``
        1..100 (10 when 0), only ``event_types`` when given."""
        req = cv.search_events_request(app_name, query, user_id=user_id, top_k=top_k, event_types=event_types)
        resp: pb.SearchEventsResponse = self._call(self.stub.SearchEvents, req)
        return [cv.hit_from_pb(h) for h in resp.hits]

    def recall(
        self,
        session_id: str,
        query: str = "",
        *,
        token_budget: int = 0,
        agent_id: str | None = None,
        tokenizer: str = "",
        top_k: int = 0,
        query_embedding: Iterable[float] | None = None,
        include_embeddings: bool = False,
    ) -> RecallResult:
        """Everything to know before the session's next model call, within one token budget
        (4000 when 0): the pinned memories of the session's app and user, the memories most
        relevant to ``query`` (``top_k``, 10 when 0), and the session's context, rendered as
        one text block with the tokens of each part. With ``agent_id`` that agent's memories
        are included and other agents' left out. The memories come without their embeddings
        unless ``include_embeddings`` is set.
        """
        req = cv.recall_request(
            session_id,
            query,
            token_budget=token_budget,
            agent_id=agent_id,
            tokenizer=tokenizer,
            top_k=top_k,
            query_embedding=query_embedding,
            include_embeddings=include_embeddings,
        )
        resp: pb.RecallResponse = self._call(self.stub.Recall, req)
        return cv.recall_from_pb(resp)
