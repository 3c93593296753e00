/**
 * The PostgreSQL store's long-term memory indexes (migration 0016): N
 * memories in ONE user's scope, written as a release before 0016 left them
 * (analyzer 0, nothing indexed), then re-analyzed the way a start-up does it
 * (reanalyze: the upgrade's cost per memory), the HNSW index built by a
 * store opening, and then searchMemories (two words of a skewed vocabulary)
 * and nearestMemories (a random 384-dimension query) over the whole scope,
 * one call at a time: p50 and PostgreSQL's CPU per call. `pgvector` runs on
 * the PostgreSQL 18 + pgvector of the tests (test/support/postgres-server.ts,
 * pgvectorBin), `plain` on Debian's PostgreSQL without it (the exact scan).
 * Not a timed test: figures for bench/README.md.
 *
 *   node --import tsx bench/memories-postgres-index.ts pgvector|plain [memories=10000] [calls=50]
 */
import { performance } from "node:perf_hooks";
import pg from "pg";
import { PostgresStore } from "../src/store/postgres.js";
import type { MemoryFilter } from "../src/store/types.js";
import { pgvectorBin, startPostgresServer } from "../test/support/postgres-server.js";
import { findPid, processTreeCpuSeconds } from "./lib/processes.js";
import { seededRandom } from "./lib/seeded-random.js";

const USAGE = "usage: node --import tsx bench/memories-postgres-index.ts pgvector|plain [memories=10000] [calls=50]";
const kind = process.argv[2];
if (kind !== "pgvector" && kind !== "plain") {
  console.error(USAGE);
  process.exit(2);
}
const total = Number(process.argv[3] ?? 10_000);
const calls = Number(process.argv[4] ?? 50);
const DIMENSIONS = 384;
const LIMITS = { maxSessions: 0, maxSessionEvents: 0 };
const random = seededRandom(35);
/** A word of a 5,000-word vocabulary, skewed: word0 is in about half the texts, word4999 in almost none. */
const word = () => `word${Math.floor(5000 * random() ** 3)}`;
const vector = () => Array.from({ length: DIMENSIONS }, () => random() * 2 - 1);

const server = await startPostgresServer({
  durable: true,
  ...(kind === "pgvector" ? { bin: await pgvectorBin() } : {}),
});
const schema = "bench";
const url = server.url;
let store = await PostgresStore.open({ url, schema, limits: LIMITS });
const admin = new pg.Client({ connectionString: url });
await admin.connect();
await admin.query(`SET search_path TO ${schema}`);

// Written as before 0016: analyzer 0, no terms, no search_vector.
let start = performance.now();
await admin.query("INSERT INTO memory_dimensions VALUES ('app', $1)", [DIMENSIONS]);
for (let n = 0; n < total; n += 5000) {
  const batch = Array.from({ length: Math.min(5000, total - n) }, (_, i) => {
    const floats = Float32Array.from(vector());
    return { id: `m${n + i}`, text: Array.from({ length: 12 }, word).join(" "), embedding: Buffer.from(floats.buffer) };
  });
  await admin.query(
    `INSERT INTO memories (app_name, memory_id, user_id, scope_key, text, created_ms, valid_from_ms, embedding, fingerprint, analyzer)
     SELECT 'app', id, 'u', '["u",null,null]', t, 1700000000000 + n, 1700000000000 + n, e, 'f', 0
     FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[]) AS s(id, t, e, n)`,
    [batch.map((b) => b.id), batch.map((b) => b.text), batch.map((b) => b.embedding), batch.map((_, i) => n + i)],
  );
}
console.log(`seeded ${total} memories (as before 0016) in ${((performance.now() - start) / 1000).toFixed(1)} s`);

start = performance.now();
// The store's own background re-analysis may share the rows (SKIP LOCKED): done when none is left.
await store.memories.reanalyze();
while (Number((await admin.query("SELECT count(*) AS n FROM memories WHERE analyzer = 0")).rows[0].n) > 0)
  await store.memories.reanalyze();
const rewritten = total;
const reanalyzeSeconds = (performance.now() - start) / 1000;
console.log(
  `re-analyzed ${rewritten} in ${reanalyzeSeconds.toFixed(1)} s: ${((reanalyzeSeconds / rewritten) * 1e6).toFixed(0)} µs a memory, ${(((reanalyzeSeconds / rewritten) * 1e6) / 60).toFixed(1)} min per million`,
);
await store.close();
start = performance.now();
// Opening makes the HNSW index of every dimension in use (over the rows search_vector now holds).
store = await PostgresStore.open({ url, schema, limits: LIMITS });
await store.memories.indexed();
console.log(`store opened (index build included) in ${((performance.now() - start) / 1000).toFixed(1)} s`);
await admin.query("VACUUM ANALYZE memories");

const postmaster = findPid("postgres", "-p", String(server.port))!;
const scope: MemoryFilter = {
  scope: { appName: "app", userId: "u", match: "visible" },
  asOf: Date.now(),
  omitEmbeddings: true,
};
async function measure(name: string, call: () => Promise<unknown>): Promise<void> {
  await call();
  const times: number[] = [];
  const cpuBefore = processTreeCpuSeconds(postmaster);
  for (let i = 0; i < calls; i++) {
    const t = performance.now();
    await call();
    times.push(performance.now() - t);
  }
  const cpu = ((processTreeCpuSeconds(postmaster) - cpuBefore) / calls) * 1000;
  times.sort((a, b) => a - b);
  console.log(
    `${kind} ${total} ${name.padEnd(40)} p50 ${times[Math.floor(calls / 2)].toFixed(2)} ms  max ${times[calls - 1].toFixed(2)} ms  PostgreSQL CPU ${cpu.toFixed(2)} ms/call`,
  );
}
await measure("searchMemories (2 words, limit 10)", () =>
  store.memories.searchMemories(scope, `${word()} ${word()}`, 10),
);
await measure("nearestMemories (limit 10)", () => store.memories.nearestMemories(scope, vector(), 10));
if (process.env.EXPLAIN) {
  const { sql, values } = store.memories.nearestQuery(scope, vector(), 10, kind === "pgvector");
  await admin.query("BEGIN");
  await admin.query("SET LOCAL hnsw.iterative_scan = relaxed_order");
  if (process.env.NO_SORT) await admin.query("SET LOCAL enable_sort = off");
  console.log(
    (await admin.query(`EXPLAIN (ANALYZE, BUFFERS) ${sql}`, values)).rows.map((r) => r["QUERY PLAN"]).join("\n"),
  );
  await admin.query("ROLLBACK");
}
await admin.end();
await store.close();
await server.stop();
