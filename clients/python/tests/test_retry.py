"""An append retried after a lost response is stored once (its event_id is assigned before the first try)."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import pytest

from engram_memory import EngramClient, EngramClientSync
from engram_server import EngramServer

HTTP2_HEADERS = 0x1


def hang_up(sock: socket.socket) -> None:
    """Closes a socket another thread may be blocked on: shutdown sends the
    FIN at once (close alone waits for that thread's recv to return)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


class LossyProxy:
    """Relays TCP on 127.0.0.1 to a real server, but cuts the first connection
    when the server starts its first HTTP/2 response (a HEADERS frame): the
    server handled the request, the client sees a broken connection."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.target = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.dropped = 0
        self.conns: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        first = True
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream, timeout=5)
            server.settimeout(None)
            self.conns += [client, server]
            # Client to server always passes; the first connection's answers are lost.
            back = self._lose if first else self._pipe
            for pump, src, dst in ((self._pipe, client, server), (back, server, client)):
                t = threading.Thread(target=pump, args=(src, dst), daemon=True)
                t.start()
                self.threads.append(t)
            first = False

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            hang_up(dst)

    def _lose(self, server: socket.socket, client: socket.socket) -> None:
        def read(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                chunk = server.recv(n - len(buf))
                if not chunk:
                    raise OSError("closed")
                buf += chunk
            return buf

        try:
            for _ in range(1000):  # bounded: a unary call needs a handful of frames
                head = read(9)
                payload = read(int.from_bytes(head[:3], "big"))
                if head[3] == HTTP2_HEADERS:
                    self.dropped += 1
                    return
                client.sendall(head + payload)
        except OSError:
            pass
        finally:
            hang_up(client)
            hang_up(server)

    def close(self) -> None:
        self.listener.close()
        for c in self.conns:
            hang_up(c)
        for t in self.threads:
            t.join(timeout=5)


@pytest.fixture
def lossy(server: EngramServer) -> Iterator[LossyProxy]:
    proxy = LossyProxy(server.target)
    yield proxy
    proxy.close()


async def test_add_event_retried_after_a_lost_response_is_stored_once(
    lossy: LossyProxy, client: EngramClient, sid: str
) -> None:
    await client.create_session("app", "user", sid)
    async with EngramClient(lossy.target, timeout=10) as retrying:
        event = await retrying.add_event(sid, "user_message", "once")
    assert lossy.dropped == 1
    stored = (await client.get_session_events(sid)).events
    assert [(e.event_id, e.seq) for e in stored] == [(event.event_id, event.seq)]


async def test_add_events_retried_after_a_lost_response_is_stored_once(
    lossy: LossyProxy, client: EngramClient, sid: str
) -> None:
    await client.create_session("app", "user", sid)
    async with EngramClient(lossy.target, timeout=10) as retrying:
        events = await retrying.add_events(sid, [{"event_type": "a"}, {"event_type": "b"}])
    assert lossy.dropped == 1
    stored = (await client.get_session_events(sid)).events
    assert [(e.event_id, e.seq) for e in stored] == [(e.event_id, e.seq) for e in events]


async def test_sync_add_event_retried_after_a_lost_response_is_stored_once(
    lossy: LossyProxy, client: EngramClient, sid: str
) -> None:
    await client.create_session("app", "user", sid)
    retrying = EngramClientSync(lossy.target, timeout=10)
    try:
        event = retrying.add_event(sid, "user_message", "once")
    finally:
        retrying.close()
    assert lossy.dropped == 1
    stored = (await client.get_session_events(sid)).events
    assert [(e.event_id, e.seq) for e in stored] == [(event.event_id, event.seq)]


async def test_write_memories_retried_after_a_lost_response_is_stored_once(
    lossy: LossyProxy, client: EngramClient
) -> None:
    app = f"retry-{uuid.uuid4().hex[:12]}"
    async with EngramClient(lossy.target, timeout=10) as retrying:
        # No memory_id given: the client assigns it before the first try, and the retry carries it.
        written = await retrying.write_memories([{"app_name": app, "text": "stored once"}])
    assert lossy.dropped == 1
    stored = [m async for m in client.list_memories(app)]
    assert [(m.memory_id, m.text) for m in stored] == [(written.memories[0].memory_id, "stored once")]


def test_sync_write_memory_retried_after_a_lost_response_is_stored_once(lossy: LossyProxy) -> None:
    app = f"retry-{uuid.uuid4().hex[:12]}"
    with EngramClientSync(lossy.target, timeout=10) as retrying:
        memory = retrying.write_memory(app, "stored once", user_id="u")
        assert lossy.dropped == 1
        stored = list(retrying.list_memories(app))
    assert [(m.memory_id, m.text) for m in stored] == [(memory.memory_id, "stored once")]


async def test_a_memory_search_whose_response_is_lost_is_retried_by_the_channel(
    lossy: LossyProxy, client: EngramClient
) -> None:
    app = f"retry-{uuid.uuid4().hex[:12]}"
    await client.write_memory(app, "found after a retry", memory_id="found")
    async with EngramClient(lossy.target, timeout=10, retries=0) as reading:
        # retries=0: no client-side retry, so only the channel's retry policy for reads can answer.
        results = await reading.search_memories(app, "retry")
    assert lossy.dropped == 1
    assert [r.memory.memory_id for r in results] == ["found"]
