"""Starts and stops real Engram servers (the repository's TypeScript server) for the tests."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
TSX = REPO_ROOT / "node_modules" / ".bin" / "tsx"
START_TIMEOUT = 60.0


class EngramServer:
    """One `tsx src/main.ts` process on 127.0.0.1 (port 0: a free port)."""

    def __init__(self, env: dict[str, str] | None = None, port: int = 0) -> None:
        self.env = {"MEMORY_STREAM_HEARTBEAT_MS": "200", "ENGRAM_PY_CLIENT_TEST": "1", **(env or {})}
        self.requested_port = port
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> EngramServer:
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(
            [str(TSX), "src/main.ts", "--host", "127.0.0.1", "--port", str(self.requested_port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        ready = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log.append(line.rstrip("\n"))
                if not ready.is_set():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("msg") == "listening" and rec.get("port"):
                        self.port = int(rec["port"])
                        ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(START_TIMEOUT) or not self.port:
            self.stop()
            raise RuntimeError("engram server did not start:\n" + "\n".join(self.log[-30:]))
        # Listening is not yet serving under load: wait for a channel to connect.
        import grpc

        with grpc.insecure_channel(self.target) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=START_TIMEOUT)
            except grpc.FutureTimeoutError:
                self.stop()
                raise RuntimeError("engram server is not reachable:\n" + "\n".join(self.log[-30:])) from None
        return self

    def stop(self, graceful: bool = True, timeout: float = 15.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM if graceful else signal.SIGKILL)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


class TcpProxy:
    """A TCP relay on 127.0.0.1 whose connections the tests can break or re-point."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.accepting = True
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            if not self.accepting:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=2)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            with self._lock:
                self._conns += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def break_all(self) -> None:
        """Tears down every relayed connection (both sides see a reset/EOF)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._stop.set()
        self.break_all()
        self._thread.join(2)
        self.sock.close()


def wait_until(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
