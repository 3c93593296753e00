"""The OpenAI Agents SDK's session tests with ``SQLiteSession`` swapped for :class:`EngramSession`.

``SQLiteSession(session_id, db_path, session_settings=...)`` becomes an
EngramSession; the tests' databases become Engram namespaces: the sessions of
one ``db_path`` share one (so two instances over one file see the same
items), ``":memory:"`` (the default) is a namespace per instance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agents
import agents.memory
from agents.memory import SessionSettings
from engram_harness import async_client, fresh_name

from engram_memory.openai_agents import EngramSession

_databases: dict[str, str] = {}


def _namespace(db_path: str | Path) -> str:
    if str(db_path) == ":memory:":
        return fresh_name("openai-agents")
    return _databases.setdefault(str(Path(db_path).resolve()), fresh_name("openai-agents"))


class EngramBackedSession(EngramSession):
    """``SQLiteSession(session_id, db_path, session_settings=...)``, kept in a real Engram."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        session_settings: SessionSettings | dict[str, Any] | None = None,
        **unused: Any,
    ) -> None:
        super().__init__(f"{_namespace(db_path)}:{session_id}", async_client(), session_settings=session_settings)

    def close(self) -> None:
        """SQLiteSession's: nothing to release (the client is shared)."""


agents.SQLiteSession = EngramBackedSession  # type: ignore[misc,assignment]
agents.memory.SQLiteSession = EngramBackedSession  # type: ignore[misc,assignment]
