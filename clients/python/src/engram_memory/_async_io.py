"""The I/O of the async clients (grpc.aio, asyncio): all they do differently from the sync ones.

client.py and memory.py are written against these names only. The sync clients
(engram_memory._gen.sync) are generated from them by scripts/generate_sync.py
(unasync), which swaps this module for :mod:`engram_memory._sync_io`: the same
names over blocking grpc and :func:`time.sleep`.
"""
from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, TypeAlias

import grpc
import grpc.aio

__all__ = ["Channel", "UnaryMethod", "channel_ready", "close_channel", "open_channel", "sleep"]

#: The channel the clients call through.
Channel: TypeAlias = grpc.aio.Channel
#: A unary method of the generated stub on that channel (generic in request and response).
UnaryMethod: TypeAlias = grpc.aio.UnaryUnaryMultiCallable


def open_channel(
    target: str, credentials: grpc.ChannelCredentials | None, options: Sequence[tuple[str, Any]]
) -> Channel:
    """A channel to ``target``: TLS with ``credentials``, else plaintext (h2c).

    A grpc.aio channel belongs to the event loop it is made in, so the client
    opens it on its first call rather than in its constructor.
    """
    if credentials is not None:
        return grpc.aio.secure_channel(target, credentials, options=options)
    return grpc.aio.insecure_channel(target, options=options)


async def close_channel(channel: Channel) -> None:
    """Closes ``channel``, cancelling the calls still on it."""
    await channel.close(None)


async def channel_ready(channel: Channel, timeout: float) -> bool:
    """Whether ``channel`` connects within ``timeout`` seconds."""
    try:
        await asyncio.wait_for(channel.channel_ready(), timeout)
    except asyncio.TimeoutError:  # TimeoutError itself only from Python 3.11 on
        return False
    return True


async def sleep(seconds: float) -> None:
    """Waits between retries without blocking the event loop."""
    await asyncio.sleep(seconds)
