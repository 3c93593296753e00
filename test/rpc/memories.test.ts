/**
 * Long-term memory over real sockets, on gRPC (grpc-js, h2c) and Connect JSON:
 * write, read, search, list, forget, supersession, "as of", erasure, live
 * watches and bad input answered INVALID_ARGUMENT naming the field.
 */
import { Code } from "@connectrpc/connect";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ScopeMatch } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { errorOf, PROTOCOLS, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { FAY_RESUMED_FRAMES, FAY_WATCH_FRAMES, resumeFaysWatch, watchFaysScope } from "../support/memory-watch.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => server?.stop());

describe.each(PROTOCOLS)("long-term memory over %s", (protocol, clientFor) => {
  let client: MemoryClient;
  // Each protocol writes into its own app: the two suites share one server.
  const app = `memories-${protocol.length}-${process.pid}`;
  beforeAll(() => {
    client = clientFor(server);
  });
  afterAll(() => client?.close());

  it("writes a batch, generates missing ids, and reads each memory back with every field", async () => {
    const { memories } = await client.writeMemories({
      memories: [
        {
          memoryId: "pref-tea",
          appName: app,
          userId: "alice",
          agentId: "planner",
          text: "Alice prefers green tea",
          fact: { subject: "alice", predicate: "prefers", object: "green tea" },
          topics: ["drinks"],
          importance: 0.5,
          pinned: true,
          metadata: { origin: "chat" },
          source: { sessionId: "s-1", fromSeq: 3n, toSeq: 4n },
          embedding: [0.5, 0.25, 0],
        },
        { appName: app, text: "The office closes at six" },
      ],
    });
    expect(memories).toHaveLength(2);
    expect(memories[1].memoryId).toMatch(/^[0-9a-f-]{36}$/);
    const { memory } = await client.getMemory({ appName: app, memoryId: "pref-tea" });
    expect(memory).toMatchObject({
      memoryId: "pref-tea",
      appName: app,
      userId: "alice",
      agentId: "planner",
      text: "Alice prefers green tea",
      fact: { subject: "alice", predicate: "prefers", object: "green tea" },
      topics: ["drinks"],
      importance: 0.5,
      pinned: true,
      metadata: { origin: "chat" },
      source: { sessionId: "s-1", fromSeq: 3n, toSeq: 4n },
      embedding: [0.5, 0.25, 0],
      supersededBy: "",
    });
    expect(memory?.sessionId).toBeUndefined();
    expect(memory?.invalidAt).toBeUndefined();
    expect(memory?.createdAt).toEqual(memory?.validFrom);
  });

  it("a retried memory_id returns the original; other content under it is ALREADY_EXISTS", async () => {
    const write = (text: string) => client.writeMemories({ memories: [{ memoryId: "retry", appName: app, text }] });
    const first = await write("same text");
    const again = await write("same text");
    expect(again.memories[0].createdAt).toEqual(first.memories[0].createdAt);
    const err = await errorOf(write("other text"));
    expect(err.code).toBe(Code.AlreadyExists);
    expect(err.rawMessage).toMatch(/^memories\[0\]\.memory_id: /);
  });

  it("searches by relevance within the scope: the user's and the shared memories, never another user's", async () => {
    await client.writeMemories({
      memories: [
        { memoryId: "s-alice", appName: app, userId: "alice", text: "Alice's cat is called Miso" },
        { memoryId: "s-bob", appName: app, userId: "bob", text: "Bob's cat is called Pixel" },
        { memoryId: "s-shared", appName: app, text: "A visiting cat must stay in the office lounge" },
        { memoryId: "s-dog", appName: app, userId: "alice", text: "Alice walks the neighbour's dog" },
      ],
    });
    const { results } = await client.searchMemories({ appName: app, userId: "alice", query: "cat called", topK: 10 });
    expect(results.map((r) => r.memory?.memoryId)).toEqual(["s-alice", "s-shared"]);
    expect(results[0].score).toBeGreaterThan(results[1].score);
    expect(results[0].lexicalScore).toBeGreaterThan(0);
    const bob = await client.searchMemories({ appName: app, userId: "bob", query: "cat" });
    expect(bob.results.map((r) => r.memory?.memoryId)).toEqual(["s-bob", "s-shared"]);
    const within = await client.searchMemories({
      appName: app,
      userId: "alice",
      scopeMatch: ScopeMatch.WITHIN,
      query: "cat dog",
    });
    expect(within.results.map((r) => r.memory?.memoryId).sort()).toEqual(["s-alice", "s-dog"]);
    const one = await client.searchMemories({ appName: app, userId: "alice", query: "cat", topK: 1 });
    expect(one.results).toHaveLength(1);
  });

  it("fuses relevance with importance and vector similarity: importance settles a tie, a query embedding promotes the nearest memory", async () => {
    await client.writeMemories({
      memories: [
        { memoryId: "rank-plain", appName: app, userId: "jo", text: "jo likes hiking trips", embedding: [0, 1, 0] },
        {
          memoryId: "rank-x-important",
          appName: app,
          userId: "jo",
          text: "jo likes hiking trips",
          importance: 0.9,
          embedding: [1, 0, 0],
        },
        {
          memoryId: "rank-near",
          appName: app,
          userId: "jo",
          text: "jo enjoys long walks in the mountains",
          embedding: [0, 0, 1],
        },
      ],
    });
    const lexical = await client.searchMemories({
      appName: app,
      userId: "jo",
      scopeMatch: ScopeMatch.EXACT,
      query: "hiking trips",
    });
    expect(lexical.results.map((r) => r.memory?.memoryId)).toEqual(["rank-x-important", "rank-plain"]);
    expect(lexical.results[0].lexicalScore).toBe(lexical.results[1].lexicalScore);
    const hybrid = await client.searchMemories({
      appName: app,
      userId: "jo",
      scopeMatch: ScopeMatch.EXACT,
      query: "hiking trips",
      queryEmbedding: [0, 0.1, 1],
    });
    expect(hybrid.results.map((r) => r.memory?.memoryId)).toEqual(["rank-plain", "rank-x-important", "rank-near"]);
    expect(hybrid.results[2].vectorScore).toBeGreaterThan(0.99);
    const vectorOnly = await client.searchMemories({
      appName: app,
      userId: "jo",
      scopeMatch: ScopeMatch.EXACT,
      queryEmbedding: [0, 0, 1],
      topK: 1,
    });
    expect(vectorOnly.results.map((r) => r.memory?.memoryId)).toEqual(["rank-near"]);
  });

  it("supersession closes the old memory's validity: search finds the new value now, the old one as of then, both with include_invalid", async () => {
    const at = (ms: number) => timestampFromMs(ms);
    await client.writeMemories({
      memories: [
        {
          memoryId: "city-1",
          appName: app,
          userId: "carol",
          key: "home city",
          text: "Carol lives in Lyon",
          validFrom: at(Date.parse("2024-01-01")),
        },
      ],
    });
    const { superseded } = await client.writeMemories({
      memories: [
        {
          memoryId: "city-2",
          appName: app,
          userId: "carol",
          key: "home city",
          text: "Carol lives in Porto",
          validFrom: at(Date.parse("2025-06-01")),
        },
      ],
    });
    expect(superseded.map((m) => [m.memoryId, m.supersededBy])).toEqual([["city-1", "city-2"]]);
    expect(superseded[0].invalidAt).toEqual(at(Date.parse("2025-06-01")));
    const search = (extra: object) =>
      client.searchMemories({ appName: app, userId: "carol", query: "Carol lives", ...extra });
    expect((await search({})).results.map((r) => r.memory?.text)).toEqual(["Carol lives in Porto"]);
    expect((await search({ asOf: at(Date.parse("2024-08-01")) })).results.map((r) => r.memory?.text)).toEqual([
      "Carol lives in Lyon",
    ]);
    expect((await search({ asOf: at(Date.parse("2023-01-01")) })).results).toEqual([]);
    expect((await search({ includeInvalid: true })).results.map((r) => r.memory?.memoryId).sort()).toEqual([
      "city-1",
      "city-2",
    ]);
    // Kept, not deleted.
    expect((await client.getMemory({ appName: app, memoryId: "city-1" })).memory?.supersededBy).toBe("city-2");
  });

  it("lists newest first, page by page, with filters bound to the page token", async () => {
    const user = "lister";
    await client.writeMemories({
      memories: Array.from({ length: 5 }, (_, i) => ({
        memoryId: `list-${i}`,
        appName: app,
        userId: user,
        text: `note ${i}`,
        topics: i % 2 ? ["odd"] : [],
      })),
    });
    const seen: string[] = [];
    let pageToken = "";
    for (let page = 0; page < 10; page++) {
      const res = await client.listMemories({ appName: app, userId: user, pageSize: 2, pageToken });
      seen.push(...res.memories.map((m) => m.memoryId));
      pageToken = res.nextPageToken;
      if (!pageToken) break;
    }
    expect(seen.sort()).toEqual(["list-0", "list-1", "list-2", "list-3", "list-4"]);
    const odd = await client.listMemories({ appName: app, userId: user, topics: ["odd"] });
    expect(odd.memories.map((m) => m.memoryId).sort()).toEqual(["list-1", "list-3"]);
    const first = await client.listMemories({ appName: app, userId: user, pageSize: 1 });
    const err = await errorOf(
      client.listMemories({ appName: app, userId: "someone-else", pageSize: 1, pageToken: first.nextPageToken }),
    );
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage).toBe("page_token: was issued for different filters");
  });

  it("forgets by ids and by scope, and DeleteUserData counts the user's memories", async () => {
    await client.writeMemories({
      memories: [
        { memoryId: "f-1", appName: app, userId: "dave", text: "one" },
        { memoryId: "f-2", appName: app, userId: "dave", sessionId: "sess", text: "two" },
        { memoryId: "f-3", appName: app, userId: "erin", text: "three" },
        { memoryId: "f-4", appName: app, userId: "erin", text: "four" },
      ],
    });
    expect((await client.deleteMemories({ appName: app, memoryIds: ["f-1", "absent"] })).deletedCount).toBe(1n);
    expect((await client.deleteMemories({ appName: app, userId: "dave" })).deletedCount).toBe(1n);
    expect((await errorOf(client.getMemory({ appName: app, memoryId: "f-2" }))).code).toBe(Code.NotFound);
    const erased = await client.deleteUserData({ appName: app, userId: "erin" });
    expect(erased.removedMemories).toBe(2n);
    expect((await client.listMemories({ appName: app, userId: "erin" })).memories).toEqual([]);
  });

  it("watches a scope live: writes, supersessions and deletions it can see, nothing of other users", async () => {
    expect(await watchFaysScope(client, client, app)).toEqual(FAY_WATCH_FRAMES);
  });

  it("a watch resumed with after replays, in order and once, what the scope missed while away, then goes live", async () => {
    expect(await resumeFaysWatch(client, client, `${app}-resume`)).toEqual({
      frames: FAY_RESUMED_FRAMES,
      cursorsRise: true,
    });
  });

  it("answers OUT_OF_RANGE naming after for a resume point beyond the app's newest change", async () => {
    const err = await errorOf(
      client
        .watchMemories({ appName: `${app}-resume-none`, after: 5n })
        [Symbol.asyncIterator]()
        .next(),
    );
    expect(err.code).toBe(Code.OutOfRange);
    expect(err.rawMessage).toMatch(/^after: change 5 is beyond the app's newest change \(0\)/);
  });

  describe("SearchEvents", () => {
    const text = (s: string) => ({ kind: { case: "stringValue" as const, value: s } });
    beforeAll(async () => {
      const sessions: Array<[string, string, string[]]> = [
        [
          `ev-kim-1-${protocol.length}`,
          "kim",
          ["We booked the cabin by the lake for June", "Remember to bring the canoe"],
        ],
        [`ev-kim-2-${protocol.length}`, "kim", ["The dentist appointment moved to Friday"]],
        [`ev-lou-1-${protocol.length}`, "lou", ["Lou also wants a lake cabin"]],
      ];
      for (const [sessionId, userId, texts] of sessions) {
        await client.createSession({ appName: app, userId, sessionId });
        await client.addEvents({
          sessionId,
          events: texts.map((t) => ({ eventType: "user_message", content: text(t) })),
        });
      }
    });

    it("finds the events of a user's sessions that best match, with session, seq and a snippet", async () => {
      const { hits } = await client.searchEvents({ appName: app, userId: "kim", query: "lake cabin" });
      expect(hits.map((h) => [h.sessionId, Number(h.seq)])).toEqual([[`ev-kim-1-${protocol.length}`, 1]]);
      expect(hits[0].snippet).toBe("We booked the cabin by the lake for June");
      expect(hits[0].score).toBeGreaterThan(0);
      expect(hits[0].event?.eventType).toBe("user_message");
      const appWide = await client.searchEvents({ appName: app, query: "lake cabin" });
      expect(appWide.hits.map((h) => h.sessionId).sort()).toEqual([
        `ev-kim-1-${protocol.length}`,
        `ev-lou-1-${protocol.length}`,
      ]);
      expect((await client.searchEvents({ appName: app, query: "lake cabin", topK: 1 })).hits).toHaveLength(1);
      expect(
        (await client.searchEvents({ appName: app, userId: "kim", query: "dentist", eventTypes: ["agent_response"] }))
          .hits,
      ).toEqual([]);
    });

    it.each([
      ["query", { appName: "a", query: " " }],
      ["app_name", { appName: "", query: "x" }],
      ["top_k", { appName: "a", query: "x", topK: 101 }],
      ["event_types[0]", { appName: "a", query: "x", eventTypes: ["not a type"] }],
    ])("refuses a bad %s", async (field, req) => {
      const err = await errorOf(client.searchEvents(req));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage.startsWith(`${field}: `)).toBe(true);
    });
  });

  describe("Recall", () => {
    const sessionId = `recall-${protocol.length}-${process.pid}`;
    const text = (s: string) => ({ kind: { case: "stringValue" as const, value: s } });
    beforeAll(async () => {
      await client.createSession({ appName: app, userId: "hana", sessionId });
      await client.addEvents({
        sessionId,
        events: [
          { eventType: "user_message", content: text("I am flying to Porto next week") },
          { eventType: "agent_response", content: text("Noted: Porto next week. Anything to book?") },
        ],
      });
      await client.writeMemories({
        memories: [
          { memoryId: "r-core", appName: app, userId: "hana", text: "Hana is vegetarian", pinned: true, importance: 1 },
          { memoryId: "r-sister", appName: app, userId: "hana", text: "Hana's sister lives in Porto" },
          { memoryId: "r-other", appName: app, userId: "ivan", text: "Ivan's sister lives in Porto too" },
          { memoryId: "r-office", appName: app, text: "Porto office opens at nine" },
          { memoryId: "r-agent", appName: app, agentId: "booker", text: "The booker agent prefers trains to Porto" },
        ],
      });
    });

    it("returns the pinned memories, the relevant ones of the session's user, and the session's context, rendered in that order", async () => {
      const recall = await client.recall({ sessionId, query: "sister in Porto", tokenizer: "chars4" });
      expect(recall.pinned.map((m) => m.memoryId)).toEqual(["r-core"]);
      const relevant = recall.memories.map((r) => r.memory?.memoryId);
      expect(relevant[0]).toBe("r-sister");
      expect(relevant).toContain("r-office");
      expect(relevant).not.toContain("r-other");
      expect(relevant).not.toContain("r-agent");
      expect(recall.context?.text).toContain("I am flying to Porto next week");
      const core = recall.text.indexOf("Hana is vegetarian");
      const sister = recall.text.indexOf("Hana's sister lives in Porto");
      const turn = recall.text.indexOf("I am flying to Porto next week");
      expect(core).toBeGreaterThan(-1);
      expect(sister).toBeGreaterThan(core);
      expect(turn).toBeGreaterThan(sister);
      // chars4 counts ceil(characters / 4): the same counter the context assembly uses.
      expect(recall.tokenizer).toBe("chars4");
      expect(recall.tokensUsed).toBe(Math.ceil(recall.text.length / 4));
      expect(recall.pinnedTokens).toBeGreaterThan(0);
      expect(recall.memoryTokens).toBeGreaterThan(0);
      expect(recall.contextTokens).toBeGreaterThan(0);
      expect(recall.pinnedTokens + recall.memoryTokens + recall.contextTokens).toBeLessThanOrEqual(
        recall.tokensUsed + 3,
      );
    });

    it("leaves the memories' embeddings out of its answer unless asked for them", async () => {
      const vectorApp = `${app}-vectors`;
      const vectorSession = `${sessionId}-vectors`;
      await client.createSession({ appName: vectorApp, userId: "hana", sessionId: vectorSession });
      await client.writeMemories({
        memories: [
          {
            memoryId: "v-core",
            appName: vectorApp,
            userId: "hana",
            text: "Hana is vegetarian",
            pinned: true,
            embedding: [0, 0, 1],
          },
          {
            memoryId: "v-sister",
            appName: vectorApp,
            userId: "hana",
            text: "Hana's sister lives in Porto",
            embedding: [1, 0, 0],
          },
        ],
      });
      const request = { sessionId: vectorSession, query: "sister in Porto", queryEmbedding: [1, 0, 0] };
      const plain = await client.recall(request);
      expect(plain.pinned.map((m) => [m.memoryId, m.embedding])).toEqual([["v-core", []]]);
      expect(plain.memories.map((r) => [r.memory?.memoryId, r.memory?.embedding])).toEqual([["v-sister", []]]);
      // The vectors still ranked it: only the answer leaves them out.
      expect(plain.memories[0].vectorScore).toBeCloseTo(1);
      const full = await client.recall({ ...request, includeEmbeddings: true });
      expect(full.pinned.map((m) => [m.memoryId, m.embedding])).toEqual([["v-core", [0, 0, 1]]]);
      expect(full.memories.map((r) => [r.memory?.memoryId, r.memory?.embedding])).toEqual([["v-sister", [1, 0, 0]]]);
      expect(full.text).toBe(plain.text);
    });

    it("leaves the embeddings out of SearchMemories and ListMemories unless asked, and GetMemory keeps them", async () => {
      const vectorApp = `${app}-listed-vectors`;
      await client.writeMemories({
        memories: [
          {
            memoryId: "l-seat",
            appName: vectorApp,
            userId: "hana",
            text: "Hana wants a window seat",
            embedding: [1, 0, 0],
          },
        ],
      });
      const search = { appName: vectorApp, userId: "hana", query: "window seat", queryEmbedding: [1, 0, 0] };
      const plain = await client.searchMemories(search);
      expect(plain.results.map((r) => [r.memory?.memoryId, r.memory?.embedding])).toEqual([["l-seat", []]]);
      expect(plain.results[0].vectorScore).toBeCloseTo(1);
      const full = await client.searchMemories({ ...search, includeEmbeddings: true });
      expect(full.results.map((r) => [r.memory?.memoryId, r.memory?.embedding])).toEqual([["l-seat", [1, 0, 0]]]);
      const listed = await client.listMemories({ appName: vectorApp });
      expect(listed.memories.map((m) => [m.memoryId, m.embedding])).toEqual([["l-seat", []]]);
      const exported = await client.listMemories({ appName: vectorApp, includeEmbeddings: true });
      expect(exported.memories.map((m) => [m.memoryId, m.embedding])).toEqual([["l-seat", [1, 0, 0]]]);
      const { memory } = await client.getMemory({ appName: vectorApp, memoryId: "l-seat" });
      expect(memory?.embedding).toEqual([1, 0, 0]);
    });

    it("names an agent to include its memories", async () => {
      const recall = await client.recall({ sessionId, query: "trains to Porto", agentId: "booker" });
      expect(recall.memories.map((r) => r.memory?.memoryId)).toContain("r-agent");
    });

    it("stays within the token budget, pinned memories first, whatever the budget", async () => {
      for (const tokenBudget of [8, 20, 40, 80, 4000]) {
        const recall = await client.recall({
          sessionId,
          query: "sister in Porto",
          tokenBudget,
          tokenizer: "o200k_base",
        });
        expect(recall.tokensUsed, `budget ${tokenBudget}`).toBeLessThanOrEqual(tokenBudget);
        if (recall.text !== "")
          expect(recall.text, `budget ${tokenBudget}`).toMatch(
            /^## Core memories\n- \d{4}-\d\d-\d\d: Hana is vegetarian/,
          );
      }
      const tight = await client.recall({
        sessionId,
        query: "sister in Porto",
        tokenBudget: 20,
        tokenizer: "o200k_base",
      });
      expect(tight.pinned).toHaveLength(1);
      expect(tight.context).toBeUndefined();
    });

    it.each([
      ["token_budget", { tokenBudget: 2_000_001 }],
      ["tokenizer", { tokenizer: "gpt2" }],
      ["query", { query: "x".repeat(4097) }],
      ["agent_id", { agentId: "" }],
      ["top_k", { topK: 1000 }],
    ])("refuses a bad %s", async (field, extra) => {
      const err = await errorOf(client.recall({ sessionId, ...extra }));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage.startsWith(`${field}: `)).toBe(true);
    });

    it("fills its budget: with an empty session, relevant memories take what the pinned ones leave, each line dated", async () => {
      const fillApp = `${app}-fill`;
      const fillSession = `${sessionId}-fill`;
      await client.createSession({ appName: fillApp, userId: "hana", sessionId: fillSession });
      const day = Date.UTC(2026, 2, 14);
      for (let first = 0; first < 300; first += 100) {
        await client.writeMemories({
          memories: Array.from({ length: 100 }, (_, i) => ({
            appName: fillApp,
            userId: "hana",
            text: `Hana visited Porto museum number ${first + i} and liked the tiles`,
            validFrom: timestampFromMs(day),
            source: { sessionId: "trip-1", fromSeq: 1n, toSeq: 2n },
          })),
        });
      }
      await client.writeMemories({
        memories: [
          {
            appName: fillApp,
            userId: "hana",
            text: "Hana is vegetarian",
            pinned: true,
            validFrom: timestampFromMs(day),
          },
        ],
      });
      const recall = await client.recall({
        sessionId: fillSession,
        query: "Porto museum tiles",
        tokenBudget: 2000,
        tokenizer: "o200k_base",
      });
      expect(recall.tokensUsed).toBeLessThanOrEqual(2000);
      expect(recall.tokensUsed).toBeGreaterThanOrEqual(1800);
      expect(recall.memories.length).toBeGreaterThan(10);
      expect(recall.text).toContain("## Core memories\n- 2026-03-14: Hana is vegetarian");
      expect(recall.text).toContain("\n- 2026-03-14 (session trip-1): Hana visited Porto museum number");
      // An explicit top_k is honoured.
      const three = await client.recall({
        sessionId: fillSession,
        query: "Porto museum tiles",
        tokenBudget: 2000,
        topK: 3,
      });
      expect(three.memories).toHaveLength(3);
    });

    it("answers NOT_FOUND for an unknown session", async () => {
      expect((await errorOf(client.recall({ sessionId: `${sessionId}-absent` }))).code).toBe(Code.NotFound);
    });
  });

  it.each([
    ["memories", { memories: [] }, /must hold at least one memory/],
    ["memories[0].app_name", { memories: [{ appName: "", text: "x" }] }, /is required/],
    ["memories[0].text", { memories: [{ appName: "a", text: "  " }] }, /is required/],
    ["memories[0].importance", { memories: [{ appName: "a", text: "x", importance: 1.5 }] }, /between 0 and 1/],
    ["memories[0].user_id", { memories: [{ appName: "a", text: "x", userId: "" }] }, /must not be empty/],
    ["memories[0].memory_id", { memories: [{ appName: "a", text: "x", memoryId: "has space" }] }, /printable ASCII/],
    [
      "memories[0].fact.predicate",
      { memories: [{ appName: "a", text: "x", fact: { subject: "s", predicate: "", object: "o" } }] },
      /is required when fact is set/,
    ],
    ["memories[0].topics[0]", { memories: [{ appName: "a", text: "x", topics: [""] }] }, /1-64 characters/],
    [
      "memories[0].invalid_at",
      { memories: [{ appName: "a", text: "x", validFrom: timestampFromMs(2000), invalidAt: timestampFromMs(1000) }] },
      /after valid_from/,
    ],
    ["memories[0].embedding", { memories: [{ appName: "a", text: "x", embedding: [Number.NaN] }] }, /finite/],
    [
      "memories[1].memory_id",
      {
        memories: [
          { appName: "a", text: "x", memoryId: "d" },
          { appName: "a", text: "y", memoryId: "d" },
        ],
      },
      /repeats/,
    ],
    [
      "memories[0].source.to_seq",
      { memories: [{ appName: "a", text: "x", source: { sessionId: "s", fromSeq: 5n, toSeq: 2n } }] },
      /below from_seq/,
    ],
  ])("WriteMemories refuses a bad %s", async (field, req, problem) => {
    const err = await errorOf(client.writeMemories(req as never));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage.startsWith(`${field}: `)).toBe(true);
    expect(err.rawMessage).toMatch(problem);
  });

  it.each([
    ["searchMemories", "app_name", "app_name", { appName: "" }],
    ["searchMemories", "top_k", "top_k", { appName: "a", topK: 101 }],
    ["searchMemories", "query", "query", { appName: "a", query: "x".repeat(4097) }],
    [
      "searchMemories",
      "include_invalid",
      "include_invalid",
      { appName: "a", includeInvalid: true, asOf: timestampFromMs(1) },
    ],
    ["searchMemories", "scope_match", "scope_match", { appName: "a", scopeMatch: 9 }],
    ["listMemories", "page_token", "page_token", { appName: "a", pageToken: "garbage" }],
    ["listMemories", "page_size", "page_size", { appName: "a", pageSize: 5000 }],
    ["deleteMemories", "scope_match", "scope_match", { appName: "a" }],
    ["deleteMemories", "scope_match", "scope_match", { appName: "a", userId: "u", scopeMatch: ScopeMatch.VISIBLE }],
    ["deleteMemories", "memory_ids", "memory_ids", { appName: "a", userId: "u", memoryIds: ["x"] }],
    ["getMemory", "memory_id", "memory_id", { appName: "a", memoryId: "" }],
  ])("%s refuses a bad %s (%s)", async (method, field, _why, req) => {
    const fn = (client as unknown as Record<string, (r: unknown) => Promise<unknown>>)[method];
    const err = await errorOf(fn(req));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.rawMessage.startsWith(`${field}: `)).toBe(true);
  });
});
