"""LangChain bridge: an Engram session as a ``BaseChatMessageHistory`` (install the ``langchain`` extra).

Each message is one event whose content is LangChain's own dict form of it
(``message_to_dict``: ``{"type", "data"}``), so every field round-trips; the
event type says who spoke, for the server's context assembly and other
readers: ``human`` is ``user_message``, ``ai`` ``agent_response``, ``system``
``system``, ``tool`` ``tool_result``, others ``chat_message``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, message_to_dict, messages_from_dict

from .client import EngramClient
from .errors import NotFoundError
from .models import MemoryEvent
from .sync import EngramClientSync

__all__ = ["EngramChatMessageHistory"]

_EVENT_TYPES = {"human": "user_message", "ai": "agent_response", "system": "system", "tool": "tool_result"}
_SOURCE = {"source": "langchain"}


def _events(messages: Sequence[BaseMessage]) -> list[MemoryEvent]:
    return [
        MemoryEvent.create(_EVENT_TYPES.get(m.type, "chat_message"), message_to_dict(m), dict(_SOURCE))
        for m in messages
    ]


def _messages(events: Sequence[MemoryEvent]) -> list[BaseMessage]:
    stored: list[dict[str, Any]] = [
        e.content for e in events if isinstance(e.content, dict) and {"type", "data"} <= e.content.keys()
    ]
    return messages_from_dict(stored)


class EngramChatMessageHistory(BaseChatMessageHistory):
    """A chat history kept in the Engram session ``session_id``.

    Pass ``client`` (an :class:`EngramClientSync`) for the blocking methods
    (``messages``, ``add_messages``, ``clear``) and/or ``async_client`` (an
    :class:`EngramClient`) for the async ones (``aget_messages``,
    ``aadd_messages``, ``aclear``); without ``async_client`` the async methods
    run the blocking ones in a thread, as LangChain's base class does. The
    session is created (``app_name``, ``user_id``) on the first write; events
    that are not messages (written by other tools) are skipped when reading.
    """

    def __init__(
        self,
        session_id: str,
        *,
        client: EngramClientSync | None = None,
        async_client: EngramClient | None = None,
        app_name: str = "agent",
        user_id: str = "user",
    ) -> None:
        if client is None and async_client is None:
            raise ValueError("EngramChatMessageHistory needs a client (EngramClientSync) or an async_client")
        self.session_id = session_id
        self.client = client
        self.async_client = async_client
        self.app_name = app_name
        self.user_id = user_id

    def _sync(self) -> EngramClientSync:
        if self.client is None:
            raise RuntimeError("this history has only an async_client: use aget_messages/aadd_messages/aclear")
        return self.client

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every message of the session, oldest first ([] for an unknown session)."""
        try:
            return _messages(list(self._sync().iter_session_events(self.session_id)))
        except NotFoundError:
            return []

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Appends the messages as one atomic batch."""
        events = _events(messages)
        if not events:
            return
        client = self._sync()
        try:
            client.add_events(self.session_id, events)
        except NotFoundError:
            client.get_or_create_session(self.session_id, self.app_name, self.user_id)
            client.add_events(self.session_id, events)

    def clear(self) -> None:
        """Deletes the session (the next write creates it again)."""
        self._sync().delete_session(self.session_id)

    async def aget_messages(self) -> list[BaseMessage]:
        if self.async_client is None:
            return await super().aget_messages()
        try:
            return _messages([e async for e in self.async_client.iter_session_events(self.session_id)])
        except NotFoundError:
            return []

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        if self.async_client is None:
            return await super().aadd_messages(messages)
        events = _events(messages)
        if not events:
            return
        try:
            await self.async_client.add_events(self.session_id, events)
        except NotFoundError:
            await self.async_client.get_or_create_session(self.session_id, self.app_name, self.user_id)
            await self.async_client.add_events(self.session_id, events)

    async def aclear(self) -> None:
        if self.async_client is None:
            return await super().aclear()
        await self.async_client.delete_session(self.session_id)
