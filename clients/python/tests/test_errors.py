"""Errors carry the server's google.rpc details, read from grpc-status-details-bin
(never parsed out of the message): the field at fault, the reason with its
metadata, and the retry delay; on the async and the sync client alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from test_auth import create_key

from engram_memory import (
    EngramClient,
    EngramClientSync,
    FailedPreconditionError,
    FieldViolation,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from engram_server import EngramServer


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EngramServer, str]]:
    """A server whose one key may make 1 call per second."""
    key_file: Path = tmp_path_factory.mktemp("keys") / "keys.json"
    key = create_key(key_file, "--app", "py-app", "--role", "read", "--rate-limit", "1")
    srv = EngramServer(
        {"MEMORY_AUTH": "true", "MEMORY_AUTH_KEYS_FILE": str(key_file), "MEMORY_AUTH_CACHE_MS": "0"}
    ).start()
    yield srv, key
    srv.stop()


async def test_a_bad_field_names_it_in_field_violations(client: EngramClient) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        await client.add_events(
            "s", [{"event_type": "user_message"}, {"event_type": "user_message", "event_id": "has space"}]
        )
    err = info.value
    assert err.field == "events[1].event_id"
    assert err.field_violations == [
        FieldViolation(
            "events[1].event_id", "must be 1-128 printable ASCII characters without spaces (pattern ^[!-~]{1,128}$)"
        )
    ]


async def test_an_expected_seq_conflict_has_reason_and_current_seq_in_metadata(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "user", sid)
    await client.add_event(sid, "user_message", "a", expected_seq=0)
    with pytest.raises(FailedPreconditionError) as info:
        await client.add_event(sid, "user_message", "b", expected_seq=0)
    err = info.value
    assert err.reason == "SEQ_CONFLICT"
    assert err.metadata == {"current_seq": "1", "expected_seq": "0"}
    assert err.current_seq == 1


async def test_an_unknown_session_has_reason_session_not_found(client: EngramClient, sid: str) -> None:
    with pytest.raises(NotFoundError) as info:
        await client.get_session("missing-" + sid)
    assert info.value.reason == "SESSION_NOT_FOUND" and info.value.field == "session_id"


async def test_a_rate_limit_has_a_retry_delay(limited_server: tuple[EngramServer, str]) -> None:
    srv, key = limited_server
    async with EngramClient(srv.target, api_key=key, timeout=10) as client:
        refused: list[ResourceExhaustedError] = []
        for _ in range(3):
            try:
                await client.get_stats()
            except ResourceExhaustedError as err:
                refused.append(err)
        assert refused
        for refusal in refused:
            assert refusal.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert refusal.reason == "RATE_LIMITED"
            assert refusal.retry_delay is not None and 0 < refusal.retry_delay <= 1.0


def test_the_sync_client_reads_the_same_details(
    server: EngramServer, limited_server: tuple[EngramServer, str], sid: str
) -> None:
    with EngramClientSync(server.target, timeout=10) as client:
        client.create_session("app", "user", sid)
        client.add_event(sid, "user_message", "a", expected_seq=0)
        with pytest.raises(FailedPreconditionError) as conflict:
            client.add_event(sid, "user_message", "b", expected_seq=0)
        assert conflict.value.reason == "SEQ_CONFLICT" and conflict.value.metadata["current_seq"] == "1"
        with pytest.raises(InvalidArgumentError) as bad:
            client.create_session("app", "user", "has space")
        assert bad.value.field == "session_id"
    srv, key = limited_server
    with EngramClientSync(srv.target, api_key=key, timeout=10) as limited:
        refused: list[ResourceExhaustedError] = []
        for _ in range(3):
            try:
                limited.get_stats()
            except ResourceExhaustedError as err:
                refused.append(err)
        assert refused and all(e.retry_delay is not None and e.retry_delay > 0 for e in refused)


async def test_a_value_of_the_wrong_type_raises_a_type_error_naming_its_field(client: EngramClient) -> None:
    with pytest.raises(TypeError, match=r"^session_id: expected str, got int 123$"):
        await client.get_session(123)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^session_id: expected str"):
        await client.create_session("app", "user", 7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^page_size: expected int, got str"):
        await client.list_sessions_page(page_size="10")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^memory_ids: expected an iterable of str"):
        await client.delete_memories("app", [1, 2])  # type: ignore[list-item]


async def test_a_set_is_refused_rather_than_stored_as_a_list(client: EngramClient, sid: str) -> None:
    await client.create_session("app", "user", sid)
    with pytest.raises(TypeError, match=r"^content: a set is not JSON"):
        await client.add_event(sid, "user_message", {"a", "b"})
    with pytest.raises(TypeError, match=r"^metadata: a frozenset is not JSON"):
        await client.add_event(sid, "user_message", "hi", metadata={"tags": frozenset({"x"})})
    with pytest.raises(TypeError, match=r"^state_delta: a set is not JSON"):
        await client.update_session(sid, state_delta={"k": {1}})
    assert (await client.add_event(sid, "user_message", ("a", "b"))).content == ["a", "b"]  # a tuple is a list
    assert [e.content async for e in client.iter_session_events(sid)] == [["a", "b"]]
