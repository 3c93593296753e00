from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from engram_memory import EngramClient, EngramMemory, StreamRetry
from engram_server import EngramServer

#: Quick reconnects so resume tests stay short.
FAST_CHANNEL = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 300),
]
FAST_RETRY = StreamRetry(max_attempts=40, initial_backoff=0.05, max_backoff=0.3)


@pytest.fixture(scope="session")
def server() -> Iterator[EngramServer]:
    srv = EngramServer().start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def small_server() -> Iterator[EngramServer]:
    """Keeps only 5 events per session (OUT_OF_RANGE for evicted cursors)."""
    srv = EngramServer({"MEMORY_MAX_SESSION_EVENTS": "5"}).start()
    yield srv
    srv.stop()


@pytest.fixture
async def client(server: EngramServer) -> AsyncIterator[EngramClient]:
    async with EngramClient(server.target, timeout=10, options=FAST_CHANNEL, stream_retry=FAST_RETRY) as c:
        yield c


@pytest.fixture
async def memory(server: EngramServer) -> AsyncIterator[EngramMemory]:
    async with EngramMemory(server.target, timeout=10) as m:
        yield m


@pytest.fixture
def sid() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"
