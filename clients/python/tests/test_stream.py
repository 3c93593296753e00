"""StreamSessionEvents: catch-up, live events, heartbeats and resume (async and sync)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from typing import TypeVar

import pytest
from conftest import FAST_CHANNEL, FAST_RETRY

from engram_memory import EngramClient, EngramClientSync, EngramMemory, NotFoundError
from engram_server import EngramServer, TcpProxy

T = TypeVar("T")


async def _take(aiter: AsyncIterator[T], n: int, timeout: float = 10.0) -> list[T]:
    out: list[T] = []

    async def run() -> None:
        async for item in aiter:
            out.append(item)
            if len(out) >= n:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def test_catch_up_then_live(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "user", sid)
    await client.add_events(sid, [{"event_type": "user_message", "content": i} for i in range(3)])
    frames = client.stream_frames(sid)
    first = await _take(frames, 5)  # 3 events, caught_up, a heartbeat (200 ms)
    assert [f.kind for f in first[:4]] == ["event", "event", "event", "caught_up"]
    assert first[3].head_seq == 3 and first[4].kind == "heartbeat"
    await client.add_event(sid, "agent_response", "live")
    live = await _take(frames, 1)
    while live[0].kind != "event":
        live = await _take(frames, 1)
    event = live[0].event
    assert event is not None and event.seq == 4 and event.content == "live"
    await frames.aclose()


async def test_memory_stream_filters_and_skips_heartbeats(memory: EngramMemory, sid: str) -> None:
    await memory.create_session("app", "user", sid)
    for i in range(4):
        await memory.add_event(sid, "user_message" if i % 2 == 0 else "agent_response", f"m{i}")
    stream = memory.stream_session_events(sid, after_seq=1, event_types=["user_message"])
    got = await _take(stream, 1)
    assert [(e.seq, e.content) for e in got] == [(3, "m2")]

    async def later() -> None:
        await asyncio.sleep(0.5)  # past a heartbeat
        await memory.add_event(sid, "agent_response", "skip")
        await memory.add_event(sid, "user_message", "m5")

    task = asyncio.create_task(later())
    got = await _take(stream, 1)
    assert [(e.seq, e.content) for e in got] == [(6, "m5")]
    await task
    await stream.aclose()


async def test_stream_unknown_session(client: EngramClient) -> None:
    with pytest.raises(NotFoundError):
        await _take(client.stream_session_events("nope-" + uuid.uuid4().hex), 1)


async def test_resume_after_channel_breaks(server: EngramServer, sid: str) -> None:
    proxy = TcpProxy(server.port)
    try:
        async with EngramClient(proxy.target, timeout=5, options=FAST_CHANNEL, stream_retry=FAST_RETRY) as c:
            await c.create_session("app", "user", sid)
            await c.add_events(sid, [{"event_type": "user_message", "content": i} for i in range(3)])
            stream = c.stream_session_events(sid)
            assert [e.seq for e in await _take(stream, 3)] == [1, 2, 3]
            for round_ in range(2):
                proxy.break_all()
                async with EngramClient(server.target, timeout=5) as direct:
                    await direct.add_events(sid, [{"event_type": "user_message", "content": f"r{round_}"}])
                got = await _take(stream, 1)
                assert got[0].content == f"r{round_}" and got[0].seq == 4 + round_
            await stream.aclose()
    finally:
        proxy.close()


async def test_resume_after_server_restart(sid: str) -> None:
    """The server shuts down (UNAVAILABLE + engram-last-seq), comes back, the stream resumes after seq 3."""
    first = EngramServer().start()
    proxy = TcpProxy(first.port)
    second: EngramServer | None = None
    try:
        async with EngramClient(proxy.target, timeout=5, options=FAST_CHANNEL, stream_retry=FAST_RETRY) as c:
            await c.create_session("app", "user", sid)
            await c.add_events(sid, [{"event_type": "user_message", "content": i} for i in range(3)])
            stream = c.stream_session_events(sid)
            assert [e.seq for e in await _take(stream, 3)] == [1, 2, 3]
            pending = asyncio.ensure_future(_take(stream, 2, timeout=30))
            # The new server (in-memory store: seeded again) is up before the old one stops, so
            # the stream's retry budget covers the switch and not a server's start-up on a busy box.
            second = await asyncio.to_thread(EngramServer().start)
            async with EngramClient(second.target, timeout=5) as direct:
                await direct.create_session("app", "user", sid)
                await direct.add_events(sid, [{"event_type": "user_message", "content": f"n{i}"} for i in range(5)])
            await asyncio.to_thread(first.stop)
            proxy.upstream_port = second.port
            resumed = await pending
            assert [(e.seq, e.content) for e in resumed] == [(4, "n3"), (5, "n4")]
            await stream.aclose()
    finally:
        proxy.close()
        first.stop()
        if second is not None:
            second.stop()


def test_sync_stream_resume(server: EngramServer, sid: str) -> None:
    proxy = TcpProxy(server.port)
    try:
        with EngramClientSync(proxy.target, timeout=5, options=FAST_CHANNEL, stream_retry=FAST_RETRY) as c:
            c.create_session("app", "user", sid)
            c.add_events(sid, [{"event_type": "user_message", "content": i} for i in range(2)])
            stream = c.stream_session_events(sid)
            assert [next(stream).seq for _ in range(2)] == [1, 2]

            def writer() -> None:
                proxy.break_all()
                with EngramClientSync(server.target, timeout=5) as w:
                    w.add_event(sid, "agent_response", "after-break")

            t = threading.Timer(0.3, writer)
            t.start()
            event = next(stream)  # blocks until the resumed stream delivers seq 3
            t.join(10)
            assert (event.seq, event.content) == (3, "after-break")
            stream.close()
    finally:
        proxy.close()
