/**
 * Long-term memories at scale, on PostgreSQL or the local (in-process) store:
 * seeds N memories into one app (1000 users, 10% app-wide, texts of 12 words
 * drawn from a 5000-word vocabulary with a skew, a 384-dimension embedding
 * each, 1% pinned; the same memories on either store, from one seeded
 * generator), then times the driver's searchMemories, listMemories and
 * nearestMemories for one user's VISIBLE scope, one call at a time, then
 * Recall (4k budget, a session of 30 events; lexical, and hybrid with a
 * client query vector when seeded with embeddings) through the service in
 * this process at c=1 and c=16, with this process's CPU per call (and
 * PostgreSQL's, on PostgreSQL; no RPC transport: the server's share of a
 * Recall over the wire is this plus its protocol). On PostgreSQL it also
 * times a cold vector search and prints the plans. Not a timed test: figures
 * for bench/README.md. `no-embeddings` seeds no vectors (1M embedded rows
 * take ~1.5 GB in PostgreSQL; 1M embedded memories took 4.4 GB of heap in the
 * local store: give node `--max-old-space-size`).
 *
 *   node --import tsx bench/memories-scale.ts postgres|local [memories=100000] [calls=200] [no-embeddings]
 *
 * `node --expose-gc` makes the heap figure after seeding a collected one.
 */
import { performance } from "node:perf_hooks";
import { setImmediate as nextTurn } from "node:timers/promises";
import pg from "pg";
import { create } from "@bufbuild/protobuf";
import {
  AddEventsRequestSchema,
  CreateSessionRequestSchema,
  RecallRequestSchema,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { closedLoop } from "./lib/closed-loop.js";
import { findPid } from "./lib/processes.js";
import { DEFAULT_SERVICE_LIMITS } from "../src/service/limits.js";
import { MemoryService } from "../src/service/memory-service.js";
import { LocalStore } from "../src/store/local.js";
import { PostgresStore } from "../src/store/postgres.js";
import type { MemoryFilter, MemoryRecord, MemoryStore } from "../src/store/types.js";
import { startPostgresServer } from "../test/support/postgres-server.js";
import { seededRandom } from "./lib/seeded-random.js";

const USAGE =
  "usage: node --import tsx bench/memories-scale.ts postgres|local [memories=100000] [calls=200] [no-embeddings]";
const kind = process.argv[2];
if (kind !== "postgres" && kind !== "local") {
  console.error(USAGE);
  process.exit(2);
}
const total = Number(process.argv[3] ?? 100_000);
const calls = Number(process.argv[4] ?? 200);
const embedded = process.argv[5] !== "no-embeddings";
const DIMENSIONS = 384;
const APP = "app";
const CREATED_BASE = 1_700_000_000_000;
const NO_LIMITS = { maxSessions: 0, maxSessionEvents: 0 };

// ---- The data, the same on both stores -------------------------------------------------------

/** 100 distinct vectors (float32 values, as the wire carries them); memory n has vectors[n % 100]. */
const vectors: Float32Array[] = (() => {
  const random = seededRandom(384);
  return Array.from({ length: 100 }, () => Float32Array.from({ length: DIMENSIONS }, () => random() * 2 - 1));
})();

/** One synthetic memory, n from 1. */
interface Synthetic {
  n: number;
  memoryId: string;
  /** undefined: app-wide (every 10th). */
  userId?: string;
  /** 12 words "wordK", K = floor(5000 r^3): word0 is in about half the texts, word4999 in almost none. */
  text: string;
  topic: string;
  importance: number;
  pinned: boolean;
  createdAt: number;
  vector: number;
}

/** The memories 1..total, in batches, from one seeded generator. */
function* synthetic(batch: number): Generator<Synthetic[]> {
  const random = seededRandom(42);
  for (let first = 1; first <= total; first += batch) {
    const out: Synthetic[] = [];
    for (let n = first; n < first + batch && n <= total; n++) {
      const words: string[] = [];
      for (let w = 0; w < 12; w++) words.push(`word${Math.floor(5000 * random() ** 3)}`);
      out.push({
        n,
        memoryId: `m${n}`,
        userId: n % 10 === 0 ? undefined : `user${n % 1000}`,
        text: words.join(" "),
        topic: `topic${n % 20}`,
        importance: random(),
        pinned: n % 97 === 0,
        createdAt: CREATED_BASE + n,
        vector: n % 100,
      });
    }
    yield out;
  }
}

// ---- Timing ----------------------------------------------------------------------------------

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** This process's CPU (user + system, every thread: GC included) in ms. */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** One call at a time, `calls` of them after 10 to warm: p50, p99 and this process's CPU per call. */
async function time(name: string, fn: (i: number) => Promise<unknown>, count = calls): Promise<void> {
  for (let i = 0; i < 10; i++) await fn(i); // warm the plans and the cache
  const ms: number[] = [];
  const cpu = cpuMs();
  for (let i = 0; i < count; i++) {
    const start = performance.now();
    await fn(i);
    ms.push(performance.now() - start);
  }
  const cpuPerCall = (cpuMs() - cpu) / count;
  ms.sort((a, b) => a - b);
  console.log(
    `${name.padEnd(56)} p50 ${percentile(ms, 50).toFixed(2)} ms  p99 ${percentile(ms, 99).toFixed(2)} ms  CPU ${cpuPerCall.toFixed(2)} ms/call (this process)`,
  );
}

// ---- The stores ------------------------------------------------------------------------------

/** What differs between the stores: how they are seeded, whose CPU counts besides this process, and PostgreSQL's extras. */
interface ScaleStore {
  store: MemoryStore;
  seed(): Promise<void>;
  /** Other processes whose CPU is charged per Recall, by name (the closed loop reads them from /proc). */
  backendPids(): Record<string, number[]>;
  /** Measurements only this store has, after the shared driver timings. */
  extraTimings(user: MemoryFilter, probe: number[]): Promise<void>;
  /** After Recall: plans and the like. */
  report(): Promise<void>;
  close(): Promise<void>;
}

/** The local store, seeded through its driver in batches, as WriteMemories would. */
function localStore(): ScaleStore {
  const store = new LocalStore(NO_LIMITS);
  return {
    store,
    async seed() {
      for (const batch of synthetic(1000)) {
        await store.memories.writeMemories(
          batch.map(
            (s): MemoryRecord => ({
              memoryId: s.memoryId,
              appName: APP,
              ...(s.userId === undefined ? {} : { userId: s.userId }),
              text: s.text,
              key: "",
              topics: [s.topic],
              importance: s.importance,
              pinned: s.pinned,
              metadata: {},
              createdAt: s.createdAt,
              validFrom: s.createdAt,
              // Each memory its own array, as a decoded request gives it: shared arrays would understate the heap and fit in cache.
              ...(embedded ? { embedding: Array.from(vectors[s.vector]) } : {}),
              fingerprint: `f${s.n}`,
            }),
          ),
        );
      }
    },
    backendPids: () => ({}),
    async extraTimings() {},
    async report() {},
    close: () => store.close(),
  };
}

/** A throwaway PostgreSQL, seeded in SQL (batches of the generator's rows through unnest), with its CPU and plans. */
async function postgresStore(): Promise<ScaleStore> {
  const server = await startPostgresServer();
  const schema = "bench";
  const store = await PostgresStore.open({ url: server.url, schema, limits: NO_LIMITS });
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query(`SET search_path TO ${schema}`);
  return {
    store,
    async seed() {
      const bytes = vectors.map((v) => Buffer.from(v.buffer, v.byteOffset, v.byteLength));
      for (const batch of synthetic(10_000)) {
        await admin.query(
          `INSERT INTO memories (app_name, memory_id, user_id, scope_key, text, topics, importance, pinned, created_ms, valid_from_ms, embedding, fingerprint, analyzer)
           SELECT $1, id, u, CASE WHEN u IS NULL THEN '[null,null,null]' ELSE '["' || u || '",null,null]' END,
                  t, ARRAY[topic], imp, pin, created, created, CASE WHEN $2 THEN ($3::bytea[])[1 + v] END, 'f' || n, 0
           FROM unnest($4::int[], $5::text[], $6::text[], $7::text[], $8::text[], $9::float8[], $10::bool[], $11::bigint[], $12::int[])
                AS s(n, id, u, t, topic, imp, pin, created, v)`,
          [
            APP,
            embedded,
            bytes,
            batch.map((s) => s.n),
            batch.map((s) => s.memoryId),
            batch.map((s) => s.userId ?? null),
            batch.map((s) => s.text),
            batch.map((s) => s.topic),
            batch.map((s) => s.importance),
            batch.map((s) => s.pinned),
            batch.map((s) => s.createdAt),
            batch.map((s) => s.vector),
          ],
        );
      }
      // Seeded as rows before migration 0016 (analyzer 0): indexed for search as a start-up would.
      await store.memories.reanalyze();
      await admin.query("ANALYZE memories");
    },
    backendPids(): Record<string, number[]> {
      const postmaster = findPid("postgres", "-p", String(server.port));
      return postmaster ? { postgres: [postmaster] } : {};
    },
    async extraTimings(user, probe) {
      // The store keeps decoded embeddings between calls: a fresh store shows a first search's cost, every embedding read from PostgreSQL.
      const cold: number[] = [];
      for (let i = 0; i < Math.min(calls, 20); i++) {
        const fresh = await PostgresStore.open({ url: server.url, schema, limits: NO_LIMITS });
        await fresh.memories.listMemories(user, 1); // a warm connection: only the vectors are cold
        const start = performance.now();
        await fresh.memories.nearestMemories(user, probe, 50);
        cold.push(performance.now() - start);
        await fresh.close();
      }
      cold.sort((a, b) => a - b);
      console.log(
        `${"nearestMemories, user VISIBLE, cold cache".padEnd(56)} p50 ${percentile(cold, 50).toFixed(2)} ms  max ${cold[cold.length - 1].toFixed(2)} ms`,
      );
    },
    async report() {
      for (const [name, sql] of [
        [
          "search, user VISIBLE",
          `EXPLAIN (ANALYZE, COSTS OFF) SELECT memory_id, ts_rank_cd(search, q, 1) AS score FROM memories, to_tsquery('english', 'word3 | word120 | word1007') q
           WHERE search @@ q AND app_name = 'app' AND (user_id IS NULL OR user_id = 'user7') AND agent_id IS NULL AND session_id IS NULL
           ORDER BY score DESC LIMIT 50`,
        ],
        [
          "list, user VISIBLE",
          `EXPLAIN (ANALYZE, COSTS OFF) SELECT * FROM (
             (SELECT memory_id, created_ms FROM memories WHERE app_name = 'app' AND user_id = 'user7' AND agent_id IS NULL AND session_id IS NULL ORDER BY created_ms DESC, memory_id DESC LIMIT 100)
             UNION ALL
             (SELECT memory_id, created_ms FROM memories WHERE app_name = 'app' AND user_id IS NULL AND agent_id IS NULL AND session_id IS NULL ORDER BY created_ms DESC, memory_id DESC LIMIT 100)
           ) both_halves ORDER BY created_ms DESC, memory_id DESC LIMIT 100`,
        ],
        [
          "list, user VISIBLE, pinned",
          `EXPLAIN (ANALYZE, COSTS OFF) SELECT * FROM (
             (SELECT memory_id, created_ms FROM memories WHERE app_name = 'app' AND user_id = 'user7' AND agent_id IS NULL AND session_id IS NULL AND pinned = true ORDER BY created_ms DESC, memory_id DESC LIMIT 100)
             UNION ALL
             (SELECT memory_id, created_ms FROM memories WHERE app_name = 'app' AND user_id IS NULL AND agent_id IS NULL AND session_id IS NULL AND pinned = true ORDER BY created_ms DESC, memory_id DESC LIMIT 100)
           ) both_halves ORDER BY created_ms DESC, memory_id DESC LIMIT 100`,
        ],
      ] as const) {
        const { rows } = await admin.query(sql);
        console.log(`\n${name}:\n${rows.map((r) => r["QUERY PLAN"]).join("\n")}`);
      }
    },
    async close() {
      await admin.end();
      await store.close();
      await server.stop();
    },
  };
}

// ---- The run ---------------------------------------------------------------------------------

const scale = kind === "postgres" ? await postgresStore() : localStore();
try {
  const seedStart = performance.now();
  await scale.seed();
  const seedSeconds = (performance.now() - seedStart) / 1000;
  (globalThis as { gc?: () => void }).gc?.();
  const mem = process.memoryUsage();
  const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MB`;
  console.log(
    `${kind}: seeded ${total} memories${embedded ? "" : " without embeddings"} in ${seedSeconds.toFixed(1)} s; ` +
      `this process's heap used ${mb(mem.heapUsed)}${(globalThis as { gc?: unknown }).gc ? " (after a GC)" : ""}, RSS ${mb(mem.rss)}`,
  );

  const user: MemoryFilter = { scope: { appName: APP, userId: "user7", match: "visible" }, asOf: Date.now() };
  const query = (i: number) => `word${i % 50} word${100 + (i % 400)} word${1000 + i}`;
  const memories = scale.store.memories;
  const nearest = memories.nearestMemories!.bind(memories);
  await time("searchMemories, user VISIBLE, top 50", (i) => memories.searchMemories(user, query(i), 50));
  await time("searchMemories, user VISIBLE, rare words, top 50", (i) =>
    memories.searchMemories(user, `word${3000 + i} word${4000 + i}`, 50),
  );
  await time("listMemories, user VISIBLE, 100", () => memories.listMemories(user, 100));
  await time("listMemories, user VISIBLE, pinned, 100 (Recall's core)", () =>
    memories.listMemories({ ...user, pinned: true }, 100),
  );
  await time("listMemories, user WITHIN, topic, 100", () =>
    memories.listMemories({ ...user, scope: { ...user.scope, match: "within" }, topics: ["topic3"] }, 100),
  );
  const probeRandom = seededRandom(7);
  const probe = Array.from({ length: DIMENSIONS }, () => Math.fround(probeRandom() * 2 - 1));
  if (embedded) {
    // PostgreSQL compares the newest 2,000 embedded candidates of the scope; the local store every embedded memory of the scope.
    await time(`nearestMemories, user VISIBLE, top 50`, () => nearest(user, probe, 50));
    await scale.extraTimings(user, probe);
  }
  const app: MemoryFilter = { scope: { appName: APP, match: "within" }, asOf: Date.now() };
  await time("searchMemories, whole app WITHIN, top 50", (i) => memories.searchMemories(app, query(i), 50));
  if (embedded) await time("nearestMemories, whole app WITHIN, top 50", () => nearest(app, probe, 50));

  // Recall as a session of user7 asks it, through the service: its reads, ranking, packing and context.
  const service = new MemoryService(scale.store, {
    limits: DEFAULT_SERVICE_LIMITS,
    contextLimit: 50,
    heartbeatMs: 1000,
  });
  await service.createSession(
    create(CreateSessionRequestSchema, { appName: APP, userId: "user7", sessionId: "recall-session" }),
  );
  await service.addEvents(
    create(AddEventsRequestSchema, {
      sessionId: "recall-session",
      events: Array.from({ length: 30 }, (_, i) => ({
        eventType: i % 2 ? "agent_response" : "user_message",
        content: { kind: { case: "stringValue" as const, value: `message ${i} about word${i} and word${i * 7}` } },
      })),
    }),
  );
  const backends = scale.backendPids();
  // At 1M a local Recall takes ~0.3-1 s of CPU, so 16 of them in flight first complete ~10 s in: a 10 s window after 2 s of
  // warm-up measured none at 1M. Larger sets get a warm-up past that first wave and a window long enough for tens of calls.
  const window = total > 100_000 ? { warmupMs: 15_000, durationMs: 45_000 } : { warmupMs: 2_000, durationMs: 10_000 };
  // Hybrid: the client sends the query's vector, so the store ranks its nearest candidates by cosine too.
  const recalls: Array<[kind: string, queryEmbedding: number[]]> = embedded
    ? [
        ["lexical", []],
        ["hybrid", probe],
      ]
    : [["lexical", []]];
  for (const [recallKind, queryEmbedding] of recalls) {
    for (const concurrency of [1, 16]) {
      // The local store answers without I/O, so its calls would chain as microtasks and starve the loop's timers: each call first yields a turn.
      const result = await closedLoop({ concurrency, ...window, cpuPids: backends }, async (worker, i) => {
        await nextTurn();
        await service.recall(
          create(RecallRequestSchema, {
            sessionId: "recall-session",
            query: query(worker * 1000 + i),
            tokenBudget: 4000,
            queryEmbedding,
          }),
        );
      });
      const backendCpu = Object.keys(backends).map(
        (name) => `, ${name} ${((result.cpuUsPerCall[name] ?? NaN) / 1000).toFixed(2)} ms`,
      );
      console.log(
        `Recall 4k ${recallKind} through the service, c=${concurrency}: ${result.throughput.toFixed(1)}/s p50 ${(result.p50Us / 1000).toFixed(1)} ms p99 ${(result.p99Us / 1000).toFixed(1)} ms, ` +
          `CPU per call: service ${((result.cpuUsPerCall.client ?? NaN) / 1000).toFixed(2)} ms${backendCpu.join("")}` +
          (result.errors ? ` (${result.errors} errors: ${result.firstError})` : ""),
      );
    }
  }
  await scale.report();
} finally {
  await scale.close();
}
