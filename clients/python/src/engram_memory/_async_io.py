"""The I/O of the async clients (grpc.aio, asyncio): all they do differently from the sync ones.

client.py and memory.py are written against these names only. The sync clients
(engram_memory._gen.sync) are generated from them by scripts/generate_sync.py
(unasync), which swaps this module for :mod:`engram_memory._sync_io`: the same
names over blocking grpc and :func:`time.sleep`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

import grpc
import grpc.aio

__all__ = ["Channel", "Connections", "UnaryMethod", "channel_ready", "close_channel", "open_channel", "sleep"]

_Stub = TypeVar("_Stub")

#: The channel the clients call through.
Channel: TypeAlias = grpc.aio.Channel
#: A unary method of the generated stub on that channel (generic in request and response).
UnaryMethod: TypeAlias = grpc.aio.UnaryUnaryMultiCallable


def open_channel(
    target: str, credentials: grpc.ChannelCredentials | None, options: Sequence[tuple[str, Any]]
) -> Channel:
    """A channel to ``target``: TLS with ``credentials``, else plaintext (h2c).

    A grpc.aio channel belongs to the event loop it is made in: the clients
    open them through :class:`Connections`, one per running loop.
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


class Connections(Generic[_Stub]):
    """The channel and stub of the running event loop, opened on its first call in that loop.

    A grpc.aio channel only works in the loop it was made in, so one client
    used from two ``asyncio.run`` calls, or from threads each running its own
    loop, keeps one channel per loop. Channels of loops that have closed are
    dropped (their calls are gone with their loop); :meth:`close` closes the
    rest. A channel given by the caller is used in every loop and never closed.
    """

    def __init__(
        self, open_new: Callable[[], Channel], make_stub: Callable[[Channel], _Stub], channel: Channel | None
    ) -> None:
        self._open_new = open_new
        self._make_stub = make_stub
        self._given = None if channel is None else (channel, make_stub(channel))
        self._by_loop: dict[asyncio.AbstractEventLoop, tuple[Channel, _Stub]] = {}
        self._lock = threading.Lock()

    def current(self) -> tuple[Channel, _Stub]:
        """The channel and stub of the running loop."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        with self._lock:
            found = self._by_loop.get(loop)
            if found is None:
                for closed in [other for other in self._by_loop if other.is_closed()]:
                    del self._by_loop[closed]
                channel = self._open_new()
                found = self._by_loop[loop] = (channel, self._make_stub(channel))
            return found

    async def close(self) -> None:
        """Closes the channels this client opened: the running loop's now, those of other live loops in their loop."""
        with self._lock:
            opened, self._by_loop = self._by_loop, {}
        running = asyncio.get_running_loop()
        for loop, (channel, _) in opened.items():
            if loop is running:
                await close_channel(channel)
            elif not loop.is_closed():
                try:
                    asyncio.run_coroutine_threadsafe(close_channel(channel), loop)
                except RuntimeError:  # that loop closed meanwhile
                    pass
