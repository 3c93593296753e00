/**
 * Long-term memories on PostgreSQL at scale: seeds N memories into one app
 * of a throwaway PostgreSQL (1000 users, 10% app-wide, texts of 12 words
 * drawn from a 5000-word vocabulary with a skew, a 384-dimension embedding
 * each, 1% pinned), then times the driver's searchMemories, listMemories and
 * nearestMemories for one user's VISIBLE scope, one call at a time, then
 * Recall (4k budget, a session of 30 events; lexical, and hybrid with a
 * client query vector when seeded with embeddings) through the service in
 * this process at c=1 and c=16, with this process's and PostgreSQL's CPU per
 * call (no RPC transport: the server's share of a Recall over the wire is
 * this plus its protocol), and prints the plans. Not a timed test: figures
 * for the README. `no-embeddings` seeds no vectors (1M embedded rows take
 * ~1.5 GB).
 *
 *   node --import tsx bench/memories-postgres-scale.ts [memories=100000] [calls=200] [no-embeddings]
 */
import { performance } from "node:perf_hooks";
import pg from "pg";
import { create } from "@bufbuild/protobuf";
import { AddEventsRequestSchema, CreateSessionRequestSchema, RecallRequestSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { closedLoop } from "./lib/closed-loop.js";
import { findPid } from "./lib/processes.js";
import { DEFAULT_SERVICE_LIMITS } from "../src/service/limits.js";
import { MemoryService } from "../src/service/memory-service.js";
import { PostgresStore } from "../src/store/postgres.js";
import type { MemoryFilter } from "../src/store/types.js";
import { startPostgresServer } from "../test/support/postgres-server.js";

const total = Number(process.argv[2] ?? 100_000);
const calls = Number(process.argv[3] ?? 200);
const embedded = process.argv[4] !== "no-embeddings";
const DIMENSIONS = 384;

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function time(name: string, fn: (i: number) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < 10; i++) await fn(i); // warm the plans and the cache
  const ms: number[] = [];
  for (let i = 0; i < calls; i++) {
    const start = performance.now();
    await fn(i);
    ms.push(performance.now() - start);
  }
  ms.sort((a, b) => a - b);
  console.log(`${name.padEnd(44)} p50 ${percentile(ms, 50).toFixed(2)} ms  p99 ${percentile(ms, 99).toFixed(2)} ms`);
}

const server = await startPostgresServer();
const schema = "bench";
const store = await PostgresStore.open({ url: server.url, schema, limits: { maxSessions: 0, maxSessionEvents: 0 } });
const admin = new pg.Client({ connectionString: server.url });
await admin.connect();
try {
  const embeddings = Array.from({ length: 100 }, () => {
    const bytes = Buffer.alloc(DIMENSIONS * 4);
    for (let d = 0; d < DIMENSIONS; d++) bytes.writeFloatLE(Math.random() * 2 - 1, d * 4);
    return bytes;
  });
  const seedStart = performance.now();
  await admin.query(`SET search_path TO ${schema}`);
  await admin.query("SELECT setseed(0.42)");
  await admin.query(
    `INSERT INTO memories (app_name, memory_id, user_id, scope_key, text, topics, importance, pinned, created_ms, valid_from_ms, embedding, fingerprint)
     SELECT 'app', 'm' || n, u, CASE WHEN u IS NULL THEN '[null,null,null]' ELSE '["' || u || '",null,null]' END,
            (SELECT string_agg('word' || floor(5000 * random() ^ 3)::int, ' ') FROM generate_series(1, 12) g WHERE g > n * 0),
            ARRAY['topic' || (n % 20)], random(), n % 97 = 0, 1700000000000 + n, 1700000000000 + n, CASE WHEN $3 THEN ($1::bytea[])[1 + n % 100] END, 'f' || n
     FROM (SELECT n, CASE WHEN n % 10 = 0 THEN NULL ELSE 'user' || (n % 1000) END AS u FROM generate_series(1, $2::int) n) s`,
    [embeddings, total, embedded],
  );
  await admin.query("ANALYZE memories");
  console.log(`seeded ${total} memories${embedded ? "" : " without embeddings"} in ${((performance.now() - seedStart) / 1000).toFixed(1)} s`);

  const user: MemoryFilter = { scope: { appName: "app", userId: "user7", match: "visible" }, asOf: Date.now() };
  const query = (i: number) => `word${i % 50} word${100 + (i % 400)} word${1000 + i}`;
  const memories = store.memories;
  await time("searchMemories, user VISIBLE, top 50", (i) => memories.searchMemories(user, query(i), 50));
  await time("searchMemories, user VISIBLE, rare words, top 50", (i) => memories.searchMemories(user, `word${3000 + i} word${4000 + i}`, 50));
  await time("listMemories, user VISIBLE, 100", () => memories.listMemories(user, 100));
  await time("listMemories, user VISIBLE, pinned, 100 (Recall's core)", () => memories.listMemories({ ...user, pinned: true }, 100));
  await time("listMemories, user WITHIN, topic, 100", () => memories.listMemories({ ...user, scope: { ...user.scope, match: "within" }, topics: ["topic3"] }, 100));
  const probe = Array.from({ length: DIMENSIONS }, () => Math.random() * 2 - 1);
  await time(`nearestMemories, user VISIBLE (<= 2000 compared)`, () => memories.nearestMemories(user, probe, 50));
  // The store keeps decoded embeddings between calls: a fresh store shows a first search's cost, every embedding read from PostgreSQL.
  const cold: number[] = [];
  for (let i = 0; i < Math.min(calls, 20); i++) {
    const fresh = await PostgresStore.open({ url: server.url, schema, limits: { maxSessions: 0, maxSessionEvents: 0 } });
    await fresh.memories.listMemories(user, 1); // a warm connection: only the vectors are cold
    const start = performance.now();
    await fresh.memories.nearestMemories(user, probe, 50);
    cold.push(performance.now() - start);
    await fresh.close();
  }
  cold.sort((a, b) => a - b);
  console.log(`${"nearestMemories, user VISIBLE, cold cache".padEnd(44)} p50 ${percentile(cold, 50).toFixed(2)} ms  max ${cold[cold.length - 1].toFixed(2)} ms`);
  const app: MemoryFilter = { scope: { appName: "app", match: "within" }, asOf: Date.now() };
  await time("searchMemories, whole app WITHIN, top 50", (i) => memories.searchMemories(app, query(i), 50));
  await time("nearestMemories, whole app (2000 of them)", () => memories.nearestMemories(app, probe, 50));

  // Recall as a session of user7 asks it, through the service: its reads, ranking, packing and context.
  const service = new MemoryService(store, { limits: DEFAULT_SERVICE_LIMITS, contextLimit: 50, heartbeatMs: 1000 });
  await service.createSession(create(CreateSessionRequestSchema, { appName: "app", userId: "user7", sessionId: "recall-session" }));
  await service.addEvents(
    create(AddEventsRequestSchema, {
      sessionId: "recall-session",
      events: Array.from({ length: 30 }, (_, i) => ({
        eventType: i % 2 ? "agent_response" : "user_message",
        content: { kind: { case: "stringValue" as const, value: `message ${i} about word${i} and word${i * 7}` } },
      })),
    }),
  );
  const postmaster = findPid("postgres", "-p", String(server.port));
  // Hybrid: the client sends the query's vector, so the store ranks its NEAREST_CANDIDATES by cosine too.
  const recalls: Array<[kind: string, queryEmbedding: number[]]> = embedded ? [["lexical", []], ["hybrid", probe]] : [["lexical", []]];
  for (const [kind, queryEmbedding] of recalls) for (const concurrency of [1, 16]) {
    const result = await closedLoop({ concurrency, durationMs: 10_000, warmupMs: 2_000, cpuPids: postmaster ? { postgres: [postmaster] } : {} }, (worker, i) =>
      service.recall(create(RecallRequestSchema, { sessionId: "recall-session", query: query(worker * 1000 + i), tokenBudget: 4000, queryEmbedding })).then(() => undefined),
    );
    console.log(
      `Recall 4k ${kind} through the service, c=${concurrency}: ${result.throughput.toFixed(1)}/s p50 ${(result.p50Us / 1000).toFixed(1)} ms p99 ${(result.p99Us / 1000).toFixed(1)} ms, ` +
        `CPU per call: service ${((result.cpuUsPerCall.client ?? NaN) / 1000).toFixed(2)} ms, PostgreSQL ${((result.cpuUsPerCall.postgres ?? NaN) / 1000).toFixed(2)} ms` +
        (result.errors ? ` (${result.errors} errors: ${result.firstError})` : ""),
    );
  }

  for (const [name, sql, params] of [
    [
      "search, user VISIBLE",
      `EXPLAIN (ANALYZE, COSTS OFF) SELECT memory_id, ts_rank_cd(search, q, 1) AS score FROM memories, to_tsquery('english', 'word3 | word120 | word1007') q
       WHERE search @@ q AND app_name = 'app' AND (user_id IS NULL OR user_id = 'user7') AND agent_id IS NULL AND session_id IS NULL
       ORDER BY score DESC LIMIT 50`,
      [],
    ],
    [
      "list, user VISIBLE",
      `EXPLAIN (ANALYZE, COSTS OFF) SELECT * FROM (
         (SELECT memory_id, created_ms FROM memories WHERE app_name = 'app' AND user_id = 'user7' AND agent_id IS NULL AND session_id IS NULL ORDER BY created_ms DESC, memory_id DESC LIMIT 100)
         UNION ALL
         (SELECT memory_id, created_ms FROM memories WHERE app_name = 'app' AND user_id IS NULL AND agent_id IS NULL AND session_id IS NULL ORDER BY created_ms DESC, memory_id DESC LIMIT 100)
       ) both_halves ORDER BY created_ms DESC, memory_id DESC LIMIT 100`,
      [],
    ],
    [
      "list, user VISIBLE, pinned",
      `EXPLAIN (ANALYZE, COSTS OFF) SELECT * FROM (
         (SELECT memory_id, created_ms FROM memories WHERE app_name = 'app' AND user_id = 'user7' AND agent_id IS NULL AND session_id IS NULL AND pinned = true ORDER BY created_ms DESC, memory_id DESC LIMIT 100)
         UNION ALL
         (SELECT memory_id, created_ms FROM memories WHERE app_name = 'app' AND user_id IS NULL AND agent_id IS NULL AND session_id IS NULL AND pinned = true ORDER BY created_ms DESC, memory_id DESC LIMIT 100)
       ) both_halves ORDER BY created_ms DESC, memory_id DESC LIMIT 100`,
      [],
    ],
  ] as const) {
    const { rows } = await admin.query(sql, [...params]);
    console.log(`\n${name}:\n${rows.map((r) => r["QUERY PLAN"]).join("\n")}`);
  }
} finally {
  await admin.end();
  await store.close();
  await server.stop();
}
