"""EngramMemory as the memory of PAIS (KAOS's Pydantic AI agent server), against real servers.

PAIS's own tests, with its memory swapped for EngramMemory, check these behaviours;
each is covered below (in our words, PAIS's turn loop re-told in ``pais_turn``):

1. A turn with a session id creates that session and lists it.
2. A turn stores the prompt (``user_message``) and the answer (``agent_response``).
3. A turn with tool calls stores them as ``tool_call`` / ``tool_result`` events
   (``delegation_*`` for ``delegate_to_*`` tools) through ``store_pydantic_message``.
4. ``build_message_history``: None for a session of at most one event; leaves the
   current prompt out; keeps the newest ``context_limit`` events; replays prompts and
   answers only; a second turn sees the first.
5. The session workflow: create without an id, list, add ``(type, content)`` events,
   read them back in order, build the text context.
6. A session keeps only its newest events past the server's cap (PAIS's bounded deque).
7. With memory disabled (``MEMORY_ENABLED=false``) every call succeeds and keeps
   nothing: create answers ``"null-session"`` (or the given id), ``get_session`` None,
   events and sessions ``[]``, context ``""``, delete True, zero stats and cleanup.
8. A turn with memory disabled still answers, and lists no session.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

from engram_memory import EngramMemory  # noqa: E402
from engram_server import EngramServer  # noqa: E402


async def pais_turn(memory: EngramMemory, agent: Agent[None, str], session_id: str, prompt: str) -> str:
    """One chat turn the way PAIS's agent server runs it over its memory."""
    session_id = await memory.get_or_create_session(session_id, "agent", "user")
    await memory.add_event(session_id, "user_message", prompt)
    history = await memory.build_message_history(session_id, 6)
    result = await agent.run(prompt, message_history=history)
    answer = str(result.output)
    await memory.add_event(session_id, "agent_response", answer)
    for message in result.new_messages():
        await memory.store_pydantic_message(session_id, message)
    return answer


@pytest.fixture(scope="module")
def null_server() -> Iterator[EngramServer]:
    srv = EngramServer({"MEMORY_ENABLED": "false"}).start()
    yield srv
    srv.stop()


@pytest.fixture
async def null_memory(null_server: EngramServer) -> AsyncIterator[EngramMemory]:
    async with EngramMemory(null_server.target, timeout=10) as m:
        yield m


async def test_a_turn_creates_the_named_session_and_stores_prompt_and_answer(memory: EngramMemory, sid: str) -> None:
    answer = await pais_turn(memory, Agent(TestModel(custom_output_text="Memory test")), sid, "Hello")
    assert answer == "Memory test"
    assert sid in await memory.list_sessions()
    events = await memory.get_session_events(sid)
    assert [(e.event_type, e.content) for e in events] == [("user_message", "Hello"), ("agent_response", "Memory test")]


async def test_a_turn_stores_tool_calls_and_returns_in_paiss_shapes(memory: EngramMemory, sid: str) -> None:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("echo", {"message": "hello"}, tool_call_id="c1"),
                    ToolCallPart("delegate_to_worker", {"task": "sum"}, tool_call_id="c2"),
                ]
            )
        return ModelResponse(parts=[TextPart("Done with tools.")])

    agent: Agent[None, str] = Agent(FunctionModel(respond))

    @agent.tool_plain
    def echo(message: str) -> str:
        return json.dumps({"echo": message})

    @agent.tool_plain
    def delegate_to_worker(task: str) -> str:
        return f"worker did {task}"

    assert await pais_turn(memory, agent, sid, "Test tools") == "Done with tools."
    events = [(e.event_type, e.content) for e in await memory.get_session_events(sid)]
    assert events == [
        ("user_message", "Test tools"),
        ("agent_response", "Done with tools."),
        ("tool_call", {"tool": "echo", "arguments": {"message": "hello"}}),
        ("delegation_request", {"tool": "delegate_to_worker", "arguments": {"task": "sum"}}),
        ("tool_result", {"tool": "echo", "result": {"echo": "hello"}}),  # JSON text is parsed
        ("delegation_response", {"tool": "delegate_to_worker", "result": "worker did sum"}),
    ]


async def test_store_pydantic_message_stores_nothing_for_prompts_answers_or_unknown_sessions(
    memory: EngramMemory, sid: str
) -> None:
    await memory.create_session("app", "user", sid)
    await memory.store_pydantic_message(sid, ModelRequest(parts=[UserPromptPart("hi")]))
    await memory.store_pydantic_message(sid, ModelResponse(parts=[TextPart("hello")]))
    assert await memory.get_session_events(sid) == []
    returned = ModelRequest(parts=[ToolReturnPart("calc", 42, tool_call_id="x")])
    await memory.store_pydantic_message(f"{sid}-absent", returned)  # no error, as add_event's False
    await memory.store_pydantic_message(sid, returned)
    assert [e.content for e in await memory.get_session_events(sid)] == [{"tool": "calc", "result": "42"}]


def _replayed(history: list[ModelMessage] | None) -> list[tuple[str, Any]]:
    assert history is not None
    out: list[tuple[str, Any]] = []
    for m in history:
        for p in m.parts:
            assert isinstance(p, (UserPromptPart, TextPart))
            out.append(("user" if isinstance(p, UserPromptPart) else "assistant", p.content))
    return out


async def test_build_message_history_replays_earlier_turns_without_the_current_prompt(
    memory: EngramMemory, sid: str
) -> None:
    assert await memory.build_message_history(sid) is None  # unknown session
    await memory.create_session("app", "user", sid)
    assert await memory.build_message_history(sid) is None
    await memory.add_event(sid, "user_message", "first question")
    assert await memory.build_message_history(sid) is None  # only the current prompt
    await memory.add_event(sid, "agent_response", "first answer")
    await memory.add_event(sid, "tool_call", {"tool": "t", "arguments": {}})
    await memory.add_event(sid, "task_delegation_received", "delegated task")
    await memory.add_event(sid, "agent_response", "delegated answer")
    await memory.add_event(sid, "user_message", "current question")
    assert _replayed(await memory.build_message_history(sid, 0)) == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "delegated task"),
        ("assistant", "delegated answer"),
    ]
    # The newest 3 of the 5 earlier events: the tool call counts toward the limit, but is not replayed.
    assert _replayed(await memory.build_message_history(sid, 3)) == [
        ("user", "delegated task"),
        ("assistant", "delegated answer"),
    ]
    # A prompt that is not the newest event is still the one left out.
    await memory.add_event(sid, "tool_result", {"tool": "t", "result": 1})
    assert _replayed(await memory.build_message_history(sid, 2)) == [("assistant", "delegated answer")]


async def test_a_second_turn_sees_the_first(memory: EngramMemory, sid: str) -> None:
    seen: list[list[ModelMessage]] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return ModelResponse(parts=[TextPart(f"answer {len(seen)}")])

    agent: Agent[None, str] = Agent(FunctionModel(respond))
    await pais_turn(memory, agent, sid, "one")
    await pais_turn(memory, agent, sid, "two")
    assert _replayed(seen[-1]) == [("user", "one"), ("assistant", "answer 1"), ("user", "two")]


async def test_session_workflow(memory: EngramMemory) -> None:
    session_id = await memory.create_session("test_app", "test_user")
    assert session_id
    assert session_id in await memory.list_sessions()
    await memory.add_event(session_id, "user_message", "Hello agent!")
    await memory.add_event(session_id, "agent_response", "Hello user!")
    await memory.add_event(session_id, "tool_call", {"tool": "calculator", "args": {"a": 1}})
    events = await memory.get_session_events(session_id)
    assert [(e.event_type, e.content) for e in events] == [
        ("user_message", "Hello agent!"),
        ("agent_response", "Hello user!"),
        ("tool_call", {"tool": "calculator", "args": {"a": 1}}),
    ]
    context = await memory.build_conversation_context(session_id)
    assert "Hello agent!" in context and "Hello user!" in context


async def test_a_session_keeps_its_newest_events_past_the_cap(small_server: EngramServer) -> None:
    async with EngramMemory(small_server.target, timeout=10) as memory:
        session_id = await memory.create_session("test_app", "test_user")
        for i in range(7):
            await memory.add_event(session_id, "user_message", f"Message {i}")
        contents = [e.content for e in await memory.get_session_events(session_id)]
        assert contents == [f"Message {i}" for i in range(2, 7)]


async def test_disabled_memory_succeeds_and_keeps_nothing(null_memory: EngramMemory) -> None:
    assert await null_memory.create_session("app", "user") == "null-session"
    assert await null_memory.create_session("app", "user", "custom-id") == "custom-id"
    assert await null_memory.get_or_create_session("my-session") == "my-session"
    assert await null_memory.get_session("any-id") is None
    assert await null_memory.add_event("any-session", "user_message", "hi") is True
    assert await null_memory.get_session_events("any-session") == []
    assert await null_memory.build_conversation_context("any-session") == ""
    assert await null_memory.build_message_history("any-session") is None
    assert await null_memory.list_sessions() == []
    assert await null_memory.delete_session("any-session") is True
    stats = await null_memory.get_memory_stats()
    assert (stats["total_sessions"], stats["total_events"]) == (0, 0)
    assert await null_memory.cleanup_old_sessions() == 0


async def test_a_turn_with_disabled_memory_answers_and_lists_no_session(null_memory: EngramMemory) -> None:
    answer = await pais_turn(null_memory, Agent(TestModel(custom_output_text="No memory response")), "test", "Hello!")
    assert answer == "No memory response"
    assert await null_memory.list_sessions() == []
