/**
 * Long-term memory on PostgreSQL across replicas, over real sockets: two
 * servers share one schema, and what one is told the other knows, live
 * (WatchMemories) and when asked (SearchMemories, Recall, DeleteUserData);
 * and a server started as operators start it (MEMORY_TYPE=postgres) keeps
 * them across a restart.
 */
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres.js";
import { connectClient, grpcJsClient, type MemoryClient } from "../support/clients.js";
import { spawnServer, startTestServer, type TestServer } from "../support/engram.js";
import { FAY_RESUMED_FRAMES, FAY_WATCH_FRAMES, resumeFaysWatch, watchFaysScope } from "../support/memory-watch.js";

const url = process.env.MEMORY_TEST_POSTGRES_URL!;
const schema = `memrpc_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
const LIMITS = { maxSessions: 1000, maxSessionEvents: 500 };

let watched: TestServer;
let written: TestServer;
beforeAll(async () => {
  watched = await startTestServer({ store: await PostgresStore.open({ url, schema, limits: LIMITS }) });
  written = await startTestServer({ store: await PostgresStore.open({ url, schema, limits: LIMITS }) });
});
afterAll(async () => {
  await watched?.stop();
  await written?.stop();
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(schema)} CASCADE`);
  await admin.end();
});

describe("long-term memory on PostgreSQL, two replicas", () => {
  let watcher: MemoryClient;
  let writer: MemoryClient;
  beforeAll(() => {
    watcher = grpcJsClient(watched.address);
    writer = connectClient(written.baseUrl);
  });
  afterAll(() => {
    watcher?.close();
    writer?.close();
  });

  it("WatchMemories on one replica sees the writes, supersessions and deletions made through the other", async () => {
    expect(await watchFaysScope(watcher, writer, "replicas", 10_000)).toEqual(FAY_WATCH_FRAMES);
  });

  it("WatchMemories on one replica resumed with after replays what the other replica changed while it was away, then goes live", async () => {
    expect(await resumeFaysWatch(watcher, writer, "replicas-resume", 10_000)).toEqual({
      frames: FAY_RESUMED_FRAMES,
      cursorsRise: true,
    });
  });

  it("Recall on one replica: pinned, lexically and vector-relevant memories written through the other, and the session's context", async () => {
    const app = "replicas-recall";
    const sessionId = `recall-pg-${process.pid}`;
    const text = (s: string) => ({ kind: { case: "stringValue" as const, value: s } });
    await writer.createSession({ appName: app, userId: "hana", sessionId });
    await writer.addEvents({
      sessionId,
      events: [{ eventType: "user_message", content: text("I am flying to Porto next week") }],
    });
    await writer.writeMemories({
      memories: [
        {
          memoryId: "core",
          appName: app,
          userId: "hana",
          text: "Hana is vegetarian",
          pinned: true,
          importance: 1,
          embedding: [0, 0, 1],
        },
        {
          memoryId: "sister",
          appName: app,
          userId: "hana",
          text: "Hana's sister lives in Porto",
          embedding: [1, 0, 0],
        },
        { memoryId: "seat", appName: app, userId: "hana", text: "Window seat, always", embedding: [0.9, 0.1, 0] },
        {
          memoryId: "other",
          appName: app,
          userId: "ivan",
          text: "Ivan's sister lives in Porto too",
          embedding: [1, 0, 0],
        },
      ],
    });
    const recall = await watcher.recall({
      sessionId,
      query: "sister in Porto",
      queryEmbedding: [1, 0, 0],
      tokenizer: "chars4",
    });
    expect(recall.pinned.map((m) => m.memoryId)).toEqual(["core"]);
    const relevant = recall.memories.map((r) => r.memory?.memoryId);
    expect(relevant[0]).toBe("sister");
    // Found by its embedding alone: no word of the query is in it.
    expect(relevant).toContain("seat");
    expect(relevant).not.toContain("other");
    expect(recall.memories.find((r) => r.memory?.memoryId === "seat")?.vectorScore).toBeGreaterThan(0.9);
    expect(recall.context?.text).toContain("I am flying to Porto next week");
    expect(recall.tokensUsed).toBe(Math.ceil(recall.text.length / 4));
  });

  it("searches on one replica what was written through the other, and erases it through either", async () => {
    const app = "replicas-search";
    await writer.writeMemories({
      memories: [
        { memoryId: "tea", appName: app, userId: "ann", text: "Ann drinks green tea every morning" },
        { memoryId: "dog", appName: app, userId: "ann", text: "Ann's dog is called Rex" },
        { memoryId: "bob", appName: app, userId: "bob", text: "Bob drinks coffee" },
      ],
    });
    const found = await watcher.searchMemories({ appName: app, userId: "ann", query: "what does ann drink" });
    // Any of the query's words finds a memory; more of them rank it higher; bob's are not ann's to see.
    expect(found.results.map((m) => m.memory?.memoryId)).toEqual(["tea", "dog"]);
    expect(found.results[0].lexicalScore).toBeGreaterThan(0);
    expect((await watcher.deleteUserData({ appName: app, userId: "ann" })).removedMemories).toBe(2n);
    expect((await writer.listMemories({ appName: app })).memories.map((m) => m.memoryId)).toEqual(["bob"]);
  });
});

describe("long-term memory through a started server (MEMORY_TYPE=postgres)", () => {
  it("writes, supersedes and searches memories, and survives a restart of the server", async () => {
    const env = { MEMORY_TYPE: "postgres", MEMORY_POSTGRES_URL: url, MEMORY_KEY_PREFIX: schema };
    const app = "started";
    let server = await spawnServer(env);
    try {
      const first = connectClient(server.baseUrl);
      await first.writeMemories({
        memories: [{ memoryId: "drink-1", appName: app, userId: "alice", key: "drink", text: "Alice drinks coffee" }],
      });
      const second = await first.writeMemories({
        memories: [
          { memoryId: "drink-2", appName: app, userId: "alice", key: "drink", text: "Alice switched to green tea" },
        ],
      });
      expect(second.superseded.map((m) => m.memoryId)).toEqual(["drink-1"]);
      first.close();
      await server.kill();
      server = await spawnServer(env);
      const again = connectClient(server.baseUrl);
      const found = await again.searchMemories({
        appName: app,
        userId: "alice",
        query: "what does alice drink",
        topK: 5,
      });
      // Only what holds now: the coffee memory was superseded, not deleted.
      expect(found.results.map((r) => r.memory?.memoryId)).toEqual(["drink-2"]);
      const all = await again.listMemories({ appName: app, userId: "alice", includeInvalid: true });
      expect(all.memories.map((m) => [m.memoryId, m.supersededBy])).toEqual([
        ["drink-2", ""],
        ["drink-1", "drink-2"],
      ]);
      again.close();
    } finally {
      await server.kill();
    }
  }, 60_000);
});
