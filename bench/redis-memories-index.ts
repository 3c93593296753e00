/**
 * The Redis store's long-term memory with and without the Redis Query Engine:
 * seeds N memories into one scope (one user's VISIBLE scope: theirs and 10%
 * app-wide; texts of 12 words from a 5000-word vocabulary with a skew; a
 * 384-dimension vector each, 1% pinned) on Valkey 8.1 + RediSearch 2.10 and on
 * Debian's Redis 7.0 (no module), then times the driver's searchMemories
 * (two vocabulary words) and nearestMemories (a random vector), one call at a
 * time: p50 and this process's and Redis' CPU per call. On the engine it also
 * times building the documents of memories stored before them (docs-5.lua,
 * the upgrade path). Not a timed test: figures for bench/README.md.
 *
 *   node --import tsx bench/redis-memories-index.ts [memories=10000] [calls=100] [in-process calls=10]
 */
import { performance } from "node:perf_hooks";
import { Redis } from "ioredis";
import { RedisStore } from "../src/store/redis.js";
import type { MemoryRecord } from "../src/store/types.js";
import { startRedisSearchServer } from "../test/support/redis-search-server.js";
import { startRedisServer } from "../test/support/redis-server.js";
import { seededRandom } from "./lib/seeded-random.js";

const total = Number(process.argv[2] ?? 10_000);
const calls = Number(process.argv[3] ?? 100);
const slowCalls = Number(process.argv[4] ?? 10);
const DIMENSIONS = 384;
const random = seededRandom(35);
const vocabulary = Array.from({ length: 5000 }, (_, i) => `w${i.toString(36)}x`);
/** Skewed: low ranks far more often. */
const word = () => vocabulary[Math.floor(vocabulary.length * random() ** 3)];
const vector = () => Array.from({ length: DIMENSIONS }, () => random() * 2 - 1);

function synthetic(n: number): MemoryRecord {
  return {
    appName: "app",
    memoryId: `m${n}`,
    userId: n % 10 === 0 ? undefined : "u",
    text: Array.from({ length: 12 }, word).join(" "),
    key: "",
    topics: [],
    importance: 0,
    pinned: n % 100 === 0,
    metadata: {},
    fingerprint: `f${n}`,
    createdAt: 1_700_000_000_000 + n,
    validFrom: 1_700_000_000_000 + n,
    embedding: vector(),
  };
}

async function redisCpuMs(admin: Redis): Promise<number> {
  const info = await admin.info("cpu");
  const field = (name: string) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)![1]);
  return (field("used_cpu_user") + field("used_cpu_sys")) * 1000;
}

async function measure(label: string, admin: Redis, n: number, call: () => Promise<unknown>): Promise<void> {
  const times: number[] = [];
  const cpu = process.cpuUsage();
  const redis = await redisCpuMs(admin);
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    await call();
    times.push(performance.now() - start);
  }
  const ownCpu = process.cpuUsage(cpu);
  const redisCpu = (await redisCpuMs(admin)) - redis;
  times.sort((a, b) => a - b);
  const p50 = times[Math.floor(times.length / 2)];
  console.log(
    `| ${label} | ${total.toLocaleString("en")} | ${p50.toFixed(1)} | ${((ownCpu.user + ownCpu.system) / 1000 / n).toFixed(1)} | ${(redisCpu / n).toFixed(1)} |`,
  );
}

const scope = { appName: "app", userId: "u", match: "visible" as const };
const filter = { scope, omitEmbeddings: true };
for (const [name, start] of [
  ["Valkey 8.1 + RediSearch 2.10 (Query Engine)", () => startRedisSearchServer({ appendonly: false })],
  ["Redis 7.0 (in process)", () => startRedisServer({ appendonly: false })],
] as const) {
  const server = await start();
  const admin = new Redis(server.url);
  const store = await RedisStore.open({
    url: server.url,
    keyPrefix: "bench",
    limits: { maxSessions: 0, maxSessionEvents: 0 },
    commandTimeoutMs: 60_000,
  });
  const seeding = performance.now();
  for (let n = 0; n < total; n += 100)
    await store.memories.writeMemories(Array.from({ length: Math.min(100, total - n) }, (_, i) => synthetic(n + i)));
  console.error(
    `${name}: seeded ${total} in ${((performance.now() - seeding) / 1000).toFixed(1)} s; used_memory ${/used_memory_human:(\S+)/.exec(await admin.info("memory"))![1]}`,
  );
  const n = store.memories.ranking === "query-engine" ? calls : slowCalls;
  // Warm-up (the first call creates the vector index's query plan, the process JIT-compiles).
  await store.memories.searchMemories(filter, `${word()} ${word()}`, 10);
  await store.memories.nearestMemories(filter, vector(), 10);
  await measure(`${name}, SearchMemories lexical`, admin, n, () =>
    store.memories.searchMemories(filter, `${word()} ${word()}`, 10),
  );
  await measure(`${name}, nearestMemories`, admin, n, () => store.memories.nearestMemories(filter, vector(), 10));
  await measure(`${name}, 100 newest pinned`, admin, n, () =>
    store.memories.listMemories({ ...filter, pinned: true }, 100),
  );
  if (store.memories.ranking === "query-engine") {
    // The upgrade: memories stored before documents get them from a build, a page per script call.
    const documents: string[] = [];
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", "bench:memdoc:*", "COUNT", 5000);
      documents.push(...keys);
      cursor = next;
    } while (cursor !== "0");
    for (let i = 0; i < documents.length; i += 5000) await admin.del(...documents.slice(i, i + 5000));
    await admin.hdel(
      `bench:mem:${Buffer.from("app").toString("hex")}:meta`,
      "docchain",
      "docready",
      "docbuild",
      "docat",
    );
    const building = performance.now();
    await store.memories.buildDocuments("app");
    console.error(
      `${name}: built ${documents.length} documents in ${((performance.now() - building) / 1000).toFixed(1)} s`,
    );
  }
  await store.close();
  await admin.quit();
  await server.destroy();
}
