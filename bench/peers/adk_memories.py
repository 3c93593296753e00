"""Google ADK's InMemoryMemoryService (google-adk from PyPI) on Engram's
long-term memory evaluation set (bench/memories-eval/): the peer for recall@5
and search latency on the same questions.

ADK's memory is per (app, user) and made of session events, so each user's
session holds one event per memory that user may recall (their own and the
app's shared ones; app-wide questions ask as a user holding only the shared
ones), the memory's id as the event's author. ADK has no validity, no
supersession and no as-of: every version of a memory is there, so a question
whose gold names a superseded version (not_valid_ids) counts as missed when
that version is returned at all, as Engram's bench scores it. Scored exactly
as isHitAtK in bench/memories-eval/dataset.ts: every gold id in the first 5,
no not-valid id anywhere in the answer. Prints one JSON object.
"""

import asyncio
import glob
import json
import os
import statistics
import time

from google.adk.events import Event
from google.adk.memory import InMemoryMemoryService
from google.adk.sessions import Session
from google.genai import types

HERE = os.path.dirname(os.path.abspath(__file__))
EVAL = os.path.join(HERE, "..", "memories-eval")
SHARED_ASKER = "__app__"
K = 5


def load():
    conversations = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(EVAL, "conversations", "*.json")))]
    app_wide = json.load(open(os.path.join(EVAL, "app-wide-questions.json")))["questions"]
    return conversations, app_wide


def event(memory):
    return Event(author=memory["memory_id"], content=types.Content(role="user", parts=[types.Part(text=memory["text"])]))


async def main():
    conversations, app_wide = load()
    memories_by_app = {}
    users_by_app = {}
    for c in conversations:
        memories_by_app.setdefault(c["app_name"], []).extend(c["memories"])
        users_by_app.setdefault(c["app_name"], set()).update(c["user_ids"])
    service = InMemoryMemoryService()
    started = time.perf_counter()
    for app, memories in memories_by_app.items():
        for user in [*sorted(users_by_app[app]), SHARED_ASKER]:
            visible = [m for m in memories if m["scope"].get("user_id") in (None, user)]
            session = Session(id=f"{app}-{user}", app_name=app, user_id=user, events=[event(m) for m in visible])
            await service.add_session_to_memory(session)
    load_seconds = time.perf_counter() - started
    questions = [(c["app_name"], q) for c in conversations for q in c["questions"]] + [(q["app_name"], q) for q in app_wide]
    hits = {}
    latencies = []
    for app, q in questions:
        user = q["asker"].get("user_id") or SHARED_ASKER
        t = time.perf_counter()
        found = await service.search_memory(app_name=app, user_id=user, query=q["query"])
        latencies.append((time.perf_counter() - t) * 1e6)
        ranked = [m.author for m in found.memories]
        gold = q["gold"]
        top = set(ranked[:K])
        hit = all(i in top for i in gold["memory_ids"]) and not any(i in ranked for i in gold.get("not_valid_ids", []))
        for category in ("all", q["category"]):
            h, n = hits.get(category, (0, 0))
            hits[category] = (h + hit, n + 1)
    latencies.sort()
    print(json.dumps({
        "peer": "google-adk InMemoryMemoryService",
        "questions": len(questions),
        "recall_at_5": {c: round(h / n, 3) for c, (h, n) in sorted(hits.items())},
        "search_p50_us": round(statistics.median(latencies)),
        "search_p99_us": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]),
        "load_seconds": round(load_seconds, 2),
    }))


if __name__ == "__main__":
    asyncio.run(main())
