"""The KAOS Memory API: EngramMemory (async) and EngramMemorySync."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

from engram_memory import EngramMemory, EngramMemorySync, MemoryEvent, sync
from engram_server import EngramServer


def test_memory_event_dict_round_trip() -> None:
    e = MemoryEvent.create("tool_call", {"tool_name": "t", "args": {"a": [1, 2]}}, {"trace": "x"})
    assert e.timestamp.tzinfo is not None and e.event_id and e.seq == 0
    d = e.to_dict()
    assert set(d) == {"event_id", "timestamp", "event_type", "content", "metadata"}
    assert isinstance(d["timestamp"], str) and d["timestamp"].endswith("+00:00")
    back = MemoryEvent.from_dict(d)
    assert back == e
    # KAOS wrote naive ISO timestamps; "Z" is accepted too.
    naive = MemoryEvent.from_dict({**d, "timestamp": "2024-01-02T03:04:05.123456"})
    assert naive.timestamp == datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)
    assert MemoryEvent.from_dict({**d, "timestamp": "2024-01-02T03:04:05Z"}).timestamp.tzinfo is not None
    with_seq = e.to_dict(include_seq=True)
    assert with_seq["seq"] == 0 and MemoryEvent.from_dict(with_seq) == e


async def test_kaos_api(memory: EngramMemory) -> None:
    user = f"user-{uuid.uuid4().hex[:8]}"
    sid = await memory.create_session("kaos-app", user)
    assert isinstance(sid, str) and sid
    assert await memory.get_or_create_session(sid) == sid
    other = f"kaos-{uuid.uuid4().hex[:8]}"
    assert await memory.get_or_create_session(other, "kaos-app", user) == other

    event = memory.create_event("user_message", "Hello", {"source": "test"})
    assert await memory.add_event(sid, event) is True
    assert event.seq == 1 and event.session_id == sid
    assert await memory.add_event(sid, event) is True  # idempotent retry
    assert await memory.add_event(sid, "agent_response", {"text": "Hi!"}, {"m": 1}) is True
    assert await memory.add_event(sid, "tool_call", {"tool": "x"}) is True
    assert await memory.add_event("missing-" + sid, "user_message", "lost") is False
    assert await memory.add_event("missing-" + sid, memory.create_event("user_message", "lost")) is False

    events = await memory.get_session_events(sid)
    assert [e.event_type for e in events] == ["user_message", "agent_response", "tool_call"]
    assert events[0].event_id == event.event_id and events[0].to_dict() == event.to_dict()
    assert [e.seq for e in await memory.get_session_events(sid, limit=2)] == [2, 3]
    assert [e.seq for e in await memory.get_session_events(sid, event_types=["agent_response"])] == [2]
    assert [e.seq for e in await memory.get_session_events(sid, limit=5000)] == [1, 2, 3]
    assert await memory.get_session_events("missing-" + sid) == []

    info = await memory.get_session(sid)
    assert info is not None and info.user_id == user and [e.seq for e in info.events] == [1, 2, 3]
    assert (await memory.get_session(sid, include_events=False)).events == []  # type: ignore[union-attr]
    assert await memory.get_session("missing-" + sid) is None

    assert await memory.list_sessions(user_id=user) == sorted([sid, other])
    assert await memory.list_sessions(user_id=user, app_name="other-app") == []
    assert sid in await memory.list_sessions()

    text = await memory.build_conversation_context(sid)
    assert text == "User: Hello\nAssistant: Hi!"
    assert await memory.build_conversation_context("missing-" + sid) == ""

    stats = await memory.get_memory_stats()
    assert set(stats) >= {"total_sessions", "total_events", "avg_events_per_session", "backend"}
    assert stats["total_sessions"] >= 2 and stats["backend"] == "local"

    assert await memory.cleanup_old_sessions(24) == 0
    assert await memory.delete_session(other) is True
    assert await memory.delete_session(other) is False


def test_sync_kaos_api(server: EngramServer) -> None:
    assert sync.EngramMemory is EngramMemorySync
    with EngramMemorySync(server.target, timeout=10) as memory:
        user = f"user-{uuid.uuid4().hex[:8]}"
        sid = memory.create_session("sync-app", user)
        assert memory.get_or_create_session(sid) == sid
        e = memory.create_event("user_message", "Hi")
        assert memory.add_event(sid, e) and e.seq == 1
        assert memory.add_event(sid, "agent_response", "Hello")
        assert memory.add_event("missing-" + sid, "user_message", "x") is False
        assert [x.content for x in memory.get_session_events(sid)] == ["Hi", "Hello"]
        assert [x.seq for x in memory.get_session_events(sid, limit=1)] == [2]
        info = memory.get_session(sid)
        assert info is not None and len(info.events) == 2
        assert memory.get_session("missing-" + sid) is None
        assert memory.list_sessions(user_id=user) == [sid]
        assert memory.build_conversation_context(sid, max_events=20) == "User: Hi\nAssistant: Hello"
        assert memory.get_memory_stats()["backend"] == "local"
        assert memory.cleanup_old_sessions(max_age_hours=1) == 0
        stream = memory.stream_session_events(sid)
        assert [next(stream).seq, next(stream).seq] == [1, 2]
        stream.close()
        assert memory.delete_session(sid) is True


def test_sync_client_rpcs(server: EngramServer) -> None:
    import pytest

    from engram_memory import EngramClientSync, FailedPreconditionError, NotFoundError

    with EngramClientSync(server.target, timeout=10) as c:
        c.wait_for_ready(5)
        sid = f"sync-{uuid.uuid4().hex[:8]}"
        s, created = c.get_or_create_session(sid, metadata={"a": 1})
        assert created and s.metadata == {"a": 1}
        c.add_event(sid, "user_message", "a", event_id="e1")
        assert c.add_event(sid, "user_message", "a", event_id="e1").seq == 1
        batch = c.add_events(sid, [{"event_type": "system", "content": None}], expected_seq=1)
        assert [e.seq for e in batch] == [2]
        with pytest.raises(FailedPreconditionError) as err:
            c.add_event(sid, "user_message", "b", expected_seq=0)
        assert err.value.current_seq == 2
        assert [e.seq for e in c.iter_session_events(sid, page_size=1)] == [1, 2]
        assert c.get_session_events(sid, tail=1).events[0].content is None
        assert [e.seq for e in c.list_events(sid)] == [1, 2]
        assert sid in [x.session_id for x in c.list_sessions()]
        assert c.build_conversation_context(sid).text == "User: a"
        assert c.get_stats().total_events >= 2
        assert c.cleanup(3600) == 0
        assert c.cleanup(3600, app_name="app", user_id="user") == 0
        erased = c.delete_user_data("sync-erase-app", "nobody")
        assert (erased.removed_sessions, erased.removed_events) == (0, 0)
        assert c.delete_session(sid)
        with pytest.raises(NotFoundError):
            c.get_session(sid)


async def test_pais_write_recall_and_forget_long_term_memories(memory: EngramMemory) -> None:
    app, user = f"pais-{uuid.uuid4().hex[:8]}", "alice"
    tea = await memory.write("Alice drinks green tea every morning", app_name=app, user_id=user, topics=["food"])
    coffee = await memory.write("Alice dislikes coffee", app_name=app, user_id=user)
    await memory.write("Bob drinks coffee", app_name=app, user_id="bob")
    assert tea.memory_id and tea.user_id == user and tea.topics == ["food"]

    found = await memory.recall("green tea", app_name=app, user_id=user)
    assert found[0].memory.memory_id == tea.memory_id
    assert {s.memory.memory_id for s in await memory.recall("coffee", app_name=app, user_id=user)} == {coffee.memory_id}
    assert len(await memory.recall(app_name=app, user_id=user, limit=1)) == 1

    assert await memory.forget(tea.memory_id, app_name=app) == 1
    assert await memory.forget([tea.memory_id], app_name=app) == 0  # forgetting twice is harmless
    assert [s.memory.memory_id for s in await memory.recall("tea", app_name=app, user_id=user)] == []

    assert await memory.forget(app_name=app, user_id=user) == 1  # the whole scope: Alice's last memory
    assert await memory.recall(app_name=app, user_id=user) == []
    assert [s.memory.text for s in await memory.recall(app_name=app, user_id="bob")] == ["Bob drinks coffee"]


def test_pais_forget_without_ids_or_scope_refuses_to_forget_the_whole_app(server: EngramServer) -> None:
    with EngramMemorySync(server.target) as memory:
        try:
            memory.forget(app_name="pais")
        except ValueError as err:
            assert "memory_ids" in str(err)
        else:
            raise AssertionError("forget() without ids or scope must raise")
        stored = memory.write("kept", app_name="pais-sync", user_id="carol")
        assert memory.recall("kept", app_name="pais-sync", user_id="carol")[0].memory.memory_id == stored.memory_id
        assert memory.forget(stored.memory_id, app_name="pais-sync") == 1
