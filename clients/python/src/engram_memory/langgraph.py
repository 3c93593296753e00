"""LangGraph bridge: a ``BaseStore`` over Engram's long-term memories (install the ``langgraph`` extra).

Each item (namespace, key, value) is one memory of the store's app (and user,
when given): its text is the value as JSON (what search matches), its
metadata holds the namespace, key and value, and its supersession ``key``
is derived from the namespace and key, so a put replaces the item's previous
version (which the server keeps, superseded). Each prefix of the namespace is
a topic, so a search under a prefix is one filtered query.

The store is async (``aget``, ``aput``, ``asearch``, ``adelete``,
``alist_namespaces``, ``abatch``; a graph run with ``ainvoke``/``astream``);
the blocking ``batch`` raises. ``filter`` conditions are applied to the
values the server returned, so a filtered search may return fewer than
``limit`` items. Items keep no separate creation time: ``created_at`` is the
time of the version read (``updated_at``).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from .client import EngramClient
from .models import LongTermMemory

__all__ = ["EngramStore"]

_META = "langgraph"
_MAX_K = 100


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


class EngramStore(BaseStore):
    """LangGraph's long-term store over the memories of ``app_name`` (of ``user_id``, when given)."""

    def __init__(self, client: EngramClient, app_name: str, *, user_id: str | None = None):
        self.client = client
        self.app_name = app_name
        self.user_id = user_id

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
        found, _ = await self.client.list_memories_page(
            self.app_name, user_id=self.user_id, key=_memory_key(namespace, key), page_size=1
        )
        return found[0] if found else None

    # ---- operations -------------------------------------------------------------

    async def _get(self, op: GetOp) -> Item | None:
        m = await self._current(op.namespace, op.key)
        return self._item(m) if m is not None else None

    async def _put(self, op: PutOp) -> None:
        memory_key = _memory_key(op.namespace, op.key)
        if op.value is None:
            # Forget every version of the item (superseded ones too).
            ids = [
                m.memory_id
                async for m in self.client.list_memories(
                    self.app_name, user_id=self.user_id, key=memory_key, include_invalid=True
                )
            ]
            for start in range(0, len(ids), 1000):
                await self.client.delete_memories(self.app_name, ids[start : start + 1000])
            return
        prefixes = [op.namespace[: i + 1] for i in range(len(op.namespace))]
        await self.client.write_memory(
            self.app_name,
            json.dumps(op.value, ensure_ascii=False, default=str),
            user_id=self.user_id,
            key=memory_key,
            topics=[_topic(p) for p in prefixes],
            metadata={_META: {"namespace": list(op.namespace), "key": op.key, "value": op.value}},
        )

    async def _search(self, op: SearchOp) -> list[SearchItem]:
        topics = [_topic(op.namespace_prefix)] if op.namespace_prefix else None
        want = op.offset + op.limit
        items: list[SearchItem] = []
        if op.query:
            hits = await self.client.search_memories(
                self.app_name, op.query, user_id=self.user_id, topics=topics, top_k=min(max(want, 1), _MAX_K)
            )
            items = [self._search_item(h.memory, h.score) for h in hits]
        else:
            async for m in self.client.list_memories(self.app_name, user_id=self.user_id, topics=topics):
                items.append(self._search_item(m, None))
                if not op.filter and len(items) >= want:
                    break
        items = [i for i in items if _matches(i.value, op.filter)]
        return items[op.offset : op.offset + op.limit]

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
        """Runs the operations in order (each one its own call)."""
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(op))
            elif isinstance(op, PutOp):
                await self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(await self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._list_namespaces(op))
            else:  # pragma: no cover - LangGraph defines no other operation
                raise ValueError(f"unknown store operation {op!r}")
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        raise NotImplementedError("EngramStore is async: use aget/aput/asearch/adelete (a graph's ainvoke/astream)")
