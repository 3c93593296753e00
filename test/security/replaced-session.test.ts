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
 * Fact extraction, which reads an appended session again in the background,
 * is forced the same way: its one worker is held on a scripted chat
 * endpoint while the scoped append's range waits behind it.
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
import {
  startScriptedChatServer,
  type ScriptedAnswer,
  type ScriptedChatServer,
} from "../support/scripted-chat-server.js";

const url = process.env.MEMORY_TEST_POSTGRES_URL!;
const schema = `replaced_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
const APP = "replaced-app";
const OTHER_APP = "replaced-other";
/** Longest wait for Recall to reach the held table; generous for a shared 2-core box. */
const REACH_TIMEOUT_MS = 20_000;

let dir: string;
let keyFile: FileKeyStore;
const keys: Record<"alice" | "everyApp" | "other", string> = { alice: "", everyApp: "", other: "" };
let server: TestServer;
let admin: pg.Client;
let alice: MemoryClient;
let everyApp: MemoryClient;
let other: MemoryClient;
const text = (s: string) => ({ kind: { case: "stringValue" as const, value: s } });

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-replaced-"));
  keyFile = new FileKeyStore(path.join(dir, "keys.json"));
  const keyFor = async (scope: Pick<ApiKeyRecord, "role" | "apps" | "userId">) => {
    const { key, record } = generateApiKey(scope);
    await keyFile.create(record);
    return key;
  };
  keys.alice = await keyFor({ role: "write", apps: [APP], userId: "alice" });
  keys.everyApp = await keyFor({ role: "admin", apps: ["*"] });
  keys.other = await keyFor({ role: "write", apps: [OTHER_APP] });
  const store = await PostgresStore.open({ url, schema, limits: { maxSessions: 0, maxSessionEvents: 0 } });
  server = await startTestServer({ store, config: { auth: true, authKeysFile: keyFile.path, authCacheMs: 0 } });
  [alice, everyApp, other] = clientsOf(server);
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
});

afterAll(async () => {
  await server?.stop();
  await admin?.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
  await admin?.end();
  rmSync(dir, { recursive: true, force: true });
});

/** Clients of `target` with alice's, the every-app admin's and the other tenant's keys. */
function clientsOf(target: TestServer): [MemoryClient, MemoryClient, MemoryClient] {
  const client = (key: string) => connectClient(target.baseUrl, { headers: { authorization: `Bearer ${key}` } });
  return [client(keys.alice), client(keys.everyApp), client(keys.other)];
}

/** Another tenant takes `sessionId` over: an admin key deletes the session, the other app's key creates it again. */
async function replace(sessionId: string, admin: MemoryClient, otherTenant: MemoryClient): Promise<void> {
  expect((await admin.deleteSession({ sessionId })).deleted).toBe(true);
  await otherTenant.createSession({ appName: OTHER_APP, userId: "bob", sessionId });
}

/**
 * Runs `call` while the schema's memories table is locked, runs `meanwhile`
 * once PostgreSQL shows the server's statement waiting for that lock, then
 * lets go; `call`'s outcome, settled.
 */
async function whileMemoriesHeld<T>(
  call: () => Promise<T>,
  meanwhile: () => Promise<void>,
): Promise<PromiseSettledResult<T>> {
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
      if (Date.now() > deadline)
        throw new Error(`the server's memory read did not wait on the held table within ${REACH_TIMEOUT_MS} ms`);
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
        await replace(sessionId, everyApp, other);
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

describe("a session replaced by another tenant between a scoped key's append and its fact extraction", () => {
  /** Answers the request held back, once it arrived. */
  let releaseHeld: ((answer: ScriptedAnswer) => void) | undefined;
  let chat: ScriptedChatServer;
  let extracting: TestServer;
  let clients: [MemoryClient, MemoryClient, MemoryClient];
  const fact = { content: JSON.stringify({ facts: [{ subject: "alice", predicate: "lives in", object: "porto" }] }) };

  beforeAll(async () => {
    chat = await startScriptedChatServer((transcript) =>
      transcript.includes("held back") ? new Promise((resolve) => (releaseHeld = resolve)) : fact,
    );
    extracting = await startTestServer({
      config: {
        auth: true,
        authKeysFile: keyFile.path,
        authCacheMs: 0,
        extractionUrl: chat.url,
        extractionModel: "scripted",
        extractionTimeoutMs: 30_000,
        extractionMaxEvents: 20,
        extractionQueueSize: 10,
        // One worker: the range appended while it is held waits in the queue.
        extractionConcurrency: 1,
        extractionEventTypes: ["user_message"],
      },
    });
    clients = clientsOf(extracting);
  });
  afterAll(async () => {
    releaseHeld?.({ content: JSON.stringify({ facts: [] }) });
    await extracting?.stop();
    await chat?.stop();
  });

  it("files no facts of alice's words under the session that took the id", async () => {
    const [aliceHere, everyAppHere, otherHere] = clients;
    await aliceHere.createSession({ sessionId: "blocker" });
    await aliceHere.addEvent({
      sessionId: "blocker",
      event: { eventType: "user_message", content: text("held back") },
    });
    for (let i = 0; i < 200 && releaseHeld === undefined; i++) await sleep(25);
    expect(releaseHeld, "the extraction worker is held").toBeDefined();
    await aliceHere.createSession({ sessionId: "taken-over" });
    await aliceHere.addEvent({
      sessionId: "taken-over",
      event: { eventType: "user_message", content: text("I live in Porto") },
    });
    await replace("taken-over", everyAppHere, otherHere);
    releaseHeld!({ content: JSON.stringify({ facts: [] }) });
    await extracting.service.extractor!.idle();
    expect(chat.transcripts.some((t) => t.includes("Porto"))).toBe(false);
    expect((await everyAppHere.listMemories({ appName: OTHER_APP, userId: "bob" })).memories).toEqual([]);
    expect((await everyAppHere.listMemories({ appName: APP, userId: "alice" })).memories).toEqual([]);
  });

  it("files no facts of alice's words under the session that took the id, when the append named no incarnation (a key for every app)", async () => {
    const [, everyAppHere, otherHere] = clients;
    releaseHeld = undefined;
    await everyAppHere.createSession({ appName: APP, userId: "alice", sessionId: "blocker-2" });
    await everyAppHere.addEvent({
      sessionId: "blocker-2",
      event: { eventType: "user_message", content: text("held back") },
    });
    for (let i = 0; i < 200 && releaseHeld === undefined; i++) await sleep(25);
    expect(releaseHeld, "the extraction worker is held").toBeDefined();
    await everyAppHere.createSession({ appName: APP, userId: "alice", sessionId: "taken-over-2" });
    await everyAppHere.addEvent({
      sessionId: "taken-over-2",
      event: { eventType: "user_message", content: text("I moved to Lisbon") },
    });
    await replace("taken-over-2", everyAppHere, otherHere);
    // The session that took the id has an event of its own at the same seq.
    await otherHere.addEvent({
      sessionId: "taken-over-2",
      event: { eventType: "user_message", content: text("bob's own words") },
    });
    releaseHeld!({ content: JSON.stringify({ facts: [] }) });
    await extracting.service.extractor!.idle();
    // Bob's own event is his to have extracted (the scripted endpoint answers it as any other); alice's words never left.
    expect(chat.transcripts.some((t) => t.includes("bob's own words"))).toBe(true);
    expect(chat.transcripts.some((t) => t.includes("Lisbon"))).toBe(false);
  });

  it("files the facts of a session left alone (the control)", async () => {
    const [aliceHere, everyAppHere] = clients;
    await aliceHere.createSession({ sessionId: "left-alone" });
    await aliceHere.addEvent({
      sessionId: "left-alone",
      event: { eventType: "user_message", content: text("I live in Porto") },
    });
    await extracting.service.extractor!.idle();
    const memories = (await everyAppHere.listMemories({ appName: APP, userId: "alice" })).memories;
    expect(memories.map((m) => m.fact?.object)).toEqual(["porto"]);
  });
});
