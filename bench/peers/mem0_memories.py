"""The mem0 library (mem0ai from PyPI) on Engram's long-term memory evaluation
set (bench/memories-eval/): a second peer for recall@5 and search latency on
the same questions, next to Google ADK's InMemoryMemoryService
(adk_memories.py, whose scoping and scoring this mirrors).

mem0 runs in-process, offline: `Memory.from_config` with its default vector
store, Qdrant, in qdrant-client's local mode (a temporary directory, vectors in
memory), its history in SQLite in that directory, telemetry off, and as its
embedder the OpenAI-compatible endpoint given by --embeddings-url: the test
embedding server (test/support/embeddings-server.py, all-MiniLM-L6-v2), the
model Engram's hybrid run uses. Memories are added with `infer=False`: mem0
stores each text as Engram gets it, with no LLM extraction and so no LLM
deciding what to update or delete. mem0 still builds an LLM client from its
config, so the config names an OpenAI-compatible base URL on 127.0.0.1 where
nothing listens and a dummy key; every LLM entry point is also wrapped to
count calls, and the run fails if there was one.

Scopes, as the ADK peer's: mem0 scopes a memory by user_id, agent_id and
run_id and a search matches the ids it is given; it has no "unset means
shared" dimension and a search must name an id, so each user (`<app>/<user>`
as mem0's user_id, the app being part of the id since mem0 has no app) holds
the memories that user may recall: their own and a copy of each of the app's
shared ones; app-wide questions ask as a pseudo-user `<app>/__app__` holding
only the shared ones. A memory's Engram agent_id (7 of 820 have one) becomes
mem0's agent_id; searches filter by user_id only, as ADK's do. No memory of
the set is scoped to a session (mem0's run_id stays unused). mem0 keeps no
validity: every version of a memory is there, so a question whose gold names
a superseded version (not_valid_ids) is missed when that version is in the
answer, as Engram's bench scores it. Each question is one `search(query,
top_k=5, filters={"user_id": ...})` (mem0's default threshold 0.1); its
latency includes embedding the query over HTTP. Scored exactly as isHitAtK in
bench/memories-eval/dataset.ts: every gold id in the first 5, no not-valid id
anywhere in the answer. Prints one JSON object.
"""

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EVAL = os.path.join(HERE, "..", "memories-eval")
SHARED_ASKER = "__app__"
K = 5
# Nothing listens on the discard port: an LLM call would fail, never leave the box.
NO_LLM_URL = "http://127.0.0.1:9/v1"


def load():
    conversations = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(EVAL, "conversations", "*.json")))]
    app_wide = json.load(open(os.path.join(EVAL, "app-wide-questions.json")))["questions"]
    return conversations, app_wide


def make_memory(workdir, embeddings_url, model, dims):
    # mem0 reads these when imported: no telemetry (it posts to PostHog), its files in workdir.
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = workdir
    from mem0 import Memory

    memory = Memory.from_config({
        "vector_store": {"provider": "qdrant", "config": {
            "collection_name": "engram_eval", "embedding_model_dims": dims, "path": os.path.join(workdir, "qdrant"), "on_disk": False,
        }},
        "embedder": {"provider": "openai", "config": {"model": model, "api_key": "unused", "openai_base_url": embeddings_url}},
        "llm": {"provider": "openai", "config": {"model": "none", "api_key": "unused", "openai_base_url": NO_LLM_URL}},
        "history_db_path": os.path.join(workdir, "history.db"),
    })
    return memory


def count_llm_calls(memory):
    """Wraps the LLM's entry point: the run reports how many calls mem0 made (it must be 0)."""
    calls = {"n": 0}
    original = memory.llm.generate_response

    def counted(*args, **kwargs):
        calls["n"] += 1
        return original(*args, **kwargs)

    memory.llm.generate_response = counted
    return calls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--embeddings-url", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:<port>/v1")
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--dims", type=int, default=384)
    args = parser.parse_args()

    conversations, app_wide = load()
    memories_by_app = {}
    users_by_app = {}
    for c in conversations:
        memories_by_app.setdefault(c["app_name"], []).extend(c["memories"])
        users_by_app.setdefault(c["app_name"], set()).update(c["user_ids"])

    with tempfile.TemporaryDirectory(prefix="mem0-peer-") as workdir:
        memory = make_memory(workdir, args.embeddings_url, args.model, args.dims)
        llm_calls = count_llm_calls(memory)
        started = time.perf_counter()
        added = 0
        for app, memories in memories_by_app.items():
            for user in [*sorted(users_by_app[app]), SHARED_ASKER]:
                visible = [m for m in memories if m["scope"].get("user_id") in (None, user)]
                for m in sorted(visible, key=lambda m: m["valid_from"]):
                    agent = m["scope"].get("agent_id")
                    memory.add(
                        m["text"],
                        user_id=f"{app}/{user}",
                        agent_id=f"{app}/{agent}" if agent else None,
                        metadata={"engram_memory_id": m["memory_id"]},
                        infer=False,
                    )
                    added += 1
        load_seconds = time.perf_counter() - started

        questions = [(c["app_name"], q) for c in conversations for q in c["questions"]] + [(q["app_name"], q) for q in app_wide]
        hits = {}
        latencies = []
        for app, q in questions:
            user = q["asker"].get("user_id") or SHARED_ASKER
            t = time.perf_counter()
            found = memory.search(q["query"], top_k=K, filters={"user_id": f"{app}/{user}"})
            latencies.append((time.perf_counter() - t) * 1e6)
            ranked = [r["metadata"]["engram_memory_id"] for r in found["results"]]
            gold = q["gold"]
            top = set(ranked[:K])
            hit = all(i in top for i in gold["memory_ids"]) and not any(i in ranked for i in gold.get("not_valid_ids", []))
            for category in ("all", q["category"]):
                h, n = hits.get(category, (0, 0))
                hits[category] = (h + hit, n + 1)
        if llm_calls["n"]:
            sys.exit(f"mem0 made {llm_calls['n']} LLM calls with infer=False")

    import importlib.metadata as md

    latencies.sort()
    print(json.dumps({
        "peer": "mem0 Memory (infer=False, local Qdrant)",
        "versions": {p: md.version(p) for p in ("mem0ai", "qdrant-client", "openai")},
        "questions": len(questions),
        "memories_added": added,
        "llm_calls": llm_calls["n"],
        "recall_at_5": {c: round(h / n, 3) for c, (h, n) in sorted(hits.items())},
        "search_p50_us": round(statistics.median(latencies)),
        "search_p99_us": round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]),
        "load_seconds": round(load_seconds, 2),
    }))


if __name__ == "__main__":
    main()
