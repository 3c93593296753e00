/**
 * The long-term memory conformance suite: what every LongTermMemoryStore
 * (a MemoryStore's `memories`) must do, whatever keeps it. A driver's test
 * file calls describeMemoriesConformance(name, factory); Redis and PostgreSQL
 * plug in here once they keep memories.
 */
import { afterEach, describe, expect, it } from "vitest";
import { MEMORY_CHANGES_RETAINED, memoryFingerprint } from "../../src/store/memories/rules.js";
import type {
  LongTermMemoryStore,
  MemoryChange,
  MemoryFilter,
  MemoryRecord,
  MemoryStore,
  ScopeMatch,
} from "../../src/store/types.js";
import { rejection } from "./fixtures.js";

/** Makes a fresh, empty store that keeps memories. */
export type MemoriesStoreFactory = () => Promise<MemoryStore>;

/** The fields a test sets; the rest take the service's defaults. */
type MemoryInput = Partial<Omit<MemoryRecord, "fingerprint">> & Pick<MemoryRecord, "memoryId" | "text">;

/** A MemoryRecord as the service would build it (fingerprint included). */
export function memory(input: MemoryInput, now = Date.now()): MemoryRecord {
  const base = {
    appName: "app",
    key: "",
    topics: [],
    importance: 0,
    pinned: false,
    metadata: {},
    ...input,
  };
  return {
    createdAt: now,
    validFrom: input.validFrom ?? now,
    ...base,
    fingerprint: memoryFingerprint(base, input.validFrom),
  };
}

/** A filter over one app's scope; valid now unless told otherwise. */
function filter(
  scope: { userId?: string; agentId?: string; sessionId?: string; match?: ScopeMatch } = {},
  rest: Partial<MemoryFilter> = {},
): MemoryFilter {
  return { scope: { appName: "app", match: "visible", ...scope }, asOf: Date.now(), ...rest };
}

const ids = (ms: readonly { memoryId: string }[]) => ms.map((m) => m.memoryId).sort();

/** Registers the memories conformance suite for one driver. */
export function describeMemoriesConformance(name: string, factory: MemoriesStoreFactory): void {
  describe(`LongTermMemoryStore conformance: ${name}`, () => {
    const open: MemoryStore[] = [];
    const fresh = async (): Promise<{ store: MemoryStore; memories: LongTermMemoryStore }> => {
      const store = await factory();
      open.push(store);
      expect(store.memories, `${name} must offer long-term memories`).toBeDefined();
      return { store, memories: store.memories! };
    };
    afterEach(async () => {
      for (const store of open.splice(0)) await store.close();
    });

    describe("1. writes", () => {
      it("stores a memory with every field and reads it back", async () => {
        const { memories } = await fresh();
        const full = memory({
          memoryId: "m1",
          userId: "u",
          agentId: "a",
          sessionId: "s",
          text: "The user prefers green tea",
          fact: { subject: "user", predicate: "prefers", object: "green tea" },
          topics: ["drinks"],
          importance: 0.75,
          pinned: true,
          metadata: { origin: ["chat", 1] },
          source: { sessionId: "s", fromSeq: 3, toSeq: 5 },
          embedding: [0.5, -0.25, 1],
        });
        const written = await memories.writeMemories([full]);
        expect(written).toEqual({ memories: [full], superseded: [] });
        expect(await memories.getMemory("app", "m1")).toEqual(full);
        expect(await memories.getMemory("other-app", "m1")).toBeUndefined();
        expect(await memories.getMemory("app", "absent")).toBeUndefined();
      });

      it("is idempotent by memory_id: the same memory again changes nothing and returns the original", async () => {
        const { memories } = await fresh();
        const first = memory({ memoryId: "m1", text: "likes cats" }, 1000);
        await memories.writeMemories([first]);
        const retry = memory({ memoryId: "m1", text: "likes cats" }, 2000);
        expect((await memories.writeMemories([retry])).memories).toEqual([first]);
        expect(await memories.listMemories(filter({ match: "within" }, { asOf: undefined }), 10)).toEqual([first]);
      });

      it("answers ALREADY_EXISTS for a memory_id stored with other content, and stores none of the batch", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([memory({ memoryId: "m1", text: "likes cats" })]);
        const err = await rejection(
          memories.writeMemories([
            memory({ memoryId: "m2", text: "new" }),
            memory({ memoryId: "m1", text: "likes dogs" }),
          ]),
        );
        expect(err.code).toBe("ALREADY_EXISTS");
        expect(err.field).toBe("memories[1].memory_id");
        expect(await memories.getMemory("app", "m2")).toBeUndefined();
        expect((await memories.getMemory("app", "m1"))?.text).toBe("likes cats");
      });

      it("keeps one embedding dimension per app: another is INVALID_ARGUMENT naming the memory, and the batch is not stored", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([memory({ memoryId: "e1", text: "x", embedding: [1, 0, 0] })]);
        const err = await rejection(
          memories.writeMemories([
            memory({ memoryId: "e2", text: "y", embedding: [1, 0, 0] }),
            memory({ memoryId: "e3", text: "z", embedding: [1, 0] }),
          ]),
        );
        expect(err.code).toBe("INVALID_ARGUMENT");
        expect(err.field).toBe("memories[1].embedding");
        expect(await memories.getMemory("app", "e2")).toBeUndefined();
        // Another app has its own dimension; a first batch must agree with itself.
        await memories.writeMemories([memory({ memoryId: "o1", appName: "other", text: "x", embedding: [1, 0] })]);
        expect(
          (
            await rejection(
              memories.writeMemories([
                memory({ memoryId: "n1", appName: "new", text: "a", embedding: [1] }),
                memory({ memoryId: "n2", appName: "new", text: "b", embedding: [1, 2] }),
              ]),
            )
          ).field,
        ).toBe("memories[1].embedding");
      });

      it("keeps memory ids apart per app", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([
          memory({ memoryId: "m1", text: "of app" }),
          memory({ memoryId: "m1", appName: "other", text: "of other" }),
        ]);
        expect((await memories.getMemory("app", "m1"))?.text).toBe("of app");
        expect((await memories.getMemory("other", "m1"))?.text).toBe("of other");
      });
    });

    describe("2. supersession and validity", () => {
      it("closes the validity of the memory with the same key in the same scope, keeping it", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([
          memory({ memoryId: "old", userId: "u", key: "drink", text: "prefers coffee", validFrom: 1000 }),
        ]);
        const result = await memories.writeMemories([
          memory({ memoryId: "new", userId: "u", key: "drink", text: "prefers tea", validFrom: 2000 }),
        ]);
        expect(result.superseded).toMatchObject([{ memoryId: "old", invalidAt: 2000, supersededBy: "new" }]);
        expect(await memories.getMemory("app", "old")).toMatchObject({ invalidAt: 2000, supersededBy: "new" });
        expect((await memories.getMemory("app", "new"))?.invalidAt).toBeUndefined();
        // Now only the new one holds; as of 1500 only the old one did; both are there with any validity.
        expect(ids(await memories.listMemories(filter({ userId: "u" }), 10))).toEqual(["new"]);
        expect(ids(await memories.listMemories(filter({ userId: "u" }, { asOf: 1500 }), 10))).toEqual(["old"]);
        expect(ids(await memories.listMemories(filter({ userId: "u" }, { asOf: undefined }), 10))).toEqual([
          "new",
          "old",
        ]);
      });

      it("supersedes by fact subject and predicate when no key is given", async () => {
        const { memories } = await fresh();
        const fact = (object: string) => ({ subject: "user", predicate: "lives in", object });
        await memories.writeMemories([
          memory({ memoryId: "a", fact: fact("Paris"), text: "lives in Paris", validFrom: 1000 }),
        ]);
        await memories.writeMemories([
          memory({ memoryId: "b", fact: fact("Rome"), text: "lives in Rome", validFrom: 2000 }),
        ]);
        expect(await memories.getMemory("app", "a")).toMatchObject({ invalidAt: 2000, supersededBy: "b" });
      });

      it("never supersedes across scopes, keys, or memories without a key", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([
          memory({ memoryId: "u1", userId: "u1", key: "drink", text: "coffee", validFrom: 1000 }),
          memory({ memoryId: "shared", key: "drink", text: "water", validFrom: 1000 }),
          memory({ memoryId: "u2-agent", userId: "u2", agentId: "x", key: "drink", text: "juice", validFrom: 1000 }),
          memory({ memoryId: "nokey", userId: "u2", text: "drinks tea", validFrom: 1000 }),
          memory({ memoryId: "u2-food", userId: "u2", key: "food", text: "pasta", validFrom: 1000 }),
        ]);
        const result = await memories.writeMemories([
          memory({ memoryId: "u2", userId: "u2", key: "drink", text: "tea", validFrom: 2000 }),
        ]);
        expect(result.superseded).toEqual([]);
        const all = await memories.listMemories(filter({ match: "within" }, { asOf: undefined }), 10);
        expect(ids(all)).toEqual(["nokey", "shared", "u1", "u2", "u2-agent", "u2-food"]);
        expect(all.filter((m) => m.invalidAt !== undefined)).toEqual([]);
      });

      it("a memory that starts before an existing one of its key holds only until that one starts", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([memory({ memoryId: "later", key: "k", text: "v2", validFrom: 3000 })]);
        const result = await memories.writeMemories([
          memory({ memoryId: "earlier", key: "k", text: "v1", validFrom: 1000 }),
        ]);
        expect(result.superseded).toEqual([]);
        expect(result.memories).toMatchObject([{ memoryId: "earlier", invalidAt: 3000, supersededBy: "later" }]);
        expect((await memories.getMemory("app", "later"))?.invalidAt).toBeUndefined();
      });

      it("applies a batch in order: the last of one key holds", async () => {
        const { memories } = await fresh();
        const result = await memories.writeMemories([
          memory({ memoryId: "v1", key: "k", text: "one", validFrom: 1000 }),
          memory({ memoryId: "v2", key: "k", text: "two", validFrom: 2000 }),
        ]);
        expect(result.memories).toMatchObject([{ memoryId: "v1", invalidAt: 2000 }, { memoryId: "v2" }]);
        expect(result.memories[1].invalidAt).toBeUndefined();
      });

      it("honours an invalid_at given on write", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([memory({ memoryId: "m", text: "on holiday", validFrom: 1000, invalidAt: 2000 })]);
        expect(ids(await memories.listMemories(filter({}, { asOf: 1999 }), 10))).toEqual(["m"]);
        expect(ids(await memories.listMemories(filter({}, { asOf: 2000 }), 10))).toEqual([]);
      });
    });

    describe("3. scopes", () => {
      const seed = async (memories: LongTermMemoryStore) =>
        memories.writeMemories([
          memory({ memoryId: "app-wide", text: "app wide insight" }),
          memory({ memoryId: "u1", userId: "u1", text: "insight of u1" }),
          memory({ memoryId: "u1-s1", userId: "u1", sessionId: "s1", text: "insight of u1 in s1" }),
          memory({ memoryId: "u2", userId: "u2", text: "insight of u2" }),
          memory({ memoryId: "agent", agentId: "planner", text: "insight of the planner" }),
          memory({ memoryId: "elsewhere", appName: "other", text: "insight of another app" }),
        ]);

      it("VISIBLE: the user's own and the shared memories, never another user's or app's", async () => {
        const { memories } = await fresh();
        await seed(memories);
        expect(ids(await memories.listMemories(filter({ userId: "u1" }), 10))).toEqual(["app-wide", "u1"]);
        expect(
          ids(await memories.listMemories(filter({ userId: "u1", sessionId: "s1", agentId: "planner" }), 10)),
        ).toEqual(["agent", "app-wide", "u1", "u1-s1"]);
        expect(ids(await memories.listMemories(filter({}), 10))).toEqual(["app-wide"]);
      });

      it("WITHIN: everything inside the scope; EXACT: that scope only", async () => {
        const { memories } = await fresh();
        await seed(memories);
        expect(ids(await memories.listMemories(filter({ userId: "u1", match: "within" }), 10))).toEqual([
          "u1",
          "u1-s1",
        ]);
        expect(ids(await memories.listMemories(filter({ match: "within" }), 10))).toEqual([
          "agent",
          "app-wide",
          "u1",
          "u1-s1",
          "u2",
        ]);
        expect(ids(await memories.listMemories(filter({ userId: "u1", match: "exact" }), 10))).toEqual(["u1"]);
        expect(ids(await memories.listMemories(filter({ match: "exact" }), 10))).toEqual(["app-wide"]);
      });

      it("searches only within the filter", async () => {
        const { memories } = await fresh();
        await seed(memories);
        expect(
          ids((await memories.searchMemories(filter({ userId: "u2" }), "insight", 10)).map((r) => r.memory)),
        ).toEqual(["app-wide", "u2"]);
      });
    });

    describe("4. ranking and listing", () => {
      it("ranks by BM25: the memory matching more (and rarer) query terms first; non-matching ones left out", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([
          memory({ memoryId: "tea", text: "The user drinks green tea every morning" }),
          memory({ memoryId: "coffee", text: "The user drinks coffee" }),
          memory({ memoryId: "dog", text: "The dog is called Rex" }),
          memory({ memoryId: "fact", text: "Hobby", fact: { subject: "user", predicate: "plays", object: "chess" } }),
        ]);
        const results = await memories.searchMemories(filter(), "green tea", 10);
        expect(results.map((r) => r.memory.memoryId)).toEqual(["tea"]);
        expect(results[0].score).toBeGreaterThan(0);
        const drinks = await memories.searchMemories(filter(), "drinks tea", 10);
        expect(drinks.map((r) => r.memory.memoryId)).toEqual(["tea", "coffee"]);
        expect((await memories.searchMemories(filter(), "chess", 10)).map((r) => r.memory.memoryId)).toEqual(["fact"]);
        expect(await memories.searchMemories(filter(), "drinks", 1)).toHaveLength(1);
      });

      it("takes any query text as words: query syntax, quotes and backslashes never fail a search, and punctuation alone matches nothing", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([
          memory({ memoryId: "irish", text: "O'Neil's pub serves stout on Fridays" }),
          memory({ memoryId: "path", text: "The backup lives in C:\\backups\\daily" }),
        ]);
        const found = async (query: string) =>
          (await memories.searchMemories(filter(), query, 10)).map((r) => r.memory.memoryId);
        expect(await found("O'Neil's 'stout' & !(pub | <-> :* \\")).toEqual(["irish"]);
        expect(await found("backups\\daily ''' \" ) (")).toEqual(["path"]);
        expect(await found("!!! ::: &&&")).toEqual([]);
      });

      it("filters searches by topics, pinned and validity", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([
          memory({ memoryId: "a", text: "note alpha", topics: ["work"], pinned: true }),
          memory({ memoryId: "b", text: "note beta", topics: ["home"] }),
          memory({ memoryId: "c", text: "note gamma", topics: ["work"], validFrom: 1000, invalidAt: 2000 }),
        ]);
        const found = async (f: MemoryFilter) =>
          ids((await memories.searchMemories(f, "note", 10)).map((r) => r.memory));
        expect(await found(filter({}, { topics: ["work"] }))).toEqual(["a"]);
        expect(await found(filter({}, { topics: ["work"], asOf: undefined }))).toEqual(["a", "c"]);
        expect(await found(filter({}, { pinned: false }))).toEqual(["b"]);
      });

      it("lists newest first and resumes after a cursor without repeats or gaps", async () => {
        const { memories } = await fresh();
        await memories.writeMemories(
          Array.from({ length: 7 }, (_, i) =>
            memory({ memoryId: `m${i}`, text: `memory ${i}` }, 1000 + Math.floor(i / 2)),
          ),
        );
        const seen: string[] = [];
        let after: { createdAt: number; memoryId: string } | undefined;
        for (let page = 0; page < 10; page++) {
          const rows = await memories.listMemories(filter(), 3, after);
          seen.push(...rows.map((m) => m.memoryId));
          if (rows.length < 3) break;
          after = rows[rows.length - 1];
        }
        expect(seen).toEqual(["m6", "m5", "m4", "m3", "m2", "m1", "m0"]);
      });

      it("lists the pinned memories alone, newest first, after a cursor, each as it is now", async () => {
        const { memories } = await fresh();
        await memories.writeMemories(
          Array.from({ length: 9 }, (_, i) =>
            memory(
              { memoryId: `p${i}`, text: `memory ${i}`, pinned: i % 3 !== 2, key: i === 1 ? "seat" : "" },
              1000 + i,
            ),
          ),
        );
        // p1 is superseded by a newer pinned memory of its key; p4 is forgotten; p2, p5 and p8 were never pinned.
        await memories.writeMemories([
          memory({ memoryId: "p9", text: "memory 9", pinned: true, key: "seat", validFrom: 5000 }, 2000),
        ]);
        await memories.deleteMemories("app", ["p4"]);
        const pinned = async (
          rest: Partial<MemoryFilter>,
          limit: number,
          after?: { createdAt: number; memoryId: string },
        ) => (await memories.listMemories(filter({}, { pinned: true, ...rest }), limit, after)).map((m) => m.memoryId);
        expect(await pinned({}, 10)).toEqual(["p9", "p7", "p6", "p3", "p0"]);
        expect(await pinned({ asOf: undefined }, 10)).toEqual(["p9", "p7", "p6", "p3", "p1", "p0"]);
        expect(await pinned({ asOf: undefined }, 2, { createdAt: 1006, memoryId: "p6" })).toEqual(["p3", "p1"]);
        const [closed] = await memories.listMemories(filter({}, { pinned: true, asOf: undefined }), 1, {
          createdAt: 1003,
          memoryId: "p3",
        });
        expect(closed).toMatchObject({ memoryId: "p1", invalidAt: 5000, supersededBy: "p9" });
        expect(
          await memories.listMemories(filter({}, { pinned: false }), 10).then((ms) => ms.map((m) => m.memoryId)),
        ).toEqual(["p8", "p5", "p2"]);
      });

      it("finds the nearest embeddings by cosine when the driver offers vector search", async (ctx) => {
        const { memories } = await fresh();
        if (!memories.nearestMemories) return ctx.skip("the driver offers no vector search");
        await memories.writeMemories([
          memory({ memoryId: "x", text: "x", embedding: [1, 0, 0] }),
          memory({ memoryId: "xy", text: "xy", embedding: [1, 1, 0] }),
          memory({ memoryId: "none", text: "none" }),
        ]);
        const nearest = await memories.nearestMemories(filter(), [1, 0.1, 0], 10);
        expect(nearest.map((r) => r.memory.memoryId)).toEqual(["x", "xy"]);
        expect(nearest[0].score).toBeCloseTo(1 / Math.sqrt(1.01), 6);
        // The app's embeddings have 3 dimensions: a query of another matches none of them.
        expect(await memories.nearestMemories(filter(), [1, 0], 10)).toEqual([]);
        expect(await memories.nearestMemories(filter(), [1, 0, 0, 0], 10)).toEqual([]);
      });

      it("searches by vector within the scope alone: a user's and the shared memories, never another user's, as each match says", async (ctx) => {
        const { memories } = await fresh();
        if (!memories.nearestMemories) return ctx.skip("the driver offers no vector search");
        await memories.writeMemories([
          memory({ memoryId: "ann", userId: "ann", text: "a", embedding: [1, 0, 0] }),
          memory({ memoryId: "ann-agent", userId: "ann", agentId: "bot", text: "b", embedding: [1, 0.2, 0] }),
          memory({ memoryId: "bob", userId: "bob", text: "c", embedding: [1, 0.1, 0] }),
          memory({ memoryId: "shared", text: "d", embedding: [1, 0.3, 0] }),
          memory({ memoryId: "shared-agent", agentId: "bot", text: "e", embedding: [1, 0.4, 0] }),
        ]);
        const near = async (scope: Parameters<typeof filter>[0]) =>
          ids((await memories.nearestMemories!(filter(scope), [1, 0, 0], 10)).map((r) => r.memory));
        expect(await near({ userId: "ann" })).toEqual(["ann", "shared"]);
        expect(await near({ userId: "ann", agentId: "bot" })).toEqual(["ann", "ann-agent", "shared", "shared-agent"]);
        expect(await near({})).toEqual(["shared"]);
        expect(await near({ userId: "ann", match: "within" })).toEqual(["ann", "ann-agent"]);
        expect(await near({ match: "within" })).toEqual(["ann", "ann-agent", "bob", "shared", "shared-agent"]);
        expect(await near({ userId: "bob", match: "exact" })).toEqual(["bob"]);
        expect(await near({ match: "exact" })).toEqual(["shared"]);
        expect(await near({ userId: "cy" })).toEqual(["shared"]);
        // Forgetting ann's memories leaves the others' where they were.
        await memories.deleteMemoriesInScope({ appName: "app", userId: "ann", match: "within" });
        expect(await near({ match: "within" })).toEqual(["bob", "shared", "shared-agent"]);
        expect(await near({ userId: "ann" })).toEqual(["shared"]);
      });

      it("ranks a memory written again under a deleted one's id by its new embedding, and a superseded one no more", async (ctx) => {
        const { memories } = await fresh();
        const nearest = memories.nearestMemories?.bind(memories);
        if (!nearest) return ctx.skip("the driver offers no vector search");
        await memories.writeMemories([
          memory({ memoryId: "m", text: "first", embedding: [1, 0, 0] }),
          memory({ memoryId: "k1", text: "k1", key: "k", embedding: [0, 0, 1] }),
        ]);
        const scores = async (query: number[]) =>
          Object.fromEntries((await nearest(filter(), query, 10)).map((r) => [r.memory.memoryId, r.score]));
        expect(await scores([1, 0, 0])).toEqual({ m: expect.closeTo(1, 6), k1: expect.closeTo(0, 6) });
        await memories.deleteMemories("app", ["m"]);
        await memories.writeMemories([
          memory({ memoryId: "m", text: "second", embedding: [0, 1, 0] }),
          memory({ memoryId: "k2", text: "k2", key: "k", embedding: [0, 1, 1] }),
        ]);
        expect(await scores([1, 0, 0])).toEqual({ m: expect.closeTo(0, 6), k2: expect.closeTo(0, 6) });
        await memories.deleteMemories("app", ["m"]);
        await memories.writeMemories([memory({ memoryId: "m", text: "third", embedding: [0, 0, 2] })]);
        expect(await scores([0, 1, 0])).toEqual({ m: expect.closeTo(0, 6), k2: expect.closeTo(Math.SQRT1_2, 6) });
        expect(await scores([0, 0, 1])).toEqual({ m: expect.closeTo(1, 6), k2: expect.closeTo(Math.SQRT1_2, 6) });
      });
    });

    describe("5. forgetting and erasure", () => {
      it("deletes by ids (absent ones skipped) and by scope, whatever the validity", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([
          memory({ memoryId: "a", userId: "u", text: "a", key: "k", validFrom: 1000 }),
          memory({ memoryId: "b", userId: "u", text: "b", key: "k", validFrom: 2000 }),
          memory({ memoryId: "c", userId: "v", text: "c" }),
          memory({ memoryId: "d", text: "d" }),
        ]);
        expect(ids(await memories.deleteMemories("app", ["d", "absent"]))).toEqual(["d"]);
        expect(ids(await memories.deleteMemoriesInScope({ appName: "app", userId: "u", match: "within" }))).toEqual([
          "a",
          "b",
        ]);
        expect(ids(await memories.listMemories(filter({ match: "within" }, { asOf: undefined }), 10))).toEqual(["c"]);
        expect(await memories.searchMemories(filter({ userId: "u" }, { asOf: undefined }), "a b", 10)).toEqual([]);
      });

      it("DeleteUserData removes every memory of the user (any agent, session, validity), and nobody else's", async () => {
        const { store, memories } = await fresh();
        await store.createSession({ sessionId: "s", appName: "app", userId: "u", metadata: {}, now: Date.now() });
        await memories.writeMemories([
          memory({ memoryId: "u-1", userId: "u", text: "one" }),
          memory({
            memoryId: "u-2",
            userId: "u",
            agentId: "a",
            sessionId: "s",
            text: "two",
            validFrom: 1000,
            invalidAt: 2000,
          }),
          memory({ memoryId: "v", userId: "v", text: "three" }),
          memory({ memoryId: "shared", text: "four" }),
          memory({ memoryId: "u-other-app", appName: "other", userId: "u", text: "five" }),
        ]);
        expect(await store.deleteUserData("app", "u")).toEqual({ sessions: 1, events: 0, memories: 2 });
        expect(await memories.getMemory("app", "u-1")).toBeUndefined();
        expect(await memories.getMemory("app", "u-2")).toBeUndefined();
        expect(ids(await memories.listMemories(filter({ match: "within" }, { asOf: undefined }), 10))).toEqual([
          "shared",
          "v",
        ]);
        expect(await memories.getMemory("other", "u-other-app")).toBeDefined();
        expect(await store.deleteUserData("app", "u")).toEqual({ sessions: 0, events: 0, memories: 0 });
      });
    });

    describe("6. changes", () => {
      it("tells subscribers of an app about writes, supersessions and deletions, and stops when unsubscribed", async () => {
        const { memories } = await fresh();
        const changes: MemoryChange[] = [];
        const unsubscribe = memories.subscribeMemories("app", (c) => changes.push(c));
        const others: MemoryChange[] = [];
        memories.subscribeMemories("other", (c) => others.push(c));
        await memories.writeMemories([memory({ memoryId: "a", key: "k", text: "one", validFrom: 1000 })]);
        await memories.writeMemories([memory({ memoryId: "b", key: "k", text: "two", validFrom: 2000 })]);
        await memories.deleteMemories("app", ["a"]);
        const seen = () =>
          changes.map((c) =>
            c.kind === "deleted"
              ? `deleted ${ids(c.memories)}`
              : c.kind === "remote"
                ? "remote"
                : `${c.kind} ${c.memory.memoryId}`,
          );
        // Bounded wait: a shared store may deliver through its backend.
        for (let i = 0; i < 100 && changes.length < 4; i++) await new Promise((r) => setTimeout(r, 20));
        expect(seen()).toEqual(["written a", "superseded a", "written b", "deleted a"]);
        unsubscribe();
        // A listener still subscribed hears the next write; by then the one gone would have too.
        const witnessed: MemoryChange[] = [];
        const unsubscribeWitness = memories.subscribeMemories("app", (c) => witnessed.push(c));
        await memories.listening?.("app");
        await memories.writeMemories([memory({ memoryId: "c", text: "three" })]);
        for (let i = 0; i < 250 && witnessed.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
        unsubscribeWitness();
        expect(witnessed.length, "the witness heard the write").toBeGreaterThan(0);
        expect(changes).toHaveLength(4);
        expect(others).toEqual([]);
      });

      it("a subscriber that throws neither fails the write nor keeps the other subscribers from hearing of it", async () => {
        const { memories } = await fresh();
        const changes: MemoryChange[] = [];
        const unsubscribeFaulty = memories.subscribeMemories("app", () => {
          throw new Error("a faulty subscriber");
        });
        const unsubscribe = memories.subscribeMemories("app", (c) => changes.push(c));
        try {
          const written = await memories.writeMemories([memory({ memoryId: "a", text: "one" })]);
          expect(ids(written.memories)).toEqual(["a"]);
          expect(await memories.deleteMemories("app", ["a"])).toHaveLength(1);
          for (let i = 0; i < 100 && changes.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
          expect(changes.map((c) => c.kind)).toEqual(["written", "deleted"]);
        } finally {
          unsubscribeFaulty();
          unsubscribe();
        }
      });
    });

    describe("7. change log (WatchMemories' after)", () => {
      const describeLogged = (changes: readonly MemoryChange[]) =>
        changes.map((c) =>
          c.kind === "deleted"
            ? `${c.seq} deleted ${c.memories.map((m) => `${m.memoryId}/${m.userId ?? "-"}`).join(",")}`
            : c.kind === "remote"
              ? `${c.seq} remote`
              : `${c.seq} ${c.kind} ${c.memory.memoryId}`,
        );

      it("numbers an app's changes one by one, and replays those after a resume point in order, written and superseded memories as they are now", async () => {
        const { memories } = await fresh();
        expect(await memories.memoryChangeWindow("app")).toEqual({ head: 0, floor: 0 });
        await memories.writeMemories([memory({ memoryId: "a", userId: "u", key: "k", text: "one", validFrom: 1000 })]);
        await memories.writeMemories([memory({ memoryId: "elsewhere", appName: "other", text: "another app" })]);
        await memories.writeMemories([memory({ memoryId: "b", userId: "u", key: "k", text: "two", validFrom: 2000 })]);
        await memories.writeMemories([
          memory({ memoryId: "c", text: "three" }),
          memory({ memoryId: "d", userId: "v", text: "four" }),
        ]);
        await memories.deleteMemories("app", ["c", "d"]);
        // a: written (1), superseded (2); b (3); c (4); d (5); the deletion of c and d is one change (6). The other app counts apart.
        expect(await memories.memoryChangeWindow("app")).toEqual({ head: 6, floor: 0 });
        expect(await memories.memoryChangeWindow("other")).toEqual({ head: 1, floor: 0 });
        const all = await memories.readMemoryChanges("app", 0, 100);
        // c and d are gone: their writes are left out, their deletion (ids and scope only) stands for them.
        expect(describeLogged(all.changes)).toEqual([
          "1 written a",
          "2 superseded a",
          "3 written b",
          "6 deleted c/-,d/v",
        ]);
        expect(all.through).toBe(6);
        // As it is now: a's replayed write shows it superseded by b.
        expect(all.changes[0]).toMatchObject({
          kind: "written",
          memory: { memoryId: "a", text: "one", supersededBy: "b", invalidAt: 2000 },
        });
        const deleted = all.changes[3];
        expect(deleted.kind === "deleted" && deleted.memories.map((m) => m.text)).toEqual(["", ""]);
        // A page: at most `limit` changes, and where to read on from.
        const page = await memories.readMemoryChanges("app", 1, 2);
        expect(describeLogged(page.changes)).toEqual(["2 superseded a", "3 written b"]);
        expect(page.through).toBe(3);
        const skipped = await memories.readMemoryChanges("app", 3, 2);
        expect(skipped).toEqual({ changes: [], through: 5 });
        expect(await memories.readMemoryChanges("app", 6, 10)).toEqual({ changes: [], through: 6 });
      });

      it("gives each live change its number, so a watcher knows where to resume", async () => {
        const { memories } = await fresh();
        const changes: MemoryChange[] = [];
        const unsubscribe = memories.subscribeMemories("app", (c) => changes.push(c));
        try {
          await memories.writeMemories([memory({ memoryId: "a", key: "k", text: "one", validFrom: 1000 })]);
          await memories.writeMemories([memory({ memoryId: "b", key: "k", text: "two", validFrom: 2000 })]);
          await memories.deleteMemories("app", ["a"]);
          for (let i = 0; i < 100 && changes.length < 4; i++) await new Promise((r) => setTimeout(r, 20));
          expect(describeLogged(changes)).toEqual(["1 written a", "2 superseded a", "3 written b", "4 deleted a/-"]);
        } finally {
          unsubscribe();
        }
      });

      it("answers OUT_OF_RANGE naming after for a resume point beyond the newest change", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([memory({ memoryId: "a", text: "one" })]);
        const err = await rejection(memories.readMemoryChanges("app", 2, 10));
        expect(err.code).toBe("OUT_OF_RANGE");
        expect(err.field).toBe("after");
        expect((await rejection(memories.readMemoryChanges("never-written", 1, 10))).code).toBe("OUT_OF_RANGE");
      });

      it(`keeps the newest ${MEMORY_CHANGES_RETAINED} changes of an app: a resume point before them is OUT_OF_RANGE naming after`, async () => {
        const { memories } = await fresh();
        const all = Array.from({ length: MEMORY_CHANGES_RETAINED + 2 }, (_, i) =>
          memory({ memoryId: `m${i}`, text: "x" }),
        );
        for (let i = 0; i < all.length; i += 1000) await memories.writeMemories(all.slice(i, i + 1000));
        expect(await memories.memoryChangeWindow("app")).toEqual({ head: MEMORY_CHANGES_RETAINED + 2, floor: 2 });
        const err = await rejection(memories.readMemoryChanges("app", 1, 10));
        expect(err.code).toBe("OUT_OF_RANGE");
        expect(err.field).toBe("after");
        expect(err.message).toContain("no longer retained");
        const oldest = await memories.readMemoryChanges("app", 2, 1);
        expect(describeLogged(oldest.changes)).toEqual(["3 written m2"]);
      }, 60_000);
    });
    describe("8. finding what was stored", () => {
      /** A unit vector pointing mostly along axis i of `dims`, a little along the next one. */
      const axis = (i: number, dims: number, lean = 0.05) =>
        Array.from({ length: dims }, (_, d) => (d === i ? 1 : d === (i + 1) % dims ? lean : 0));
      const NEEDLES = 10;
      const DIMS = 32;
      /** More newer memories than any window a store ever ranked (2,000), so a store that ranks a window fails. */
      const FILLER = 2_100;

      it(`finds each of ${NEEDLES} old memories by keyword and by vector after ${FILLER} newer ones in the same scope`, async () => {
        const { memories } = await fresh();
        const start = 1_000_000;
        const needles = Array.from({ length: NEEDLES }, (_, i) =>
          memory(
            {
              memoryId: `needle-${i}`,
              userId: "u",
              text: `The user's locker code is hidden under needleword${String.fromCharCode(97 + i)}zz`,
              embedding: axis(i, DIMS, 0),
            },
            start + i,
          ),
        );
        await memories.writeMemories(needles);
        for (let batch = 0; batch < FILLER / 100; batch++) {
          await memories.writeMemories(
            Array.from({ length: 100 }, (_, j) => {
              const n = batch * 100 + j;
              // Filler shares the needles' common words and leans towards their axes, but never points along one.
              return memory(
                {
                  memoryId: `filler-${n}`,
                  userId: "u",
                  text: `The user's locker code note number ${n}`,
                  embedding: axis(NEEDLES + (n % (DIMS - NEEDLES)), DIMS, 0.5),
                },
                start + 1000 + n,
              );
            }),
          );
        }
        for (let i = 0; i < NEEDLES; i++) {
          const byWord = await memories.searchMemories(
            filter({ userId: "u" }),
            `needleword${String.fromCharCode(97 + i)}zz locker`,
            5,
          );
          expect(
            byWord.map((r) => r.memory.memoryId),
            `keyword for needle-${i}`,
          ).toContain(`needle-${i}`);
          expect(byWord[0].memory.memoryId).toBe(`needle-${i}`);
        }
        expect(memories.nearestMemories, "every store that keeps memories searches by vector").toBeDefined();
        if (!memories.nearestMemories) return;
        for (let i = 0; i < NEEDLES; i++) {
          // Within 0.02 of the needle's own embedding.
          const query = axis(i, DIMS, 0.02);
          const byVector = await memories.nearestMemories(filter({ userId: "u" }), query, 5);
          expect(byVector[0]?.memory.memoryId, `vector for needle-${i}`).toBe(`needle-${i}`);
        }
      }, 120_000);

      it("analyzes text the same way on every store: stemming, Unicode normalization, case and CJK segmentation", async () => {
        const { memories } = await fresh();
        const cases: Array<{ text: string; query: string }> = [
          { text: "Alice now prefers aisle seats on long flights", query: "book a flight seat" },
          { text: "Meeting at the Cafe\u0301 de Flore", query: "caf\u00e9" },
          { text: "私の名前は太郎です", query: "太郎" },
          { text: "我喜欢吃苹果", query: "苹果" },
          { text: "Ｆｕｌｌ-width ＡＢＣ corp", query: "abc" },
          { text: "STRASSE closed", query: "straße" },
          { text: "She was running marathons", query: "RUN" },
        ];
        await memories.writeMemories(cases.map((c, i) => memory({ memoryId: `case-${i}`, text: c.text })));
        for (const [i, c] of cases.entries()) {
          const found = (await memories.searchMemories(filter(), c.query, 10)).map((r) => r.memory.memoryId);
          expect(found, `${JSON.stringify(c.query)} in ${JSON.stringify(c.text)}`).toEqual([`case-${i}`]);
        }
        // Stop words alone match nothing; a word that is only a stop word in one text does not join them.
        expect(await memories.searchMemories(filter(), "the of and", 10)).toEqual([]);
      });

      it("ranks a memory that matches every query term above newer ones that match fewer", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([
          memory({ memoryId: "best", userId: "u", text: "Alice is allergic to peanuts and shellfish" }, 1000),
        ]);
        await memories.writeMemories(
          Array.from({ length: 30 }, (_, i) =>
            memory(
              {
                memoryId: `newer-${i}`,
                userId: "u",
                text: `Alice mentioned ${i % 2 ? "peanuts" : "shellfish"} at dinner ${i}`,
              },
              2000 + i,
            ),
          ),
        );
        const results = await memories.searchMemories(filter({ userId: "u" }), "allergic peanuts shellfish", 5);
        expect(results[0].memory.memoryId).toBe("best");
      });

      it("scores a caller's memories by what the caller may see alone: another user's memories change no score", async () => {
        const { memories } = await fresh();
        await memories.writeMemories([
          memory({ memoryId: "mine", userId: "u1", text: "my zebra sighting at the park" }),
          memory({ memoryId: "other", userId: "u1", text: "a walk at the park" }),
        ]);
        const scores = async () =>
          (await memories.searchMemories(filter({ userId: "u1" }), "zebra park", 10)).map((r) => [
            r.memory.memoryId,
            r.score,
          ]);
        const before = await scores();
        for (let round = 0; round < 3; round++) {
          await memories.writeMemories(
            Array.from({ length: 5 }, (_, i) =>
              memory({ memoryId: `u2-${round}-${i}`, userId: "u2", text: `zebra number ${i} seen by u2 at the zoo` }),
            ),
          );
          const after = await scores();
          expect(after.map(([id]) => id)).toEqual(before.map(([id]) => id));
          for (const [i, [, score]] of after.entries()) expect(score).toBeCloseTo(before[i][1] as number, 9);
        }
      });
    });
  });
}
