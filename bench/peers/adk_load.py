"""Drives Google ADK's DatabaseSessionService (google-adk from PyPI) on PostgreSQL.

The peer benchmark for Engram's append and read-recent workloads: one
asyncio process, `concurrency` tasks in a closed loop for a bounded time
after a warm-up. append: append_event of a 100-byte user message to the
task's own session. read-recent: get_session with num_recent_events=20 on
a session holding --read-events events. Prints one JSON object per point.
Only ever talks to the database URL it is given (127.0.0.1).
"""

import argparse
import asyncio
import json
import time
import uuid

from google.adk.events import Event
from google.adk.sessions import DatabaseSessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

CONTENT_100B = "The quick brown fox jumps over the lazy dog while the agent remembers every single word it heard. ok"
APP = "adkbench"
USER = "bench"


def user_event() -> Event:
    return Event(
        invocation_id=str(uuid.uuid4()),
        author="user",
        content=types.Content(role="user", parts=[types.Part(text=CONTENT_100B)]),
    )


def summarize(latencies: list[float]) -> tuple[float, float]:
    if not latencies:
        return float("nan"), float("nan")
    ordered = sorted(latencies)
    rank = lambda p: ordered[min(len(ordered) - 1, max(0, int(-(-p * len(ordered) // 1)) - 1))]
    return rank(0.5) * 1e6, rank(0.99) * 1e6


async def closed_loop(concurrency: int, duration: float, warmup: float, operation) -> dict:
    start = time.perf_counter()
    measure_from = start + warmup
    stop_at = measure_from + duration
    latencies: list[float] = []
    errors = 0
    first_error = None

    async def worker(index: int) -> None:
        nonlocal errors, first_error
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            try:
                await operation(index)
            except Exception as exc:  # counted and reported, never hidden
                errors += 1
                first_error = first_error or repr(exc)
                if errors > 1000:
                    raise
                continue
            t1 = time.perf_counter()
            if measure_from <= t1 <= stop_at:
                latencies.append(t1 - t0)

    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    p50, p99 = summarize(latencies)
    return {
        "calls": len(latencies),
        "errors": errors,
        "firstError": first_error,
        "throughput": round(len(latencies) / duration, 1),
        "p50Us": round(p50, 1),
        "p99Us": round(p99, 1),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db-url", required=True)
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--duration", type=float, default=2.5)
    parser.add_argument("--warmup", type=float, default=0.5)
    parser.add_argument("--read-events", type=int, default=1000)
    parser.add_argument("--pool-size", type=int, default=10)
    args = parser.parse_args()
    if "127.0.0.1" not in args.db_url and "localhost" not in args.db_url:
        raise SystemExit("refusing a database that is not on loopback")
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    # The same pool size as Engram's PostgreSQL store (10 connections).
    service = DatabaseSessionService(db_url=args.db_url, pool_size=args.pool_size, max_overflow=0)

    sessions = []
    for _ in range(max(concurrencies)):
        sessions.append(await service.create_session(app_name=APP, user_id=USER))
    read_session = await service.create_session(app_name=APP, user_id=USER)
    for _ in range(args.read_events):
        await service.append_event(read_session, user_event())

    async def append(index: int) -> None:
        await service.append_event(sessions[index], user_event())

    config = GetSessionConfig(num_recent_events=20)

    async def read_recent(_: int) -> None:
        session = await service.get_session(app_name=APP, user_id=USER, session_id=read_session.id, config=config)
        if session is None or len(session.events) != 20:
            raise RuntimeError(f"expected 20 events, got {None if session is None else len(session.events)}")

    for workload, operation in (("append", append), ("read-recent", read_recent)):
        for concurrency in concurrencies:
            result = await closed_loop(concurrency, args.duration, args.warmup, operation)
            print(json.dumps({"workload": workload, "concurrency": concurrency, **result}), flush=True)
    await service.close() if hasattr(service, "close") else None


if __name__ == "__main__":
    asyncio.run(main())
