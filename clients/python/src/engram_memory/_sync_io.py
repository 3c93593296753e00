"""The I/O of the sync clients (blocking grpc, time.sleep): the same names as :mod:`engram_memory._async_io`.

The generated sync clients (engram_memory._gen.sync) call these where the async
ones await theirs; everything else is one source (client.py, memory.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

import grpc

__all__ = ["Channel", "Connections", "UnaryMethod", "channel_ready", "close_channel", "open_channel", "sleep"]

_Stub = TypeVar("_Stub")

#: The channel the clients call through.
Channel: TypeAlias = grpc.Channel
#: A unary method of the generated stub on that channel (generic in request and response).
UnaryMethod: TypeAlias = grpc.UnaryUnaryMultiCallable


def open_channel(
    target: str, credentials: grpc.ChannelCredentials | None, options: Sequence[tuple[str, Any]]
) -> Channel:
    """A channel to ``target``: TLS with ``credentials``, else plaintext (h2c)."""
    if credentials is not None:
        return grpc.secure_channel(target, credentials, options=options)
    return grpc.insecure_channel(target, options=options)


def close_channel(channel: Channel) -> None:
    """Closes ``channel``, cancelling the calls still on it."""
    channel.close()


def channel_ready(channel: Channel, timeout: float) -> bool:
    """Whether ``channel`` connects within ``timeout`` seconds."""
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        return False
    return True


#: Waits between retries.
sleep = time.sleep


class Connections(Generic[_Stub]):
    """The one channel and stub of a sync client, opened on its first call.

    A blocking grpc channel may be shared by any number of threads, so every
    thread calls through the same one. A channel given by the caller is never closed.
    """

    def __init__(
        self, open_new: Callable[[], Channel], make_stub: Callable[[Channel], _Stub], channel: Channel | None
    ) -> None:
        self._open_new = open_new
        self._make_stub = make_stub
        self._owned = channel is None
        self._opened = None if channel is None else (channel, make_stub(channel))
        self._lock = threading.Lock()

    def current(self) -> tuple[Channel, _Stub]:
        """The channel and stub (opened now when needed)."""
        opened = self._opened
        if opened is not None:
            return opened
        with self._lock:
            if self._opened is None:
                channel = self._open_new()
                self._opened = (channel, self._make_stub(channel))
            return self._opened

    def close(self) -> None:
        """Closes the channel when this client opened it (a later call opens a new one)."""
        if not self._owned:
            return
        with self._lock:
            opened, self._opened = self._opened, None
        if opened is not None:
            close_channel(opened[0])
