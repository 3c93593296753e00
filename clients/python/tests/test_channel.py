"""The channel plumbing of both clients: readiness, closing, borrowed channels.

The sync client is generated from the async one, but its I/O (_sync_io) is
its own, so every case runs on both.
"""

from __future__ import annotations

import socket

import grpc
import grpc.aio
import pytest

from engram_memory import EngramClient, EngramClientSync, EngramError
from engram_server import EngramServer


@pytest.fixture
def dead_target() -> str:
    """A 127.0.0.1 port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def test_wait_for_ready_returns_once_connected_and_raises_unavailable_naming_the_target(
    server: EngramServer, dead_target: str
) -> None:
    async with EngramClient(server.target) as up:
        await up.wait_for_ready(10)
    async with EngramClient(dead_target) as down:
        with pytest.raises(EngramError) as err:
            await down.wait_for_ready(0.5)
    assert err.value.code == grpc.StatusCode.UNAVAILABLE and dead_target in err.value.message


def test_sync_wait_for_ready_returns_once_connected_and_raises_unavailable_naming_the_target(
    server: EngramServer, dead_target: str
) -> None:
    with EngramClientSync(server.target) as up:
        up.wait_for_ready(10)
    with EngramClientSync(dead_target) as down, pytest.raises(EngramError) as err:
        down.wait_for_ready(0.5)
    assert err.value.code == grpc.StatusCode.UNAVAILABLE and dead_target in err.value.message


async def test_close_leaves_a_borrowed_channel_open_and_in_use(server: EngramServer, dead_target: str) -> None:
    async with grpc.aio.insecure_channel(server.target) as channel:
        # The target names a dead port: only the borrowed channel can answer.
        client = EngramClient(dead_target, channel=channel, timeout=10)
        await client.get_stats()
        await client.close()
        await client.get_stats()
        await EngramClient(dead_target, channel=channel, timeout=10).get_stats()


def test_sync_close_leaves_a_borrowed_channel_open_and_in_use(server: EngramServer, dead_target: str) -> None:
    with grpc.insecure_channel(server.target) as channel:
        client = EngramClientSync(dead_target, channel=channel, timeout=10)
        client.get_stats()
        client.close()
        client.get_stats()
        EngramClientSync(dead_target, channel=channel, timeout=10).get_stats()


async def test_a_call_after_close_opens_a_new_channel(server: EngramServer) -> None:
    client = EngramClient(server.target, timeout=10)
    await client.get_stats()
    await client.close()
    await client.get_stats()
    await client.close()


def test_sync_call_after_close_opens_a_new_channel(server: EngramServer) -> None:
    client = EngramClientSync(server.target, timeout=10)
    client.get_stats()
    client.close()
    client.get_stats()
    client.close()
