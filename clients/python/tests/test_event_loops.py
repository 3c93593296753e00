"""One client or adapter used from several event loops and threads.

A grpc.aio channel only works in the loop it was made in; the async client
keeps one per running loop, so nothing is tied to the first ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from engram_memory import EngramClient, EngramClientSync, EngramMemory
from engram_server import EngramServer


def _in_threads(work: Callable[[int], None], count: int = 2) -> None:
    """Runs ``work(i)`` in ``count`` threads at once and re-raises the first failure."""
    failures: list[BaseException] = []
    start = threading.Barrier(count)

    def run(i: int) -> None:
        try:
            start.wait(10)
            work(i)
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            failures.append(err)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a thread did not finish within 60 s"
    if failures:
        raise failures[0]


def _twice_then_in_threads(step: Callable[[int], Coroutine[Any, Any, None]]) -> None:
    """``step`` in two ``asyncio.run`` calls one after the other, then in two threads at once."""
    asyncio.run(step(0))
    asyncio.run(step(1))
    _in_threads(lambda i: asyncio.run(step(2 + i)))


def test_one_client_serves_two_asyncio_runs_and_two_threads(server: EngramServer) -> None:
    client = EngramClient(server.target, timeout=10)
    sid = f"loops-{uuid.uuid4().hex[:12]}"

    async def step(i: int) -> None:
        await client.get_or_create_session(sid)
        await client.add_event(sid, "user_message", f"turn {i}")

    _twice_then_in_threads(step)

    async def read_and_close() -> list[str]:
        texts = [e.content async for e in client.iter_session_events(sid)]
        await client.close()
        return texts

    assert sorted(asyncio.run(read_and_close())) == ["turn 0", "turn 1", "turn 2", "turn 3"]


def test_one_memory_adapter_serves_two_asyncio_runs_and_two_threads(server: EngramServer) -> None:
    memory = EngramMemory(server.target, timeout=10)
    sid = f"loops-{uuid.uuid4().hex[:12]}"

    async def step(i: int) -> None:
        await memory.create_session("loops", "alice", sid) if i == 0 else None
        await memory.add_event(sid, "user_message", f"turn {i}")

    _twice_then_in_threads(step)

    async def read() -> int:
        return len(await memory.get_session_events(sid))

    assert asyncio.run(read()) == 4
    asyncio.run(memory.close())


def test_one_openai_agents_session_serves_two_asyncio_runs_and_two_threads(server: EngramServer) -> None:
    pytest.importorskip("agents")
    from engram_memory.openai_agents import EngramSession

    session = EngramSession(f"loops-{uuid.uuid4().hex[:12]}", EngramClient(server.target, timeout=10))

    async def step(i: int) -> None:
        await session.add_items([{"role": "user", "content": f"turn {i}"}])

    _twice_then_in_threads(step)
    items: list[Any] = asyncio.run(session.get_items())
    assert sorted(str(item["content"]) for item in items) == ["turn 0", "turn 1", "turn 2", "turn 3"]


def test_one_adk_session_service_serves_two_asyncio_runs_and_two_threads(server: EngramServer) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events.event import Event
    from google.genai import types

    from engram_memory.adk import EngramSessionService

    service = EngramSessionService(EngramClient(server.target, timeout=10))
    app = f"loops-{uuid.uuid4().hex[:12]}"
    asyncio.run(service.create_session(app_name=app, user_id="u", session_id="main"))

    async def step(i: int) -> None:
        session = await service.get_session(app_name=app, user_id="u", session_id="main")
        assert session is not None
        said = types.Content(role="user", parts=[types.Part(text=f"turn {i}")])
        await service.append_event(session, Event(invocation_id=f"inv-{i}", author="user", content=said))

    _twice_then_in_threads(step)
    final = asyncio.run(service.get_session(app_name=app, user_id="u", session_id="main"))
    assert final is not None and len(final.events) == 4


def test_the_sync_client_is_shared_by_threads(server: EngramServer) -> None:
    sid = f"loops-{uuid.uuid4().hex[:12]}"
    with EngramClientSync(server.target, timeout=10) as client:
        client.get_or_create_session(sid)

        def add_five(i: int) -> None:
            for n in range(5):
                client.add_event(sid, "user_message", f"{i}-{n}")

        _in_threads(add_five, 4)
        assert len(list(client.iter_session_events(sid))) == 20
