"""The I/O of the sync clients (blocking grpc, time.sleep): the same names as :mod:`engram_memory._async_io`.

The generated sync clients (engram_memory._gen.sync) call these where the async
ones await theirs; everything else is one source (client.py, memory.py).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, TypeAlias

import grpc

__all__ = ["Channel", "UnaryMethod", "channel_ready", "close_channel", "open_channel", "sleep"]

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
