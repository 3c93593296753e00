"""Long-term memory: every memory RPC of the async EngramClient against a real server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from datetime import datetime, timezone

import grpc
import pytest
from conftest import FAST_CHANNEL, FAST_RETRY

from engram_memory import (
    AlreadyExistsError,
    EngramClient,
    EngramError,
    Fact,
    InvalidArgumentError,
    LongTermMemory,
    MemoryChange,
    MemorySource,
    NotFoundError,
)
from engram_server import EngramServer, TcpProxy

JAN_2024 = datetime(2024, 1, 1, tzinfo=timezone.utc)
JUN_2025 = datetime(2025, 6, 1, tzinfo=timezone.utc)


@pytest.fixture
def app() -> str:
    return f"mem-{uuid.uuid4().hex[:12]}"


async def _next_change(watch: AsyncGenerator[MemoryChange, None], timeout: float = 10.0) -> MemoryChange:
    return await asyncio.wait_for(watch.__anext__(), timeout)


async def test_writes_a_memory_and_reads_it_back_with_every_field(client: EngramClient, app: str) -> None:
    written = await client.write_memories(
        [
            LongTermMemory(
                app_name=app,
                text="Alice prefers green tea",
                memory_id="tea",
                user_id="alice",
                agent_id="barista",
                session_id="s-1",
                fact=Fact("alice", "prefers", "green tea"),
                topics=["drinks", "preferences"],
                importance=0.75,
                pinned=True,
                metadata={"confidence": 0.9, "tags": ["a", "b"]},
                source=MemorySource("s-1", 3, 5),
                valid_from=JAN_2024,
            ),
            {"app_name": app, "text": "The office opens at nine", "fact": ("office", "opens at", "nine")},
        ]
    )
    tea, office = written.memories
    assert written.superseded == []
    assert (tea.memory_id, tea.user_id, tea.agent_id, tea.session_id) == ("tea", "alice", "barista", "s-1")
    # The client gave the memory without an id a UUID before sending it.
    assert uuid.UUID(office.memory_id) and office.user_id is None and office.agent_id is None
    assert office.fact == Fact("office", "opens at", "nine")

    got = await client.get_memory(app, "tea")
    assert got.text == "Alice prefers green tea" and got.fact == Fact("alice", "prefers", "green tea")
    assert got.topics == ["drinks", "preferences"] and got.importance == pytest.approx(0.75)
    assert got.pinned and got.metadata == {"confidence": 0.9, "tags": ["a", "b"]}
    assert got.source == MemorySource("s-1", 3, 5)
    assert got.valid_from == JAN_2024 and got.invalid_at is None and got.valid
    assert got.created_at is not None and got.created_at.tzinfo is not None
    assert got.superseded_by == ""

    with pytest.raises(NotFoundError):
        await client.get_memory(app, "absent")


async def test_write_memory_takes_keyword_arguments_and_an_id_written_again_returns_the_original(
    client: EngramClient, app: str
) -> None:
    first = await client.write_memory(app, "Bob plays chess", memory_id="chess", user_id="bob", topics=["games"])
    again = await client.write_memory(app, "Bob plays chess", memory_id="chess", user_id="bob", topics=["games"])
    assert again.created_at == first.created_at
    assert [m.memory_id async for m in client.list_memories(app)] == ["chess"]
    with pytest.raises(AlreadyExistsError):
        await client.write_memory(app, "Bob plays go", memory_id="chess", user_id="bob")


async def test_searches_within_the_scope_the_users_and_the_shared_memories_never_another_users(
    client: EngramClient, app: str
) -> None:
    await client.write_memories(
        [
            {"app_name": app, "memory_id": "own", "user_id": "carol", "text": "Carol's sister lives in Porto"},
            {"app_name": app, "memory_id": "shared", "text": "The Porto office opens at nine", "topics": ["office"]},
            {"app_name": app, "memory_id": "other", "user_id": "dan", "text": "Dan's sister lives in Porto"},
        ]
    )
    found = await client.search_memories(app, "sister in Porto", user_id="carol")
    ids = [r.memory.memory_id for r in found]
    assert ids[0] == "own" and "shared" in ids and "other" not in ids
    assert found[0].score > 0 and found[0].lexical_score > 0
    assert [r.memory.memory_id for r in await client.search_memories(app, "Porto", user_id="carol", top_k=1)] == ["own"]
    office = await client.search_memories(app, "Porto", user_id="carol", topics=["office"])
    assert [r.memory.memory_id for r in office] == ["shared"]
    within = await client.search_memories(app, "Porto", user_id="carol", scope_match="within")
    assert [r.memory.memory_id for r in within] == ["own"]
    with pytest.raises(ValueError, match="scope_match"):
        await client.search_memories(app, "Porto", scope_match="everywhere")  # type: ignore[arg-type]


async def test_supersession_closes_the_old_fact_and_include_invalid_shows_both(client: EngramClient, app: str) -> None:
    await client.write_memory(
        app,
        "Erin lives in Lyon",
        memory_id="lyon",
        user_id="erin",
        fact=("erin", "lives in", "Lyon"),
        valid_from=JAN_2024,
    )
    write = await client.write_memories(
        [
            LongTermMemory(
                app,
                "Erin lives in Porto",
                memory_id="porto",
                user_id="erin",
                fact=Fact("erin", "lives in", "Porto"),
                valid_from=JUN_2025,
            )
        ]
    )
    assert [(m.memory_id, m.superseded_by, m.invalid_at) for m in write.superseded] == [("lyon", "porto", JUN_2025)]

    now = await client.search_memories(app, "Erin lives", user_id="erin")
    assert [r.memory.memory_id for r in now] == ["porto"]
    then = await client.search_memories(app, "Erin lives", user_id="erin", as_of=datetime(2024, 8, 1))
    assert [r.memory.memory_id for r in then] == ["lyon"]
    both = await client.search_memories(app, "Erin lives", user_id="erin", include_invalid=True)
    assert sorted(r.memory.memory_id for r in both) == ["lyon", "porto"]
    listed = [m.memory_id async for m in client.list_memories(app, user_id="erin", include_invalid=True)]
    assert sorted(listed) == ["lyon", "porto"]
    assert [m.memory_id async for m in client.list_memories(app, user_id="erin")] == ["porto"]
    old = await client.get_memory(app, "lyon")
    assert old.superseded_by == "porto" and not old.valid


async def test_lists_newest_first_page_by_page_with_filters(client: EngramClient, app: str) -> None:
    # One write each, a few ms apart: created_at (in ms) orders them, not the id that breaks its ties.
    for i in range(5):
        await client.write_memory(app, f"note {i}", memory_id=f"n{i}", user_id="fay", topics=["odd"] if i % 2 else [])
        await asyncio.sleep(0.005)
    await client.write_memory(app, "Fay likes jazz", memory_id="jazz", user_id="fay", fact=("fay", "likes", "jazz"))

    page, token = await client.list_memories_page(app, user_id="fay", page_size=2)
    assert [m.memory_id for m in page] == ["jazz", "n4"] and token
    page2, token2 = await client.list_memories_page(app, user_id="fay", page_size=2, page_token=token)
    assert [m.memory_id for m in page2] == ["n3", "n2"] and token2
    every = [m.memory_id async for m in client.list_memories(app, user_id="fay", page_size=2)]
    assert every == ["jazz", "n4", "n3", "n2", "n1", "n0"]
    assert [m.memory_id async for m in client.list_memories(app, user_id="fay", topics=["odd"])] == ["n3", "n1"]
    facts = [m.memory_id async for m in client.list_memories(app, subject="fay", predicate="likes")]
    assert facts == ["jazz"]
    with pytest.raises(InvalidArgumentError) as info:
        await client.list_memories_page(app, user_id="someone-else", page_size=2, page_token=token)
    assert "page_token" in info.value.message


async def test_forgets_by_ids_and_by_scope_and_delete_user_data_counts_memories(client: EngramClient, app: str) -> None:
    await client.write_memories(
        [
            {"app_name": app, "memory_id": "g1", "user_id": "gus", "text": "one"},
            {"app_name": app, "memory_id": "g2", "user_id": "gus", "session_id": "s", "text": "two"},
            {"app_name": app, "memory_id": "h1", "user_id": "hal", "text": "three"},
            {"app_name": app, "memory_id": "h2", "user_id": "hal", "text": "four"},
        ]
    )
    assert await client.delete_memories(app, ["g1", "absent"]) == 1
    assert await client.delete_memories(app, ["g1"]) == 0  # safe to repeat
    assert await client.delete_memories(app, user_id="gus") == 1
    with pytest.raises(NotFoundError):
        await client.get_memory(app, "g2")
    erased = await client.delete_user_data(app, "hal")
    assert erased.removed_memories == 2
    assert [m async for m in client.list_memories(app)] == []


async def test_watch_sees_writes_supersessions_and_deletions_of_its_scope_only(client: EngramClient, app: str) -> None:
    watch = client.watch_memories(app, user_id="ivy")
    try:
        assert (await _next_change(watch)).kind == "started"
        await client.write_memory(app, "Ivy is calm", memory_id="m1", user_id="ivy", key="mood")
        await client.write_memory(app, "Jon is busy", memory_id="other", user_id="jon")
        await client.write_memory(app, "Ivy is excited", memory_id="m2", user_id="ivy", key="mood")
        await client.delete_memories(app, ["m1", "other"])
        seen = [await _next_change(watch) for _ in range(4)]
    finally:
        await watch.aclose()
    assert [(c.kind, c.memory.memory_id if c.memory else c.memory_ids) for c in seen] == [
        ("written", "m1"),
        ("superseded", "m1"),
        ("written", "m2"),
        ("deleted", ("m1",)),
    ]
    superseded = seen[1].memory
    assert superseded is not None and superseded.superseded_by == "m2"


async def test_watch_passes_heartbeats_only_when_asked(client: EngramClient, app: str) -> None:
    # The test server sends a heartbeat every 200 ms of idleness.
    watch = client.watch_memories(app, heartbeats=True)
    try:
        assert [(await _next_change(watch)).kind for _ in range(2)] == ["started", "heartbeat"]
    finally:
        await watch.aclose()
    quiet = client.watch_memories(app)
    try:
        assert (await _next_change(quiet)).kind == "started"
        await asyncio.sleep(0.6)  # past a few heartbeats, which must not surface
        await client.write_memory(app, "after the heartbeats", memory_id="late")
        change = await _next_change(quiet)
    finally:
        await quiet.aclose()
    assert change.kind == "written" and change.memory is not None and change.memory.memory_id == "late"


async def test_watch_resumes_after_a_broken_connection_from_the_last_change_it_saw(
    server: EngramServer, client: EngramClient, app: str
) -> None:
    proxy = TcpProxy(server.port)
    try:
        async with EngramClient(proxy.target, timeout=10, options=FAST_CHANNEL, stream_retry=FAST_RETRY) as via:
            watch = via.watch_memories(app)
            try:
                started = await _next_change(watch)
                assert started.kind == "started"
                await client.write_memory(app, "seen live", memory_id="live")
                live = await _next_change(watch)
                proxy.break_all()
                # Written while the watch is away: replayed after the last cursor it saw, once.
                await client.write_memory(app, "written while away", memory_id="away")
                away = await _next_change(watch, 20)
                await client.write_memory(app, "written after the resume", memory_id="after")
                after = await _next_change(watch)
            finally:
                await watch.aclose()
    finally:
        proxy.close()
    changes = [live, away, after]
    assert [(c.kind, c.memory.memory_id if c.memory else None) for c in changes] == [
        ("written", "live"),
        ("written", "away"),
        ("written", "after"),
    ]
    assert [c.cursor for c in changes] == [started.cursor + 1, started.cursor + 2, started.cursor + 3]


async def test_watch_with_after_replays_the_retained_changes_after_it(client: EngramClient, app: str) -> None:
    first = await client.write_memory(app, "one", memory_id="r1")
    await client.write_memory(app, "two", memory_id="r2")
    await client.delete_memories(app, ["r1"])
    watch = client.watch_memories(app, after=0)
    try:
        started = await _next_change(watch)
        seen = [await _next_change(watch) for _ in range(2)]
    finally:
        await watch.aclose()
    assert first.memory_id == "r1" and started.kind == "started" and started.cursor == 0
    assert [(c.kind, c.memory.memory_id if c.memory else c.memory_ids, c.cursor) for c in seen] == [
        ("written", "r2", 2),
        ("deleted", ("r1",), 3),
    ]
    too_new = client.watch_memories(app, after=99)
    try:
        with pytest.raises(EngramError) as raised:
            await _next_change(too_new)
    finally:
        await too_new.aclose()
    assert raised.value.code == grpc.StatusCode.OUT_OF_RANGE and raised.value.field == "after"


async def test_search_events_finds_a_users_events_with_session_seq_and_snippet(client: EngramClient, app: str) -> None:
    kim, lou = f"{app}-kim", f"{app}-lou"
    await client.create_session(app, "kim", kim)
    await client.add_events(
        kim,
        [
            {"event_type": "user_message", "content": "The dentist appointment moved to Friday"},
            {"event_type": "user_message", "content": "We booked the cabin by the lake for June"},
        ],
    )
    await client.create_session(app, "lou", lou)
    await client.add_event(lou, "user_message", "Lou also wants a lake cabin")

    hits = await client.search_events(app, "lake cabin", user_id="kim")
    assert [(h.session_id, h.seq) for h in hits] == [(kim, 2)]
    assert hits[0].snippet == "We booked the cabin by the lake for June" and hits[0].score > 0
    assert hits[0].event.event_type == "user_message" and hits[0].event.seq == 2
    assert sorted(h.session_id for h in await client.search_events(app, "lake cabin")) == [kim, lou]
    assert len(await client.search_events(app, "lake cabin", top_k=1)) == 1
    assert await client.search_events(app, "dentist", event_types=["agent_response"]) == []


async def test_recall_returns_pinned_relevant_memories_and_the_sessions_context_in_one_budget(
    client: EngramClient, app: str, sid: str
) -> None:
    await client.create_session(app, "hana", sid)
    await client.add_event(sid, "user_message", "I am flying to Porto next week")
    await client.write_memories(
        [
            {"app_name": app, "memory_id": "core", "user_id": "hana", "text": "Hana is vegetarian", "pinned": True},
            {"app_name": app, "memory_id": "sister", "user_id": "hana", "text": "Hana's sister lives in Porto"},
            {"app_name": app, "memory_id": "other", "user_id": "ivan", "text": "Ivan's sister lives in Porto"},
            {"app_name": app, "memory_id": "agent", "agent_id": "booker", "text": "The booker prefers trains to Porto"},
        ]
    )
    recall = await client.recall(sid, "sister in Porto", tokenizer="chars4")
    assert [m.memory_id for m in recall.pinned] == ["core"]
    relevant = [r.memory.memory_id for r in recall.memories]
    assert relevant[0] == "sister" and "other" not in relevant and "agent" not in relevant
    assert "I am flying to Porto next week" in recall.context.text
    assert recall.text.index("Hana is vegetarian") < recall.text.index("Hana's sister") < recall.text.index("flying")
    assert recall.tokenizer == "chars4" and recall.tokens_used > 0
    assert min(recall.pinned_tokens, recall.memory_tokens, recall.context_tokens) > 0
    with_agent = await client.recall(sid, "trains to Porto", agent_id="booker")
    assert "agent" in [r.memory.memory_id for r in with_agent.memories]
    small = await client.recall(sid, "sister in Porto", token_budget=20)
    assert small.tokens_used <= 20


async def test_recall_leaves_embeddings_out_unless_asked(client: EngramClient, app: str, sid: str) -> None:
    await client.create_session(app, "hana", sid)
    await client.write_memories(
        [{"app_name": app, "memory_id": "seat", "user_id": "hana", "text": "Window seat", "embedding": [1.0, 0.0]}]
    )
    plain = await client.recall(sid, "window seat", query_embedding=[1.0, 0.0])
    assert [(r.memory.memory_id, r.memory.embedding) for r in plain.memories] == [("seat", [])]
    full = await client.recall(sid, "window seat", query_embedding=[1.0, 0.0], include_embeddings=True)
    assert [(r.memory.memory_id, r.memory.embedding) for r in full.memories] == [("seat", [1.0, 0.0])]


async def test_search_and_list_leave_embeddings_out_unless_asked(client: EngramClient, app: str) -> None:
    await client.write_memories(
        [{"app_name": app, "memory_id": "aisle", "user_id": "ines", "text": "Aisle seat", "embedding": [0.0, 1.0]}]
    )
    found = await client.search_memories(app, "aisle seat", user_id="ines", query_embedding=[0.0, 1.0])
    assert [(r.memory.memory_id, r.memory.embedding) for r in found] == [("aisle", [])]
    found = await client.search_memories(
        app, "aisle seat", user_id="ines", query_embedding=[0.0, 1.0], include_embeddings=True
    )
    assert [(r.memory.memory_id, r.memory.embedding) for r in found] == [("aisle", [0.0, 1.0])]
    page, _ = await client.list_memories_page(app, user_id="ines")
    assert [(m.memory_id, m.embedding) for m in page] == [("aisle", [])]
    every = [m async for m in client.list_memories(app, user_id="ines", include_embeddings=True)]
    assert [(m.memory_id, m.embedding) for m in every] == [("aisle", [0.0, 1.0])]
