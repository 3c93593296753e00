"""EngramStore as LangGraph's BaseStore, against a real server, and a graph that uses it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore, GetOp, IndexConfig, InvalidNamespaceError, PutOp  # noqa: E402

from engram_memory import EngramClient  # noqa: E402
from engram_memory.langgraph import EngramStore  # noqa: E402
from engram_server import EngramServer  # noqa: E402


@pytest.fixture
def store(client: EngramClient, sid: str) -> EngramStore:
    return EngramStore(client, f"lg-{sid}", user_id="alice")


async def test_put_get_replace_and_delete(store: EngramStore, client: EngramClient) -> None:
    ns = ("users", "alice", "prefs")
    assert await store.aget(ns, "food") is None
    await store.aput(ns, "food", {"likes": "pasta", "n": 1})
    item = await store.aget(ns, "food")
    assert item is not None and (item.namespace, item.key, item.value) == (ns, "food", {"likes": "pasta", "n": 1})

    await store.aput(ns, "food", {"likes": "curry", "n": 2})  # replaces: one current version
    item = await store.aget(ns, "food")
    assert item is not None and item.value == {"likes": "curry", "n": 2}
    current = [m async for m in client.list_memories(store.app_name, user_id="alice")]
    assert len(current) == 1
    assert await store.aget(("users", "bob", "prefs"), "food") is None  # another namespace

    await store.adelete(ns, "food")
    assert await store.aget(ns, "food") is None
    assert [m async for m in client.list_memories(store.app_name, user_id="alice", include_invalid=True)] == []


async def test_search_by_namespace_prefix_query_and_filter(store: EngramStore) -> None:
    await store.aput(("docs", "travel"), "porto", {"text": "Porto has port wine cellars", "stars": 5})
    await store.aput(("docs", "travel"), "lyon", {"text": "Lyon is famous for food", "stars": 4})
    await store.aput(("docs", "work"), "report", {"text": "Quarterly report on wine sales", "stars": 2})
    await store.aput(("notes",), "todo", {"text": "buy wine", "stars": 1})

    travel = await store.asearch(("docs", "travel"))
    assert {i.key for i in travel} == {"porto", "lyon"}
    docs = await store.asearch(("docs",))
    assert {i.key for i in docs} == {"porto", "lyon", "report"}
    assert len(await store.asearch(())) == 4

    wine_docs = await store.asearch(("docs",), query="wine")
    assert {i.key for i in wine_docs} == {"porto", "report"}
    assert all(i.score is not None for i in wine_docs)
    assert [i.key for i in await store.asearch(("docs",), filter={"stars": {"$gte": 4}, "text": {"$ne": "x"}})] in (
        ["porto", "lyon"],
        ["lyon", "porto"],
    )
    assert [i.key for i in await store.asearch(("docs",), filter={"stars": 2})] == ["report"]
    assert len(await store.asearch((), limit=2)) == 2


async def test_list_namespaces(store: EngramStore) -> None:
    await store.aput(("docs", "travel"), "a", {"v": 1})
    await store.aput(("docs", "work", "2026"), "b", {"v": 1})
    await store.aput(("notes",), "c", {"v": 1})
    assert await store.alist_namespaces() == [("docs", "travel"), ("docs", "work", "2026"), ("notes",)]
    assert await store.alist_namespaces(prefix=("docs",)) == [("docs", "travel"), ("docs", "work", "2026")]
    assert await store.alist_namespaces(suffix=("2026",)) == [("docs", "work", "2026")]
    assert await store.alist_namespaces(prefix=("docs", "*")) == [("docs", "travel"), ("docs", "work", "2026")]
    assert await store.alist_namespaces(max_depth=1) == [("docs",), ("notes",)]


def _blocking_round_trip(store: EngramStore) -> None:
    ns = ("users", "carol")
    assert store.get(ns, "pet") is None
    store.put(ns, "pet", {"text": "a cat called Miso"})
    item = store.get(ns, "pet")
    assert item is not None and item.value == {"text": "a cat called Miso"}
    assert [i.key for i in store.search(("users",), query="cat")] == ["pet"]
    assert store.list_namespaces() == [ns]
    assert store.batch([GetOp(ns, "pet"), PutOp(ns, "pet", None), GetOp(ns, "pet")])[2] is None
    store.delete(ns, "pet")


def test_the_blocking_api_works_outside_any_event_loop(client: EngramClient, sid: str) -> None:
    _blocking_round_trip(EngramStore(client, f"lg-sync-{sid}"))


async def test_the_blocking_api_works_from_a_thread_of_an_async_app(client: EngramClient, sid: str) -> None:
    store = EngramStore(client, f"lg-thread-{sid}")
    await asyncio.to_thread(_blocking_round_trip, store)
    await store.aput(("async",), "k", {"v": 1})  # the async API keeps working beside it
    assert await asyncio.to_thread(store.get, ("async",), "k") is not None


def test_a_sync_graph_uses_the_blocking_api(client: EngramClient, sid: str) -> None:
    store = EngramStore(client, f"lg-graph-{sid}")

    def respond(state: _Turn, *, store: BaseStore) -> dict[str, Any]:
        ns = ("memories", state["user"])
        if state["said"].startswith("remember "):
            store.put(ns, "fact", {"text": state["said"].removeprefix("remember ")})
            return {"reply": "ok"}
        known = store.search(ns, query=state["said"])
        return {"reply": known[0].value["text"] if known else "I don't know"}

    graph = StateGraph(_Turn)
    graph.add_node("respond", respond)
    graph.add_edge(START, "respond")
    graph.add_edge("respond", END)
    app = graph.compile(store=store)
    app.invoke({"user": "dan", "said": "remember my bike is red", "reply": ""})
    assert app.invoke({"user": "dan", "said": "what colour is my bike", "reply": ""})["reply"] == "my bike is red"


@pytest.mark.parametrize(
    "namespace", [("a.b",), ("",), ("ok", ""), ("a\x00",)], ids=["period", "empty", "empty-second", "nul"]
)
async def test_invalid_namespace_labels_are_refused_as_langgraph_refuses_them(
    store: EngramStore, namespace: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidNamespaceError):
        await store.aput(namespace, "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):  # ops handed straight to abatch are checked too
        await store.abatch([PutOp(namespace, "k", {"v": 1})])
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(namespace, "k")])
    with pytest.raises(InvalidNamespaceError):
        await store.aput(("langgraph", "x"), "k", {"v": 1})


async def test_index_false_and_index_fields_choose_what_a_search_matches(store: EngramStore) -> None:
    ns = ("notes",)
    await store.aput(ns, "indexed", {"title": "tomato soup", "body": "onions"})
    await store.aput(ns, "hidden", {"title": "tomato salad"}, index=False)
    await store.aput(ns, "title-only", {"title": "bread", "body": "tomato"}, index=["title"])

    found = await store.asearch(ns, query="tomato", limit=1)
    assert [(i.key, i.score is not None) for i in found] == [("indexed", True)]
    # Unindexed items only fill the remaining places, unscored; a field not indexed is not matched.
    found = await store.asearch(ns, query="tomato", limit=10)
    assert [(i.key, i.score is None) for i in found] == [("indexed", False), ("hidden", True)]
    assert {i.key for i in await store.asearch(ns, query="bread")} == {"title-only", "hidden"}
    item = await store.aget(ns, "hidden")
    assert item is not None and item.value == {"title": "tomato salad"}


def _letters(texts: Sequence[str]) -> list[list[float]]:
    """A deterministic embedding: how often each letter a..z occurs."""
    return [[float(t.lower().count(chr(c))) + 0.01 for c in range(ord("a"), ord("z") + 1)] for t in texts]


async def test_an_index_config_embeds_the_indexed_fields_and_searches_by_them(client: EngramClient, sid: str) -> None:
    index: IndexConfig = {"dims": 26, "embed": _letters, "fields": ["text"]}
    store = EngramStore(client, f"lg-embed-{sid}", index=index)
    await store.aput(("docs",), "zz", {"text": "zzz buzz fizz", "other": "aaa"})
    await store.aput(("docs",), "aa", {"text": "banana", "other": "zzz"})
    stored = [m async for m in client.list_memories(store.app_name)]
    assert {m.text for m in stored} == {"zzz buzz fizz", "banana"}
    vectors = [m.embedding async for m in client.list_memories(store.app_name, include_embeddings=True)]
    assert [len(v) for v in vectors] == [26, 26]
    assert [i.key for i in await store.asearch(("docs",), query="buzz", limit=1)] == ["zz"]


async def test_a_burst_of_6000_operations_outlasts_the_deadline_without_hitting_it(
    server: EngramServer, sid: str
) -> None:
    # A 3 s deadline per call, a burst that takes far longer as a whole: puts handed
    # over in one batch travel 100 per call, and concurrent calls queue in the store.
    async with EngramClient(server.target, timeout=3) as short:
        store = EngramStore(short, f"lg-burst-{sid}")
        await store.abatch([PutOp(("batched",), f"k{n}", {"n": n}) for n in range(4000)])
        await asyncio.gather(*(store.aput(("concurrent",), f"k{n}", {"n": n}) for n in range(2000)))
        assert len([m async for m in short.list_memories(store.app_name)]) == 6000
        item = await store.aget(("batched",), "k3999")
        assert item is not None and item.value == {"n": 3999}


class _Turn(TypedDict):
    user: str
    said: str
    reply: str


async def test_a_graph_remembers_across_runs_through_the_store(store: EngramStore) -> None:
    async def respond(state: _Turn, *, store: BaseStore) -> dict[str, Any]:
        ns = ("memories", state["user"])
        if state["said"].startswith("remember "):
            await store.aput(ns, "fact", {"text": state["said"].removeprefix("remember ")})
            return {"reply": "ok"}
        known = await store.asearch(ns, query=state["said"])
        return {"reply": known[0].value["text"] if known else "I don't know"}

    graph = StateGraph(_Turn)
    graph.add_node("respond", respond)
    graph.add_edge(START, "respond")
    graph.add_edge("respond", END)
    app = graph.compile(store=store)

    assert (await app.ainvoke({"user": "alice", "said": "remember my sister lives in Porto", "reply": ""}))[
        "reply"
    ] == "ok"
    answer = await app.ainvoke({"user": "alice", "said": "where does my sister live", "reply": ""})
    assert answer["reply"] == "my sister lives in Porto"
    other = await app.ainvoke({"user": "bob", "said": "where does my sister live", "reply": ""})
    assert other["reply"] == "I don't know"
