/**
 * The raw-store baselines, a forked child of the runner: the same storage
 * work Engram's server does per AddEvent and per "last 20 events" read, done
 * by the store driver itself (the same ioredis Lua scripts, the same pg
 * function and group commit) in a process with no gRPC, no validation and
 * no protobuf. The gap between this and the server is the server's own cost.
 */
import { randomUUID } from "node:crypto";
import { loadConfig } from "../src/config.js";
import { openStore } from "../src/store/index.js";
import type { MemoryStore, NewEvent } from "../src/store/types.js";
import { closedLoop, type ClosedLoopOptions, type LoadResult } from "./lib/closed-loop.js";
import { serveRequests } from "./lib/processes.js";
import pg from "pg";
import { memoryFingerprint } from "../src/store/memories/rules.js";
import { seededRandom } from "./lib/seeded-random.js";
import { CONTENT_100B, WRITE_APP } from "./workloads.js";

/** One raw run. */
export interface RawSpec extends ClosedLoopOptions {
  backend: "redis" | "postgres";
  url: string;
  /**
   * "open" only connects (so the backend's connection processes exist before CPU is charged to them);
   * "write-memories": the WriteMemories workload's batch (100 memories of the worker's own user) through the driver;
   * "hnsw-insert": 100 random 384-d vectors into a table with only a pgvector HNSW index, in plain SQL,
   * no Engram at all (what pgvector itself costs per vector on this machine).
   */
  op: "open" | "append" | "tail" | "write-memories" | "hnsw-insert";
  /** Events in the session the tail reads from. */
  tailSessionEvents: number;
}

const stores = new Map<string, MemoryStore>();

async function storeFor(spec: RawSpec): Promise<MemoryStore> {
  const key = `${spec.backend} ${spec.url}`;
  let store = stores.get(key);
  if (!store) {
    const flag = spec.backend === "redis" ? "--redis-url" : "--postgres-url";
    const config = loadConfig(
      [
        "--memory-type",
        spec.backend,
        flag,
        spec.url,
        "--key-prefix",
        "rawbench",
        "--max-session-events",
        "1000000",
        "--max-sessions",
        "1000000",
      ],
      {},
    );
    store = await openStore(config);
    stores.set(key, store);
  }
  return store;
}

function newEvent(): NewEvent {
  // What the service hands the store for a 100-byte user message with a generated id.
  return {
    eventId: randomUUID(),
    eventType: "user_message",
    content: CONTENT_100B,
    metadata: {},
    timestamp: Date.now(),
    fingerprint: "",
  };
}

/** Runs one raw point. */
async function runRaw(spec: RawSpec): Promise<LoadResult> {
  const store = await storeFor(spec);
  if (spec.op === "open") {
    // Fill the pool: PostgreSQL starts one backend process per connection.
    await Promise.all(Array.from({ length: 16 }, () => store.getSession("raw-open")));
    return { calls: 0, errors: 0, seconds: 0, throughput: 0, p50Us: 0, p99Us: 0, meanUs: 0, cpuUsPerCall: {} };
  }
  if (spec.op === "write-memories") {
    // A worker's memories differ from call to call in their ids and times only, which the fingerprint leaves out:
    // hashed once, so the driver's figure holds no service work.
    const contents = Array.from({ length: spec.concurrency }, (_, worker) =>
      Array.from({ length: 100 }, (_, i) => {
        const content = {
          appName: WRITE_APP,
          userId: `writer-${worker}`,
          text: `${CONTENT_100B} (${worker}.${i})`,
          key: "",
          topics: [],
          importance: (i % 10) / 10,
          pinned: false,
          metadata: {},
        };
        return { ...content, fingerprint: memoryFingerprint({ memoryId: "", ...content }) };
      }),
    );
    return closedLoop(spec, async (worker) => {
      const now = Date.now();
      await store.memories.writeMemories(
        contents[worker].map((content) => ({ ...content, memoryId: randomUUID(), createdAt: now, validFrom: now })),
      );
    });
  }
  if (spec.op === "hnsw-insert") return hnswInserts(spec);
  const session = (id: string) =>
    store.getOrCreateSession({ sessionId: id, appName: "rawbench", userId: "bench", metadata: {}, now: Date.now() });
  if (spec.op === "append") {
    for (let i = 0; i < spec.concurrency; i++) await session(`raw-append-${i}`);
    return closedLoop(spec, async (worker) => {
      await store.appendEvents(`raw-append-${worker}`, [newEvent()]);
    });
  }
  const tailId = `raw-tail-${spec.tailSessionEvents}`;
  const { session: existing } = await session(tailId);
  for (let n = existing.headSeq; n < spec.tailSessionEvents; n += 500) {
    await store.appendEvents(tailId, Array.from({ length: Math.min(500, spec.tailSessionEvents - n) }, newEvent));
  }
  return closedLoop(spec, async () => {
    await store.readTail(tailId, 20);
  });
}

/** pgvector's own cost per vector: plain INSERTs of 100 random 384-d vectors into a table with only an HNSW index (cosine, pgvector's defaults). */
async function hnswInserts(spec: RawSpec): Promise<LoadResult> {
  const pool = new pg.Pool({ connectionString: spec.url, max: spec.concurrency });
  try {
    await pool.query("CREATE EXTENSION IF NOT EXISTS vector");
    await pool.query("CREATE TABLE IF NOT EXISTS raw_hnsw (id bigserial PRIMARY KEY, v vector(384))");
    await pool.query("CREATE INDEX IF NOT EXISTS raw_hnsw_v ON raw_hnsw USING hnsw (v vector_cosine_ops)");
    const random = seededRandom(spec.concurrency);
    return await closedLoop(spec, async () => {
      const vectors = Array.from(
        { length: 100 },
        () => `[${Array.from({ length: 384 }, () => random() - 0.5).join(",")}]`,
      );
      await pool.query("INSERT INTO raw_hnsw (v) SELECT unnest($1::text[])::vector(384)", [vectors]);
    });
  } finally {
    await pool.end();
  }
}

serveRequests((spec: RawSpec) => runRaw(spec));
