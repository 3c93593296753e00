/**
 * Recent events are fair between tenants. Tenant B appends 2,000 events dated
 * a year ahead; tenant A's own events (some before the flood, some after, one
 * dated in 2001) must still be what A's scoped ListEvents and GET
 * /memory/events show, in the order the server stored them, on every store.
 * Keys bound to several apps, or to a user in every app, see theirs merged.
 * An admin key's store-wide view orders by that same ingest order, so B's
 * future dates do not pin B's events above events stored after them.
 * A real server on 127.0.0.1 per backend, keys in that backend's key store.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey, type ApiKeyRecord, type ApiKeyStore } from "../../src/auth/api-keys.js";
import { openApiKeyStore } from "../../src/auth/index.js";
import { loadConfig, type Config } from "../../src/config.js";
import { openStore } from "../../src/store/index.js";
import { connectClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

const BACKENDS: Array<{ name: Config["memoryType"]; settings: () => Partial<Config> }> = [
  { name: "local", settings: () => ({}) },
  { name: "redis", settings: () => ({ redisUrl: process.env.MEMORY_TEST_REDIS_URL! }) },
  { name: "postgres", settings: () => ({ postgresUrl: process.env.MEMORY_TEST_POSTGRES_URL! }) },
];

const YEAR_MS = 365 * 24 * 3600 * 1000;
/** B's flood: four sessions of 500 events (the largest batch), each well inside any retention cap. */
const FLOOD_SESSIONS = 4;
const FLOOD_BATCH = 500;

describe.each(BACKENDS)("recent events with one tenant flooding future-dated events ($name)", (backend) => {
  const run = `${process.pid}_${Date.now().toString(36)}`;
  const appA = `recency-a-${run}`;
  const appB = `recency-b-${run}`;
  const appC = `recency-c-${run}`;
  let dir: string;
  let keys: ApiKeyStore;
  let server: TestServer;
  const bearer: Record<string, string> = {};
  const clients: MemoryClient[] = [];

  const client = (label: string) => {
    const c = connectClient(server.baseUrl, { headers: { authorization: `Bearer ${bearer[label]}` } });
    clients.push(c);
    return c;
  };
  const rest = async (label: string, query = "limit=1000") => {
    const res = await fetch(`${server.baseUrl}/memory/events?${query}`, {
      headers: { authorization: `Bearer ${bearer[label]}` },
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { events: Array<{ event_id: string }> }).events.map((e) => e.event_id);
  };

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "engram-recency-"));
    const config: Config = {
      ...loadConfig([], {}),
      memoryType: backend.name,
      ...backend.settings(),
      keyPrefix: `recency_${backend.name}_${run}`,
      authKeysFile: path.join(dir, "keys.json"),
      auth: true,
      host: "127.0.0.1",
      port: 0,
    };
    keys = await openApiKeyStore(config);
    const make = async (label: string, scope: Pick<ApiKeyRecord, "role" | "apps" | "userId">) => {
      const { key, record } = generateApiKey(scope);
      await keys.create(record);
      bearer[label] = key;
    };
    await make("a", { role: "write", apps: [appA] });
    await make("aAlice", { role: "read", apps: [appA], userId: "alice" });
    await make("b", { role: "write", apps: [appB] });
    await make("c", { role: "write", apps: [appC] });
    await make("ac", { role: "read", apps: [appA, appC] });
    await make("alice", { role: "read", apps: ["*"], userId: "alice" });
    await make("admin", { role: "admin", apps: ["*"] });
    server = await startTestServer({ store: await openStore(config), config });

    const a = client("a");
    const b = client("b");
    const now = Date.now();
    await a.createSession({ sessionId: `a-alice-${run}`, appName: appA, userId: "alice" });
    await a.createSession({ sessionId: `a-bob-${run}`, appName: appA, userId: "bob" });
    const addA = (session: string, eventId: string, ms: number) =>
      a.addEvent({
        sessionId: `a-${session}-${run}`,
        event: { eventId, eventType: "user_message", timestamp: timestampFromMs(ms) },
      });
    await addA("alice", "a1", now);
    await addA("bob", "a2", now);
    await addA("alice", "a3", now + 1);
    await client("c").createSession({ sessionId: `c-alice-${run}`, appName: appC, userId: "alice" });
    await client("c").addEvent({
      sessionId: `c-alice-${run}`,
      event: { eventId: "c1", eventType: "user_message", timestamp: timestampFromMs(now + 2 * YEAR_MS) },
    });
    for (let s = 0; s < FLOOD_SESSIONS; s++) {
      const sessionId = `b-${s}-${run}`;
      await b.createSession({ sessionId, appName: appB, userId: "mallory" });
      const events = Array.from({ length: FLOOD_BATCH }, (_, i) => ({
        eventId: `b-${s}-${i}`,
        eventType: "user_message",
        timestamp: timestampFromMs(now + YEAR_MS + s * FLOOD_BATCH + i),
      }));
      await b.addEvents({ sessionId, events });
    }
    // Stored after the flood, dated before it: ingest order, not the date, says these are the newest.
    await addA("alice", "a4", now + 2);
    await addA("alice", "a5", Date.UTC(2001, 0, 1));
  }, 120_000);

  afterAll(async () => {
    for (const c of clients) c.close();
    await server?.stop();
    await keys?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("a key scoped to an app still sees all of its app's events, in the order they were stored", async () => {
    const { events } = await client("a").listEvents({ limit: 1000 });
    expect(events.map((e) => e.eventId)).toEqual(["a1", "a2", "a3", "a4", "a5"]);
    expect(await rest("a")).toEqual(["a1", "a2", "a3", "a4", "a5"]);
  });

  it("a key scoped to an app and a user sees that user's events only", async () => {
    const { events } = await client("aAlice").listEvents({ limit: 3 });
    expect(events.map((e) => e.eventId)).toEqual(["a3", "a4", "a5"]);
    expect(await rest("aAlice", "limit=100")).toEqual(["a1", "a3", "a4", "a5"]);
  });

  it("a key bound to several apps sees theirs merged in the order they were stored", async () => {
    const { events } = await client("ac").listEvents({ limit: 1000 });
    expect(events.map((e) => e.eventId)).toEqual(["a1", "a2", "a3", "c1", "a4", "a5"]);
    expect(await rest("ac", "limit=3")).toEqual(["c1", "a4", "a5"]);
  });

  it("a key bound to a user in every app sees that user's events in every app", async () => {
    const { events } = await client("alice").listEvents({ limit: 1000 });
    expect(events.map((e) => e.eventId)).toEqual(["a1", "a3", "c1", "a4", "a5"]);
  });

  it("the flooding tenant sees only its own events", async () => {
    const { events } = await client("b").listEvents({ limit: 2 });
    expect(events.map((e) => e.eventId)).toEqual([`b-3-${FLOOD_BATCH - 2}`, `b-3-${FLOOD_BATCH - 1}`]);
  });

  it("the store-wide view orders by ingest: events stored after the flood come last whatever their dates", async () => {
    const { events } = await client("admin").listEvents({ limit: 4 });
    expect(events.map((e) => e.eventId)).toEqual([`b-3-${FLOOD_BATCH - 2}`, `b-3-${FLOOD_BATCH - 1}`, "a4", "a5"]);
    expect(await rest("admin", "limit=2")).toEqual(["a4", "a5"]);
  });
});
