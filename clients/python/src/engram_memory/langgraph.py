"""LangGraph bridge: a ``BaseStore`` over Engram's long-term memories (install the ``langgraph`` extra).

Each item (namespace, key, value) is one memory of the store's app (and user,
when given): its text is the value as JSON (what search matches), its
metadata holds the namespace, key and value, and its supersession ``key``
is derived from the namespace and key, so a put replaces the item's previous
version (which the server keeps, superseded). Each prefix of the namespace is
a topic, so a search under a prefix is one filtered query.

Both APIs work: the async one (``aget``, ``aput``, ``asearch``, ...,
``abatch``) in the caller's loop, the blocking one (``get``, ``put``,
``search``, ..., ``batch``) through the async client in a loop of the
store's own thread, so a graph's sync nodes can call it from any thread.
Namespaces are checked as LangGraph's own stores check them. Consecutive
puts of a batch travel as one WriteMemories per 100 items, and each loop
keeps at most ``max_in_flight`` calls open, so a burst of thousands of
operations queues in the client instead of outliving its deadline.

What a search matches is the item's indexed text: the whole value as JSON,
or the texts at the paths of ``index["fields"]`` (or of a put's ``index=[...]``),
joined; with ``index["embed"]`` that text is also embedded (one vector per
item) and searches are hybrid. ``index=False`` leaves an item out of ranked
search; like LangGraph's in-memory store, such items only fill a search's
remaining places, unscored. With embeddings, a hit's score is the cosine
similarity of its vector with the query's, as in LangGraph's stores, and hits
are ranked by it. ``filter`` conditions are applied to the values the server
returned (the best 100 matches), so a filtered search may return fewer than
``limit`` items. Items keep no separate creation time: ``created_at`` is the time of
the version read (``updated_at``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Awaitable, Iterable
from datetime import datetime, timezone
from typing import Any, TypeVar

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from .client import EngramClient
from .models import LongTermMemory

__all__ = ["EngramStore"]

_META = "langgraph"
_MAX_K = 100
#: Most memories of one WriteMemories call.
_WRITE_BATCH = 100
_T = TypeVar("_T")
#: The text of an item put with index=False: no word, so no query matches it (its value is in the metadata).
_UNINDEXED_TEXT = "-"


def _digest(parts: Iterable[str]) -> str:
    return hashlib.sha256(json.dumps(list(parts)).encode()).hexdigest()


def _memory_key(namespace: tuple[str, ...], key: str) -> str:
    return "langgraph:" + _digest([*namespace, "\0", key])


def _topic(prefix: tuple[str, ...]) -> str:
    # Topics are at most 64 characters; a namespace prefix may be longer.
    return "lgns:" + _digest(prefix)[:40]


def _compare(op: str, have: Any, arg: Any) -> bool:
    """LangGraph's filter operators; an absent field satisfies no ordering."""
    if op == "$eq":
        return bool(have == arg)
    if op == "$ne":
        return bool(have != arg)
    if have is None:
        return False
    return bool(
        have > arg if op == "$gt" else have >= arg if op == "$gte" else have < arg if op == "$lt" else have <= arg
    )


_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def _matches(value: dict[str, Any], conditions: dict[str, Any] | None) -> bool:
    for field, want in (conditions or {}).items():
        have = value.get(field)
        if isinstance(want, dict) and want and all(k in _OPERATORS for k in want):
            if not all(_compare(op, have, arg) for op, arg in want.items()):
                return False
        elif have != want:
            return False
    return True


class _LoopThread:
    """An event loop of its own in a daemon thread, for the blocking API."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, work: Awaitable[_T]) -> _T:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="engram-langgraph-store", daemon=True).start()
                self._loop = loop
        return asyncio.run_coroutine_threadsafe(_awaited(work), self._loop).result()


async def _awaited(work: Awaitable[_T]) -> _T:
    return await work


class EngramStore(BaseStore):
    """LangGraph's long-term store over the memories of ``app_name`` (of ``user_id``, when given).

    Args:
        client: the async client (used from any loop or thread).
        app_name: the app whose memories hold the items.
        user_id: the user they belong to (app-wide when None).
        index: LangGraph's index config: ``fields`` (paths whose text is
            indexed, ``["$"]``: the whole value) and ``embed`` (embeddings or
            an embedding function: searches become hybrid); ``dims`` is not needed.
        max_in_flight: most calls this store keeps open at once per event loop.
    """

    def __init__(
        self,
        client: EngramClient,
        app_name: str,
        *,
        user_id: str | None = None,
        index: IndexConfig | None = None,
        max_in_flight: int = 8,
    ):
        self.client = client
        self.app_name = app_name
        self.user_id = user_id
        self.index_config = index
        self.embeddings: Embeddings | None = (
            ensure_embeddings(index["embed"]) if index and index.get("embed") is not None else None
        )
        self._index_paths = [(p, tokenize_path(p) if p != "$" else [p]) for p in ((index or {}).get("fields") or ["$"])]
        self.max_in_flight = max(1, max_in_flight)
        self._gates: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}
        self._gates_lock = threading.Lock()
        self._blocking = _LoopThread()

    async def _gated(self, work: Awaitable[_T]) -> _T:
        """Awaits ``work`` once fewer than ``max_in_flight`` calls of this loop are open."""
        loop = asyncio.get_running_loop()
        with self._gates_lock:
            gate = self._gates.get(loop)
            if gate is None:
                for closed in [other for other in self._gates if other.is_closed()]:
                    del self._gates[closed]
                gate = self._gates[loop] = asyncio.Semaphore(self.max_in_flight)
        async with gate:
            return await work

    def _indexed_text(self, value: dict[str, Any], index: Any) -> str | None:
        """The text search matches for ``value`` (None: not indexed)."""
        if index is False:
            return None
        paths = self._index_paths if index is None else [(p, tokenize_path(p)) for p in index]
        if paths == [("$", ["$"])]:
            return json.dumps(value, ensure_ascii=False, default=str)
        texts = [t for _, tokens in paths for t in get_text_at_path(value, tokens)]
        return "\n".join(texts) if texts else None

    # ---- reading memories back as items ----------------------------------------

    @staticmethod
    def _fields(m: LongTermMemory) -> tuple[tuple[str, ...], str, dict[str, Any], datetime]:
        meta = m.metadata.get(_META, {})
        when = m.created_at or datetime.now(timezone.utc)
        return tuple(meta.get("namespace", ())), str(meta.get("key", "")), dict(meta.get("value", {})), when

    def _item(self, m: LongTermMemory) -> Item:
        ns, key, value, when = self._fields(m)
        return Item(namespace=ns, key=key, value=value, created_at=when, updated_at=when)

    def _search_item(self, m: LongTermMemory, score: float | None) -> SearchItem:
        ns, key, value, when = self._fields(m)
        return SearchItem(namespace=ns, key=key, value=value, created_at=when, updated_at=when, score=score)

    async def _current(self, namespace: tuple[str, ...], key: str) -> LongTermMemory | None:
        found, _ = await self._gated(
            self.client.list_memories_page(
                self.app_name, user_id=self.user_id, key=_memory_key(namespace, key), page_size=1
            )
        )
        return found[0] if found else None

    # ---- operations -------------------------------------------------------------

    async def _get(self, op: GetOp) -> Item | None:
        m = await self._current(op.namespace, op.key)
        return self._item(m) if m is not None else None

    async def _delete(self, op: PutOp) -> None:
        """Forgets every version of the item (superseded ones too)."""
        ids = [
            m.memory_id
            async for m in self.client.list_memories(
                self.app_name, user_id=self.user_id, key=_memory_key(op.namespace, op.key), include_invalid=True
            )
        ]
        for start in range(0, len(ids), 1000):
            await self._gated(self.client.delete_memories(self.app_name, ids[start : start + 1000]))

    async def _put_all(self, ops: list[PutOp]) -> None:
        """Writes the items of consecutive puts, the last put of an item winning, 100 per call."""
        latest = {(op.namespace, op.key): op for op in ops}
        memories: list[LongTermMemory] = []
        texts: list[tuple[int, str]] = []
        for op in latest.values():
            value = dict(op.value or {})
            indexed = self._indexed_text(value, op.index)
            if indexed is not None and self.embeddings is not None:
                texts.append((len(memories), indexed))
            prefixes = [op.namespace[: i + 1] for i in range(len(op.namespace))]
            memories.append(
                LongTermMemory(
                    app_name=self.app_name,
                    text=indexed if indexed is not None else _UNINDEXED_TEXT,
                    user_id=self.user_id,
                    key=_memory_key(op.namespace, op.key),
                    topics=[_topic(p) for p in prefixes],
                    metadata={
                        _META: {
                            "namespace": list(op.namespace),
                            "key": op.key,
                            "value": value,
                            "indexed": indexed is not None,
                        }
                    },
                )
            )
        if texts and self.embeddings is not None:
            vectors = await self.embeddings.aembed_documents([t for _, t in texts])
            for (at, _), vector in zip(texts, vectors, strict=True):
                memories[at].embedding = list(vector)
        for start in range(0, len(memories), _WRITE_BATCH):
            await self._gated(self.client.write_memories(memories[start : start + _WRITE_BATCH]))

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        topics = [_topic(op.namespace_prefix)] if op.namespace_prefix else None
        want = op.offset + op.limit
        items: list[SearchItem] = []
        if op.query:
            vector = await self.embeddings.aembed_query(op.query) if self.embeddings is not None else None
            # Filters apply to what comes back, and a vector ranking is redone here:
            # both look at the most candidates one search returns.
            wide = bool(op.filter) or vector is not None
            hits = await self._gated(
                self.client.search_memories(
                    self.app_name,
                    op.query,
                    user_id=self.user_id,
                    topics=topics,
                    top_k=_MAX_K if wide else min(max(want, 1), _MAX_K),
                    query_embedding=vector,
                )
            )
            hits = [h for h in hits if self._indexed(h.memory)]
            if vector is not None:
                # LangGraph's score with embeddings is the cosine similarity, and it ranks by it.
                hits.sort(key=lambda h: h.vector_score, reverse=True)
                items = [self._search_item(h.memory, h.vector_score) for h in hits]
            else:
                items = [self._search_item(h.memory, h.score) for h in hits]
            if len(items) < want:  # unindexed items fill the remaining places, as in LangGraph's stores
                async for m in self.client.list_memories(self.app_name, user_id=self.user_id, topics=topics):
                    if not self._indexed(m):
                        items.append(self._search_item(m, None))
                        if not op.filter and len(items) >= want:
                            break
        else:
            async for m in self.client.list_memories(self.app_name, user_id=self.user_id, topics=topics):
                items.append(self._search_item(m, None))
                if not op.filter and len(items) >= want:
                    break
        items = [i for i in items if _matches(i.value, op.filter)]
        return items[op.offset : op.offset + op.limit]

    @staticmethod
    def _indexed(m: LongTermMemory) -> bool:
        return bool(m.metadata.get(_META, {}).get("indexed", True))

    async def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        seen: set[tuple[str, ...]] = set()
        async for m in self.client.list_memories(self.app_name, user_id=self.user_id):
            ns = self._fields(m)[0]
            if not ns or not all(self._condition(ns, c) for c in op.match_conditions or ()):
                continue
            seen.add(ns[: op.max_depth] if op.max_depth is not None else ns)
        return sorted(seen)[op.offset : op.offset + op.limit]

    @staticmethod
    def _condition(ns: tuple[str, ...], condition: Any) -> bool:
        path = tuple(condition.path)
        if len(path) > len(ns):
            return False
        part = ns[: len(path)] if condition.match_type == "prefix" else ns[len(ns) - len(path) :]
        return all(p == "*" or p == n for p, n in zip(path, part, strict=True))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs the operations in order; consecutive puts are written together."""
        ops = list(ops)
        for op in ops:
            validate_op_namespace(op)
        results: list[Result] = []
        puts: list[PutOp] = []
        for op in ops:
            if isinstance(op, PutOp) and op.value is not None:
                puts.append(op)
                results.append(None)
                continue
            if puts:
                await self._put_all(puts)
                puts = []
            if isinstance(op, GetOp):
                results.append(await self._get(op))
            elif isinstance(op, PutOp):
                await self._delete(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list_namespaces(op))
            else:  # pragma: no cover - LangGraph defines no other operation
                raise ValueError(f"unknown store operation {op!r}")
        if puts:
            await self._put_all(puts)
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """The blocking API: runs :meth:`abatch` in the store's own loop thread (callable from any thread)."""
        return self._blocking.run(self.abatch(list(ops)))
