"""LangGraph's store tests with ``InMemoryStore`` swapped for :class:`EngramStore`.

Every ``InMemoryStore(...)`` the tests make is an EngramStore over an app of its
own (so it starts empty), taking the same ``index`` config; the tests call
both its async API and its blocking one.
"""

from __future__ import annotations

from typing import Any

import langgraph.store.memory
from engram_harness import async_client, fresh_name
from langgraph.store.base import IndexConfig

from engram_memory.langgraph import EngramStore


class EngramBackedStore(EngramStore):
    """``InMemoryStore(index=...)``, kept in a real Engram."""

    def __init__(self, *, index: IndexConfig | None = None, **unused: Any) -> None:
        super().__init__(async_client(), fresh_name("langgraph-store"), index=index)


langgraph.store.memory.InMemoryStore = EngramBackedStore  # type: ignore[misc,assignment]
