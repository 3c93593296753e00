"""api_key against a real server with MEMORY_AUTH=true: calls and streams carry
it; no key is UnauthenticatedError, a key's missing role or app PermissionDeniedError."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from engram_memory import (
    EngramClient,
    EngramClientSync,
    EngramMemory,
    MemoryEvent,
    PermissionDeniedError,
    UnauthenticatedError,
)
from engram_server import REPO_ROOT, TSX, EngramServer


def create_key(key_file: Path, *args: str) -> str:
    """Makes a key with the repository's `engram keys` CLI."""
    out = subprocess.run(
        [str(TSX), "src/cli/main.ts", "keys", "create", "--json", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "MEMORY_TYPE": "local", "MEMORY_AUTH_KEYS_FILE": str(key_file)},
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return str(json.loads(out.stdout)["key"])


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EngramServer, str, str]]:
    key_file = tmp_path_factory.mktemp("keys") / "keys.json"
    writer = create_key(key_file, "--app", "py-app", "--role", "write")
    reader = create_key(key_file, "--app", "py-app", "--role", "read")
    srv = EngramServer(
        {"MEMORY_AUTH": "true", "MEMORY_AUTH_KEYS_FILE": str(key_file), "MEMORY_AUTH_CACHE_MS": "0"}
    ).start()
    yield srv, writer, reader
    srv.stop()


async def test_async_client_and_memory_carry_the_key(auth_server: tuple[EngramServer, str, str]) -> None:
    srv, writer, reader = auth_server
    async with EngramClient(srv.target, timeout=10) as anonymous:
        with pytest.raises(UnauthenticatedError):
            await anonymous.get_stats()
    async with EngramMemory(srv.target, api_key=writer, timeout=10) as memory:
        sid = await memory.create_session("py-app", "alice")
        assert await memory.add_event(sid, "user_message", "hi")
        with pytest.raises(PermissionDeniedError):
            await memory.create_session("other-app", "alice")
    async with EngramClient(srv.target, api_key=reader, timeout=10) as client:
        with pytest.raises(PermissionDeniedError):
            await client.append(sid, MemoryEvent.create("user_message", "no"))
        stream = client.stream_session_events(sid, 0)
        first = await stream.__anext__()
        await stream.aclose()
        assert first.content == "hi"


def test_sync_client_carries_the_key(auth_server: tuple[EngramServer, str, str]) -> None:
    srv, _writer, reader = auth_server
    with EngramClientSync(srv.target, timeout=10) as anonymous, pytest.raises(UnauthenticatedError):
        anonymous.get_stats()
    with EngramClientSync(srv.target, api_key=reader, timeout=10) as client:
        assert client.get_stats().backend == "local"
