/**
 * The local store's search engine at scale (src/store/inverted-index.ts):
 * seeds N memories into ONE exact scope (one user of one app; texts of 12
 * words from bench/memories-scale.ts's skewed 5000-word vocabulary, a
 * distinct 384-dimension embedding each), then times searchMemories
 * (exact BM25) and nearestMemories (exact cosine) for that user's visible
 * scope one call at a time, and SearchEvents over E events of one user's
 * sessions, from the local store's index and read and ranked per call as
 * stores without an index do. Prints p50, p99, this process's CPU per call
 * and the heap the seeded memories take (with `node --expose-gc`, after a
 * collection). Figures for bench/README.md; not a timed test.
 *
 *   node --expose-gc --import tsx bench/local-search.ts [memories=100000] [calls=100] [events=10000]
 */
import { performance } from "node:perf_hooks";
import { searchEvents } from "../src/service/memories/event-search.js";
import { searchEventsByReading } from "../src/store/event-search.js";
import { LocalStore } from "../src/store/local.js";
import type { MemoryFilter, MemoryRecord, MemoryStore } from "../src/store/types.js";
import { seededRandom } from "./lib/seeded-random.js";

const total = Number(process.argv[2] ?? 100_000);
const calls = Number(process.argv[3] ?? 100);
const eventCount = Number(process.argv[4] ?? 10_000);
const DIMENSIONS = 384;
const NO_LIMITS = { maxSessions: 0, maxSessionEvents: 0 };

const random = seededRandom(42);
/** 12 words "wordK", K = floor(5000 r^3): word0 is in about half the texts, word4999 in almost none. */
const sentence = () => Array.from({ length: 12 }, () => `word${Math.floor(5000 * random() ** 3)}`).join(" ");

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** This process's CPU (user + system, GC included) in ms. */
function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/** One call at a time, `calls` of them after 5 to warm: p50, p99 and CPU per call. */
async function time(name: string, fn: (i: number) => Promise<unknown>): Promise<void> {
  for (let i = 0; i < 5; i++) await fn(i);
  const ms: number[] = [];
  const cpu = cpuMs();
  for (let i = 0; i < calls; i++) {
    const start = performance.now();
    await fn(i);
    ms.push(performance.now() - start);
  }
  const cpuPerCall = (cpuMs() - cpu) / calls;
  ms.sort((a, b) => a - b);
  console.log(
    `${name.padEnd(60)} p50 ${percentile(ms, 50).toFixed(2)} ms  p99 ${percentile(ms, 99).toFixed(2)} ms  CPU ${cpuPerCall.toFixed(2)} ms/call`,
  );
}

function heapMb(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return process.memoryUsage().heapUsed / 1e6;
}

const store = new LocalStore(NO_LIMITS);
const heapBefore = heapMb();
const seedStart = performance.now();
for (let first = 0; first < total; first += 1000) {
  const batch: MemoryRecord[] = [];
  for (let n = first; n < Math.min(total, first + 1000); n++) {
    batch.push({
      memoryId: `m${n}`,
      appName: "app",
      userId: "user",
      text: sentence(),
      key: "",
      topics: [],
      importance: 0.5,
      pinned: false,
      metadata: {},
      createdAt: 1_700_000_000_000 + n,
      validFrom: 1_700_000_000_000 + n,
      fingerprint: `f${n}`,
      embedding: Array.from({ length: DIMENSIONS }, () => Math.fround(random() * 2 - 1)),
    });
  }
  await store.memories.writeMemories(batch);
}
const seedMs = performance.now() - seedStart;
console.log(
  `seeded ${total} memories in one scope in ${(seedMs / 1000).toFixed(1)} s; heap ${(heapMb() - heapBefore).toFixed(0)} MB (records with number[] embeddings, and the index)`,
);

const visible: MemoryFilter = { scope: { appName: "app", userId: "user", match: "visible" } };
const queries = Array.from({ length: 50 }, () => `${sentence().split(" ").slice(0, 3).join(" ")}`);
const probes = Array.from({ length: 50 }, () => Array.from({ length: DIMENSIONS }, () => random() * 2 - 1));
await time(`searchMemories, 3 words, ${total} in the scope, limit 10`, (i) =>
  store.memories.searchMemories(visible, queries[i % queries.length], 10),
);
await time(`searchMemories, 1 rare word, ${total} in the scope, limit 10`, (i) =>
  store.memories.searchMemories(visible, `word${4000 + (i % 900)}`, 10),
);
await time(`searchMemories, the commonest word (word0), limit 10`, () =>
  store.memories.searchMemories(visible, "word0", 10),
);
await time(`nearestMemories, ${DIMENSIONS} dims, ${total} in the scope, limit 10`, (i) =>
  store.memories.nearestMemories(visible, probes[i % probes.length], 10),
);

// ---- SearchEvents ----------------------------------------------------------------------------

const sessions = 100;
for (let s = 0; s < sessions; s++) {
  await store.createSession({
    sessionId: `s${s}`,
    appName: "events-app",
    userId: "user",
    metadata: {},
    now: Date.now(),
  });
  const events = Array.from({ length: Math.ceil(eventCount / sessions) }, (_, i) => ({
    eventId: `e${s}-${i}`,
    eventType: "user_message",
    content: { text: sentence() },
    metadata: {},
    timestamp: Date.now(),
    fingerprint: "",
  }));
  await store.appendEvents(`s${s}`, events);
}
const eventSearch = (i: number, through: MemoryStore | "read") => {
  const search = {
    appName: "events-app",
    userId: "user",
    eventTypes: [],
    query: queries[i % queries.length],
    topK: 10,
  };
  return through === "read" ? searchEventsByReading(store, { ...search, limit: 10 }) : searchEvents(through, search);
};
await time(`SearchEvents, ${eventCount} events of one user, local index`, (i) => eventSearch(i, store));
await time(`SearchEvents, ${eventCount} events of one user, read and ranked per call`, (i) => eventSearch(i, "read"));
await store.close();
