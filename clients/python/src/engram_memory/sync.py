"""Blocking clients over grpc sync channels: the same methods as the async ones.

``engram_memory.sync.EngramMemory`` is the sync KAOS API (also exported as
``engram_memory.EngramMemorySync``); ``engram_memory.sync.EngramClient`` the
low-level one (``engram_memory.EngramClientSync``).
"""
from __future__ import annotations

import time
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import grpc

from . import _convert as cv
from ._gen.engram.v1 import memory_pb2 as pb
from ._gen.engram.v1 import memory_pb2_grpc as pb_grpc
from ._retry import DEFAULT_RETRIES, StreamRetry, unary_backoff
from .client import DEFAULT_TARGET, MAX_PAGE_SIZE, Metadata, channel_options
from .errors import EngramError, NotFoundError, from_rpc_error
from .models import (
    ConversationContext,
    EventPage,
    MemoryEvent,
    MemoryStats,
    SessionInfo,
    StreamFrame,
    UserDataErased,
)

__all__ = ["EngramClient", "EngramClientSync", "EngramMemory", "EngramMemorySync"]


class EngramClientSync:
    """Blocking low-level client of the Engram memory service (see the async EngramClient)."""

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        channel: grpc.Channel | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] | None = None,
        timeout: float | None = 30.0,
        metadata: Metadata | None = None,
        stream_retry: StreamRetry | None = None,
        api_key: str | None = None,
        retries: int = DEFAULT_RETRIES,
    ) -> None:
        self.target = cv.normalize_target(target)
        self._owns_channel = channel is None
        if channel is None:
            if credentials is not None:
                channel = grpc.secure_channel(self.target, credentials, options=channel_options(options))
            else:
                channel = grpc.insecure_channel(self.target, options=channel_options(options))
        self._channel: grpc.Channel = channel
        self.stub = pb_grpc.MemoryServiceStub(channel)
        self.timeout = timeout
        # api_key: a server with MEMORY_AUTH=true wants ``authorization: Bearer <key>`` on every call.
        auth = (("authorization", f"Bearer {api_key}"),) if api_key else ()
        self.metadata: tuple[tuple[str, str], ...] = auth + tuple(metadata or ())
        self.stream_retry = stream_retry or StreamRetry()
        #: Retries of an append without expected_seq after UNAVAILABLE (0: none).
        self.retries = max(0, retries)

    def _call(self, method: Any, request: Any, *, retry: bool = False) -> Any:
        # retry: only for requests whose repetition cannot change the outcome
        # (appends carry an event_id assigned before the first try).
        failures = 0
        while True:
            try:
                return method(request, timeout=self.timeout, metadata=self.metadata)
            except grpc.RpcError as err:
                failures += 1
                if not retry or failures > self.retries or err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise from_rpc_error(err) from err
            time.sleep(unary_backoff(failures))

    def close(self) -> None:
        if self._owns_channel:
            self._channel.close()

    def __enter__(self) -> EngramClientSync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_for_ready(self, timeout: float = 10.0) -> None:
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise EngramError(grpc.StatusCode.UNAVAILABLE, f"{self.target}: not ready after {timeout}s") from None

    # ---- sessions -------------------------------------------------------------

    def create_session(
        self, app_name: str, user_id: str, session_id: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> SessionInfo:
        req = cv.create_session_request(app_name, user_id, session_id, metadata)
        return cv.session_from_pb(self._call(self.stub.CreateSession, req).session)

    def get_or_create_session(
        self, session_id: str, app_name: str = "agent", user_id: str = "user", metadata: Mapping[str, Any] | None = None
    ) -> tuple[SessionInfo, bool]:
        resp = self._call(self.stub.GetOrCreateSession, cv.get_or_create_request(session_id, app_name, user_id, metadata))
        return cv.session_from_pb(resp.session), resp.created

    def get_session(self, session_id: str) -> SessionInfo:
        return cv.session_from_pb(self._call(self.stub.GetSession, pb.GetSessionRequest(session_id=session_id)).session)

    def list_sessions_page(
        self, *, app_name: str | None = None, user_id: str | None = None, page_size: int = 0, page_token: str = ""
    ) -> tuple[list[SessionInfo], str]:
        resp = self._call(self.stub.ListSessions, cv.list_sessions_request(app_name, user_id, page_size, page_token))
        return [cv.session_from_pb(s) for s in resp.sessions], resp.next_page_token

    def list_sessions(
        self, *, app_name: str | None = None, user_id: str | None = None, page_size: int = MAX_PAGE_SIZE
    ) -> Iterator[SessionInfo]:
        token = ""
        while True:
            sessions, token = self.list_sessions_page(
                app_name=app_name, user_id=user_id, page_size=page_size, page_token=token
            )
            yield from sessions
            if not token or not sessions:
                return

    def delete_session(self, session_id: str) -> bool:
        return bool(self._call(self.stub.DeleteSession, pb.DeleteSessionRequest(session_id=session_id)).deleted)

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
    ) -> MemoryEvent:
        msg = cv.event_input(event_type, content, metadata, event_id, timestamp)
        resp = self._call(self.stub.AddEvent, cv.add_event_request(session_id, msg, expected_seq), retry=expected_seq is None)
        return cv.event_from_pb(resp.event)

    def append(self, session_id: str, event: cv.EventLike, *, expected_seq: int | None = None) -> MemoryEvent:
        resp = self._call(self.stub.AddEvent, cv.add_event_request(session_id, cv.event_input_of(event), expected_seq), retry=expected_seq is None)
        return cv.event_from_pb(resp.event)

    def add_events(
        self, session_id: str, events: Iterable[cv.EventLike], *, expected_seq: int | None = None
    ) -> list[MemoryEvent]:
        resp = self._call(self.stub.AddEvents, cv.add_events_request(session_id, events, expected_seq), retry=expected_seq is None)
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
        req = cv.get_session_events_request(session_id, event_types, after_seq, limit, page_token, tail)
        return cv.page_from_pb(self._call(self.stub.GetSessionEvents, req))

    def iter_session_events(
        self,
        session_id: str,
        *,
        event_types: Iterable[str] | None = None,
        after_seq: int | None = None,
        page_size: int = MAX_PAGE_SIZE,
    ) -> Iterator[MemoryEvent]:
        types = list(event_types or ())
        page = self.get_session_events(session_id, event_types=types, after_seq=after_seq, limit=page_size)
        while True:
            yield from page.events
            if not page.next_page_token or not page.events:
                return
            page = self.get_session_events(session_id, event_types=types, limit=page_size, page_token=page.next_page_token)

    def list_events(self, session_id: str | None = None, limit: int = 0) -> list[MemoryEvent]:
        resp = self._call(self.stub.ListEvents, cv.list_events_request(session_id, limit))
        return [cv.event_from_pb(e) for e in resp.events]

    def stream_frames(
        self,
        session_id: str,
        after_seq: int | None = 0,
        event_types: Iterable[str] | None = None,
        *,
        resume: bool = True,
        retry: StreamRetry | None = None,
    ) -> Generator[StreamFrame, None, None]:
        """Every frame of StreamSessionEvents, resuming after UNAVAILABLE (see the async client)."""
        policy = retry or self.stream_retry
        types = list(event_types or ())
        cursor = after_seq
        failures = 0
        while True:
            call: Any = self.stub.StreamSessionEvents(cv.stream_request(session_id, cursor, types), metadata=self.metadata)
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
            time.sleep(policy.backoff(failures))

    def stream_session_events(
        self,
        session_id: str,
        after_seq: int | None = 0,
        event_types: Iterable[str] | None = None,
        *,
        resume: bool = True,
        retry: StreamRetry | None = None,
    ) -> Generator[MemoryEvent, None, None]:
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
        """As :meth:`EngramClient.build_conversation_context`, blocking."""
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
        return cv.context_from_pb(self._call(self.stub.BuildConversationContext, req))

    def get_stats(self) -> MemoryStats:
        return cv.stats_from_pb(self._call(self.stub.GetStats, pb.GetStatsRequest()))

    def cleanup(self, max_age: timedelta | float, *, app_name: str | None = None, user_id: str | None = None) -> int:
        return int(self._call(self.stub.Cleanup, cv.cleanup_request(max_age, app_name, user_id)).removed_sessions)

    def delete_user_data(self, app_name: str, user_id: str) -> UserDataErased:
        return cv.erased_from_pb(
            self._call(self.stub.DeleteUserData, pb.DeleteUserDataRequest(app_name=app_name, user_id=user_id))
        )


class EngramMemorySync:
    """Blocking drop-in for the KAOS ``Memory`` API (see the async EngramMemory)."""

    def __init__(self, target: str = DEFAULT_TARGET, *, client: EngramClientSync | None = None, **client_kwargs: Any):
        self._owns_client = client is None
        self.client = client if client is not None else EngramClientSync(target, **client_kwargs)

    def close(self) -> None:
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> EngramMemorySync:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create_session(self, app_name: str, user_id: str, session_id: str | None = None) -> str:
        return self.client.create_session(app_name, user_id, session_id).session_id

    def get_session(self, session_id: str, *, include_events: bool = True) -> SessionInfo | None:
        try:
            info = self.client.get_session(session_id)
            if include_events:
                info.events = list(self.client.iter_session_events(session_id))
        except NotFoundError:
            return None
        return info

    def get_or_create_session(self, session_id: str, app_name: str = "agent", user_id: str = "user") -> str:
        return self.client.get_or_create_session(session_id, app_name, user_id)[0].session_id

    def list_sessions(self, user_id: str | None = None, app_name: str | None = None) -> list[str]:
        return [s.session_id for s in self.client.list_sessions(app_name=app_name, user_id=user_id)]

    def delete_session(self, session_id: str) -> bool:
        return self.client.delete_session(session_id)

    def create_event(self, event_type: str, content: Any, metadata: dict[str, Any] | None = None) -> MemoryEvent:
        return MemoryEvent.create(event_type, content, metadata)

    def add_event(
        self,
        session_id: str,
        event_or_type: MemoryEvent | str,
        content: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        event = event_or_type if isinstance(event_or_type, MemoryEvent) else self.create_event(
            event_or_type, content, metadata
        )
        try:
            stored = self.client.append(session_id, event)
        except NotFoundError:
            return False
        event.seq, event.session_id = stored.seq, stored.session_id
        return True

    def get_session_events(
        self, session_id: str, event_types: Iterable[str] | None = None, limit: int | None = None
    ) -> list[MemoryEvent]:
        types = list(event_types or ())
        try:
            if limit and limit <= MAX_PAGE_SIZE:
                return self.client.get_session_events(session_id, event_types=types, tail=limit).events
            events = list(self.client.iter_session_events(session_id, event_types=types))
        except NotFoundError:
            return []
        return events[-limit:] if limit and limit > 0 else events

    def stream_session_events(
        self, session_id: str, after_seq: int | None = 0, event_types: Iterable[str] | None = None
    ) -> Generator[MemoryEvent, None, None]:
        return self.client.stream_session_events(session_id, after_seq, event_types)

    def build_conversation_context(
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
        """KAOS text form of the context ("" for an unknown session); options as in
        :meth:`EngramClient.build_conversation_context`."""
        try:
            return self.client.build_conversation_context(
                session_id,
                min(max(max_events, 0), MAX_PAGE_SIZE),
                token_budget=token_budget,
            query=query,
            tokenizer=tokenizer,
            preserve_system=preserve_system,
            section_budgets=section_budgets,
            section_priority=section_priority,
            retrieval_threshold=retrieval_threshold,
            ).text
        except NotFoundError:
            return ""

    def get_memory_stats(self) -> dict[str, Any]:
        return self.client.get_stats().to_dict()

    def cleanup_old_sessions(self, max_age_hours: float = 24) -> int:
        return self.client.cleanup(timedelta(hours=max_age_hours))


#: ``engram_memory.sync.EngramClient`` / ``engram_memory.sync.EngramMemory``.
EngramClient = EngramClientSync
EngramMemory = EngramMemorySync
