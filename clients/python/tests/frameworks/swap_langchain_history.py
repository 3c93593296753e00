"""LangChain's chat-history tests with ``InMemoryChatMessageHistory`` swapped for
:class:`EngramChatMessageHistory`.

Every ``InMemoryChatMessageHistory(messages=...)`` the tests make is an Engram
session of its own, seeded with ``messages``, with both clients (the blocking
``messages``/``add_messages``/``clear`` and the async ``a*`` methods go to the
server). Two histories are equal when their messages are, as LangChain's
in-memory ones (pydantic models holding a list) compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import langchain_core.chat_history
from engram_harness import async_client, fresh_name, sync_client
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from engram_memory.langchain import EngramChatMessageHistory


class EngramBackedHistory(EngramChatMessageHistory):
    """``InMemoryChatMessageHistory(messages=...)``, kept in a real Engram."""

    def __init__(self, messages: Sequence[BaseMessage] | None = None, **unused: Any) -> None:
        super().__init__(fresh_name("langchain-history"), client=sync_client(), async_client=async_client())
        if messages:
            self.add_messages(messages)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BaseChatMessageHistory) and self.messages == other.messages

    __hash__ = None  # type: ignore[assignment]


langchain_core.chat_history.InMemoryChatMessageHistory = EngramBackedHistory  # type: ignore[misc,assignment]
