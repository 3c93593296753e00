"""KnowledgeGraph (async) and KnowledgeGraphSync: KGMemory-style facts on long-term memory."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from engram_memory import EngramClient, KnowledgeGraph, KnowledgeGraphSync
from engram_server import EngramServer


@pytest.fixture
def app() -> str:
    return f"kg-{uuid.uuid4().hex[:12]}"


async def test_add_fact_stores_a_fact_in_the_graphs_scope(client: EngramClient, app: str) -> None:
    async with KnowledgeGraph(app, user_id="alice", client=client) as kg:
        since = datetime(2024, 3, 1, tzinfo=timezone.utc)
        fact = await kg.add_fact(
            "alice", "prefers", "green tea", role="user", valid_from=since, importance=0.5, topics=["drinks"]
        )
    assert (fact.subject, fact.predicate, fact.object, fact.role) == ("alice", "prefers", "green tea", "user")
    assert fact.valid_from == since and fact.invalid_at is None
    stored = await client.get_memory(app, fact.memory.memory_id)
    assert (stored.user_id, stored.agent_id, stored.text) == ("alice", None, "alice prefers green tea")
    assert stored.topics == ["drinks", "role:user"] and stored.metadata == {"role": "user"}
    assert stored.importance == pytest.approx(0.5)
    assert fact.to_message() == {"role": "user", "content": "Fact (user): alice prefers green tea."}


async def test_a_newer_fact_with_the_same_subject_and_predicate_supersedes_the_old_one(
    client: EngramClient, app: str
) -> None:
    kg = KnowledgeGraph(app, user_id="bob", client=client)
    old = await kg.add_fact("bob", "lives in", "Lyon", valid_from=datetime(2024, 1, 1, tzinfo=timezone.utc))
    await kg.add_fact("bob", "works at", "Acme")
    await kg.add_fact("bob", "lives in", "Porto")
    recent = await kg.retrieve_recent(5)
    assert [(f.predicate, f.object) for f in recent] == [("lives in", "Porto"), ("works at", "Acme")]
    everything = await kg.retrieve_recent(5, include_invalid=True)
    assert [f.object for f in everything] == ["Porto", "Acme", "Lyon"]
    lyon = everything[2]
    assert lyon.memory.memory_id == old.memory.memory_id and lyon.invalid_at is not None
    found = [f.object for f in await kg.search("bob lives in", 3)]
    assert found[0] == "Porto" and "Lyon" not in found
    assert [f.object for f in await kg.search("bob lives in", 3, as_of="2024-06-01T00:00:00Z")] == ["Lyon"]


async def test_retrieve_recent_returns_the_n_newest_facts_and_skips_memories_without_one(
    client: EngramClient, app: str
) -> None:
    kg = KnowledgeGraph(app, client=client)
    for i in range(4):
        await kg.add_fact(f"item-{i}", "has", f"value-{i}")
    await client.write_memory(app, "a plain memory without a fact")
    assert [f.subject for f in await kg.retrieve_recent(3)] == ["item-3", "item-2", "item-1"]
    assert await kg.retrieve_recent(0) == []
    assert len(await kg.retrieve_recent(10)) == 4


async def test_retrieve_by_role_returns_the_facts_stated_by_that_role_newest_first(
    client: EngramClient, app: str
) -> None:
    kg = KnowledgeGraph(app, user_id="cleo", client=client)
    await kg.add_fact("cleo", "owns", "a bike", role="user")
    await kg.add_fact("bike shop", "opens at", "nine", role="assistant")
    await kg.add_fact("cleo", "lives near", "the park", role="user")
    await kg.add_fact("weather", "is", "sunny")  # no role: matches none
    assert [f.object for f in await kg.retrieve_by_role("user")] == ["the park", "a bike"]
    assert [f.object for f in await kg.retrieve_by_role("user", 1)] == ["the park"]
    assert [f.subject for f in await kg.retrieve_by_role("assistant")] == ["bike shop"]
    assert await kg.retrieve_by_role("tool") == []


async def test_a_users_graph_sees_its_own_and_the_shared_facts_never_another_users(
    client: EngramClient, app: str
) -> None:
    shared = KnowledgeGraph(app, client=client)
    dana = KnowledgeGraph(app, user_id="dana", client=client)
    eli = KnowledgeGraph(app, user_id="eli", client=client)
    await shared.add_fact("office", "is in", "Lisbon")
    await dana.add_fact("dana", "speaks", "Portuguese")
    await eli.add_fact("eli", "speaks", "Greek")
    assert sorted(f.object for f in await dana.retrieve_recent(10)) == ["Lisbon", "Portuguese"]
    assert [f.object for f in await dana.search("speaks", 5)] == ["Portuguese"]
    # A fact written for another user from dana's graph lands in that user's scope.
    await dana.add_fact("eli", "likes", "olives", user_id="eli")
    assert sorted(f.object for f in await eli.retrieve_recent(10)) == ["Greek", "Lisbon", "olives"]


def test_the_sync_graph_adds_retrieves_and_searches(server: EngramServer, app: str) -> None:
    with KnowledgeGraphSync(app, server.target, user_id="finn", timeout=10) as kg:
        kg.add_fact("finn", "plays", "violin", role="user")
        kg.add_fact("finn", "plays", "cello", role="user")  # supersedes: same subject and predicate
        kg.add_fact("concert", "is on", "Friday", role="assistant")
        assert [f.object for f in kg.retrieve_recent(5)] == ["Friday", "cello"]
        assert [f.object for f in kg.retrieve_recent(5, include_invalid=True)] == ["Friday", "cello", "violin"]
        assert [f.object for f in kg.retrieve_by_role("user")] == ["cello"]
        assert [f.object for f in kg.search("what does finn play", 2)] == ["cello"]
