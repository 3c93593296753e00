"""Long-term memory through the generated blocking EngramClientSync: every memory method once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from engram_memory import EngramClientSync, Fact, LongTermMemory, NotFoundError
from engram_server import EngramServer


@pytest.fixture
def sync_client(server: EngramServer) -> Iterator[EngramClientSync]:
    with EngramClientSync(server.target, timeout=10) as c:
        yield c


@pytest.fixture
def app() -> str:
    return f"mem-sync-{uuid.uuid4().hex[:12]}"


def test_sync_write_get_supersede_search_and_list(sync_client: EngramClientSync, app: str) -> None:
    first = sync_client.write_memory(app, "Kai drinks coffee", user_id="kai", fact=("kai", "drinks", "coffee"))
    assert uuid.UUID(first.memory_id)
    write = sync_client.write_memories(
        [LongTermMemory(app, "Kai drinks tea", memory_id="tea", user_id="kai", fact=Fact("kai", "drinks", "tea"))]
    )
    assert [m.memory_id for m in write.superseded] == [first.memory_id]
    assert sync_client.get_memory(app, first.memory_id).superseded_by == "tea"

    assert [r.memory.memory_id for r in sync_client.search_memories(app, "Kai drinks", user_id="kai")] == ["tea"]
    both = sync_client.search_memories(app, "Kai drinks", user_id="kai", include_invalid=True)
    assert sorted(r.memory.memory_id for r in both) == sorted(["tea", first.memory_id])

    # A few ms apart: created_at (in ms) orders them, not the id that breaks its ties.
    for i in range(3):
        time.sleep(0.005)
        sync_client.write_memory(app, f"note {i}", memory_id=f"n{i}", user_id="kai")
    page, token = sync_client.list_memories_page(app, user_id="kai", page_size=2)
    assert [m.memory_id for m in page] == ["n2", "n1"] and token
    every = [m.memory_id for m in sync_client.list_memories(app, user_id="kai", page_size=2)]
    assert every == ["n2", "n1", "n0", "tea"]


def test_sync_delete_by_ids_and_scope(sync_client: EngramClientSync, app: str) -> None:
    owners = ["lea", "lea", "max", "max"]
    sync_client.write_memories(
        [{"app_name": app, "memory_id": f"d{i}", "user_id": owner, "text": f"t{i}"} for i, owner in enumerate(owners)]
    )
    assert sync_client.delete_memories(app, ["d0", "absent"]) == 1
    assert sync_client.delete_memories(app, user_id="max") == 2
    with pytest.raises(NotFoundError):
        sync_client.get_memory(app, "d2")
    assert [m.memory_id for m in sync_client.list_memories(app)] == ["d1"]


def test_sync_watch_sees_a_write(sync_client: EngramClientSync, app: str) -> None:
    watch = sync_client.watch_memories(app, user_id="nia")
    try:
        assert next(watch).kind == "started"
        # The server pushes the change into the open stream; the next read returns it.
        sync_client.write_memory(app, "Nia joined the team", memory_id="joined", user_id="nia")
        change = next(watch)
    finally:
        watch.close()
    assert change.kind == "written" and change.memory is not None and change.memory.memory_id == "joined"


def test_sync_search_events_and_recall(sync_client: EngramClientSync, app: str, sid: str) -> None:
    sync_client.create_session(app, "omar", sid)
    sync_client.add_event(sid, "user_message", "Book the cabin by the lake")
    sync_client.write_memory(app, "Omar is allergic to nuts", user_id="omar", pinned=True)
    hits = sync_client.search_events(app, "lake cabin", user_id="omar")
    assert [(h.session_id, h.seq, h.snippet) for h in hits] == [(sid, 1, "Book the cabin by the lake")]
    recall = sync_client.recall(sid, "cabin", tokenizer="chars4")
    assert [m.text for m in recall.pinned] == ["Omar is allergic to nuts"]
    assert "Book the cabin by the lake" in recall.context.text and "allergic" in recall.text
