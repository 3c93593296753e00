/**
 * A scoped key's call is held to the session its scope check saw, never to
 * a session created later under the same id: session ids are the client's,
 * so between the check and the service's store calls the session can be
 * deleted and created again by another tenant (StoreCall.expectedIncarnation).
 *
 * Forced deterministically through a real server on PostgreSQL: Recall reads
 * its session (the scope check, then Recall itself), then the memories, then
 * the session's events. The test holds the memories table (LOCK TABLE in an
 * open transaction) until PostgreSQL shows Recall's memory read waiting on
 * it, replaces the session through the server meanwhile, and lets go.
 * The writes and the other reads have no such point between their check and
 * their one store call that a test can hold without a hook in the store: the
 * store conformance suite (test/store/conformance.ts, "5c") forces their
 * interleaving on every store instead.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey, type ApiKeyRecord } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { PostgresStore } from "../../src/store/postgres.js";
import { connectClient, errorOf, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

const url = process.env.MEMORY_TEST_POSTGRES_URL!;
const schema = `replaced_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
const APP = "replaced-app";
const OTHER_APP = "replaced-other";
/** Longest wait for Recall to reach the held table; generous for a shared 2-core box. */
const REACH_TIMEOUT_MS = 20_000;

let dir: string;
let server: TestServer;
let admin: pg.Client;
let alice: MemoryClient;
let everyApp: MemoryClient;
let other: MemoryClient;
const text = (s: string) => ({ kind: { case: "stringValue" as const, value: s } });

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-replaced-"));
  const keyFile = new FileKeyStore(path.join(dir, "keys.json"));
  const keyFor = async (scope: Pick<ApiKeyRecord, "role" | "apps" | "userId">) => {
    const { key, record } = generateApiKey(scope);
    await keyFile.create(record);
    return key;
  };
  const keys = {
    alice: await keyFor({ role: "write", apps: [APP], userId: "alice" }),
    everyApp: await keyFor({ role: "admin", apps: ["*"] }),
    other: await keyFor({ role: "write", apps: [OTHER_APP] }),
  };
  const store = await PostgresStore.open({ url, schema, limits: { maxSessions: 0, maxSessionEvents: 0 } });
  server = await startTestServer({ store, config: { auth: true, authKeysFile: keyFile.path, authCacheMs: 0 } });
  const client = (key: string) => connectClient(server.baseUrl, { headers: { authorization: `Bearer ${key}` } });
  [alice, everyApp, other] = [client(keys.alice), client(keys.everyApp), client(keys.other)];
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
});

afterAll(async () => {
  await server?.stop();
  await admin?.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
  await admin?.end();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Runs `call` while the schema's memories table is locked, runs `meanwhile`
 * once PostgreSQL shows the server's statement waiting for that lock, then
 * lets go; `call`'s outcome, settled.
 */
async function whileMemoriesHeld<T>(call: () => Promise<T>, meanwhile: () => Promise<void>): Promise<PromiseSettledResult<T>> {
  const holder = new pg.Client({ connectionString: url });
  await holder.connect();
  try {
    await holder.query("BEGIN");
    await holder.query(`LOCK TABLE ${pg.escapeIdentifier(schema)}.memories IN ACCESS EXCLUSIVE MODE`);
    const outcome = call().then(
      (value) => ({ status: "fulfilled", value }) as const,
      (reason: unknown) => ({ status: "rejected", reason }) as const,
    );
    const deadline = Date.now() + REACH_TIMEOUT_MS;
    for (;;) {
      const { rows } = await admin.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%memories%'",
        [`engram:${schema}`],
      );
      if (rows[0].n > 0) break;
      if (Date.now() > deadline) throw new Error(`the server's memory read did not wait on the held table within ${REACH_TIMEOUT_MS} ms`);
      await sleep(20);
    }
    await meanwhile();
    await holder.query("ROLLBACK");
    return await outcome;
  } finally {
    await holder.end();
  }
}

describe("a session replaced by another tenant between a scoped key's check and its reads", () => {
  it("Recall by a user-bound key answers NOT_FOUND, never the other tenant's events", async () => {
    const sessionId = "replaced-recall";
    await alice.createSession({ sessionId });
    await alice.addEvent({ sessionId, event: { eventType: "user_message", content: text("alice's own words") } });
    const outcome = await whileMemoriesHeld(
      () => alice.recall({ sessionId, query: "words", tokenizer: "chars4" }),
      async () => {
        // Another tenant takes the id over: an admin key deletes the session, the other app's key creates it again.
        expect((await everyApp.deleteSession({ sessionId })).deleted).toBe(true);
        await other.createSession({ appName: OTHER_APP, userId: "bob", sessionId });
        await other.addEvent({ sessionId, event: { eventType: "user_message", content: text("bob's secret words") } });
      },
    );
    expect(outcome.status).toBe("rejected");
    const err = ConnectError.from((outcome as PromiseRejectedResult).reason);
    const absent = await errorOf(alice.recall({ sessionId: "never-created", query: "words" }));
    expect(err.code).toBe(Code.NotFound);
    expect(err.rawMessage).toBe(absent.rawMessage.replace("never-created", sessionId));
    // The other tenant's session is whole, and still out of alice's reach.
    const { events } = await other.getSessionEvents({ sessionId });
    expect(events.map((e) => e.content?.kind.value)).toEqual(["bob's secret words"]);
    expect((await errorOf(alice.getSessionEvents({ sessionId }))).code).toBe(Code.NotFound);
  });

  it("Recall held the same way, with its session left alone, answers the session's own context (the control)", async () => {
    const sessionId = "kept-recall";
    await alice.createSession({ sessionId });
    await alice.addEvent({ sessionId, event: { eventType: "user_message", content: text("alice's own words") } });
    const outcome = await whileMemoriesHeld(
      () => alice.recall({ sessionId, query: "words", tokenizer: "chars4" }),
      async () => {},
    );
    expect(outcome.status).toBe("fulfilled");
    const recall = (outcome as PromiseFulfilledResult<Awaited<ReturnType<MemoryClient["recall"]>>>).value;
    expect(recall.context?.text).toContain("alice's own words");
  });
});
