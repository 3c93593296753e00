/**
 * The RPC suite on the PostgreSQL store (every server gets its own schema,
 * dropped when it stops), and what only PostgreSQL shows through the RPCs:
 * the client's deadline bounds the database work of its call.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Code } from "@connectrpc/connect";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres.js";
import { connectClient, errorOf, grpcJsClient, type MemoryClient } from "../support/clients.js";
import { startTestServer } from "../support/engram.js";
import { describeRpcSuite } from "./suite.js";

const url = process.env.MEMORY_TEST_POSTGRES_URL!;
const admin = new pg.Pool({ connectionString: url, max: 3 });
admin.on("error", () => {});
afterAll(() => admin.end());
let schemas = 0;
const freshSchema = () => `rpc_${process.pid}_${++schemas}_${Math.random().toString(36).slice(2, 8)}`;

describeRpcSuite("postgres", async (limits) => {
  const schema = freshSchema();
  const store = await PostgresStore.open({ url, schema, limits });
  const close = store.close.bind(store);
  store.close = async () => {
    await close();
    await admin.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
  };
  return store;
});

describe("postgres: the client's deadline bounds its call's work in the database", () => {
  /** Far beyond every wait below: only the call's deadline can end a statement sooner. */
  const STORE_TIMEOUT_MS = 60_000;
  /** The clients' deadline: short, but long enough to reach the database on a busy box. */
  const DEADLINE_MS = 500;

  /** A server on its own schema with a 2-connection pool; `stop` drops the schema. */
  async function start() {
    const schema = freshSchema();
    const store = await PostgresStore.open({
      url,
      schema,
      limits: { maxSessions: 0, maxSessionEvents: 0 },
      queryTimeoutMs: STORE_TIMEOUT_MS,
      poolSize: 2,
    });
    const server = await startTestServer({ store });
    const clients: Array<[string, MemoryClient]> = [
      ["gRPC", grpcJsClient(server.address)],
      ["Connect", connectClient(server.baseUrl)],
    ];
    const quoted = pg.escapeIdentifier(schema);
    /** Locks held or awaited by the server's pooled connections (idle ones hold none). */
    const serverLocks = async (which: "waiting" | "any") => {
      const { rows } = await admin.query(
        `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE a.application_name = $1 ${which === "waiting" ? "AND NOT l.granted" : ""}`,
        [`engram:${schema}`],
      );
      return rows[0].n as number;
    };
    /** Polls `check` every 50 ms for at most `ms`; its last answer. */
    const within = async (ms: number, check: () => Promise<boolean>) => {
      const until = Date.now() + ms;
      let ok = await check();
      while (!ok && Date.now() < until) {
        await sleep(50);
        ok = await check();
      }
      return ok;
    };
    const stop = async () => {
      for (const [, client] of clients) client.close();
      await server.stop();
      await admin.query(`DROP SCHEMA IF EXISTS ${quoted} CASCADE`);
    };
    return { schema, quoted, clients, serverLocks, within, stop };
  }

  const event = (eventId: string) => ({
    sessionId: "held",
    event: { eventId, eventType: "user_message", content: { kind: { case: "stringValue" as const, value: eventId } } },
  });

  it("AddEvent on a session another transaction holds ends DEADLINE_EXCEEDED, its statement and locks are gone at once, and nothing lands later", async () => {
    const { quoted, clients, serverLocks, within, stop } = await start();
    const holder = await admin.connect();
    try {
      await clients[0][1].createSession({ sessionId: "held", appName: "app", userId: "ann" });
      await holder.query("BEGIN");
      await holder.query(`SELECT 1 FROM ${quoted}.sessions WHERE session_id = 'held' FOR UPDATE`);

      for (const [name, client] of clients) {
        const err = await errorOf(client.addEvent(event(`late-${name}`), { timeoutMs: DEADLINE_MS }));
        expect(err.code, `${name}: ${err.message}`).toBe(Code.DeadlineExceeded);
      }
      // The server's statements gave up at the deadline (lock_timeout inside the append), long before
      // the store timeout: no pooled connection waits for the row or holds a lock.
      expect(await within(10_000, async () => (await serverLocks("any")) === 0)).toBe(true);

      // Control: an append without a deadline does wait for the row, as long as the holder holds it.
      const patient = clients[0][1].addEvent(event("patient"));
      expect(await within(10_000, async () => (await serverLocks("waiting")) === 1)).toBe(true);
      // Still waiting well past the deadline the others had: the absence of giving up is what is checked.
      await sleep(DEADLINE_MS * 2);
      expect(await serverLocks("waiting")).toBe(1);

      await holder.query("ROLLBACK");
      expect(Number((await patient).event!.seq)).toBe(1);
      const { events } = await clients[1][1].getSessionEvents({ sessionId: "held" });
      expect(events.map((e) => e.eventId)).toEqual(["patient"]);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
      await stop();
    }
  });

  it("GetSessionEvents behind a table lock ends DEADLINE_EXCEEDED and gives its pooled connection back at the deadline", async () => {
    const { quoted, clients, within, stop } = await start();
    const holder = await admin.connect();
    try {
      await clients[0][1].createSession({ sessionId: "held", appName: "app", userId: "ann" });
      await clients[0][1].addEvent(event("e1"));
      await holder.query("BEGIN");
      await holder.query(`LOCK TABLE ${quoted}.events IN ACCESS EXCLUSIVE MODE`);

      // One read per pooled connection (2), each stuck behind the lock until its deadline.
      const reads = clients.map(([name, client]) =>
        errorOf(client.getSessionEvents({ sessionId: "held" }, { timeoutMs: DEADLINE_MS })).then(
          (err) => [name, err] as const,
        ),
      );
      for (const [name, err] of await Promise.all(reads))
        expect(err.code, `${name}: ${err.message}`).toBe(Code.DeadlineExceeded);

      // Both connections were handed back: a read of another table is served while the lock is still held
      // (otherwise it would queue for a connection until the store timeout, and fail UNAVAILABLE).
      const served = () =>
        clients[0][1].getSession({ sessionId: "held" }, { timeoutMs: 2000 }).then(
          () => true,
          () => false,
        );
      expect(await within(10_000, served)).toBe(true);
      const held = await holder.query(
        "SELECT count(*)::int AS n FROM pg_locks WHERE pid = pg_backend_pid() AND mode = 'AccessExclusiveLock' AND granted",
      );
      expect(held.rows[0].n).toBeGreaterThan(0);

      await holder.query("ROLLBACK");
      const { events } = await clients[1][1].getSessionEvents({ sessionId: "held" });
      expect(events.map((e) => e.eventId)).toEqual(["e1"]);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
      await stop();
    }
  });

  it("SearchMemories and WriteMemories behind a lock on the memories table end DEADLINE_EXCEEDED and give their pooled connections back, where a call without a deadline waits", async () => {
    const { quoted, clients, within, stop } = await start();
    const holder = await admin.connect();
    try {
      const [, client] = clients[0];
      await client.writeMemories({
        memories: [{ memoryId: "m1", appName: "app", userId: "ann", text: "prefers green tea" }],
      });
      await holder.query("BEGIN");
      await holder.query(`LOCK TABLE ${quoted}.memories IN ACCESS EXCLUSIVE MODE`);

      // One call per pooled connection (2), each stuck behind the lock until its deadline.
      const [searchErr, writeErr] = await Promise.all([
        errorOf(
          clients[0][1].searchMemories(
            { appName: "app", userId: "ann", query: "tea", topK: 5 },
            { timeoutMs: DEADLINE_MS },
          ),
        ),
        errorOf(
          clients[1][1].writeMemories(
            { memories: [{ memoryId: "m2", appName: "app", userId: "ann", text: "walks to work" }] },
            { timeoutMs: DEADLINE_MS },
          ),
        ),
      ]);
      expect(searchErr.code, searchErr.message).toBe(Code.DeadlineExceeded);
      expect(writeErr.code, writeErr.message).toBe(Code.DeadlineExceeded);
      // Both connections were handed back: a read of another table is served while the lock is still held.
      const served = () =>
        client.getSession({ sessionId: "none" }, { timeoutMs: 2000 }).then(
          () => true,
          (err: { code?: Code }) => err.code === Code.NotFound,
        );
      expect(await within(10_000, served)).toBe(true);

      // Control: a search without a deadline waits as long as the holder holds the lock.
      let settled = false;
      const patient = client
        .searchMemories({ appName: "app", userId: "ann", query: "tea", topK: 5 })
        .finally(() => (settled = true));
      // Still unanswered well past the deadline the others had: the absence of an answer is what is checked.
      await sleep(DEADLINE_MS * 3);
      expect(settled).toBe(false);

      await holder.query("ROLLBACK");
      expect((await patient).results.map((r) => r.memory?.memoryId)).toEqual(["m1"]);
      // The write that timed out stored nothing.
      expect((await client.listMemories({ appName: "app", userId: "ann" })).memories.map((m) => m.memoryId)).toEqual([
        "m1",
      ]);
    } finally {
      await holder.query("ROLLBACK").catch(() => {});
      holder.release();
      await stop();
    }
  });
});
