"""EngramStore as LangGraph's BaseStore, against a real server, and a graph that uses it."""
from __future__ import annotations

from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore  # noqa: E402

from engram_memory import EngramClient  # noqa: E402
from engram_memory.langgraph import EngramStore  # noqa: E402


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


async def test_the_blocking_api_says_to_use_the_async_one(store: EngramStore) -> None:
    with pytest.raises(NotImplementedError, match="async"):
        store.get(("a",), "b")


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
