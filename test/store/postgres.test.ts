/**
 * The PostgreSQL store: the shared conformance suite (one fresh schema per
 * store, dropped after) plus what only a SQL backend can get wrong:
 * migrations under concurrency, seqs across pools, rows left behind,
 * collation, durability settings and outages.
 */
import { readdirSync, readFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresKeyStore } from "../../src/auth/postgres-key-store.js";
import { PostgresStore, type PostgresStoreOptions } from "../../src/store/postgres.js";
import { MIGRATIONS_DIR, schemaVersionProblem } from "../../src/store/postgres/migrations.js";
import { recentEventsQuery } from "../../src/store/postgres/statements.js";
import { StoreIncompatibleError } from "../../src/store/incompatible.js";
import type { PostgresMemories } from "../../src/store/memories/postgres.js";
import { ConnectingStore } from "../../src/store/connecting.js";
import type { MemoryChange, MemoryStore, SessionNotice, StoreLimits } from "../../src/store/types.js";
import { startChaosProxy } from "../support/chaos-proxy.js";
import { spawnServer, type ServerProcess } from "../support/engram.js";
import { freePort } from "../support/postgres-server.js";
import { describeStoreConformance, makeSession, newEvent, rejection, waitFor } from "./conformance.js";
import { describeMemoriesConformance, memory } from "./memories-conformance.js";
import { MEMORY_CHANGES_RETAINED } from "../../src/store/memories/rules.js";

const url = process.env.MEMORY_TEST_POSTGRES_URL!;
/** A PostgreSQL with pgvector (global setup); `url`'s has none, for the exact path. */
const vectorUrl = process.env.MEMORY_TEST_POSTGRES_VECTOR_URL!;
const LIMITS: StoreLimits = { maxSessions: 1000, maxSessionEvents: 500 };
let schemas = 0;
/** A schema no other store, test or test file uses. */
const freshSchema = () => `t_${process.pid}_${++schemas}_${Math.random().toString(36).slice(2, 8)}`;

const admin = new pg.Pool({ connectionString: url, max: 2 });
admin.on("error", () => {});
const vectorAdmin = new pg.Pool({ connectionString: vectorUrl, max: 2 });
vectorAdmin.on("error", () => {});
afterAll(() => Promise.all([admin.end(), vectorAdmin.end()]));

/** Opens a store on a schema that is dropped when the store closes; `extra.url` picks the server (vectorUrl). */
async function openStore(
  limits: StoreLimits = LIMITS,
  schema = freshSchema(),
  extra: Partial<PostgresStoreOptions> = {},
): Promise<PostgresStore> {
  const store = await PostgresStore.open({ url, schema, limits, ...extra });
  const close = store.close.bind(store);
  store.close = async () => {
    await close();
    await (extra.url?.startsWith(vectorUrl) ? vectorAdmin : admin).query(
      `DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`,
    );
  };
  return store;
}

describeStoreConformance("postgres", (limits) => openStore(limits), { persistent: true, shared: true, retains: true });
describeMemoriesConformance("postgres", () => openStore());
describeMemoriesConformance("postgres with pgvector", () => openStore(LIMITS, freshSchema(), { url: vectorUrl }));

describe("PostgreSQL long-term memory search", () => {
  const DIMS = 8;
  /** A unit-ish vector along axis `i`, leaning `lean` along the next one. */
  const axis = (i: number, lean = 0) =>
    Array.from({ length: DIMS }, (_, d) => (d === i ? 1 : d === (i + 1) % DIMS ? lean : 0));
  const within = (userId: string) => ({
    scope: { appName: "app", userId, match: "within" as const },
    asOf: Date.now(),
  });

  for (const [server, serverUrl] of [
    // The index scan gives up after 50 rows, and the planner takes it wherever it can: the exact plan must fill in.
    [
      "with pgvector",
      () => `${vectorUrl}?options=${encodeURIComponent("-c hnsw.max_scan_tuples=50 -c enable_sort=off")}`,
    ],
    ["without pgvector", () => url],
  ] as const) {
    it(`${server}: a filter that keeps few memories of a dimension still gets all of them, the nearest first`, async () => {
      const schema = freshSchema();
      const store = await openStore(LIMITS, schema, { url: serverUrl() });
      try {
        const memories = store.memories!;
        // 1,500 memories of another user all nearer the query than the three of "few".
        for (let batch = 0; batch < 15; batch++) {
          await memories.writeMemories(
            Array.from({ length: 100 }, (_, j) =>
              memory({
                memoryId: `crowd-${batch}-${j}`,
                userId: "crowd",
                text: "crowd",
                embedding: axis(0, 0.01 * (j + 1)),
              }),
            ),
          );
        }
        await memories.writeMemories(
          [0.5, 2, 4].map((lean, i) =>
            memory({ memoryId: `few-${i}`, userId: "few", text: "few", embedding: axis(0, lean) }),
          ),
        );
        const db = server === "with pgvector" ? vectorAdmin : admin;
        const found = await memories.nearestMemories!(within("few"), axis(0), 10);
        expect(found.map((r) => r.memory.memoryId)).toEqual(["few-0", "few-1", "few-2"]);
        expect(found[0].score).toBeCloseTo(1 / Math.sqrt(1.25), 6);
        const { rows } = await db.query(
          "SELECT format_type(atttypid, atttypmod) AS type FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'search_vector'",
          [`${pg.escapeIdentifier(schema)}.memories`],
        );
        expect(rows[0].type).toBe(server === "with pgvector" ? "vector" : "real[]");
        if (server === "with pgvector") {
          // The crowd's own search walks the dimension's HNSW index once the planner knows the table
          // (autovacuum's ANALYZE): the five nearest are the batches' first (all alike).
          await vectorAdmin.query(`ANALYZE ${pg.escapeIdentifier(schema)}.memories`);
          const crowd = await memories.nearestMemories!(within("crowd"), axis(0), 5);
          for (const r of crowd) expect(r.memory.memoryId).toMatch(/^crowd-\d+-0$/);
          const { sql, values } = (memories as PostgresMemories).nearestQuery(within("crowd"), axis(0), 5, true);
          const client = await vectorAdmin.connect();
          try {
            await client.query("BEGIN");
            await client.query("SET LOCAL hnsw.iterative_scan = relaxed_order");
            const { rows: plan } = await client.query(`EXPLAIN ${sql}`, values);
            expect(plan.map((r) => r["QUERY PLAN"]).join("\n")).toContain(`Index Scan using memories_vector_${DIMS}`);
          } finally {
            await client.query("ROLLBACK");
            client.release();
          }
        }
      } finally {
        await store.close();
      }
    });
  }

  it("re-analyzes memories stored before migration 0016, and an older release's insert is refused", async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema, { url: vectorUrl });
    const table = `${pg.escapeIdentifier(schema)}.memories`;
    try {
      const memories = store.memories!;
      await memories.writeMemories([
        memory({ memoryId: "old", userId: "u", text: "The spare key is under the geranium pot", embedding: axis(3) }),
      ]);
      // As 0016 leaves a row written before it: analyzer 0, nothing indexed.
      await vectorAdmin.query(`UPDATE ${table} SET analyzer = 0, terms = NULL, search_vector = NULL`);
      expect(await memories.searchMemories(within("u"), "geraniums", 5)).toEqual([]);
      expect(await memories.nearestMemories!(within("u"), axis(3), 5)).toEqual([]);
      expect(await memories.reanalyze()).toBe(1);
      expect((await memories.searchMemories(within("u"), "geraniums", 5)).map((r) => r.memory.memoryId)).toEqual([
        "old",
      ]);
      expect((await memories.nearestMemories!(within("u"), axis(3), 5)).map((r) => r.memory.memoryId)).toEqual(["old"]);
      expect(await memories.reanalyze()).toBe(0);
      // The previous release's INSERT names no analyzer: refused, not stored unsearchable.
      const older = vectorAdmin.query(
        `INSERT INTO ${table} (app_name, memory_id, user_id, scope_key, text, created_ms, valid_from_ms, fingerprint) VALUES ('app', 'stale', 'u', '', 'x', 1, 1, 'f')`,
      );
      await expect(older).rejects.toMatchObject({ code: "23502", column: "analyzer" });
    } finally {
      await store.close();
    }
  });
});

describe("PostgresStore specifics", () => {
  const count = async (schema: string, table: string, sessionId?: string) => {
    const where = sessionId === undefined ? "" : " WHERE session_id = $1";
    const { rows } = await admin.query(
      `SELECT count(*)::int AS n FROM ${pg.escapeIdentifier(schema)}.${table}${where}`,
      sessionId === undefined ? [] : [sessionId],
    );
    return rows[0].n as number;
  };

  it("resumeErasures finishes an erasure recorded as in progress; a finished erasure leaves no record", async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema);
    try {
      for (const [id, user] of [
        ["x1", "gone"],
        ["x2", "gone"],
        ["keep", "stays"],
      ])
        await makeSession(store, id, "app", user);
      await store.appendEvents("x1", [newEvent("user_message", 1), newEvent("user_message", 2)]);
      expect(await store.resumeErasures()).toEqual({ users: 0, sessions: 0, events: 0 });
      // An erasure whose replica died before removing anything: only its record is there.
      await admin.query(
        `INSERT INTO ${pg.escapeIdentifier(schema)}.erasures (app_name, user_id, token) VALUES ('app', 'gone', 'token-of-a-dead-replica')`,
      );
      expect(await store.resumeErasures()).toEqual({ users: 1, sessions: 2, events: 2 });
      expect(await count(schema, "erasures")).toBe(0);
      expect((await store.listSessions({ limit: 10 })).map((s) => s.sessionId)).toEqual(["keep"]);
      expect(await store.deleteUserData("app", "stays")).toEqual({ sessions: 1, events: 0, memories: 0 });
      expect(await count(schema, "erasures")).toBe(0);
    } finally {
      await store.close();
    }
  });

  it("applies migrations once, even when several replicas start on a fresh schema at once", async () => {
    const schema = freshSchema();
    const stores = await Promise.all(
      Array.from({ length: 4 }, () => PostgresStore.open({ url, schema, limits: LIMITS })),
    );
    try {
      const again = await PostgresStore.open({ url, schema, limits: LIMITS });
      stores.push(again);
      const { rows } = await admin.query(
        `SELECT version, name FROM ${pg.escapeIdentifier(schema)}.schema_migrations ORDER BY version`,
      );
      // Each numbered file exactly once, in order.
      const files = readdirSync(MIGRATIONS_DIR)
        .filter((f) => /^\d{4}_.*\.sql$/.test(f))
        .sort();
      expect(files.slice(0, 3)).toEqual(["0001_init.sql", "0002_api_keys.sql", "0003_append_function.sql"]);
      expect(rows).toEqual(files.map((name) => ({ version: Number(name.slice(0, 4)), name })));
      await makeSession(stores[0], "s1");
      expect((await stores[3].getSession("s1"))?.sessionId).toBe("s1");
    } finally {
      for (const store of stores) await store.close();
      await admin.query(`DROP SCHEMA ${pg.escapeIdentifier(schema)} CASCADE`);
    }
  });

  it("keeps only the functions this release and the previous one call: migration 0009 drops the append functions of 0003 and 0004", async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema);
    try {
      const { rows } = await admin.query(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY p.proname",
        [schema],
      );
      // append_many_checked (0015, live in functions.sql): every append (src/store/postgres/appends.ts);
      // append_many_retained (0006): the previous release's appends during a rolling upgrade;
      // events_copy_tenancy: the insert trigger of 0007.
      expect(rows.map((r) => r.proname)).toEqual([
        "append_many_checked",
        "append_many_retained",
        "events_copy_tenancy",
      ]);
      await makeSession(store, "s1");
      expect((await store.appendEvents("s1", [newEvent("user_message", 1)])).events.map((e) => e.seq)).toEqual([1]);
    } finally {
      await store.close();
    }
  });

  it("gives gapless seqs to concurrent appends from two replicas", async () => {
    const schema = freshSchema();
    const a = await openStore(LIMITS, schema);
    const b = await PostgresStore.open({ url, schema, limits: LIMITS });
    try {
      await makeSession(a, "s1");
      const results = await Promise.all(
        Array.from({ length: 40 }, (_, i) =>
          (i % 2 ? a : b).appendEvents("s1", [newEvent("user_message", i), newEvent("agent_response", i)]),
        ),
      );
      const seqs = results.flatMap((r) => r.events.map((e) => e.seq)).sort((x, y) => x - y);
      expect(seqs).toEqual(Array.from({ length: 80 }, (_, i) => i + 1));
      // Each batch got consecutive seqs: commit order is seq order.
      for (const r of results) expect(r.events[1].seq).toBe(r.events[0].seq + 1);
      expect(await b.stats()).toEqual({ totalSessions: 1, totalEvents: 80 });
    } finally {
      await b.close();
      await a.close();
    }
  });

  it("trims in SQL: only the retained rows remain and older cursors are OUT_OF_RANGE", async () => {
    const schema = freshSchema();
    const store = await openStore({ ...LIMITS, maxSessionEvents: 4 }, schema);
    try {
      await makeSession(store, "s1");
      for (let i = 0; i < 3; i++)
        await store.appendEvents("s1", [newEvent("user_message", i), newEvent("user_message", i)]);
      expect(await count(schema, "events", "s1")).toBe(4);
      expect(await store.getSession("s1")).toMatchObject({ firstSeq: 3, headSeq: 6 });
      expect((await store.stats()).totalEvents).toBe(4);
      const err = await rejection(store.readEvents("s1", { afterSeq: 1, limit: 10 }));
      expect(err.code).toBe("OUT_OF_RANGE");
      expect(err.message).toContain("oldest retained seq is 3");
    } finally {
      await store.close();
    }
  });

  it("a scoped recent listing reads O(limit) rows of its own index, however many events other tenants store", async () => {
    const schema = freshSchema();
    const store = await openStore({ ...LIMITS, maxSessionEvents: 10_000 }, schema);
    const client = await admin.connect();
    try {
      await makeSession(store, "quiet", "quiet", "ann");
      await store.appendEvents(
        "quiet",
        Array.from({ length: 20 }, (_, i) => newEvent("user_message", i)),
      );
      // Another app floods, and so does another user of the same app.
      await makeSession(store, "loud", "loud", "mallory");
      await makeSession(store, "quiet-bob", "quiet", "bob");
      for (let b = 0; b < 6; b++) {
        await store.appendEvents(
          "loud",
          Array.from({ length: 500 }, (_, i) => newEvent("user_message", i, { timestamp: Date.now() + 86_400_000 })),
        );
        await store.appendEvents(
          "quiet-bob",
          Array.from({ length: 200 }, (_, i) => newEvent("user_message", i, { timestamp: Date.now() + 86_400_000 })),
        );
      }
      await client.query(`ANALYZE ${pg.escapeIdentifier(schema)}.events`);
      type PlanNode = {
        "Relation Name"?: string;
        "Actual Rows": number;
        "Actual Loops": number;
        "Rows Removed by Filter"?: number;
        Plans?: PlanNode[];
      };
      /** Rows every scan of the events table looked at (returned or filtered out), over all its loops. */
      const rowsRead = (node: PlanNode): number =>
        (node["Relation Name"] === "events"
          ? (node["Actual Rows"] + (node["Rows Removed by Filter"] ?? 0)) * node["Actual Loops"]
          : 0) + (node.Plans ?? []).reduce((sum, child) => sum + rowsRead(child), 0);
      const limit = 10;
      const filters = [
        { appNames: ["quiet"] },
        { userId: "ann" },
        { appNames: ["quiet"], userId: "ann" },
        { appNames: ["quiet", "loud"] },
        {},
      ];
      // Both the plan made for the values and the generic one a prepared statement switches to.
      for (const mode of ["force_custom_plan", "force_generic_plan"]) {
        await client.query(`SET plan_cache_mode = ${mode}`);
        for (const filter of filters) {
          const { sql, params } = recentEventsQuery(pg.escapeIdentifier(schema), limit, filter)!;
          const { rows } = await client.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, params);
          const apps = filter.appNames?.length ?? 1;
          expect(rowsRead(rows[0]["QUERY PLAN"][0].Plan), `${mode} ${JSON.stringify(filter)}`).toBeLessThanOrEqual(
            limit * apps,
          );
        }
      }
      expect(
        (await store.listRecentEvents(limit, { appNames: ["quiet"], userId: "ann" })).map((e) => e.content),
      ).toEqual([10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
    } finally {
      client.release();
      await store.close();
    }
  });

  it("migrating a schema that holds events numbers them by timestamp, and appends of older releases keep their tenancy", async () => {
    const schema = freshSchema();
    const quoted = pg.escapeIdentifier(schema);
    const client = await admin.connect();
    let store: PostgresStore | undefined;
    try {
      // The schema as a release before 0007 left it, with events in it.
      const before = readdirSync(MIGRATIONS_DIR)
        .filter((f) => /^\d{4}_.*\.sql$/.test(f) && Number(f.slice(0, 4)) < 7)
        .sort();
      await client.query("BEGIN");
      await client.query(`CREATE SCHEMA ${quoted}`);
      await client.query(`SET LOCAL search_path TO ${quoted}`);
      await client.query(
        "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
      );
      for (const file of before) {
        await client.query(readFileSync(path.join(MIGRATIONS_DIR, file), "utf8"));
        await client.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [
          Number(file.slice(0, 4)),
          file,
        ]);
      }
      await client.query(`INSERT INTO sessions (session_id, app_name, user_id, created_at, updated_at, head_seq, first_seq) VALUES
        ('s1', 'x', 'ann', now(), now(), 2, 1), ('s2', 'y', 'bob', now(), now(), 1, 1)`);
      await client.query(`INSERT INTO events (session_id, seq, event_id, event_type, content, "timestamp", fingerprint) VALUES
        ('s1', 1, 'e1', 'user_message', '"second"', '2026-01-02T00:00:00Z', 'f'),
        ('s1', 2, 'e2', 'user_message', '"third"', '2026-01-03T00:00:00Z', 'f'),
        ('s2', 1, 'e3', 'user_message', '"first"', '2026-01-01T00:00:00Z', 'f')`);
      await client.query("COMMIT");

      store = await PostgresStore.open({ url, schema, limits: LIMITS });
      const contents = async (filter?: object) => (await store!.listRecentEvents(10, filter)).map((e) => e.content);
      expect(await contents()).toEqual(["first", "second", "third"]);
      expect(await contents({ appNames: ["x"] })).toEqual(["second", "third"]);

      // A replica of the release before 0007 appends through append_many_retained (0006), which names none of the new columns.
      const { rows } = await client.query(
        `SELECT status FROM ${quoted}.append_many_retained(ARRAY['s2'], ARRAY[NULL::bigint], ARRAY[1], ARRAY['e4'], ARRAY['user_message'], ARRAY['"old replica"'],
           ARRAY['{}'], ARRAY['2001-01-01T00:00:00Z'::timestamptz], ARRAY['f4'], 100, ARRAY[]::text[], ARRAY[]::bigint[], 0, 0, false, 0::smallint, 'nobody', 7900, NULL, now())`,
      );
      expect(rows.at(-1).status).toBe("appended");
      await store.appendEvents("s1", [newEvent("user_message", "new replica", { timestamp: 0 })]);
      expect(await contents()).toEqual(["first", "second", "third", "old replica", "new replica"]);
      expect(await contents({ appNames: ["y"], userId: "bob" })).toEqual(["first", "old replica"]);
      expect(await contents({ userId: "ann" })).toEqual(["second", "third", "new replica"]);
    } finally {
      await client.query("ROLLBACK").catch(() => {});
      client.release();
      await store?.close();
      await admin.query(`DROP SCHEMA IF EXISTS ${quoted} CASCADE`);
    }
  });

  it("leaves no rows behind when a session is deleted, evicted or cleaned up", async () => {
    const schema = freshSchema();
    const store = await openStore({ ...LIMITS, maxSessions: 3 }, schema);
    try {
      for (const id of ["a", "b", "c"]) {
        await makeSession(store, id);
        await store.appendEvents(id, [newEvent("user_message", id), newEvent("agent_response", id)]);
        await sleep(2);
      }
      expect(await store.deleteSession("b")).toBe(true);
      expect(await count(schema, "events", "b")).toBe(0);
      await makeSession(store, "d");
      await makeSession(store, "e"); // 4 > 3: "a", least recently updated, goes
      expect(await count(schema, "sessions", "a")).toBe(0);
      expect(await count(schema, "events", "a")).toBe(0);
      expect(await store.cleanup(Date.now() + 1000)).toBe(3);
      expect(await count(schema, "sessions")).toBe(0);
      expect(await count(schema, "events")).toBe(0);
      expect(await store.stats()).toEqual({ totalSessions: 0, totalEvents: 0 });
    } finally {
      await store.close();
    }
  });

  it("takes ids with %_'*?: and newlines literally and lists them in code-point order", async () => {
    const store = await openStore();
    try {
      const ids = ["a%", "a_", "a'b", "a*", "a?", "a:b", "a\nb", "B", "é", "😀", "z"];
      for (const id of ids) {
        await store.createSession({
          sessionId: id,
          appName: `app ${id}`,
          userId: `u%_'\n${id}`,
          metadata: {},
          now: Date.now(),
        });
        await store.appendEvents(id, [newEvent("user_message", id, { eventId: `${id}%_'*?:\n` })]);
      }
      const listed = (await store.listSessions({ limit: 100 })).map((s) => s.sessionId);
      const codePoints = (s: string) => [...s].map((c) => c.codePointAt(0)!);
      const expected = [...ids].sort((x, y) => {
        const [p, q] = [codePoints(x), codePoints(y)];
        for (let i = 0; i < Math.min(p.length, q.length); i++) if (p[i] !== q[i]) return p[i] - q[i];
        return p.length - q.length;
      });
      expect(listed).toEqual(expected);
      for (const id of ids) {
        expect(
          (await store.listSessions({ limit: 100, appName: `app ${id}`, userId: `u%_'\n${id}` })).map(
            (s) => s.sessionId,
          ),
        ).toEqual([id]);
        const retry = await store.appendEvents(id, [newEvent("user_message", id, { eventId: `${id}%_'*?:\n` })]);
        expect(retry.replayed).toBe(true);
      }
      expect(await store.listSessions({ limit: 100, appName: "app a_" })).toHaveLength(1);
      expect(await store.listSessions({ limit: 100, appName: "app a%" })).toHaveLength(1);
    } finally {
      await store.close();
    }
  });

  it("describes durability from synchronous_commit and fsync", async () => {
    const store = await openStore();
    try {
      const durability = await store.describeDurability();
      expect(durability.settings).toMatchObject({
        synchronous_commit: expect.any(String),
        fsync: expect.any(String),
        wal_level: expect.any(String),
      });
      expect(durability.summary).toContain(
        `synchronous_commit=${durability.settings.synchronous_commit}, fsync=${durability.settings.fsync}`,
      );
      if (durability.settings.fsync === "off") expect(durability.summary).toContain("host crashes");
    } finally {
      await store.close();
    }
  });

  it("re-listens after its LISTEN connection is terminated and reports the head it missed", async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema);
    const writer = await PostgresStore.open({ url, schema, limits: LIMITS });
    const listening = async () =>
      (
        await admin.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1", [
          `engram:${schema}:listen`,
        ])
      ).rows[0].n as number;
    try {
      await makeSession(store, "s1");
      const notices: SessionNotice[] = [];
      store.subscribe("s1", (n) => notices.push(n));
      await writer.appendEvents("s1", [newEvent("user_message", 1)]);
      await waitFor(() => notices.some((n) => n.headSeq === 1));
      await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", [
        `engram:${schema}:listen`,
      ]);
      // Most likely inside the reconnect back-off, so its NOTIFY is lost: the resync must report it.
      await writer.appendEvents("s1", [newEvent("user_message", 2)]);
      await waitFor(() => notices.some((n) => n.headSeq === 2));
      const deadline = Date.now() + 5000;
      while ((await listening()) < 2 && Date.now() < deadline) await sleep(20);
      await writer.appendEvents("s1", [newEvent("user_message", 3)]);
      await waitFor(() => notices.some((n) => n.headSeq === 3));
    } finally {
      await writer.close();
      await store.close();
    }
  });

  it("retries a call until a live connection answers when its pooled connections were terminated", async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema);
    try {
      await makeSession(store, "s1");
      await Promise.all([store.getSession("s1"), store.getSession("s1"), store.stats()]); // several pooled connections
      const { rows } = await admin.query(
        "SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1",
        [`engram:${schema}`],
      );
      expect(rows[0].n).toBeGreaterThan(0);
      const appended = await store.appendEvents("s1", [newEvent("user_message", 1, { eventId: "e1" })]);
      expect(appended).toMatchObject({ replayed: false, events: [{ seq: 1 }] });
      expect((await store.readEvents("s1", { limit: 10 })).events.map((e) => e.seq)).toEqual([1]);
    } finally {
      await store.close();
    }
  });

  it.each([
    ["", (store: PostgresStore): MemoryStore => store],
    [
      " (through a ConnectingStore, which passes the call on)",
      (store: PostgresStore): MemoryStore =>
        new ConnectingStore("postgres", async () => store, { failed: () => {}, opened: () => {} }),
    ],
  ])(
    "an append queued behind a locked session gives up at the call's deadline, writes nothing, and frees its connection%s",
    async (_, caller) => {
      const schema = freshSchema();
      const store = await openStore(LIMITS, schema, { poolSize: 2 });
      const holder = await admin.connect();
      try {
        const front = caller(store);
        if (front instanceof ConnectingStore) await front.opened;
        await makeSession(store, "s1");
        await holder.query("BEGIN");
        await holder.query(`SELECT 1 FROM ${pg.escapeIdentifier(schema)}.sessions WHERE session_id = 's1' FOR UPDATE`);
        const started = Date.now();
        const err = await rejection(
          front.appendEvents("s1", [newEvent("user_message", 1, { eventId: "late" })], undefined, {
            deadline: Date.now() + 300,
          }),
        );
        expect(["UNAVAILABLE", "DEADLINE_EXCEEDED"]).toContain(err.code);
        expect(Date.now() - started).toBeLessThan(5000);
        // Nothing is still waiting on the lock server-side: the statement was cancelled, not just abandoned.
        // The server's lock_timeout and the client's query timeout are the same length, so the client may
        // see its timeout a moment before the server cancels: allow 3 s, far below the 15 s statement bound.
        const waiting = async () =>
          (
            await admin.query(
              "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'",
              [`engram:${schema}`],
            )
          ).rows[0].n as number;
        for (const until = Date.now() + 3000; (await waiting()) > 0 && Date.now() < until; ) await sleep(50);
        expect(await waiting()).toBe(0);
        await holder.query("ROLLBACK");
        // The pool (2 connections) still serves, and the timed-out append left no event.
        expect(
          (await store.appendEvents("s1", [newEvent("user_message", 2, { eventId: "next" })])).events.map((e) => e.seq),
        ).toEqual([1]);
        expect((await store.readEvents("s1", { limit: 10 })).events.map((e) => e.eventId)).toEqual(["next"]);
      } finally {
        await holder.query("ROLLBACK").catch(() => {});
        holder.release();
        await store.close();
      }
    },
  );

  it("group commit: a session held by another transaction stalls only its own appends, which land in order once it is free", async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema);
    const holder = await admin.connect();
    try {
      for (const id of ["held", "a", "b", "c", "d"]) await makeSession(store, id);
      await holder.query("BEGIN");
      await holder.query(`SELECT 1 FROM ${pg.escapeIdentifier(schema)}.sessions WHERE session_id = 'held' FOR UPDATE`);
      // Several appends to the held session, then appends to free sessions.
      const held = [1, 2, 3].map((i) =>
        store.appendEvents("held", [newEvent("user_message", i, { eventId: `h${i}` })]),
      );
      let heldSettled = false;
      void Promise.allSettled(held).then(() => (heldSettled = true));
      const free = ["a", "b", "c", "d", "a", "b"].map((id, i) =>
        store.appendEvents(id, [newEvent("user_message", i, { eventId: `f${i}` })]),
      );
      const done = await Promise.race([Promise.all(free), sleep(10_000).then(() => "timeout" as const)]);
      expect(done).not.toBe("timeout");
      expect(heldSettled).toBe(false);
      expect(
        (done as { events: { sessionId: string; seq: number }[] }[])
          .map((r) => `${r.events[0].sessionId}:${r.events[0].seq}`)
          .sort(),
      ).toEqual(["a:1", "a:2", "b:1", "b:2", "c:1", "d:1"]);
      await holder.query("ROLLBACK");
      const seqs = (await Promise.all(held)).map((r) => r.events[0].seq).sort();
      expect(seqs).toEqual([1, 2, 3]);
      expect((await store.readEvents("held", { limit: 10 })).events.map((e) => e.seq)).toEqual([1, 2, 3]);
      expect((await store.stats()).totalEvents).toBe(9);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
      await store.close();
    }
  });

  it("group commit: appends to one session queued together go in successive batches, gapless, in order", async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema);
    try {
      for (const id of ["a", "b"]) await makeSession(store, id);
      // All submitted in one tick: the first goes alone, the rest queue and are batched by distinct session.
      const appends = Array.from({ length: 12 }, (_, i) =>
        store.appendEvents(i % 3 === 2 ? "b" : "a", [newEvent("user_message", i, { eventId: `e${i}` })]),
      );
      const results = await Promise.all(appends);
      const seqsOf = (id: string) => results.filter((r) => r.events[0].sessionId === id).map((r) => r.events[0].seq);
      expect(seqsOf("a")).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
      expect(seqsOf("b")).toEqual([1, 2, 3, 4]);
      expect((await store.readEvents("a", { limit: 20 })).events.map((e) => e.content)).toEqual([
        0, 1, 3, 4, 6, 7, 9, 10,
      ]);
      expect((await store.stats()).totalEvents).toBe(12);

      // append_many_retained itself refuses a batch naming one session twice, and writes nothing.
      const sql = `SELECT * FROM ${pg.escapeIdentifier(schema)}.append_many_retained($1::text[], $2::bigint[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], 500, '{}'::text[], '{}'::bigint[], 0, 0, true, 0::smallint, 'unused', 8000, NULL, now())`;
      const twice = admin.query(sql, [
        ["a", "a"],
        [null, null],
        [1, 2],
        ["x1", "x2"],
        ["t", "t"],
        ["1", "2"],
        ["{}", "{}"],
        [new Date(), new Date()],
        ["f", "f"],
      ]);
      await expect(twice).rejects.toMatchObject({ code: "22023" });
      expect(await count(schema, "events", "a")).toBe(8);
    } finally {
      await store.close();
    }
  });

  it("group commit: one batch of appends with different outcomes answers each on its own", async () => {
    const store = await openStore({ maxSessions: 1000, maxSessionEvents: 3 });
    try {
      for (const id of ["busy1", "busy2", "dup", "stale", "fresh", "retry", "capped"]) await makeSession(store, id);
      await store.appendEvents("dup", [newEvent("user_message", "first", { eventId: "d1" })]);
      await store.appendEvents("retry", [newEvent("user_message", "r1", { eventId: "r1" })]);
      await store.appendEvents(
        "capped",
        ["c1", "c2", "c3"].map((c) => newEvent("user_message", c, { eventId: c })),
      );
      // The first filler takes the batch slot alone; the rest queue meanwhile and go together as one append_many call.
      const fillers = ["busy1", "busy2"].map((id) => store.appendEvents(id, [newEvent("user_message", id)]));
      const [dup, stale, fresh, retry, capped, missing] = await Promise.allSettled([
        store.appendEvents("dup", [newEvent("user_message", "other", { eventId: "d1" })]),
        store.appendEvents("stale", [newEvent("user_message", "s")], 5),
        store.appendEvents("fresh", [newEvent("user_message", "f1"), newEvent("user_message", "f2")], 0),
        store.appendEvents("retry", [
          newEvent("user_message", "r1", { eventId: "r1" }),
          newEvent("user_message", "r2", { eventId: "r2" }),
        ]),
        store.appendEvents(
          "capped",
          ["c4", "c5"].map((c) => newEvent("user_message", c, { eventId: c })),
        ),
        store.appendEvents("nobody", [newEvent("user_message", "x")]),
      ]);
      await Promise.all(fillers);
      expect(dup).toMatchObject({ status: "rejected", reason: { code: "ALREADY_EXISTS" } });
      expect(stale).toMatchObject({ status: "rejected", reason: { code: "FAILED_PRECONDITION" } });
      expect(missing).toMatchObject({ status: "rejected", reason: { code: "NOT_FOUND" } });
      expect(fresh.status === "fulfilled" && fresh.value.events.map((e) => e.seq)).toEqual([1, 2]);
      expect(retry.status === "fulfilled" && retry.value.events.map((e) => [e.seq, e.eventId])).toEqual([
        [1, "r1"],
        [2, "r2"],
      ]);
      expect(capped.status === "fulfilled" && capped.value.events.map((e) => e.seq)).toEqual([4, 5]);
      expect((await store.readEvents("dup", { limit: 10 })).events.map((e) => e.content)).toEqual(["first"]);
      expect((await store.readEvents("stale", { limit: 10 })).events).toEqual([]);
      expect((await store.readEvents("retry", { limit: 10 })).events.map((e) => e.eventId)).toEqual(["r1", "r2"]);
      const kept = await store.readEvents("capped", { limit: 10 });
      expect([kept.firstSeq, kept.headSeq, kept.events.map((e) => e.eventId)]).toEqual([3, 5, ["c3", "c4", "c5"]]);
      // 1 + 1 + 3 before; then 2 fillers, 2 fresh, 1 new retry event, and capped's 2 new less 2 trimmed.
      expect((await store.stats()).totalEvents).toBe(10);
    } finally {
      await store.close();
    }
  });

  it("group commit: an append PostgreSQL refuses fails alone; the appends batched with it are written", async () => {
    const store = await openStore();
    try {
      for (const id of ["a", "b", "c", "d", "e", "f"]) await makeSession(store, id);
      // jsonb refuses the NUL character (the service refuses it before the store; here it reaches the store).
      const appends = ["a", "b", "c", "d", "e", "f"].map((id) =>
        store.appendEvents(id, [newEvent("user_message", id === "d" ? "bad\u0000" : id, { eventId: `${id}1` })]),
      );
      const results = await Promise.allSettled(appends);
      expect(results.map((r) => r.status)).toEqual([
        "fulfilled",
        "fulfilled",
        "fulfilled",
        "rejected",
        "fulfilled",
        "fulfilled",
      ]);
      for (const id of ["a", "b", "c", "e", "f"])
        expect((await store.readEvents(id, { limit: 10 })).events.map((e) => e.content)).toEqual([id]);
      expect((await store.readEvents("d", { limit: 10 })).events).toEqual([]);
      expect((await store.stats()).totalEvents).toBe(5);
    } finally {
      await store.close();
    }
  });

  describe("when PostgreSQL is unreachable", () => {
    let silent: Server;
    let silentPort: number;
    const sockets = new Set<Socket>();
    beforeAll(async () => {
      // Accepts TCP and never answers: only the connect timeout can end the wait.
      silent = createServer((socket) => sockets.add(socket));
      await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
      silentPort = (silent.address() as { port: number }).port;
    });
    afterAll(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    });

    it("fails to open with UNAVAILABLE on a closed port, at once", async () => {
      const port = await freePort();
      const started = Date.now();
      const err = await rejection(
        PostgresStore.open({ url: `postgres://postgres@127.0.0.1:${port}/postgres`, schema: "engram", limits: LIMITS }),
      );
      expect(err.code).toBe("UNAVAILABLE");
      expect(err.message).toContain("ECONNREFUSED");
      expect(Date.now() - started).toBeLessThan(3000);
    });

    it("answers UNAVAILABLE within the connect timeout when the server never responds", async () => {
      const store = new PostgresStore({
        url: `postgres://postgres@127.0.0.1:${silentPort}/postgres`,
        schema: "engram",
        limits: LIMITS,
        connectTimeoutMs: 300,
      });
      try {
        const started = Date.now();
        expect((await rejection(store.ping())).code).toBe("UNAVAILABLE");
        expect((await rejection(store.getSession("s1"))).code).toBe("UNAVAILABLE");
        expect(Date.now() - started).toBeLessThan(3000);
      } finally {
        await store.close();
      }
    });
  });
});

describe("an older release refuses a schema migrated by a newer one", () => {
  const newestKnown = Math.max(
    ...readdirSync(MIGRATIONS_DIR)
      .filter((f) => /^\d{4}_.*\.sql$/.test(f))
      .map((f) => Number(f.slice(0, 4))),
  );
  const newer = newestKnown + 1;
  const pad = (v: number) => String(v).padStart(4, "0");

  /** A schema holding only schema_migrations with these versions, as a release this one does not know would leave it. */
  async function schemaAt(versions: number[]): Promise<string> {
    const schema = freshSchema();
    const quoted = pg.escapeIdentifier(schema);
    await admin.query(`CREATE SCHEMA ${quoted}`);
    await admin.query(
      `CREATE TABLE ${quoted}.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
    );
    for (const v of versions)
      await admin.query(`INSERT INTO ${quoted}.schema_migrations (version, name) VALUES ($1, $2)`, [
        v,
        `${pad(v)}_later.sql`,
      ]);
    return schema;
  }

  /** The schema's tables and recorded versions, to show a refusal touched nothing. */
  async function contents(schema: string): Promise<{ tables: string[]; versions: number[] }> {
    const tables = await admin.query(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY table_name",
      [schema],
    );
    const versions = await admin.query(
      `SELECT version FROM ${pg.escapeIdentifier(schema)}.schema_migrations ORDER BY version`,
    );
    return { tables: tables.rows.map((r) => r.table_name), versions: versions.rows.map((r) => r.version) };
  }

  const drop = (schema: string) => admin.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);

  it("PostgresStore.open fails naming both versions and applies nothing", async () => {
    const schema = await schemaAt([1, newer]);
    try {
      const err = await PostgresStore.open({ url, schema, limits: LIMITS }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StoreIncompatibleError);
      expect((err as Error).message).toBe(
        `schema "${schema}" is at migration ${pad(newer)} but this Engram knows migrations up to ${pad(newestKnown)}: ` +
          "a newer release migrated it; upgrade this replica (an older replica must not write into a newer schema)",
      );
      expect(await contents(schema)).toEqual({ tables: ["schema_migrations"], versions: [1, newer] });
    } finally {
      await drop(schema);
    }
  });

  it("a replica of the previous release refuses the schema this release migrated, naming both versions", async () => {
    // What the previous release ships: every migration but this release's newest.
    const previous = newestKnown - 1;
    const schema = freshSchema();
    const store = await PostgresStore.open({ url, schema, limits: LIMITS });
    try {
      await store.close();
      const { rows } = await admin.query(
        `SELECT version FROM ${pg.escapeIdentifier(schema)}.schema_migrations ORDER BY version`,
      );
      const applied = rows.map((r) => r.version as number);
      expect(applied.at(-1)).toBe(newestKnown);
      const known = Array.from({ length: previous }, (_, i) => i + 1);
      expect(schemaVersionProblem(schema, applied, known)).toBe(
        `schema "${schema}" is at migration ${pad(newestKnown)} but this Engram knows migrations up to ${pad(previous)}: ` +
          "a newer release migrated it; upgrade this replica (an older replica must not write into a newer schema)",
      );
      // This release itself uses it.
      expect(schemaVersionProblem(schema, applied, applied)).toBeUndefined();
    } finally {
      await drop(schema);
    }
  });

  it("PostgresStore.open fails on a schema that lacks a migration below its newest, naming the missing one", async () => {
    const schema = await schemaAt([1, 3]);
    try {
      const err = await PostgresStore.open({ url, schema, limits: LIMITS }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StoreIncompatibleError);
      expect((err as Error).message).toMatch(
        new RegExp(`^schema "${schema}" is at migration 0003 but lacks migration 0002 `),
      );
      expect(await contents(schema)).toEqual({ tables: ["schema_migrations"], versions: [1, 3] });
    } finally {
      await drop(schema);
    }
  });

  it("the API key store refuses it too, rather than reporting an outage to retry", async () => {
    const schema = await schemaAt([1, newer]);
    try {
      const err = await PostgresKeyStore.open(url, schema).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(StoreIncompatibleError);
      expect((err as Error).message).toContain(
        `is at migration ${pad(newer)} but this Engram knows migrations up to ${pad(newestKnown)}`,
      );
    } finally {
      await drop(schema);
    }
  });

  it("a server started on it exits 2 with the message instead of serving", async () => {
    const schema = await schemaAt([1, newer]);
    try {
      // spawnServer rejects with the exit code and the output when the process exits before listening.
      const outcome = await spawnServer({
        MEMORY_TYPE: "postgres",
        MEMORY_POSTGRES_URL: url,
        MEMORY_KEY_PREFIX: schema,
      }).then(
        async (server) => {
          await server.kill();
          return "listening (unready, retrying) instead of exiting";
        },
        (err: unknown) => (err as Error).message,
      );
      expect(outcome).toContain("server exited with 2 before listening");
      expect(outcome).toContain(
        `engram: refusing the store: MEMORY_TYPE=postgres: cannot open schema "${schema}" at MEMORY_POSTGRES_URL: `,
      );
      expect(outcome).toContain(
        `is at migration ${pad(newer)} but this Engram knows migrations up to ${pad(newestKnown)}`,
      );
      expect(await contents(schema)).toEqual({ tables: ["schema_migrations"], versions: [1, newer] });
    } finally {
      await drop(schema);
    }
  }, 60_000);

  it("a server that finds it only once PostgreSQL answers (after retrying an outage) exits 2 too", async () => {
    const schema = await schemaAt([1, newer]);
    const target = new URL(url);
    const proxy = await startChaosProxy(Number(target.port), target.hostname);
    let server: ServerProcess | undefined;
    try {
      proxy.set({ kind: "refuse" });
      const viaProxy = new URL(url);
      viaProxy.port = String(proxy.port);
      server = await spawnServer({
        MEMORY_TYPE: "postgres",
        MEMORY_POSTGRES_URL: viaProxy.toString(),
        MEMORY_KEY_PREFIX: schema,
      });
      // Up and unready through the outage, as any backend down at start-up.
      expect(server.child.exitCode).toBeNull();
      proxy.set({ kind: "pass" });
      const exit = await Promise.race([
        server.exited,
        sleep(30_000, undefined, { ref: false }).then(() => "still running after 30 s"),
      ]);
      expect(exit).toEqual({ code: 2, signal: null });
      const refusal = server.lines.find((line) => line.includes("refusing the store"));
      expect(refusal).toContain(
        `is at migration ${pad(newer)} but this Engram knows migrations up to ${pad(newestKnown)}`,
      );
      expect(await contents(schema)).toEqual({ tables: ["schema_migrations"], versions: [1, newer] });
    } finally {
      await server?.kill();
      await proxy.close();
      await drop(schema);
    }
  }, 60_000);
});

describe("PostgresStore long-term memories", () => {
  it("reads no embedding from PostgreSQL for a filter that omits them, and the same records otherwise", async () => {
    const store = await openStore(LIMITS, freshSchema());
    try {
      await store.memories.writeMemories([
        memory({ memoryId: "near", userId: "u", text: "window seat on trains", embedding: [1, 0, 0] }),
        memory({ memoryId: "far", userId: "u", text: "aisle seat on planes", embedding: [0, 1, 0] }),
      ]);
      const filter = { scope: { appName: "app", userId: "u", match: "exact" as const }, asOf: Date.now() };
      const reads = async (f: typeof filter & { omitEmbeddings?: boolean }) => [
        ...(await store.memories.searchMemories(f, "seat", 5)).map((r) => r.memory),
        ...(await store.memories.nearestMemories!(f, [1, 0, 0], 5)).map((r) => r.memory),
        ...(await store.memories.listMemories(f, 5)),
      ];
      const full = await reads(filter);
      expect(full).toHaveLength(6);
      expect(full.every((m) => m.embedding?.length === 3)).toBe(true);
      const omitted = await reads({ ...filter, omitEmbeddings: true });
      expect(omitted.map((m) => m.embedding)).toEqual(full.map(() => undefined));
      expect(omitted).toEqual(full.map(({ embedding: _, ...rest }) => rest));
    } finally {
      await store.close();
    }
  });

  it("two replicas writing the same key at once leave exactly one valid memory, the others closed in a chain", async () => {
    const schema = freshSchema();
    const a = await openStore(LIMITS, schema);
    const b = await PostgresStore.open({ url, schema, limits: LIMITS });
    try {
      for (let round = 0; round < 10; round++) {
        const key = `drink-${round}`;
        // Eight writers of one key, four through each replica, all valid from the same instant or later;
        // two of them in batches of 21 memories.
        const padding = (i: number) =>
          i % 4 === 3
            ? Array.from({ length: 20 }, (_, j) =>
                memory({ memoryId: `${key}-${i}-pad-${j}`, userId: "u", text: "padding" }),
              )
            : [];
        await Promise.all(
          Array.from({ length: 8 }, (_, i) =>
            (i % 2 ? a : b).memories.writeMemories([
              ...padding(i),
              memory({ memoryId: `${key}-${i}`, userId: "u", key, text: `drinks ${i}`, validFrom: 1000 + (i % 3) }),
            ]),
          ),
        );
        const versions = await a.memories.listMemories(
          { scope: { appName: "app", userId: "u", match: "exact" }, key },
          100,
        );
        expect(versions).toHaveLength(8);
        const open = versions.filter((m) => m.invalidAt === undefined);
        expect(
          open.map((m) => m.memoryId),
          `round ${round}`,
        ).toHaveLength(1);
        // Whatever the commit order, at no instant do two versions hold.
        for (const at of [999, 1000, 1001, 1002, 5000]) {
          const holding = await b.memories.listMemories(
            { scope: { appName: "app", userId: "u", match: "exact" }, key, asOf: at },
            100,
          );
          expect(holding.length, `round ${round} as of ${at}`).toBeLessThanOrEqual(1);
        }
      }
    } finally {
      await b.close();
      await a.close();
    }
  }, 60_000);

  it("writers of one app that share no key never wait on each other: 16 writers on two replicas pass a batch held inside its transaction", async () => {
    const schema = freshSchema();
    const a = await openStore(LIMITS, schema);
    const b = await PostgresStore.open({ url, schema, limits: LIMITS });
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    const waiting = async () =>
      (await holder.query<{ locktype: string }>("SELECT locktype FROM pg_locks WHERE NOT granted")).rows.map(
        (r) => r.locktype,
      );
    const until = async (check: () => Promise<boolean>, what: string) => {
      for (const deadline = Date.now() + 20_000; !(await check()); await sleep(20))
        if (Date.now() > deadline) throw new Error(`not within 20 s: ${what}`);
    };
    let released = false;
    try {
      await a.memories.writeMemories([memory({ memoryId: "tea", userId: "held", key: "drink", text: "drinks tea" })]);
      // A batch stuck inside its transaction, after its locks: it must close "tea", whose row this client holds.
      await holder.query("BEGIN");
      await holder.query(`SELECT 1 FROM "${schema}".memories WHERE app_name = 'app' AND memory_id = 'tea' FOR UPDATE`);
      const stuck = a.memories.writeMemories([
        memory({ memoryId: "coffee", userId: "held", key: "drink", text: "drinks coffee" }),
      ]);
      await until(async () => (await waiting()).includes("transactionid"), "the held batch waits on the row");
      // A batch of the same key waits for it, on the key's lock.
      const sameKey = b.memories.writeMemories([
        memory({ memoryId: "water", userId: "held", key: "drink", text: "drinks water" }),
      ]);
      await until(async () => (await waiting()).includes("advisory"), "the same key's batch waits on the key");

      // Sixteen writers of the same app, one user each, alternating replicas: batches of 100 memories,
      // one without keys, then two of facts whose keys (subject and predicate) the second closes, in each user's own scope.
      const batchOf = (w: number, round: number) =>
        Array.from({ length: 100 }, (_, i) =>
          memory({
            memoryId: `w${w}-${round}-${i}`,
            userId: `writer-${w}`,
            text: `note ${i}`,
            ...(round > 0 ? { fact: { subject: `item ${i}`, predicate: "is in", object: `box ${w}` } } : {}),
          }),
        );
      const writers = Promise.all(
        Array.from({ length: 16 }, async (_, w) => {
          for (let round = 0; round < 3; round++) await (w % 2 ? a : b).memories.writeMemories(batchOf(w, round));
        }),
      );
      const timedOut = sleep(30_000).then(() => "waited");
      expect(
        await Promise.race([writers.then(() => "done"), timedOut]),
        "writers sharing no key with the held batch waited for it",
      ).toBe("done");
      expect((await waiting()).filter((t) => t === "advisory")).toHaveLength(1);

      await holder.query("COMMIT");
      released = true;
      await Promise.all([stuck, sameKey]);
      const versions = await a.memories.listMemories(
        { scope: { appName: "app", userId: "held", match: "exact" }, key: "drink" },
        10,
      );
      expect(versions.map((m) => m.memoryId).sort()).toEqual(["coffee", "tea", "water"]);
      expect(versions.filter((m) => m.invalidAt === undefined)).toHaveLength(1);
      const writer3 = { appName: "app", userId: "writer-3", match: "exact" } as const;
      expect(await b.memories.listMemories({ scope: writer3 }, 1000)).toHaveLength(300);
      expect(await b.memories.listMemories({ scope: writer3, asOf: Date.now() }, 1000)).toHaveLength(200);
    } finally {
      if (!released) await holder.query("ROLLBACK").catch(() => {});
      await holder.end();
      await b.close();
      await a.close();
    }
  }, 120_000);

  it("two replicas writing first embeddings of different dimensions into one app at once: one is refused", async () => {
    const schema = freshSchema();
    const a = await openStore(LIMITS, schema);
    const b = await PostgresStore.open({ url, schema, limits: LIMITS });
    try {
      for (let round = 0; round < 5; round++) {
        const appName = `dims-${round}`;
        const results = await Promise.allSettled([
          a.memories.writeMemories([memory({ memoryId: "two", appName, text: "x", embedding: [1, 0] })]),
          b.memories.writeMemories([memory({ memoryId: "three", appName, text: "y", embedding: [1, 0, 0] })]),
        ]);
        expect(
          results.filter((r) => r.status === "fulfilled"),
          `round ${round}`,
        ).toHaveLength(1);
        const refused = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
        expect(refused.reason).toMatchObject({ code: "INVALID_ARGUMENT", field: "memories[0].embedding" });
      }
    } finally {
      await b.close();
      await a.close();
    }
  });

  it("a subscriber on one replica hears how far another's changes go, and reads them from the change log", async () => {
    const schema = freshSchema();
    const watcher = await openStore(LIMITS, schema);
    const writer = await PostgresStore.open({ url, schema, limits: LIMITS });
    try {
      const changes: MemoryChange[] = [];
      watcher.memories.subscribeMemories("app", (c) => changes.push(c));
      await writer.memories.writeMemories([
        memory({ memoryId: "a", userId: "u", agentId: "x", key: "k", text: "one", validFrom: 1000 }),
      ]);
      await writer.memories.writeMemories([
        memory({ memoryId: "b", userId: "u", agentId: "x", key: "k", text: "two", validFrom: 2000 }),
      ]);
      await writer.memories.writeMemories([memory({ memoryId: "elsewhere", appName: "other", text: "not this app" })]);
      await writer.memories.deleteMemories("app", ["a"]);
      await waitFor(() => changes.some((c) => c.seq === 4), 10_000);
      expect(changes.every((c) => c.kind === "remote")).toBe(true);
      const { changes: logged, through } = await watcher.memories.readMemoryChanges("app", 0, 10);
      expect(through).toBe(4);
      // The log refers to a's writes, but a is gone: its deletion (ids and scope only) stands for it.
      const seen = logged.map((c) =>
        c.kind === "deleted"
          ? `deleted ${c.memories.map((m) => `${m.memoryId}/${m.userId}/${m.agentId}`)}`
          : c.kind === "remote"
            ? "remote"
            : `${c.seq} ${c.kind} ${c.memory.memoryId}`,
      );
      expect(seen).toEqual(["3 written b", "deleted a/u/x"]);
      // Written memories arrive whole, as they are now.
      expect(logged[0]).toMatchObject({ kind: "written", memory: { memoryId: "b", text: "two", userId: "u" } });
    } finally {
      await writer.close();
      await watcher.close();
    }
  });

  it("pages a user's VISIBLE listing newest first across their own and the shared memories, without repeats or gaps", async () => {
    const store = await openStore();
    try {
      // Own, shared and another user's memories interleaved in time, some created in the same millisecond.
      const owners = [{ userId: "u" }, {}, { userId: "v" }, { userId: "u", agentId: "a" }];
      await store.memories.writeMemories(
        Array.from({ length: 40 }, (_, i) =>
          memory({ memoryId: `m${String(i).padStart(2, "0")}`, text: "x", ...owners[i % 4] }, 1000 + Math.floor(i / 3)),
        ),
      );
      const scope = { appName: "app", userId: "u", match: "visible" as const };
      const seen: string[] = [];
      let after: { createdAt: number; memoryId: string } | undefined;
      for (let page = 0; page < 20; page++) {
        const rows = await store.memories.listMemories({ scope }, 3, after);
        seen.push(...rows.map((m) => m.memoryId));
        if (rows.length < 3) break;
        after = rows[rows.length - 1];
      }
      const expected = Array.from({ length: 40 }, (_, i) => i)
        .filter((i) => i % 4 < 2)
        .reverse()
        .map((i) => `m${String(i).padStart(2, "0")}`);
      expect(seen).toEqual(expected);
    } finally {
      await store.close();
    }
  });

  it("searches with any user text: quotes, backslashes, operators and stop words never fail the query", async () => {
    const store = await openStore();
    try {
      await store.memories.writeMemories([
        memory({ memoryId: "tea", text: "Alice's favourite drink is green tea (not coffee!)" }),
        memory({ memoryId: "path", text: "The backup lives in C:\\data\\backup & nowhere else" }),
      ]);
      const search = (q: string) =>
        store.memories.searchMemories({ scope: { appName: "app", match: "visible" } }, q, 10);
      for (const q of [
        "'",
        "''",
        "\\",
        "\\'",
        "a & b | !c",
        "(((",
        "tea:*",
        '"unterminated',
        "-coffee",
        "or",
        "the of and",
        "<->",
        "!!",
        "😀 tea",
        "'tea' & 'coffee'",
        ":",
        "tea:A",
      ]) {
        await expect(search(q), q).resolves.toBeInstanceOf(Array);
      }
      // OR of the query's terms: one matching word finds the memory.
      expect((await search("what is Alice drinking today")).map((r) => r.memory.memoryId)).toEqual(["tea"]);
      expect((await search("backup")).map((r) => r.memory.memoryId)).toEqual(["path"]);
      expect((await search("'tea'")).map((r) => r.memory.memoryId)).toEqual(["tea"]);
      expect(await search("the of and")).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it("migrations 0010 and 0011 apply to a schema an earlier release left, keeping its sessions", async () => {
    const schema = freshSchema();
    const quoted = pg.escapeIdentifier(schema);
    const first = await PostgresStore.open({ url, schema, limits: LIMITS });
    await makeSession(first, "s1");
    await first.appendEvents("s1", [newEvent("user_message", 1)]);
    await first.close();
    // What the release before 0010 left: no memory tables, migrations up to the one before.
    await admin.query(`DROP TABLE ${quoted}.memories, ${quoted}.memory_dimensions`);
    await admin.query(`DELETE FROM ${quoted}.schema_migrations WHERE version >= 10`);
    const store = await openStore(LIMITS, schema);
    try {
      const { rows } = await admin.query(
        `SELECT array_agg(version ORDER BY version)::int[] AS v FROM ${quoted}.schema_migrations WHERE version IN (10, 11)`,
      );
      expect(rows[0].v).toEqual([10, 11]);
      expect((await store.readEvents("s1", { limit: 10 })).events).toHaveLength(1);
      await store.memories.writeMemories([
        memory({ memoryId: "m", userId: "u", text: "remembered after the upgrade", embedding: [1, 0] }),
      ]);
      const scope = { appName: "app", userId: "u", match: "visible" } as const;
      expect((await store.memories.searchMemories({ scope }, "upgrade", 5)).map((r) => r.memory.memoryId)).toEqual([
        "m",
      ]);
      expect((await store.memories.nearestMemories({ scope }, [1, 0], 5)).map((r) => r.memory.memoryId)).toEqual(["m"]);
    } finally {
      await store.close();
    }
  });

  it(`the change log holds the newest ${MEMORY_CHANGES_RETAINED} changes of an app, no more`, async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema);
    try {
      const all = Array.from({ length: MEMORY_CHANGES_RETAINED + 5 }, (_, i) =>
        memory({ memoryId: `m${i}`, text: "x" }),
      );
      for (let i = 0; i < all.length; i += 1000) await store.memories.writeMemories(all.slice(i, i + 1000));
      await store.memories.deleteMemories("app", ["m0"]);
      const { rows } = await admin.query<{ n: string; first: string }>(
        `SELECT count(*) AS n, min(seq) AS first FROM ${pg.escapeIdentifier(schema)}.memory_changes WHERE app_name = 'app'`,
      );
      expect(rows[0]).toEqual({ n: String(MEMORY_CHANGES_RETAINED), first: "7" });
    } finally {
      await store.close();
    }
  }, 60_000);

  it("migration 0012 (session state) applies to a schema an earlier release left, keeping its sessions and events", async () => {
    const schema = freshSchema();
    const quoted = pg.escapeIdentifier(schema);
    const first = await PostgresStore.open({ url, schema, limits: LIMITS });
    await makeSession(first, "s1");
    await first.appendEvents("s1", [newEvent("user_message", 1)]);
    await first.close();
    // What the release before 0012 left: no state columns or tables (nor the memory change log of 0013).
    await admin.query(`ALTER TABLE ${quoted}.sessions DROP COLUMN state, DROP COLUMN version`);
    await admin.query(`ALTER TABLE ${quoted}.events DROP COLUMN state_delta`);
    await admin.query(
      `DROP TABLE ${quoted}.app_state, ${quoted}.user_state, ${quoted}.memory_changes, ${quoted}.memory_change_heads`,
    );
    await admin.query(`DELETE FROM ${quoted}.schema_migrations WHERE version >= 12`);
    const store = await openStore(LIMITS, schema);
    try {
      expect(await store.getSession("s1")).toMatchObject({ headSeq: 1, state: {}, version: 0 });
      expect((await store.readEvents("s1", { limit: 10 })).events[0].stateDelta).toBeUndefined();
      await store.appendEvents("s1", [
        newEvent("agent_response", 2, { eventId: "e2", stateDelta: { a: 1, "user:b": 2 } }),
      ]);
      expect(await store.getSession("s1")).toMatchObject({ headSeq: 2, state: { a: 1 }, version: 1 });
      expect(await store.sharedState("app", "user")).toEqual({ app: {}, user: { b: 2 } });
    } finally {
      await store.close();
    }
  });

  it("forgets and erases more memories than one delete transaction holds", async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema);
    try {
      // 10,001 of u's memories and 10,001 of v's (one past the batch of 10,000 each), written in SQL for speed.
      for (const user of ["u", "v"]) {
        await admin.query(
          `INSERT INTO ${pg.escapeIdentifier(schema)}.memories (app_name, memory_id, user_id, scope_key, text, created_ms, valid_from_ms, fingerprint, analyzer)
           SELECT 'app', $1 || n, $1, '["' || $1 || '",null,null]', 'bulk ' || n, n, n, 'f' || n, 0 FROM generate_series(1, 10001) n`,
          [user],
        );
      }
      expect(await store.memories.deleteMemoriesInScope({ appName: "app", userId: "u", match: "within" })).toHaveLength(
        10_001,
      );
      expect(await store.deleteUserData("app", "v")).toEqual({ sessions: 0, events: 0, memories: 10_001 });
      expect(await store.memories.listMemories({ scope: { appName: "app", match: "within" } }, 10)).toEqual([]);
    } finally {
      await store.close();
    }
  }, 60_000);

  it("a resumed erasure removes the user's memories too", async () => {
    const schema = freshSchema();
    const store = await openStore(LIMITS, schema);
    try {
      await store.memories.writeMemories([
        memory({ memoryId: "gone", userId: "gone", text: "x" }),
        memory({ memoryId: "kept", userId: "stays", text: "y" }),
      ]);
      // An erasure whose replica died before removing anything: only its record is there.
      await admin.query(
        `INSERT INTO ${pg.escapeIdentifier(schema)}.erasures (app_name, user_id, token) VALUES ('app', 'gone', 'token-of-a-dead-replica')`,
      );
      await store.resumeErasures();
      expect(await store.memories.getMemory("app", "gone")).toBeUndefined();
      expect(await store.memories.getMemory("app", "kept")).toBeDefined();
    } finally {
      await store.close();
    }
  });
});
