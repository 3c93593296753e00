/**
 * MemoryClient's long-term memory methods against a real in-process Engram
 * server on 127.0.0.1, over gRPC (HTTP/2) and Connect (HTTP/1.1): write, get,
 * search, list page by page, forget, watch, episodic event search and
 * recall, as plain objects with Dates, and a write retried after a lost
 * response stored once.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Interceptor } from "@connectrpc/connect";
import { startTestServer, type TestServer } from "../../../test/support/engram.js";
import { Code, ConnectError, createMemoryClient, fieldOf, type MemoryChange, type MemoryClient, type Protocol } from "../src/index.js";
import { errorOf } from "./support.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => server?.stop());

describe.each<[Protocol]>([["grpc"], ["connect"]])("long-term memory over %s", (protocol) => {
  let client: MemoryClient;
  // Each protocol writes into its own app: the two suites share one server.
  const app = `client-memories-${protocol}`;
  beforeAll(() => {
    client = createMemoryClient({ baseUrl: server.baseUrl, protocol, timeoutMs: 10_000 });
  });
  afterAll(() => client?.close());

  it("writes a batch, assigns missing ids, and reads every field back as plain values", async () => {
    const validFrom = new Date("2024-03-01T09:00:00.250Z");
    const written = await client.writeMemories([
      {
        memoryId: "tea",
        appName: app,
        userId: "alice",
        agentId: "planner",
        text: "Alice prefers green tea",
        fact: { subject: "alice", predicate: "prefers", object: "green tea" },
        topics: ["drinks"],
        importance: 0.5,
        pinned: true,
        metadata: { origin: "chat" },
        source: { sessionId: "s-1", fromSeq: 3, toSeq: 4n },
        validFrom,
        embedding: [0.5, 0.25, 0],
      },
      { appName: app, text: "The office closes at six" },
    ]);
    expect(written.superseded).toEqual([]);
    expect(written.memories.map((m) => m.text)).toEqual(["Alice prefers green tea", "The office closes at six"]);
    expect(written.memories[1].memoryId).toMatch(/^[0-9a-f-]{36}$/);
    const tea = await client.getMemory(app, "tea");
    expect(tea).toEqual({
      memoryId: "tea",
      appName: app,
      userId: "alice",
      agentId: "planner",
      text: "Alice prefers green tea",
      fact: { subject: "alice", predicate: "prefers", object: "green tea" },
      key: "",
      topics: ["drinks"],
      importance: 0.5,
      pinned: true,
      metadata: { origin: "chat" },
      source: { sessionId: "s-1", fromSeq: 3, toSeq: 4 },
      createdAt: expect.any(Date),
      validFrom,
      invalidAt: undefined,
      supersededBy: "",
      embedding: [0.5, 0.25, 0],
    });
    const shared = await client.getMemory(app, written.memories[1].memoryId);
    expect(shared).not.toHaveProperty("userId");
    expect(shared).not.toHaveProperty("fact");
    expect(shared.validFrom?.getTime()).toBe(shared.createdAt?.getTime());
    expect((await errorOf(client.getMemory(app, "absent"))).code).toBe(Code.NotFound);
  });

  it("returns the stored original for a repeated id, and refuses other content under it", async () => {
    const first = await client.writeMemories([{ memoryId: "again", appName: app, text: "said once" }]);
    const second = await client.writeMemories([{ memoryId: "again", appName: app, text: "said once" }]);
    expect(second.memories).toEqual(first.memories);
    const err = await errorOf(client.writeMemories([{ memoryId: "again", appName: app, text: "said otherwise" }]));
    expect(err.code).toBe(Code.AlreadyExists);
  });

  it("names the field of a bad memory, and checks scopeMatch before sending", async () => {
    const err = await errorOf(client.writeMemories([{ appName: app, text: "x", importance: 2 }]));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(fieldOf(err)).toBe("memories[0].importance");
    await expect(client.searchMemories({ appName: app, scopeMatch: "nearby" as never })).rejects.toThrow(/scopeMatch/);
  });

  it("searches a user's scope: their memories and the shared ones, never another user's, best first", async () => {
    await client.writeMemories([
      { memoryId: "s-kim-lake", appName: app, userId: "kim", text: "Kim booked a cabin by the lake", topics: ["travel"] },
      { memoryId: "s-kim-dentist", appName: app, userId: "kim", text: "Kim sees the dentist on Friday" },
      { memoryId: "s-kim-guide", appName: app, userId: "kim", agentId: "guide", text: "Kim's guide knows the lake trails" },
      { memoryId: "s-lou-lake", appName: app, userId: "lou", text: "Lou wants a lake cabin too", topics: ["travel"] },
      { memoryId: "s-shared-lake", appName: app, text: "The lake is frozen in winter", topics: ["weather"] },
    ]);
    const results = await client.searchMemories({ appName: app, userId: "kim", query: "lake cabin" });
    const ids = results.map((r) => r.memory.memoryId);
    expect(ids[0]).toBe("s-kim-lake");
    expect(ids).toContain("s-shared-lake");
    expect(ids).not.toContain("s-lou-lake");
    expect(ids).not.toContain("s-kim-guide"); // another agent's, not visible to a caller without one
    expect(results[0].score).toBeGreaterThan(0);
    expect(results[0].lexicalScore).toBeGreaterThan(0);
    expect(results[0].memory.createdAt).toBeInstanceOf(Date);
    const travel = await client.searchMemories({ appName: app, userId: "kim", query: "lake", topics: ["travel"] });
    expect(travel.map((r) => r.memory.memoryId)).toEqual(["s-kim-lake"]);
    expect(await client.searchMemories({ appName: app, userId: "kim", query: "lake", topK: 1 })).toHaveLength(1);
    const exact = await client.searchMemories({ appName: app, userId: "kim", scopeMatch: "exact", query: "lake" });
    expect(exact.map((r) => r.memory.memoryId)).toEqual(["s-kim-lake"]);
    const within = await client.searchMemories({ appName: app, userId: "kim", scopeMatch: "within", query: "lake" });
    expect(within.map((r) => r.memory.memoryId).sort()).toEqual(["s-kim-guide", "s-kim-lake"]);
  });

  it("supersedes by key: now finds the new value, asOf the old one, includeInvalid both", async () => {
    const before = await client.writeMemories([{ memoryId: "city-1", appName: app, userId: "mo", key: "city", text: "Mo lives in Lyon" }]);
    const lyonFrom = before.memories[0].validFrom!;
    const moved = await client.writeMemories([
      { memoryId: "city-2", appName: app, userId: "mo", key: "city", text: "Mo lives in Porto", validFrom: new Date(lyonFrom.getTime() + 60_000) },
    ]);
    expect(moved.superseded).toHaveLength(1);
    expect(moved.superseded[0]).toMatchObject({ memoryId: "city-1", supersededBy: "city-2" });
    expect(moved.superseded[0].invalidAt?.getTime()).toBe(lyonFrom.getTime() + 60_000);
    const query = { appName: app, userId: "mo", scopeMatch: "exact" as const, query: "Mo lives" };
    expect((await client.searchMemories({ ...query, asOf: new Date(lyonFrom.getTime() + 120_000) })).map((r) => r.memory.memoryId)).toEqual(["city-2"]);
    expect((await client.searchMemories({ ...query, asOf: new Date(lyonFrom.getTime() + 1_000) })).map((r) => r.memory.memoryId)).toEqual(["city-1"]);
    expect((await client.searchMemories({ ...query, includeInvalid: true })).map((r) => r.memory.memoryId).sort()).toEqual(["city-1", "city-2"]);
  });

  it("lists a scope newest first, fetching every page as the loop asks, and one page at a time", async () => {
    const user = "pager";
    for (let i = 0; i < 5; i++) {
      await client.writeMemories([{ memoryId: `page-${i}`, appName: app, userId: user, text: `note ${i}`, pinned: i === 0 }]);
    }
    const all = [];
    for await (const m of client.listMemories({ appName: app, userId: user, pageSize: 2 })) all.push(m.memoryId);
    expect(all).toEqual(["page-4", "page-3", "page-2", "page-1", "page-0"]);
    const first = await client.listMemoriesPage({ appName: app, userId: user, pageSize: 3 });
    expect(first.memories.map((m) => m.memoryId)).toEqual(["page-4", "page-3", "page-2"]);
    expect(first.nextPageToken).not.toBe("");
    const rest = await client.listMemoriesPage({ appName: app, userId: user, pageSize: 3, pageToken: first.nextPageToken });
    expect(rest).toEqual({ memories: [expect.objectContaining({ memoryId: "page-1" }), expect.objectContaining({ memoryId: "page-0" })], nextPageToken: "" });
    const pinned = [];
    for await (const m of client.listMemories({ appName: app, userId: user, pinned: true })) pinned.push(m.memoryId);
    expect(pinned).toEqual(["page-0"]);
    // Breaking out of the loop stops fetching.
    for await (const m of client.listMemories({ appName: app, userId: user, pageSize: 1 })) {
      expect(m.memoryId).toBe("page-4");
      break;
    }
  });

  it("forgets by ids and by scope, counting what it removed", async () => {
    await client.writeMemories([
      { memoryId: "f-1", appName: app, userId: "nia", text: "one" },
      { memoryId: "f-2", appName: app, userId: "nia", agentId: "a", text: "two" },
      { memoryId: "f-3", appName: app, userId: "nia", sessionId: "s", text: "three" },
      { memoryId: "f-keep", appName: app, userId: "ola", text: "kept" },
    ]);
    expect(await client.deleteMemories({ appName: app, memoryIds: ["f-1", "f-absent"] })).toBe(1);
    expect(await client.deleteMemories({ appName: app, userId: "nia" })).toBe(2);
    expect(await client.deleteMemories({ appName: app, userId: "nia" })).toBe(0);
    expect((await client.getMemory(app, "f-keep")).text).toBe("kept");
    const erased = await client.deleteUserData(app, "ola");
    expect(erased).toEqual({ removedSessions: 0, removedEvents: 0, removedMemories: 1 });
  });

  it("watches a scope live: started first, then writes, supersessions and deletions it can see", async () => {
    const abort = new AbortController();
    const changes: MemoryChange[] = [];
    let started!: () => void;
    const ready = new Promise<void>((resolve) => (started = resolve));
    const watching = (async () => {
      for await (const change of client.watchMemories({ appName: app, userId: "pia" }, { signal: AbortSignal.any([abort.signal, AbortSignal.timeout(20_000)]) })) {
        if (change.type === "started") started();
        changes.push(change);
        if (changes.length === 6) abort.abort();
      }
    })();
    await ready;
    await client.writeMemories([{ memoryId: "w-1", appName: app, userId: "pia", key: "mood", text: "Pia is calm" }]);
    await client.writeMemories([{ memoryId: "w-other", appName: app, userId: "quin", text: "Quin is busy" }]);
    await client.writeMemories([{ memoryId: "w-shared", appName: app, text: "the office is open" }]);
    await client.writeMemories([{ memoryId: "w-2", appName: app, userId: "pia", key: "mood", text: "Pia is excited" }]);
    await client.deleteMemories({ appName: app, memoryIds: ["w-1", "w-other"] });
    await watching; // ends quietly when aborted
    const summary = changes.map((c) => (c.type === "deleted" ? `deleted ${c.memoryIds.join(",")}` : c.type === "started" ? "started" : `${c.type} ${c.memory.memoryId}`));
    expect(summary).toEqual(["started", "written w-1", "written w-shared", "superseded w-1", "written w-2", "deleted w-1"]);
    const superseded = changes[3] as Extract<MemoryChange, { type: "superseded" }>;
    expect(superseded.memory.invalidAt).toBeInstanceOf(Date);
  });

  it("ends a watch when the loop breaks, and throws what the server refuses", async () => {
    for await (const change of client.watchMemories({ appName: app })) {
      expect(change).toEqual({ type: "started", cursor: expect.any(Number) });
      break;
    }
    const failing = (async () => {
      for await (const _ of client.watchMemories({ appName: "" })) void _;
    })();
    const err = await errorOf(failing);
    expect(err.code).toBe(Code.InvalidArgument);
    expect(fieldOf(err)).toBe("app_name");
  });

  it("searches the events of a user's sessions and recalls memories with a session's context", async () => {
    const sessionId = `recall-${protocol}`;
    await client.createSession(app, "rae", sessionId);
    await client.addEvents(sessionId, [
      { eventType: "user_message", content: "I am flying to Porto next week" },
      { eventType: "agent_response", content: "Noted: Porto next week. Anything to book?" },
    ]);
    const hits = await client.searchEvents({ appName: app, userId: "rae", query: "flying Porto" });
    expect(hits).toHaveLength(2);
    expect(hits[0]).toMatchObject({ sessionId, seq: 1, snippet: "I am flying to Porto next week" });
    expect(hits[0].event).toMatchObject({ seq: 1, eventType: "user_message", content: "I am flying to Porto next week" });
    expect(hits[0].event.timestamp).toBeInstanceOf(Date);
    expect(await client.searchEvents({ appName: app, userId: "rae", query: "Porto", eventTypes: ["tool_call"] })).toEqual([]);

    await client.writeMemories([
      { memoryId: "r-core", appName: app, userId: "rae", text: "Rae is vegetarian", pinned: true, importance: 1 },
      { memoryId: "r-sister", appName: app, userId: "rae", text: "Rae's sister lives in Porto" },
      { memoryId: "r-other", appName: app, userId: "sol", text: "Sol's sister lives in Porto too" },
    ]);
    const recall = await client.recall(sessionId, { query: "sister in Porto", tokenizer: "chars4" });
    expect(recall.pinned.map((m) => m.memoryId)).toEqual(["r-core"]);
    expect(recall.memories[0].memory.memoryId).toBe("r-sister");
    expect(recall.memories.map((r) => r.memory.memoryId)).not.toContain("r-other");
    expect(recall.context?.text).toContain("I am flying to Porto next week");
    expect(recall.context?.messages[0]).toEqual({ role: "user", content: "I am flying to Porto next week" });
    expect(recall.text.indexOf("Rae is vegetarian")).toBeLessThan(recall.text.indexOf("Rae's sister lives in Porto"));
    expect(recall).toMatchObject({ tokenizer: "chars4", tokensUsed: Math.ceil(recall.text.length / 4) });
    expect(recall.pinnedTokens).toBeGreaterThan(0);
    expect(recall.memoryTokens).toBeGreaterThan(0);
    expect(recall.contextTokens).toBeGreaterThan(0);
    const tight = await client.recall(sessionId, { query: "sister in Porto", tokenBudget: 20 });
    expect(tight.tokensUsed).toBeLessThanOrEqual(20);
    expect(tight.context).toBeUndefined();
    expect((await errorOf(client.recall(`${sessionId}-absent`))).code).toBe(Code.NotFound);
  });

  it("returns embeddings from searchMemories, listMemories and recall only when asked, and from getMemory always", async () => {
    const sessionId = `vectors-${protocol}`;
    await client.createSession(app, "vic", sessionId);
    await client.writeMemories([{ memoryId: "v-seat", appName: app, userId: "vic", text: "Vic wants a window seat", embedding: [1, 0, 0] }]);
    const search = { appName: app, userId: "vic", scopeMatch: "exact" as const, query: "window seat", queryEmbedding: [1, 0, 0] };
    expect((await client.searchMemories(search)).map((r) => r.memory.embedding)).toEqual([[]]);
    expect((await client.searchMemories({ ...search, includeEmbeddings: true })).map((r) => r.memory.embedding)).toEqual([[1, 0, 0]]);
    const listing = { appName: app, userId: "vic", scopeMatch: "exact" as const };
    expect((await client.listMemoriesPage(listing)).memories.map((m) => m.embedding)).toEqual([[]]);
    expect((await client.listMemoriesPage({ ...listing, includeEmbeddings: true })).memories.map((m) => m.embedding)).toEqual([[1, 0, 0]]);
    const seatOf = (r: { memories: { memory: { memoryId: string; embedding: number[] } }[] }) => r.memories.find((m) => m.memory.memoryId === "v-seat")?.memory.embedding;
    expect(seatOf(await client.recall(sessionId, { query: "window seat", queryEmbedding: [1, 0, 0] }))).toEqual([]);
    expect(seatOf(await client.recall(sessionId, { query: "window seat", queryEmbedding: [1, 0, 0], includeEmbeddings: true }))).toEqual([1, 0, 0]);
    expect((await client.getMemory(app, "v-seat")).embedding).toEqual([1, 0, 0]);
  });

  it("retries a write whose response was lost and stores it once, under the id assigned before the first try", async () => {
    // The first call reaches the server and is handled; its response is replaced by UNAVAILABLE.
    let lost = 0;
    const loseFirstResponse: Interceptor = (next) => async (req) => {
      const res = await next(req);
      if (req.method.name === "WriteMemories" && lost++ === 0) throw new ConnectError("response lost", Code.Unavailable);
      return res;
    };
    const lossy = createMemoryClient({ baseUrl: server.baseUrl, protocol, interceptors: [loseFirstResponse] });
    try {
      const user = "lossy";
      const { memories } = await lossy.writeMemories([{ appName: app, userId: user, text: "stored once" }]);
      expect(lost).toBe(2);
      const stored = [];
      for await (const m of client.listMemories({ appName: app, userId: user })) stored.push(m.memoryId);
      expect(stored).toEqual([memories[0].memoryId]);
    } finally {
      lossy.close();
    }
    const noRetry = createMemoryClient({ baseUrl: server.baseUrl, protocol, retries: 0, interceptors: [loseFirstResponse] });
    lost = 0;
    try {
      expect((await errorOf(noRetry.writeMemories([{ appName: app, text: "reported" }]))).code).toBe(Code.Unavailable);
    } finally {
      noRetry.close();
    }
  });
});
