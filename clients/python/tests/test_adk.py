"""EngramSessionService and EngramMemoryService against a real server, and an ADK Runner on them.

ADK's own session-service tests (tests/unittests/sessions) check these behaviours
of every BaseSessionService; each is covered here in our words:

1. An unknown session reads as None.
2. create/get: app, user, id, state and update time; get equals what create
   returned; delete makes it None.
3. list_sessions: every session of the user with its state; without a user,
   every session of the app; oldest update first.
4. ``app:`` state is shared by every user of the app.
5. ``user:`` state is shared by the user's sessions only.
6. Session state is not shared with other sessions.
7. ``temp:`` state is visible in the live session object but never stored,
   nor left in the event's delta; it is visible to the next event of the same
   invocation.
8. A session is read only by its own app and user.
9. Creating a taken id raises ADK's AlreadyExistsError.
10. Events round-trip whole: bytes, and every field of a complete event.
11. Appending an event moves the session's update time to the event's.
12. get_session's config: ``num_recent_events`` (0: none) and
    ``after_timestamp`` (inclusive), alone and together.
13. Partial events are not stored.
14. get_user_state: {} without state; the user's keys without the prefix;
    not another user's or another app's; the latest write.
15. A padded session id reads and deletes the same session.
Differences are listed in the client README (Integrations, Google ADK).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.errors.already_exists_error import AlreadyExistsError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.adk.events.event_actions import EventActions  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import Runner  # noqa: E402
from google.adk.sessions.base_session_service import GetSessionConfig  # noqa: E402
from google.genai import types  # noqa: E402

from engram_memory import EngramClient  # noqa: E402
from engram_memory.adk import EngramMemoryService, EngramSessionService, engram_session_id  # noqa: E402


@pytest.fixture
def service(client: EngramClient) -> EngramSessionService:
    return EngramSessionService(client)


@pytest.fixture
def app(sid: str) -> str:
    """An app of its own per test, so listings and app state see only the test's sessions."""
    return f"app-{sid}"


def _event(author: str = "user", **kwargs: Any) -> Event:
    return Event(invocation_id=kwargs.pop("invocation_id", "inv"), author=author, **kwargs)


# ---- 1, 2, 3, 8, 9, 15: sessions ------------------------------------------------


async def test_an_unknown_session_is_none(service: EngramSessionService, app: str) -> None:
    assert await service.get_session(app_name=app, user_id="u", session_id="no-such-session") is None


async def test_create_get_and_delete(service: EngramSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    assert (session.app_name, session.user_id, session.state, session.events) == (app, "u", {}, [])
    assert session.id and session.last_update_time > 0
    assert await service.get_session(app_name=app, user_id="u", session_id=session.id) == session
    await service.delete_session(app_name=app, user_id="u", session_id=session.id)
    assert await service.get_session(app_name=app, user_id="u", session_id=session.id) is None


async def test_list_sessions_by_user_and_for_the_whole_app(service: EngramSessionService, app: str) -> None:
    for sid, user in (("s-b", "u1"), ("s-a", "u1"), ("s-c", "u2")):
        await service.create_session(app_name=app, user_id=user, session_id=f"{app}-{sid}")
        await asyncio.sleep(0.02)  # distinct update times (milliseconds) to order by
    u1 = (await service.list_sessions(app_name=app, user_id="u1")).sessions
    assert [s.id for s in u1] == [f"{app}-s-b", f"{app}-s-a"]  # oldest update first, not id order
    assert all(s.events == [] for s in u1)
    everyone = (await service.list_sessions(app_name=app)).sessions
    assert {s.id for s in everyone} == {f"{app}-s-a", f"{app}-s-b", f"{app}-s-c"}


async def test_a_session_is_read_only_by_its_own_app_and_user(service: EngramSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u1")
    assert await service.get_session(app_name=app, user_id="u2", session_id=session.id) is None
    assert await service.get_session(app_name=f"{app}-other", user_id="u1", session_id=session.id) is None
    await service.delete_session(app_name=app, user_id="u2", session_id=session.id)  # not u2's: kept
    assert await service.get_session(app_name=app, user_id="u1", session_id=session.id) is not None


async def test_a_taken_id_raises_already_exists(service: EngramSessionService, app: str) -> None:
    await service.create_session(app_name=app, user_id="u", session_id=f"{app}-taken")
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=app, user_id="u", session_id=f"{app}-taken")


async def test_a_padded_id_reads_and_deletes_the_same_session(service: EngramSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u", session_id=f"  {app}-padded ")
    assert session.id == f"{app}-padded"
    got = await service.get_session(app_name=app, user_id="u", session_id=f" {app}-padded  ")
    assert got is not None and got.id == session.id
    await service.delete_session(app_name=app, user_id="u", session_id=f" {app}-padded")
    assert await service.get_session(app_name=app, user_id="u", session_id=session.id) is None


# ---- 10, 11, 12, 13: events -----------------------------------------------------


async def test_events_round_trip_whole(service: EngramSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    image = types.Content(role="user", parts=[types.Part.from_bytes(data=b"\x89PNG-bytes", mime_type="image/png")])
    await service.append_event(session, _event(content=image))
    complete = _event(
        author="agent",
        content=types.Content(role="model", parts=[types.Part(text="done")]),
        turn_complete=True,
        partial=False,
        actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="other", escalate=True),
        long_running_tool_ids={"tool1"},
        error_code="E",
        error_message="message",
        interrupted=True,
        grounding_metadata=types.GroundingMetadata(web_search_queries=["q"]),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1, candidates_token_count=1, total_token_count=2
        ),
        custom_metadata={"k": "v"},
        timestamp=1700000000.123,
    )
    await service.append_event(session, complete)
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got == session
    assert got is not None and got.events[0].content == image


async def test_an_event_moves_the_update_time_to_its_own(service: EngramSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    later = session.last_update_time + 10
    await service.append_event(session, _event(timestamp=later))
    assert session.last_update_time == pytest.approx(later, abs=1e-6)
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None and got.last_update_time == pytest.approx(later, abs=1e-6)


async def test_get_session_config_windows_the_events(service: EngramSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    for i in range(1, 6):
        await service.append_event(session, _event(timestamp=float(i)))

    async def stamps(config: GetSessionConfig | None) -> list[float]:
        got = await service.get_session(app_name=app, user_id="u", session_id=session.id, config=config)
        assert got is not None
        return [e.timestamp for e in got.events]

    assert await stamps(None) == [1, 2, 3, 4, 5]
    assert await stamps(GetSessionConfig(num_recent_events=0)) == []
    assert await stamps(GetSessionConfig(num_recent_events=3)) == [3, 4, 5]
    assert await stamps(GetSessionConfig(after_timestamp=4.0)) == [4, 5]
    assert await stamps(GetSessionConfig(after_timestamp=50.0)) == []
    assert await stamps(GetSessionConfig(num_recent_events=3, after_timestamp=4.0)) == [4, 5]


async def test_partial_events_are_not_stored(service: EngramSessionService, app: str, client: EngramClient) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    await service.append_event(session, _event(partial=True))
    assert session.events == []
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None and got.events == []
    assert (await client.get_session_events(engram_session_id(app, "u", session.id))).events == []


async def test_events_are_engram_events_other_clients_read(
    service: EngramSessionService, app: str, client: EngramClient
) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    await service.append_event(session, _event(content=types.Content(role="user", parts=[types.Part(text="hi")])))
    await service.append_event(session, _event(author="agent", content=types.Content(parts=[types.Part(text="yo")])))
    stored = (await client.get_session_events(engram_session_id(app, "u", session.id))).events
    assert [(e.event_type, e.event_id) for e in stored] == [
        ("user_message", session.events[0].id),
        ("agent_response", session.events[1].id),
    ]
    # An event another tool wrote is not an ADK event: the session service leaves it out.
    await client.add_event(engram_session_id(app, "u", session.id), "user_message", "from elsewhere")
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None and [e.id for e in got.events] == [e.id for e in session.events]


# ---- 4, 5, 6, 7, 14: state ---------------------------------------------------------


async def test_state_scopes(service: EngramSessionService, app: str) -> None:
    s1 = await service.create_session(
        app_name=app, user_id="u1", session_id=f"{app}-s1", state={"app:k1": "v1", "user:k1": "u1", "sk1": "s"}
    )
    await service.append_event(s1, _event(actions=EventActions(state_delta={"app:k2": "v2", "user:k2": 2, "sk2": 1})))
    got1 = await service.get_session(app_name=app, user_id="u1", session_id=s1.id)
    assert got1 is not None and got1.state == {
        "app:k1": "v1",
        "app:k2": "v2",
        "user:k1": "u1",
        "user:k2": 2,
        "sk1": "s",
        "sk2": 1,
    }
    s1b = await service.create_session(app_name=app, user_id="u1", session_id=f"{app}-s1b")
    assert s1b.state == {"app:k1": "v1", "app:k2": "v2", "user:k1": "u1", "user:k2": 2}
    s2 = await service.create_session(app_name=app, user_id="u2", session_id=f"{app}-s2")
    assert s2.state == {"app:k1": "v1", "app:k2": "v2"}
    listed = {s.id: s.state for s in (await service.list_sessions(app_name=app, user_id="u1")).sessions}
    assert listed[s1.id]["sk2"] == 1


async def test_temp_state_is_live_only(service: EngramSessionService, app: str) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    first = _event(author="agent1", actions=EventActions(state_delta={"temp:out": "from a1", "sk": "v"}))
    await service.append_event(session, first)
    assert session.state["temp:out"] == "from a1"  # the next agent of the invocation reads it
    assert "temp:out" not in first.actions.state_delta and first.actions.state_delta["sk"] == "v"
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None and got.state == {"sk": "v"}
    assert "temp:out" not in got.events[0].actions.state_delta


async def test_get_user_state(service: EngramSessionService, app: str) -> None:
    assert await service.get_user_state(app_name=app, user_id="u1") == {}
    session = await service.create_session(app_name=app, user_id="u1")
    await service.append_event(
        session, _event(actions=EventActions(state_delta={"user:profile": {"name": "Alice"}, "session_key": 1}))
    )
    await service.append_event(session, _event(actions=EventActions(state_delta={"user:counter": 1})))
    await service.append_event(session, _event(actions=EventActions(state_delta={"user:counter": 2})))
    assert await service.get_user_state(app_name=app, user_id="u1") == {"profile": {"name": "Alice"}, "counter": 2}
    assert await service.get_user_state(app_name=app, user_id="u2") == {}
    assert await service.get_user_state(app_name=f"{app}-other", user_id="u1") == {}


# ---- a Runner with an offline model, and the memory service ---------------------


class ScriptedLlm(BaseLlm):
    """Answers each call with the next scripted reply and records what it was sent."""

    model: str = "scripted"
    replies: list[str] = []
    requests: list[LlmRequest] = []

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        text = self.replies[len(self.requests) - 1]
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


@pytest.fixture
async def memory_service(client: EngramClient) -> AsyncIterator[EngramMemoryService]:
    yield EngramMemoryService(client)


def _said(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def test_a_runner_keeps_sessions_and_events_in_engram(
    service: EngramSessionService, memory_service: EngramMemoryService, app: str, client: EngramClient
) -> None:
    llm = ScriptedLlm(replies=["Hello Alice.", "You live in Porto."], requests=[])
    agent = LlmAgent(name="assistant", model=llm, instruction="Be brief.", output_key="last_reply")
    runner = Runner(app_name=app, agent=agent, session_service=service, memory_service=memory_service)
    session = await service.create_session(app_name=app, user_id="alice")

    replies = [
        e.content.parts[0].text
        async for e in runner.run_async(user_id="alice", session_id=session.id, new_message=_said("I live in Porto"))
        if e.content and e.content.parts and e.author == "assistant"
    ]
    assert replies == ["Hello Alice."]
    stored = await service.get_session(app_name=app, user_id="alice", session_id=session.id)
    assert stored is not None
    assert [(e.author, e.content.parts[0].text if e.content and e.content.parts else None) for e in stored.events] == [
        ("user", "I live in Porto"),
        ("assistant", "Hello Alice."),
    ]
    engram_id = engram_session_id(app, "alice", session.id)
    assert [e.event_type for e in (await client.get_session_events(engram_id)).events] == [
        "user_message",
        "agent_response",
    ]

    # A second turn: the model is sent the whole conversation Engram holds.
    async for _ in runner.run_async(user_id="alice", session_id=session.id, new_message=_said("Where do I live?")):
        pass
    sent = [(c.role, c.parts[0].text if c.parts else None) for c in llm.requests[-1].contents]
    assert sent == [("user", "I live in Porto"), ("model", "Hello Alice."), ("user", "Where do I live?")]


async def test_the_memory_service_remembers_sessions_and_searches_memories_and_events(
    service: EngramSessionService, memory_service: EngramMemoryService, app: str
) -> None:
    session = await service.create_session(app_name=app, user_id="alice")
    await service.append_event(session, _event(content=_said("My sister lives in Porto")))
    await service.append_event(session, _event(author="agent", content=types.Content(parts=[types.Part(text="Nice.")])))
    await memory_service.add_session_to_memory(session)
    await memory_service.add_session_to_memory(session)  # again: stored once
    found = await memory_service.search_memory(app_name=app, user_id="alice", query="sister Porto")
    texts = [m.content.parts[0].text for m in found.memories if m.content.parts]
    assert texts.count("My sister lives in Porto") == 1
    assert found.memories[0].author == "user"
    assert (await memory_service.search_memory(app_name=app, user_id="bob", query="sister Porto")).memories == []

    # An event of the user's sessions that was never added to memory is found by event search.
    other = await service.create_session(app_name=app, user_id="alice")
    await service.append_event(other, _event(content=_said("I play the cello on Sundays")))
    cello = await memory_service.search_memory(app_name=app, user_id="alice", query="cello")
    assert [m.custom_metadata.get("session_id") for m in cello.memories] == [other.id]

    # Explicit entries, and forgetting one by the id search reported.
    from google.adk.memory.memory_entry import MemoryEntry

    await memory_service.add_memory(
        app_name=app, user_id="alice", memories=[MemoryEntry(content=_said("Alice is vegetarian"), author="user")]
    )
    veg = (await memory_service.search_memory(app_name=app, user_id="alice", query="vegetarian")).memories
    assert veg and veg[0].id
    await memory_service.delete_memory(app_name=app, user_id="alice", memory_id=veg[0].id)
    assert (await memory_service.search_memory(app_name=app, user_id="alice", query="vegetarian")).memories == []


async def test_the_same_session_id_serves_each_user_and_app_apart(service: EngramSessionService, app: str) -> None:
    alice = await service.create_session(app_name=app, user_id="alice", session_id="main", state={"who": "alice"})
    bob = await service.create_session(app_name=app, user_id="bob", session_id="main", state={"who": "bob"})
    other_app = await service.create_session(app_name=f"{app}-2", user_id="alice", session_id="main")
    assert alice.id == bob.id == other_app.id == "main"
    await service.append_event(alice, _event(content=_said("alice's turn")))
    got_alice = await service.get_session(app_name=app, user_id="alice", session_id="main")
    got_bob = await service.get_session(app_name=app, user_id="bob", session_id="main")
    assert got_alice is not None and got_bob is not None
    assert (got_alice.state["who"], len(got_alice.events)) == ("alice", 1)
    assert (got_bob.state["who"], got_bob.events) == ("bob", [])
    assert [s.id for s in (await service.list_sessions(app_name=app, user_id="bob")).sessions] == ["main"]
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=app, user_id="bob", session_id="main")
    await service.delete_session(app_name=app, user_id="bob", session_id="main")
    assert await service.get_session(app_name=app, user_id="alice", session_id="main") is not None


async def test_a_session_stored_under_its_adk_id_before_namespacing_is_still_used(
    service: EngramSessionService, app: str, client: EngramClient
) -> None:
    legacy_id = f"{app}-legacy"
    await client.create_session(app, "u", legacy_id)  # how sessions were stored before
    session = await service.get_session(app_name=app, user_id="u", session_id=legacy_id)
    assert session is not None and session.id == legacy_id
    await service.append_event(session, _event(content=_said("still here")))
    assert [e.event_type for e in (await client.get_session_events(legacy_id)).events] == ["user_message"]
    with pytest.raises(AlreadyExistsError):
        await service.create_session(app_name=app, user_id="u", session_id=legacy_id)
    assert [s.id for s in (await service.list_sessions(app_name=app, user_id="u")).sessions] == [legacy_id]
    await service.delete_session(app_name=app, user_id="u", session_id=legacy_id)
    assert await service.get_session(app_name=app, user_id="u", session_id=legacy_id) is None


async def test_a_none_in_a_state_delta_is_stored_as_none(
    service: EngramSessionService, app: str, client: EngramClient
) -> None:
    session = await service.create_session(app_name=app, user_id="u", state={"k": 1, "made": None})
    delta = {"k": None, "user:u": None, "app:a": None}
    await service.append_event(session, _event(actions=EventActions(state_delta=delta)))
    assert session.state == {"k": None, "made": None, "user:u": None, "app:a": None}
    got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
    assert got is not None and got.state == {"k": None, "made": None, "user:u": None, "app:a": None}
    assert got.events[-1].actions.state_delta == delta
    # Other clients read the event with its nulls and the flag saying they are values.
    stored = (await client.get_session_events(engram_session_id(app, "u", session.id))).events[-1]
    assert stored.state_delta == delta and stored.state_nulls_are_values


async def test_re_adding_an_event_with_edited_text_updates_its_memory(
    service: EngramSessionService, memory_service: EngramMemoryService, app: str
) -> None:
    session = await service.create_session(app_name=app, user_id="u")
    event = _event(content=_said("I live in Porto"))
    await service.append_event(session, event)
    await memory_service.add_session_to_memory(session)
    edited = event.model_copy(update={"content": _said("I live in Lisbon now")})
    await memory_service.add_events_to_memory(app_name=app, user_id="u", events=[edited], session_id=session.id)
    found = await memory_service.search_memory(app_name=app, user_id="u", query="live")
    assert [m.content.parts[0].text for m in found.memories if m.content.parts] == ["I live in Lisbon now"]


async def test_equally_good_memories_come_back_in_the_order_they_were_added(
    memory_service: EngramMemoryService, app: str
) -> None:
    from google.adk.memory.memory_entry import MemoryEntry

    for text in ("apple one", "apple two", "apple three"):
        await memory_service.add_memory(app_name=app, user_id="u", memories=[MemoryEntry(content=_said(text))])
    found = await memory_service.search_memory(app_name=app, user_id="u", query="apple")
    assert [m.content.parts[0].text for m in found.memories if m.content.parts] == [
        "apple one",
        "apple two",
        "apple three",
    ]
