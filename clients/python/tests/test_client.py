"""Every RPC of the low-level async EngramClient, and the error codes."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta, timezone

import grpc
import pytest

from engram_memory import (
    AlreadyExistsError,
    EngramClient,
    EngramError,
    FailedPreconditionError,
    InvalidArgumentError,
    MemoryEvent,
    NotFoundError,
    OutOfRangeError,
)
from engram_server import EngramServer


async def test_sessions_lifecycle(client: EngramClient, sid: str) -> None:
    s = await client.create_session("app-a", "user-a", sid, metadata={"team": "x", "n": 3})
    assert (s.session_id, s.app_name, s.user_id) == (sid, "app-a", "user-a")
    assert s.metadata == {"team": "x", "n": 3}
    assert s.head_seq == 0 and s.event_count == 0 and s.first_seq == 1
    assert s.created_at.tzinfo is not None

    got = await client.get_session(sid)
    assert got.session_id == sid and got.metadata == {"team": "x", "n": 3}

    generated = await client.create_session("app-a", "user-a")
    assert generated.session_id and generated.session_id != sid

    same, created = await client.get_or_create_session(sid)
    assert not created and same.app_name == "app-a"
    fresh, created = await client.get_or_create_session(sid + "-new")
    assert created and (fresh.app_name, fresh.user_id) == ("agent", "user")

    assert await client.delete_session(sid) is True
    assert await client.delete_session(sid) is False
    with pytest.raises(NotFoundError) as info:
        await client.get_session(sid)
    assert info.value.code == grpc.StatusCode.NOT_FOUND
    assert info.value.field == "session_id"


async def test_list_sessions_pages(client: EngramClient) -> None:
    app = f"app-{uuid.uuid4().hex[:8]}"
    ids = sorted(f"{app}-{i}" for i in range(5))
    for i, s in enumerate(ids):
        await client.create_session(app, "u1" if i % 2 == 0 else "u2", s)
    page, token = await client.list_sessions_page(app_name=app, page_size=2)
    assert [s.session_id for s in page] == ids[:2] and token
    assert [s.session_id async for s in client.list_sessions(app_name=app, page_size=2)] == ids
    assert [s.session_id async for s in client.list_sessions(app_name=app, user_id="u2")] == [ids[1], ids[3]]


async def test_add_and_read_events(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "user", sid)
    when = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    e1 = await client.add_event(sid, "user_message", "hello", metadata={"k": [1, 2]}, timestamp=when)
    assert (e1.seq, e1.session_id, e1.content, e1.metadata, e1.timestamp) == (1, sid, "hello", {"k": [1, 2]}, when)
    batch = await client.add_events(
        sid,
        [
            MemoryEvent.create("agent_response", {"text": "hi", "score": 0.5, "ok": True, "none": None}),
            {"event_type": "system", "content": [1, "two", {"three": 3}]},
        ],
    )
    assert [e.seq for e in batch] == [2, 3]
    assert batch[0].content == {"text": "hi", "score": 0.5, "ok": True, "none": None}
    assert batch[1].content == [1, "two", {"three": 3}]
    await client.add_events(sid, [{"event_type": "user_message", "content": f"m{i}"} for i in range(7)])

    page = await client.get_session_events(sid, limit=4)
    assert [e.seq for e in page.events] == [1, 2, 3, 4] and page.next_page_token and page.head_seq == 10
    nxt = await client.get_session_events(sid, limit=4, page_token=page.next_page_token)
    assert [e.seq for e in nxt.events] == [5, 6, 7, 8]
    after = await client.get_session_events(sid, after_seq=8)
    assert [e.seq for e in after.events] == [9, 10] and after.next_page_token == ""
    tail = await client.get_session_events(sid, tail=3, event_types=["user_message"])
    assert [e.content for e in tail.events] == ["m4", "m5", "m6"]
    assert [e.seq async for e in client.iter_session_events(sid, page_size=3)] == list(range(1, 11))
    assert [e.seq async for e in client.iter_session_events(sid, after_seq=7, page_size=2)] == [8, 9, 10]

    recent = await client.list_events(sid, limit=2)
    assert [e.seq for e in recent] == [9, 10]
    assert len(await client.list_events(limit=3)) == 3

    info = await client.get_session(sid)
    assert (info.head_seq, info.event_count) == (10, 10)


async def test_idempotent_retry_by_event_id(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "user", sid)
    first = await client.add_event(sid, "user_message", {"text": "once"}, event_id="evt-1")
    retry = await client.add_event(sid, "user_message", {"text": "once"}, event_id="evt-1")
    assert retry.seq == first.seq == 1 and retry.event_id == "evt-1"
    event = MemoryEvent.create("agent_response", "answer")
    a = await client.append(sid, event)
    b = await client.append(sid, event)
    assert a.seq == b.seq == 2
    assert (await client.get_session(sid)).event_count == 2
    with pytest.raises(EngramError):  # same id, other content: not a retry
        await client.add_event(sid, "user_message", {"text": "different"}, event_id="evt-1")


async def test_expected_seq(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "user", sid)
    await client.add_event(sid, "user_message", "a", expected_seq=0)
    await client.add_events(sid, [{"event_type": "user_message", "content": "b"}], expected_seq=1)
    with pytest.raises(FailedPreconditionError) as info:
        await client.add_event(sid, "user_message", "c", expected_seq=1)
    err = info.value
    assert err.code == grpc.StatusCode.FAILED_PRECONDITION and err.current_seq == 2
    assert err.field == "expected_seq"
    with pytest.raises(FailedPreconditionError) as info2:
        await client.add_events(sid, [{"event_type": "user_message", "content": "c"}], expected_seq=5)
    assert info2.value.current_seq == 2


async def test_session_state(client: EngramClient, sid: str) -> None:
    app = f"state-{sid}"
    await client.create_session(app, "ada", sid)
    e = await client.add_event(
        sid, "agent_response", "ok", state_delta={"topic": "cats", "user:lang": "en", "temp:x": 1}
    )
    assert e.state_delta == {"topic": "cats", "user:lang": "en"}
    [batched] = await client.add_events(
        sid, [{"event_type": "agent_response", "state_delta": {"app:motd": "hi", "topic": None}}]
    )
    assert batched.state_delta == {"app:motd": "hi", "topic": None}
    s = await client.get_session(sid)
    assert s.state == {"user:lang": "en", "app:motd": "hi"} and s.version == 2
    updated = await client.update_session(sid, metadata={"title": "t"}, state_delta={"step": 1}, expected_version=2)
    assert updated.metadata == {"title": "t"} and updated.version == 3
    assert updated.state == {"step": 1, "user:lang": "en", "app:motd": "hi"}
    with pytest.raises(FailedPreconditionError) as stale:
        await client.update_session(sid, state_delta={"step": 2}, expected_version=2)
    assert stale.value.current_version == 3 and stale.value.reason == "VERSION_CONFLICT"
    events = await client.get_session_events(sid)
    assert [ev.state_delta for ev in events.events] == [
        {"topic": "cats", "user:lang": "en"},
        {"app:motd": "hi", "topic": None},
    ]


async def test_state_removals_and_none_as_a_value(client: EngramClient, sid: str) -> None:
    await client.create_session(f"state-{sid}", "ada", sid)
    e = await client.add_event(
        sid, "agent_response", "ok", state_delta={"kept": None, "gone": 1}, state_nulls_are_values=True
    )
    assert e.state_delta == {"kept": None, "gone": 1} and e.state_nulls_are_values and e.state_removals is None
    [removed] = await client.add_events(sid, [{"event_type": "agent_response", "state_removals": ["gone"]}])
    assert removed.state_removals == ["gone"] and not removed.state_nulls_are_values
    s = await client.update_session(sid, state_delta={"also": None}, state_nulls_are_values=True)
    assert s.state == {"kept": None, "also": None}
    s = await client.update_session(sid, state_removals=("kept",))
    assert s.state == {"also": None}
    events = (await client.get_session_events(sid)).events
    assert [(ev.state_removals, ev.state_nulls_are_values) for ev in events] == [(None, True), (["gone"], False)]
    with pytest.raises(InvalidArgumentError) as twice:
        await client.update_session(sid, state_removals=["a", "a"])
    assert twice.value.field == "state_removals[1]"
    with pytest.raises(TypeError, match=r"state_removals\[0\]: expected str"):
        await client.update_session(sid, state_removals=[1])  # type: ignore[list-item]


async def test_error_codes(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "user", sid)
    with pytest.raises(AlreadyExistsError) as exists:
        await client.create_session("app", "user", sid)
    assert exists.value.code == grpc.StatusCode.ALREADY_EXISTS

    with pytest.raises(InvalidArgumentError) as bad_id:
        await client.create_session("app", "user", "has space")
    assert bad_id.value.code == grpc.StatusCode.INVALID_ARGUMENT and bad_id.value.field == "session_id"
    with pytest.raises(InvalidArgumentError) as bad_type:
        await client.add_event(sid, "9-not-a-type", "x")
    assert bad_type.value.field == "event.event_type"
    with pytest.raises(InvalidArgumentError) as bad_batch:
        await client.add_events(sid, [])
    assert bad_batch.value.field == "events"
    with pytest.raises(InvalidArgumentError) as bad_app:
        await client.create_session("", "user")
    assert bad_app.value.field == "app_name"
    with pytest.raises(InvalidArgumentError) as bad_age:
        await client.cleanup(0)
    assert bad_age.value.field == "max_age"
    with pytest.raises(NotFoundError):
        await client.add_event("missing-" + sid, "user_message", "x")
    with pytest.raises(NotFoundError):
        await client.get_session_events("missing-" + sid)


async def test_out_of_range(small_server: EngramServer) -> None:
    async with EngramClient(small_server.target, timeout=10) as c:
        sid = f"oor-{uuid.uuid4().hex[:8]}"
        await c.create_session("app", "user", sid)
        await c.add_events(sid, [{"event_type": "user_message", "content": i} for i in range(8)])
        info = await c.get_session(sid)
        assert (info.first_seq, info.head_seq, info.event_count) == (4, 8, 5)
        with pytest.raises(OutOfRangeError) as err:
            await c.get_session_events(sid, after_seq=1)
        assert err.value.code == grpc.StatusCode.OUT_OF_RANGE and err.value.field == "after_seq"
        assert [e.seq for e in (await c.get_session_events(sid, after_seq=3)).events] == [4, 5, 6, 7, 8]
        assert [e.seq for e in (await c.get_session_events(sid)).events] == [4, 5, 6, 7, 8]
        with pytest.raises(OutOfRangeError):
            async for _ in c.stream_session_events(sid, after_seq=0):
                pass


async def test_build_conversation_context(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "user", sid)
    await client.add_events(
        sid,
        [
            {"event_type": "user_message", "content": "What's the weather in Paris?"},
            {
                "event_type": "tool_call",
                "content": {"tool_name": "weather", "args": {"city": "Paris"}, "tool_call_id": "c1"},
            },
            {
                "event_type": "tool_result",
                "content": {"tool_name": "weather", "content": "sunny", "tool_call_id": "c1"},
            },
            {
                "event_type": "tool_call",
                "content": {"tool_name": "weather", "args": {"city": "Rome"}, "tool_call_id": "c2"},
            },
            {"event_type": "agent_response", "content": "It is sunny."},
        ],
    )
    ctx = await client.build_conversation_context(sid, max_events=10)
    assert ctx.text == "User: What's the weather in Paris?\nAssistant: It is sunny."
    assert ctx.events_included == 4 and ctx.events_dropped == 1  # c2 has no result
    roles = [m.role for m in ctx.messages]
    assert roles == ["user", "assistant", "tool", "assistant"]
    call = ctx.messages[1].tool_calls[0]
    assert call.id == "c1" and call.type == "function"
    assert ctx.messages[2].tool_call_id == "c1"
    assert ctx.messages[1].to_dict()["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris"}'
    short = await client.build_conversation_context(sid, max_events=1)
    assert short.text == "Assistant: It is sunny."


async def test_stats_and_cleanup(small_server: EngramServer) -> None:
    async with EngramClient(small_server.target, timeout=10) as c:
        sid = f"stats-{uuid.uuid4().hex[:8]}"
        await c.create_session("app", "user", sid)
        await c.add_event(sid, "user_message", "x")
        stats = await c.get_stats()
        assert stats.backend == "local" and stats.total_sessions >= 1 and stats.total_events >= 1
        assert stats.avg_events_per_session == pytest.approx(stats.total_events / stats.total_sessions)
        assert await c.cleanup(timedelta(hours=1)) == 0
        await asyncio.sleep(0.05)
        removed = await c.cleanup(timedelta(milliseconds=10))
        assert removed >= 1
        with pytest.raises(NotFoundError):
            await c.get_session(sid)


async def test_delete_user_data(client: EngramClient, sid: str) -> None:
    app = f"erase-{sid}"
    await client.create_session(app, "gone", sid + "-a")
    await client.create_session(app, "gone", sid + "-b")
    await client.create_session(app, "stays", sid + "-kept")
    await client.add_events(
        sid + "-a",
        [{"event_type": "user_message", "content": "one"}, {"event_type": "agent_response", "content": "two"}],
    )
    await client.add_event(sid + "-b", "user_message", "three")
    await client.add_event(sid + "-kept", "user_message", "four")
    erased = await client.delete_user_data(app, "gone")
    assert (erased.removed_sessions, erased.removed_events) == (2, 3)
    with pytest.raises(NotFoundError):
        await client.get_session(sid + "-a")
    again = await client.delete_user_data(app, "gone")
    assert (again.removed_sessions, again.removed_events) == (0, 0)
    assert [e.content for e in (await client.get_session_events(sid + "-kept")).events] == ["four"]
    with pytest.raises(InvalidArgumentError) as err:
        await client.delete_user_data(app, "")
    assert err.value.message.startswith("user_id: ")


async def test_cleanup_filtered_by_app_and_user(small_server: EngramServer) -> None:
    async with EngramClient(small_server.target, timeout=10) as c:
        app = f"clean-{uuid.uuid4().hex[:8]}"
        await c.create_session(app, "u", app + "-mine")
        await c.create_session(app, "v", app + "-other-user")
        await c.create_session(app + "-2", "u", app + "-other-app")
        await asyncio.sleep(0.05)
        assert await c.cleanup(timedelta(milliseconds=10), app_name=app, user_id="u") == 1
        with pytest.raises(NotFoundError):
            await c.get_session(app + "-mine")
        assert (await c.get_session(app + "-other-user")).user_id == "v"
        assert (await c.get_session(app + "-other-app")).app_name == app + "-2"


async def test_unavailable(sid: str) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with EngramClient(f"127.0.0.1:{port}", timeout=2) as c:
        with pytest.raises(EngramError) as err:
            await c.get_stats()
    assert err.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
