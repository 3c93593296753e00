"""EngramChatMessageHistory against a real server, driven by LangChain's own fake chat model (no network)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder  # noqa: E402
from langchain_core.runnables.history import RunnableWithMessageHistory  # noqa: E402

from engram_memory import EngramClient, EngramClientSync  # noqa: E402
from engram_memory.langchain import EngramChatMessageHistory  # noqa: E402
from engram_server import EngramServer  # noqa: E402


@pytest.fixture
def sync_client(server: EngramServer) -> Iterator[EngramClientSync]:
    with EngramClientSync(server.target, timeout=10) as c:
        yield c


def test_messages_round_trip_with_every_field(sync_client: EngramClientSync, sid: str) -> None:
    history = EngramChatMessageHistory(sid, client=sync_client, app_name="lc", user_id="alice")
    assert isinstance(history, BaseChatMessageHistory)
    assert history.messages == []
    messages = [
        SystemMessage("be brief"),
        HumanMessage("weather?", id="h1"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "t1"}]),
        ToolMessage("sunny", tool_call_id="t1"),
        AIMessage("Sunny.", response_metadata={"model": "fake"}),
    ]
    history.add_messages(messages)
    assert history.messages == messages
    assert (sync_client.get_session(sid).app_name, sync_client.get_session(sid).user_id) == ("lc", "alice")
    events = list(sync_client.iter_session_events(sid))
    types = ["system", "user_message", "agent_response", "tool_result", "agent_response"]
    assert [e.event_type for e in events] == types

    history.add_user_message("and tomorrow?")
    assert history.messages[-1] == HumanMessage("and tomorrow?")
    history.clear()
    assert history.messages == []


def test_events_that_are_not_messages_are_skipped(sync_client: EngramClientSync, sid: str) -> None:
    sync_client.create_session("app", "user", sid)
    sync_client.add_event(sid, "user_message", "written by another tool")
    history = EngramChatMessageHistory(sid, client=sync_client)
    history.add_messages([HumanMessage("hi")])
    assert history.messages == [HumanMessage("hi")]


async def test_async_methods_and_a_runnable_with_history(client: EngramClient, sid: str) -> None:
    model = FakeMessagesListChatModel(responses=[AIMessage("Hello Alice."), AIMessage("Your name is Alice.")])
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
    chain = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: EngramChatMessageHistory(session_id, async_client=client),
        input_messages_key="input",
        history_messages_key="history",
    )
    config = {"configurable": {"session_id": sid}}
    first = await chain.ainvoke({"input": "I am Alice"}, config=config)  # type: ignore[arg-type]
    assert first.content == "Hello Alice."
    second = await chain.ainvoke({"input": "What is my name?"}, config=config)  # type: ignore[arg-type]
    assert second.content == "Your name is Alice."
    history = EngramChatMessageHistory(sid, async_client=client)
    assert await history.aget_messages() == [
        HumanMessage("I am Alice"),
        AIMessage("Hello Alice.", id=(await history.aget_messages())[1].id),
        HumanMessage("What is my name?"),
        AIMessage("Your name is Alice.", id=(await history.aget_messages())[3].id),
    ]
    await history.aclear()
    assert await history.aget_messages() == []
    with pytest.raises(RuntimeError, match="async_client"):
        _ = history.messages
