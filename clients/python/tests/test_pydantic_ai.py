"""The Pydantic AI bridge, with FunctionModel/TestModel (no network)."""

from __future__ import annotations

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
from pydantic_ai.models import Model  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

from engram_memory import EngramMemory  # noqa: E402
from engram_memory.pydantic_ai import events_to_messages, load_message_history, save_new_messages  # noqa: E402


def _weather_model(seen: list[list[ModelMessage]]) -> FunctionModel:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        last = messages[-1]
        if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
            ret = next(p for p in last.parts if isinstance(p, ToolReturnPart))
            return ModelResponse(parts=[TextPart(f"It is {ret.content} in Paris.")])
        prompt = next(p for p in last.parts if isinstance(p, UserPromptPart))
        if "weather" in str(prompt.content):
            return ModelResponse(parts=[ToolCallPart("get_weather", {"city": "Paris"}, tool_call_id="call-1")])
        return ModelResponse(parts=[TextPart(f"turns so far: {len(messages)}")])

    return FunctionModel(respond, model_name="fn")


def _agent(model: Model) -> Agent[None, str]:
    agent = Agent(model)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        return "sunny" if city == "Paris" else "rainy"

    return agent


def _shape(messages: list[ModelMessage]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    out: list[tuple[str, list[tuple[Any, ...]]]] = []
    for m in messages:
        parts: list[tuple[Any, ...]] = []
        for p in m.parts:
            if isinstance(p, UserPromptPart):
                parts.append(("user", p.content))
            elif isinstance(p, TextPart):
                parts.append(("text", p.content))
            elif isinstance(p, ToolCallPart):
                parts.append(("call", p.tool_name, p.args_as_dict(), p.tool_call_id))
            elif isinstance(p, ToolReturnPart):
                parts.append(("return", p.tool_name, p.content, p.tool_call_id))
        out.append((m.kind, parts))
    return out


async def test_history_round_trip_with_tool_pair(memory: EngramMemory, sid: str) -> None:
    seen: list[list[ModelMessage]] = []
    agent = _agent(_weather_model(seen))
    assert await load_message_history(memory, sid) == []

    result = await agent.run("What's the weather in Paris?")
    assert result.output == "It is sunny in Paris."
    stored = await save_new_messages(memory, sid, result.new_messages())  # creates the session
    assert [e.event_type for e in stored] == ["user_message", "tool_call", "tool_result", "agent_response"]
    assert stored[1].content == {"tool_name": "get_weather", "args": {"city": "Paris"}, "tool_call_id": "call-1"}
    assert stored[2].content == {"tool_name": "get_weather", "content": "sunny", "tool_call_id": "call-1"}

    history = await load_message_history(memory, sid)
    assert _shape(history) == _shape(result.new_messages())
    assert isinstance(history[1], ModelResponse) and history[1].model_name == "fn"

    # The server pairs the same shapes by tool_call_id.
    ctx = await memory.client.build_conversation_context(sid, max_events=10)
    assert [m.role for m in ctx.messages] == ["user", "assistant", "tool", "assistant"]
    assert ctx.messages[1].tool_calls[0].id == ctx.messages[2].tool_call_id == "call-1"

    # A second run continues from the loaded history.
    result2 = await agent.run("And now?", message_history=history)
    assert result2.output == "turns so far: 5"
    assert _shape(seen[-1][:4]) == _shape(history)
    await save_new_messages(memory, sid, result2.new_messages())
    assert len(await load_message_history(memory, sid)) == 6


async def test_unpaired_tool_calls_are_dropped(memory: EngramMemory, sid: str) -> None:
    await memory.create_session("app", "user", sid)
    await memory.add_event(sid, "user_message", "hi")
    await memory.add_event(sid, "tool_call", {"tool_name": "a", "args": {}, "tool_call_id": "open"})
    await memory.add_event(sid, "tool_result", {"tool_name": "b", "content": 1, "tool_call_id": "orphan"})
    await memory.add_event(sid, "agent_response", "done")
    history = await load_message_history(memory, sid)
    assert _shape(history) == [("request", [("user", "hi")]), ("response", [("text", "done")])]


async def test_test_model_run(memory: EngramMemory, sid: str) -> None:
    agent = _agent(TestModel())
    result = await agent.run("hello")
    await save_new_messages(memory, sid, result.new_messages())
    history = await load_message_history(memory, sid)
    calls = [p for m in history for p in m.parts if isinstance(p, ToolCallPart)]
    returns = [p for m in history for p in m.parts if isinstance(p, ToolReturnPart)]
    assert calls and [c.tool_call_id for c in calls] == [r.tool_call_id for r in returns]
    result2 = await agent.run("again", message_history=history)
    assert result2.output


def test_events_to_messages_groups_foreign_events() -> None:
    from engram_memory import MemoryEvent

    events = [
        MemoryEvent.create("user_message", {"text": "q"}),
        MemoryEvent.create("tool_call", {"tool": "search", "arguments": '{"q":1}', "id": "x"}),
        MemoryEvent.create("tool_result", {"tool": "search", "result": [1], "tool_call_id": "x"}),
        MemoryEvent.create("agent_response", "a"),
    ]
    assert _shape(events_to_messages(events)) == [
        ("request", [("user", "q")]),
        ("response", [("call", "search", {"q": 1}, "x")]),
        ("request", [("return", "search", [1], "x")]),
        ("response", [("text", "a")]),
    ]
