"""EngramSession as the OpenAI Agents SDK's Session, driven by the SDK's own ScriptedModel (no network)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.memory import Session  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

from engram_memory import EngramClient  # noqa: E402

set_tracing_disabled(True)  # the SDK would otherwise try to export traces
from engram_memory.openai_agents import EngramSession  # noqa: E402


def _texts(items: list[Any]) -> list[tuple[str, str]]:
    """(role, text) of the message items."""
    out: list[tuple[str, str]] = []
    for item in items:
        if item.get("type", "message") != "message":
            continue
        content = item["content"]
        text = content if isinstance(content, str) else "".join(part.get("text", "") for part in content)
        out.append((item["role"], text))
    return out


async def test_is_a_session_of_the_sdk(client: EngramClient, sid: str) -> None:
    assert isinstance(EngramSession(sid, client), Session)


async def test_a_runner_keeps_the_conversation_in_engram(client: EngramClient, sid: str) -> None:
    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    model = ScriptedModel(
        [
            [function_call("get_weather", {"city": "Paris"}, call_id="call-1")],
            [assistant_message("It is sunny in Paris.")],
            [assistant_message("You asked about Paris.")],
        ]
    )
    agent = Agent(name="weather", model=model, tools=[get_weather])
    session = EngramSession(sid, client, app_name="weather-app", user_id="alice")

    first = await Runner.run(agent, "Weather in Paris?", session=session)
    assert first.final_output == "It is sunny in Paris."
    stored = await client.get_session(sid)
    assert (stored.app_name, stored.user_id) == ("weather-app", "alice")
    events = [e async for e in client.iter_session_events(sid)]
    assert [e.event_type for e in events] == ["user_message", "tool_call", "tool_result", "agent_response"]
    assert events[1].content["call_id"] == events[2].content["call_id"] == "call-1"

    # The second turn starts from the history Engram holds.
    second = await Runner.run(agent, "What did I ask?", session=session)
    assert second.final_output == "You asked about Paris."
    seen = model.calls[-1].input
    assert _texts(seen) == [
        ("user", "Weather in Paris?"),
        ("assistant", "It is sunny in Paris."),
        ("user", "What did I ask?"),
    ]
    assert len(await session.get_items()) == 6


async def test_get_add_pop_and_clear(client: EngramClient, sid: str) -> None:
    session = EngramSession(sid, client)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    items: list[Any] = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[1:]
    assert await session.get_items(limit=0) == []

    assert await session.pop_item() == items[2]
    assert await session.get_items() == items[:2]
    await session.add_items([{"role": "user", "content": "four"}])
    assert _texts(await session.get_items()) == [("user", "one"), ("assistant", "two"), ("user", "four")]
    assert await session.pop_item() == {"role": "user", "content": "four"}
    assert await session.pop_item() == items[1]
    assert await session.get_items() == items[:1]

    await session.clear_session()
    assert await session.get_items() == []
    await session.add_items(items[:1])  # a cleared session is created again
    assert await session.get_items() == items[:1]


async def test_items_keep_their_json_types(client: EngramClient, sid: str) -> None:
    session = EngramSession(sid, client)
    item: Any = {"type": "function_call_output", "call_id": "c", "output": '{"n": 1}', "extra": {"n": 1, "f": 1.5}}
    await session.add_items([item])
    assert await session.get_items() == [item]
    got: Any = (await session.get_items())[0]
    assert isinstance(got["extra"]["n"], int)


async def test_session_settings_set_the_default_limit_of_get_items(client: EngramClient, sid: str) -> None:
    from agents import RunConfig
    from agents.memory import SessionSettings

    items: list[Any] = [{"role": "user", "content": str(n)} for n in range(5)]
    session = EngramSession(sid, client, session_settings=SessionSettings(limit=2))
    await session.add_items(items)
    assert await session.get_items() == items[-2:]
    assert await session.get_items(limit=4) == items[-4:]  # an explicit limit wins
    assert EngramSession(sid, client).session_settings == SessionSettings()
    assert await EngramSession(sid, client, session_settings={"limit": 3}).get_items() == items[-3:]

    # The runner reads the session's settings (overlaid by the run's) for the history it sends.
    model = ScriptedModel([[assistant_message("ok")], [assistant_message("ok")]])
    agent = Agent(name="limited", model=model)
    await Runner.run(agent, "next", session=session)
    assert _texts(model.calls[-1].input) == [("user", "3"), ("user", "4"), ("user", "next")]
    await Runner.run(agent, "last", session=session, run_config=RunConfig(session_settings=SessionSettings(limit=1)))
    assert _texts(model.calls[-1].input) == [("assistant", "ok"), ("user", "last")]


async def test_an_item_that_is_not_json_is_refused_and_nothing_is_written(client: EngramClient, sid: str) -> None:
    session = EngramSession(sid, client)
    await session.add_items([{"role": "user", "content": "kept"}])
    with pytest.raises(TypeError):
        await session.add_items([{"role": "user", "content": "fine"}, {"role": "user", "content": object()}])  # type: ignore[list-item,misc]
    assert _texts(await session.get_items()) == [("user", "kept")]
