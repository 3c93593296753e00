/**
 * The store conformance suite: one set of cases every MemoryStore driver must
 * pass (keyv/unstorage style). A driver's test file calls
 * describeStoreConformance(name, factory, capabilities) and adds only its own
 * specific cases.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, it } from "vitest";
import { MemoryError } from "../../src/errors.js";
import { pino } from "pino";
import { RetentionSweeper } from "../../src/service/retention.js";
import { searchEvents } from "../../src/service/memories/event-search.js";
import { describeStateConformance } from "./state-conformance.js";
import { makeSession, newEvent, rejection, waitFor } from "./fixtures.js";
import type {
  JsonValue,
  MemoryStore,
  RecentEventsFilter,
  SessionNotice,
  SessionRecord,
  StoreCall,
  StoreCapabilities,
  StoreLimits,
} from "../../src/store/types.js";

/** Makes a fresh, empty store with the given limits. */
export type StoreFactory = (limits: StoreLimits) => Promise<MemoryStore>;

export { makeSession, newEvent, rejection, waitFor };

const DEFAULT_LIMITS: StoreLimits = { maxSessions: 1000, maxSessionEvents: 500 };
const silentLog = pino({ level: "silent" });

/** Registers the whole conformance suite for one driver. */
export function describeStoreConformance(name: string, factory: StoreFactory, capabilities: StoreCapabilities): void {
  describe(`MemoryStore conformance: ${name}`, () => {
    const open: MemoryStore[] = [];
    const fresh = async (limits: Partial<StoreLimits> = {}) => {
      const store = await factory({ ...DEFAULT_LIMITS, ...limits });
      open.push(store);
      return store;
    };
    afterEach(async () => {
      for (const store of open.splice(0)) await store.close();
    });

    it("declares its capabilities", async () => {
      const store = await fresh();
      expect(store.capabilities).toEqual(capabilities);
    });

    describe("1. sessions", () => {
      it("creates a session and reads it back", async () => {
        const store = await fresh();
        const now = Date.now();
        const created = await store.createSession({
          sessionId: "s1",
          appName: "app",
          userId: "u",
          metadata: { a: [1, "x"] },
          now,
        });
        expect(created).toMatchObject({
          sessionId: "s1",
          appName: "app",
          userId: "u",
          metadata: { a: [1, "x"] },
          headSeq: 0,
          firstSeq: 1,
        });
        expect(created.createdAt).toBe(now);
        expect(await store.getSession("s1")).toEqual(created);
        expect(await store.getSession("missing")).toBeUndefined();
      });

      it("answers ALREADY_EXISTS for a taken session id and keeps the events", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        await store.appendEvents("s1", [newEvent("user_message", "hi")]);
        const err = await rejection(makeSession(store, "s1", "other", "other"));
        expect(err.code).toBe("ALREADY_EXISTS");
        expect((await store.readEvents("s1", { limit: 10 })).events).toHaveLength(1);
        expect((await store.getSession("s1"))!.appName).toBe("app");
      });

      it("getOrCreateSession creates once under concurrent calls", async () => {
        const store = await fresh();
        const input = { sessionId: "race", appName: "app", userId: "u", metadata: {}, now: Date.now() };
        const results = await Promise.all(Array.from({ length: 20 }, () => store.getOrCreateSession(input)));
        expect(results.filter((r) => r.created)).toHaveLength(1);
        expect(new Set(results.map((r) => r.session.createdAt)).size).toBe(1);
        const again = await store.getOrCreateSession(input);
        expect(again.created).toBe(false);
      });

      it("lists sessions in session_id order with a cursor and filters", async () => {
        const store = await fresh();
        for (const id of ["c", "a", "e", "b", "d"])
          await makeSession(store, id, id < "c" ? "app1" : "app2", id === "e" ? "u2" : "u1");
        const all = await store.listSessions({ limit: 10 });
        expect(all.map((s) => s.sessionId)).toEqual(["a", "b", "c", "d", "e"]);
        const page1 = await store.listSessions({ limit: 2 });
        const page2 = await store.listSessions({ limit: 2, afterSessionId: page1[1].sessionId });
        expect([...page1, ...page2].map((s) => s.sessionId)).toEqual(["a", "b", "c", "d"]);
        expect((await store.listSessions({ limit: 10, appName: "app2" })).map((s) => s.sessionId)).toEqual([
          "c",
          "d",
          "e",
        ]);
        expect(
          (await store.listSessions({ limit: 10, appName: "app2", userId: "u1" })).map((s) => s.sessionId),
        ).toEqual(["c", "d"]);
        expect((await store.listSessions({ limit: 10, userId: "u2" })).map((s) => s.sessionId)).toEqual(["e"]);
        expect(await store.listSessions({ limit: 10, afterSessionId: "e" })).toEqual([]);
      });

      it("deletes a session with every event; a second delete is false", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        await store.appendEvents("s1", [
          newEvent("user_message", "a", { eventId: "e1" }),
          newEvent("agent_response", "b"),
        ]);
        expect(await store.deleteSession("s1")).toBe(true);
        expect(await store.getSession("s1")).toBeUndefined();
        expect((await rejection(store.readEvents("s1", { limit: 10 }))).code).toBe("NOT_FOUND");
        expect(await store.deleteSession("s1")).toBe(false);
        expect(await store.stats()).toEqual({ totalSessions: 0, totalEvents: 0 });
        // A session re-created under the same id starts from scratch, event ids included.
        await makeSession(store, "s1");
        const again = await store.appendEvents("s1", [newEvent("user_message", "other", { eventId: "e1" })]);
        expect(again.events[0]).toMatchObject({ seq: 1, content: "other" });
      });
    });

    describe("2. appends", () => {
      it("assigns seq 1, 2, 3 ... and moves the head", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        const a = await store.appendEvents("s1", [newEvent("user_message", "one")]);
        const b = await store.appendEvents("s1", [
          newEvent("agent_response", "two"),
          newEvent("tool_call", { tool: "x" }),
        ]);
        expect([...a.events, ...b.events].map((e) => e.seq)).toEqual([1, 2, 3]);
        expect(b.replayed).toBe(false);
        const s = await store.getSession("s1");
        expect(s).toMatchObject({ headSeq: 3, firstSeq: 1 });
        expect(s!.updatedAt).toBeGreaterThanOrEqual(s!.createdAt);
      });

      it("answers NOT_FOUND for an unknown session", async () => {
        const store = await fresh();
        const err = await rejection(store.appendEvents("nope", [newEvent("user_message", "x")]));
        expect(err.code).toBe("NOT_FOUND");
        expect(err.message).toContain("session_id");
      });

      it("round-trips every JSON shape, metadata and timestamps exactly", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        const contents: JsonValue[] = [
          null,
          true,
          false,
          0,
          -1.5,
          1e21,
          "",
          'text with ünïcödé, emoji 🧠 and "quotes"\n',
          [],
          {},
          [1, [2, [3, { deep: [null, "x"] }]]],
          { nested: { a: 1, b: [true, null], "key with spaces": "v" } },
        ];
        const input = contents.map((c, i) =>
          newEvent("custom.type", c, { metadata: { i, trace_id: "abc" }, timestamp: 1_700_000_000_123 + i }),
        );
        await store.appendEvents("s1", input);
        const page = await store.readEvents("s1", { limit: 100 });
        expect(page.events.map((e) => e.content)).toEqual(contents);
        expect(page.events.map((e) => e.metadata)).toEqual(input.map((e) => e.metadata));
        expect(page.events.map((e) => e.timestamp)).toEqual(input.map((e) => e.timestamp));
        expect(page.events.every((e) => e.sessionId === "s1" && e.eventType === "custom.type")).toBe(true);
      });

      it("50 concurrent appends to one session get seq 1..50 exactly", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        const results = await Promise.all(
          Array.from({ length: 50 }, (_, i) => store.appendEvents("s1", [newEvent("user_message", i)])),
        );
        expect(results.map((r) => r.events[0].seq).sort((a, b) => a - b)).toEqual(
          Array.from({ length: 50 }, (_, i) => i + 1),
        );
        const page = await store.readEvents("s1", { limit: 100 });
        expect(page.events.map((e) => e.seq)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
        expect(new Set(page.events.map((e) => e.content)).size).toBe(50);
      });

      it("a retried event_id with the same payload returns the original event", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        const first = await store.appendEvents("s1", [
          newEvent("user_message", { text: "hi", n: [1, 2] }, { eventId: "e1", metadata: { a: 1, b: 2 } }),
        ]);
        await store.appendEvents("s1", [newEvent("agent_response", "between")]);
        // Same payload, keys in another order, another timestamp: still the same event.
        const retry = await store.appendEvents("s1", [
          newEvent(
            "user_message",
            { n: [1, 2], text: "hi" },
            { eventId: "e1", metadata: { b: 2, a: 1 }, timestamp: 1 },
          ),
        ]);
        expect(retry.replayed).toBe(true);
        expect(retry.events).toEqual(first.events);
        expect((await store.getSession("s1"))!.headSeq).toBe(2);
      });

      it("a retried event_id with another payload is ALREADY_EXISTS", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        await store.appendEvents("s1", [newEvent("user_message", "hi", { eventId: "e1" })]);
        const err = await rejection(store.appendEvents("s1", [newEvent("user_message", "changed", { eventId: "e1" })]));
        expect(err.code).toBe("ALREADY_EXISTS");
        expect(err.message).toContain("event_id");
        expect((await store.getSession("s1"))!.headSeq).toBe(1);
      });

      it("a batch is atomic: one conflicting event_id appends nothing", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        await store.appendEvents("s1", [newEvent("user_message", "hi", { eventId: "e1" })]);
        const err = await rejection(
          store.appendEvents("s1", [
            newEvent("agent_response", "new"),
            newEvent("user_message", "different", { eventId: "e1" }),
          ]),
        );
        expect(err.code).toBe("ALREADY_EXISTS");
        expect((await store.readEvents("s1", { limit: 10 })).events.map((e) => e.content)).toEqual(["hi"]);
      });

      it("a batch mixing a retry and new events appends only the new ones", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        const first = await store.appendEvents("s1", [newEvent("user_message", "hi", { eventId: "e1" })]);
        const mixed = await store.appendEvents("s1", [
          newEvent("user_message", "hi", { eventId: "e1" }),
          newEvent("agent_response", "new", { eventId: "e2" }),
        ]);
        expect(mixed.replayed).toBe(false);
        expect(mixed.events.map((e) => e.seq)).toEqual([first.events[0].seq, 2]);
        expect((await store.getSession("s1"))!.headSeq).toBe(2);
      });

      it("expected_seq: a match appends, a mismatch is FAILED_PRECONDITION with the current seq", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        await store.appendEvents("s1", [newEvent("user_message", "a")], 0);
        await store.appendEvents("s1", [newEvent("user_message", "b")], 1);
        const err = await rejection(store.appendEvents("s1", [newEvent("user_message", "c")], 1));
        expect(err.code).toBe("FAILED_PRECONDITION");
        expect(err.metadata["engram-current-seq"]).toBe("2");
        expect((await store.getSession("s1"))!.headSeq).toBe(2);
      });

      it("a retry whose expected_seq is stale still returns the original (the first try succeeded)", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        const first = await store.appendEvents("s1", [newEvent("user_message", "a", { eventId: "e1" })], 0);
        const retry = await store.appendEvents("s1", [newEvent("user_message", "a", { eventId: "e1" })], 0);
        expect(retry).toEqual({ events: first.events, replayed: true });
      });

      it("under concurrent expected_seq appends exactly one writer wins each seq", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        const outcomes = await Promise.allSettled(
          Array.from({ length: 10 }, (_, i) => store.appendEvents("s1", [newEvent("user_message", i)], 0)),
        );
        expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(1);
        for (const o of outcomes)
          if (o.status === "rejected") expect((o.reason as MemoryError).code).toBe("FAILED_PRECONDITION");
      });
    });

    describe("3. reads", () => {
      it("reads after a cursor, with a limit and an event type filter", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        await store.appendEvents(
          "s1",
          ["user_message", "agent_response", "tool_call", "tool_result", "user_message", "agent_response"].map((t, i) =>
            newEvent(t, i),
          ),
        );
        const page = await store.readEvents("s1", { afterSeq: 2, limit: 2 });
        expect(page.events.map((e) => e.seq)).toEqual([3, 4]);
        expect(page).toMatchObject({ headSeq: 6, firstSeq: 1 });
        const filtered = await store.readEvents("s1", { eventTypes: ["user_message", "tool_result"], limit: 10 });
        expect(filtered.events.map((e) => e.seq)).toEqual([1, 4, 5]);
        const filteredAfter = await store.readEvents("s1", { afterSeq: 1, eventTypes: ["user_message"], limit: 10 });
        expect(filteredAfter.events.map((e) => e.seq)).toEqual([5]);
        expect((await store.readEvents("s1", { afterSeq: 6, limit: 10 })).events).toEqual([]);
      });

      it("reads the newest events with readTail, filtered or not", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        await store.appendEvents(
          "s1",
          ["user_message", "agent_response", "user_message", "agent_response"].map((t, i) => newEvent(t, i)),
        );
        expect((await store.readTail("s1", 3)).events.map((e) => e.seq)).toEqual([2, 3, 4]);
        expect((await store.readTail("s1", 10, ["user_message"])).events.map((e) => e.seq)).toEqual([1, 3]);
        expect((await rejection(store.readTail("nope", 3))).code).toBe("NOT_FOUND");
      });

      it("evicts the oldest events past maxSessionEvents and refuses cursors into them", async () => {
        const store = await fresh({ maxSessionEvents: 5, dedupeWindowMs: 0 });
        await makeSession(store, "s1");
        for (let i = 0; i < 8; i++)
          await store.appendEvents("s1", [newEvent("user_message", i, { eventId: `e${i + 1}` })]);
        const page = await store.readEvents("s1", { limit: 100 });
        expect(page.events.map((e) => e.seq)).toEqual([4, 5, 6, 7, 8]);
        expect(page).toMatchObject({ firstSeq: 4, headSeq: 8 });
        expect(await store.getSession("s1")).toMatchObject({ firstSeq: 4, headSeq: 8 });
        expect((await store.readEvents("s1", { afterSeq: 3, limit: 10 })).events[0].seq).toBe(4);
        const err = await rejection(store.readEvents("s1", { afterSeq: 2, limit: 10 }));
        expect(err.code).toBe("OUT_OF_RANGE");
        expect(err.message).toContain("after_seq");
        expect((await store.stats()).totalEvents).toBe(5);
        // Without a dedupe window an evicted event_id is no longer known: its id may be used again.
        const reused = await store.appendEvents("s1", [newEvent("user_message", "new", { eventId: "e1" })]);
        expect(reused.events[0].seq).toBe(9);
      });

      it("a batch larger than the cap keeps only the newest events", async () => {
        const store = await fresh({ maxSessionEvents: 3 });
        await makeSession(store, "s1");
        const res = await store.appendEvents(
          "s1",
          Array.from({ length: 5 }, (_, i) => newEvent("user_message", i)),
        );
        expect(res.events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
        expect((await store.readEvents("s1", { limit: 10 })).events.map((e) => e.seq)).toEqual([3, 4, 5]);
      });

      it("refuses a cursor ahead of the head with OUT_OF_RANGE", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        await store.appendEvents("s1", [newEvent("user_message", 1)]);
        expect((await rejection(store.readEvents("s1", { afterSeq: 5, limit: 10 }))).code).toBe("OUT_OF_RANGE");
      });

      it("lists the most recent events of one session or of all, oldest first", async () => {
        const store = await fresh();
        await makeSession(store, "a");
        await makeSession(store, "b");
        await store.appendEvents("a", [newEvent("user_message", "a1"), newEvent("user_message", "a2")]);
        await store.appendEvents("b", [newEvent("user_message", "b1"), newEvent("user_message", "b2")]);
        expect((await store.listRecentEvents(3)).map((e) => e.content)).toEqual(["a2", "b1", "b2"]);
        expect((await store.listRecentEvents(10, { sessionId: "b" })).map((e) => e.content)).toEqual(["b1", "b2"]);
        expect((await store.listRecentEvents(1, { sessionId: "a" })).map((e) => e.content)).toEqual(["a2"]);
        expect((await rejection(store.listRecentEvents(10, { sessionId: "nope" }))).code).toBe("NOT_FOUND");
      });
    });

    describe("3b. recent events: ingest order and scopes", () => {
      const contents = (events: Array<{ content: unknown }>) => events.map((e) => e.content);

      it("orders by when the store stored an event, never by its timestamp", async () => {
        const store = await fresh();
        await makeSession(store, "a");
        await makeSession(store, "b");
        const t = 1_700_000_000_000;
        await store.appendEvents("a", [
          newEvent("user_message", "a1", { timestamp: t + 1 }),
          newEvent("user_message", "a2", { timestamp: t + 4 }),
        ]);
        await store.appendEvents("b", [newEvent("user_message", "future", { timestamp: t + 10 * 365 * 86_400_000 })]);
        await store.appendEvents("a", [newEvent("user_message", "old", { timestamp: 0 })]);
        await store.appendEvents("b", [newEvent("user_message", "b2", { timestamp: t + 2 })]);
        expect(contents(await store.listRecentEvents(10))).toEqual(["a1", "a2", "future", "old", "b2"]);
        expect(contents(await store.listRecentEvents(2))).toEqual(["old", "b2"]);
        expect(contents(await store.listRecentEvents(10, { appNames: ["app"] }))).toEqual([
          "a1",
          "a2",
          "future",
          "old",
          "b2",
        ]);
      });

      it("lists an app's, a user's, or an app and user's events only, merging the apps named", async () => {
        const store = await fresh();
        await makeSession(store, "x-ann", "x", "ann");
        await makeSession(store, "x-bob", "x", "bob");
        await makeSession(store, "y-ann", "y", "ann");
        await makeSession(store, "z-ann", "z", "ann");
        await makeSession(store, "empty", "w", "ann");
        for (const [session, content] of [
          ["x-ann", 1],
          ["y-ann", 2],
          ["x-bob", 3],
          ["z-ann", 4],
          ["x-ann", 5],
          ["y-ann", 6],
        ] as const) {
          await store.appendEvents(session, [newEvent("user_message", content, { timestamp: 1_000_000 - content })]);
        }
        expect(contents(await store.listRecentEvents(10, { appNames: ["x"] }))).toEqual([1, 3, 5]);
        expect(contents(await store.listRecentEvents(2, { appNames: ["x"] }))).toEqual([3, 5]);
        expect(contents(await store.listRecentEvents(10, { appNames: ["x"], userId: "ann" }))).toEqual([1, 5]);
        expect(contents(await store.listRecentEvents(10, { userId: "ann" }))).toEqual([1, 2, 4, 5, 6]);
        expect(contents(await store.listRecentEvents(10, { appNames: ["x", "y"] }))).toEqual([1, 2, 3, 5, 6]);
        expect(contents(await store.listRecentEvents(3, { appNames: ["y", "x", "y"] }))).toEqual([3, 5, 6]);
        expect(contents(await store.listRecentEvents(10, { appNames: ["x", "y"], userId: "ann" }))).toEqual([
          1, 2, 5, 6,
        ]);
        expect(await store.listRecentEvents(10, { appNames: ["w"] })).toEqual([]);
        expect(await store.listRecentEvents(10, { appNames: ["nobody"] })).toEqual([]);
        expect(await store.listRecentEvents(10, { appNames: [] })).toEqual([]);
        expect(await store.listRecentEvents(10, { appNames: ["x"], userId: "nobody" })).toEqual([]);
        // Names that could collide in a key or a pattern stay apart.
        await makeSession(store, "colon-1", "a", "b:c");
        await makeSession(store, "colon-2", "a:b", "c");
        await store.appendEvents("colon-1", [newEvent("user_message", "one")]);
        await store.appendEvents("colon-2", [newEvent("user_message", "two")]);
        expect(contents(await store.listRecentEvents(10, { appNames: ["a"] }))).toEqual(["one"]);
        expect(contents(await store.listRecentEvents(10, { appNames: ["a:b"], userId: "c" }))).toEqual(["two"]);
        expect(await store.listRecentEvents(10, { appNames: ["a"], userId: "c" })).toEqual([]);
      });

      it("keeps an app's events listed however many events another app stores after them", async () => {
        const store = await fresh({ maxSessionEvents: 1000 });
        await makeSession(store, "quiet", "quiet", "ann");
        await store.appendEvents("quiet", [newEvent("user_message", "mine")]);
        for (let s = 0; s < 5; s++) {
          await makeSession(store, `loud-${s}`, "loud", "mallory");
          await store.appendEvents(
            `loud-${s}`,
            Array.from({ length: 500 }, (_, i) => newEvent("user_message", i, { timestamp: Date.now() + 86_400_000 })),
          );
        }
        expect(contents(await store.listRecentEvents(1000, { appNames: ["quiet"] }))).toEqual(["mine"]);
        expect(contents(await store.listRecentEvents(1000, { userId: "ann" }))).toEqual(["mine"]);
        expect(contents(await store.listRecentEvents(1000, { appNames: ["quiet"], userId: "ann" }))).toEqual(["mine"]);
        expect(contents(await store.listRecentEvents(1000, { appNames: ["loud"] }))).toHaveLength(1000);
      });

      it("drops trimmed and deleted events from every listing", async () => {
        const store = await fresh({ maxSessionEvents: 2 });
        await makeSession(store, "keep", "x", "ann");
        await makeSession(store, "trim", "x", "ann");
        await store.appendEvents("keep", [newEvent("user_message", "k1")]);
        await store.appendEvents("trim", [newEvent("user_message", "t1"), newEvent("user_message", "t2")]);
        await store.appendEvents("trim", [newEvent("user_message", "t3")]);
        const filters = [undefined, { appNames: ["x"] }, { userId: "ann" }, { appNames: ["x"], userId: "ann" }];
        for (const filter of filters)
          expect(contents(await store.listRecentEvents(10, filter)), JSON.stringify(filter)).toEqual([
            "k1",
            "t2",
            "t3",
          ]);
        expect(await store.deleteSession("trim")).toBe(true);
        for (const filter of filters)
          expect(contents(await store.listRecentEvents(10, filter)), JSON.stringify(filter)).toEqual(["k1"]);
        // A session created again under the deleted id, in another tenancy, lists only under its new scope.
        await makeSession(store, "trim", "y", "bob");
        await store.appendEvents("trim", [newEvent("user_message", "new")]);
        expect(contents(await store.listRecentEvents(10, { appNames: ["x"] }))).toEqual(["k1"]);
        expect(contents(await store.listRecentEvents(10, { appNames: ["y"], userId: "bob" }))).toEqual(["new"]);
        expect(contents(await store.listRecentEvents(10))).toEqual(["k1", "new"]);
      });
    });

    describe("4. stats, cleanup and eviction", () => {
      it("counts sessions and retained events", async () => {
        const store = await fresh();
        expect(await store.stats()).toEqual({ totalSessions: 0, totalEvents: 0 });
        await makeSession(store, "a");
        await makeSession(store, "b");
        await store.appendEvents("a", [newEvent("user_message", 1), newEvent("user_message", 2)]);
        await store.appendEvents("b", [newEvent("user_message", 3)]);
        expect(await store.stats()).toEqual({ totalSessions: 2, totalEvents: 3 });
      });

      it("cleanup removes sessions last updated before the cutoff", async () => {
        const store = await fresh();
        await makeSession(store, "old");
        await makeSession(store, "touched");
        // Clock time apart on purpose: the cutoff must fall strictly between the old updates and the new.
        await sleep(20);
        const cutoff = Date.now();
        await sleep(5);
        await store.appendEvents("touched", [newEvent("user_message", "x")]);
        await makeSession(store, "new");
        expect(await store.cleanup(cutoff)).toBe(1);
        expect(await store.getSession("old")).toBeUndefined();
        expect((await store.listSessions({ limit: 10 })).map((s) => s.sessionId)).toEqual(["new", "touched"]);
        expect(await store.cleanup(cutoff)).toBe(0);
      });

      it("past maxSessions evicts the least recently updated 10%", async () => {
        const store = await fresh({ maxSessions: 10 });
        // 2 ms apart below: update order is by update time, which must differ from one session to the next.
        for (let i = 0; i < 10; i++) {
          await makeSession(store, `s${i}`);
          await sleep(2);
        }
        await store.appendEvents("s0", [newEvent("user_message", "keep me")]);
        await sleep(2);
        expect(store.sessionsEvicted).toBe(0);
        await makeSession(store, "s10");
        expect(store.sessionsEvicted).toBe(1);
        const ids = (await store.listSessions({ limit: 100 })).map((s) => s.sessionId);
        expect(ids).toHaveLength(10);
        expect(ids).not.toContain("s1");
        expect(ids).toContain("s0");
        expect(ids).toContain("s10");
        expect((await store.stats()).totalSessions).toBe(10);
      });

      it("keeps update order through appends to the middle, deletions and repeated evictions", async () => {
        const store = await fresh({ maxSessions: 10 });
        // 2 ms apart below: update order is by update time, which must differ from one session to the next.
        for (let i = 0; i < 10; i++) {
          await makeSession(store, `s${i}`);
          await sleep(2);
        }
        // Update order from here: s0 s1 s4 s6 s7 s8 s5 s2 s9, with s3 gone.
        for (const id of ["s5", "s2", "s9"]) {
          await store.appendEvents(id, [newEvent("user_message", id)]);
          await sleep(2);
        }
        expect(await store.deleteSession("s3")).toBe(true);
        const evictions: string[][] = [];
        let before = (await store.listSessions({ limit: 100 })).map((s) => s.sessionId);
        for (const id of ["t0", "t1", "t2", "t3"]) {
          await makeSession(store, id);
          await sleep(2);
          const now = (await store.listSessions({ limit: 100 })).map((s) => s.sessionId);
          evictions.push(before.filter((x) => !now.includes(x)));
          before = now;
        }
        // t0 fills the 10th place; each later one evicts the least recently updated.
        expect(evictions).toEqual([[], ["s0"], ["s1"], ["s4"]]);
        expect(store.sessionsEvicted).toBe(3);
        expect(before.sort()).toEqual(["s2", "s5", "s6", "s7", "s8", "s9", "t0", "t1", "t2", "t3"]);
        // Cleanup walks the same order: everything updated before t0 was made.
        expect(await store.cleanup((await store.getSession("t0"))!.updatedAt)).toBe(6);
        expect((await store.listSessions({ limit: 100 })).map((s) => s.sessionId)).toEqual(["t0", "t1", "t2", "t3"]);
      });
    });

    describe("4b. erasure and filtered cleanup", () => {
      /** Sessions of the user to erase, and of neighbours that must survive it. */
      async function tenants(store: MemoryStore) {
        const t = 1_700_000_000_000;
        for (const id of ["e1", "e2", "e3"]) await makeSession(store, id, "app", "erased");
        await store.appendEvents("e1", [
          newEvent("user_message", "e1a", { timestamp: t + 1 }),
          newEvent("user_message", "e1b", { timestamp: t + 5 }),
        ]);
        await store.appendEvents("e3", [newEvent("user_message", "e3a", { timestamp: t + 6 })]);
        // The same user in another app, another user of the same app, and names that only concatenate alike.
        await makeSession(store, "other-app", "app2", "erased");
        await makeSession(store, "other-user", "app", "kept");
        await makeSession(store, "lookalike", "app:erased", "x");
        await makeSession(store, "lookalike2", "ap", "p:erased");
        await store.appendEvents("other-app", [newEvent("user_message", "o1", { timestamp: t + 2 })]);
        await store.appendEvents("other-user", [
          newEvent("user_message", "o2", { timestamp: t + 3 }),
          newEvent("user_message", "o3", { timestamp: t + 4 }),
        ]);
      }

      it("deleteUserData removes every session and event of the user, counts them, and touches nobody else", async () => {
        const store = await fresh();
        await tenants(store);
        expect(await store.deleteUserData("app", "erased")).toMatchObject({ sessions: 3, events: 3 });
        for (const id of ["e1", "e2", "e3"]) {
          expect(await store.getSession(id)).toBeUndefined();
          expect((await rejection(store.readEvents(id, { limit: 10 }))).code).toBe("NOT_FOUND");
        }
        expect(await store.listSessions({ limit: 100, appName: "app", userId: "erased" })).toEqual([]);
        expect((await store.listSessions({ limit: 100 })).map((s) => s.sessionId)).toEqual([
          "lookalike",
          "lookalike2",
          "other-app",
          "other-user",
        ]);
        expect((await store.readEvents("other-user", { limit: 10 })).events.map((e) => e.content)).toEqual([
          "o2",
          "o3",
        ]);
        expect((await store.listRecentEvents(100)).map((e) => e.content)).toEqual(["o1", "o2", "o3"]);
        expect(await store.stats()).toEqual({ totalSessions: 4, totalEvents: 3 });
      });

      it("deleteUserData empties the user's recent views and forgets the ids of their trimmed events", async () => {
        const store = await fresh({ maxSessionEvents: 1 });
        const withId = (id: string) => newEvent("user_message", id, { eventId: id });
        await makeSession(store, "e1", "app", "erased");
        await makeSession(store, "same-user", "app2", "erased");
        await makeSession(store, "same-app", "app", "kept");
        // e1 keeps only e1b; e1a is trimmed and its id kept for the dedupe window.
        await store.appendEvents("e1", [withId("e1a")]);
        await store.appendEvents("same-user", [withId("o1")]);
        await store.appendEvents("e1", [withId("e1b")]);
        await store.appendEvents("same-app", [withId("o2")]);
        expect((await store.appendEvents("e1", [withId("e1a")])).replayed).toBe(true);
        const recent = async (filter: RecentEventsFilter) =>
          (await store.listRecentEvents(100, filter)).map((e) => e.content);
        expect(await recent({ appNames: ["app"], userId: "erased" })).toEqual(["e1b"]);

        await store.deleteUserData("app", "erased");
        expect(await recent({ appNames: ["app"], userId: "erased" })).toEqual([]);
        expect(await recent({ userId: "erased" })).toEqual(["o1"]);
        expect(await recent({ appNames: ["app"] })).toEqual(["o2"]);
        expect(await recent({})).toEqual(["o1", "o2"]);
        // The same id in the same user's new session is a new event, not a replay of the erased one.
        await makeSession(store, "e1", "app", "erased");
        expect(await store.appendEvents("e1", [withId("e1a")])).toMatchObject({
          replayed: false,
          events: [{ seq: 1, content: "e1a" }],
        });
      });

      it("deleteUserData is safe to repeat: a second call removes nothing and says so", async () => {
        const store = await fresh();
        await tenants(store);
        await store.deleteUserData("app", "erased");
        expect(await store.deleteUserData("app", "erased")).toMatchObject({ sessions: 0, events: 0 });
        expect(await store.deleteUserData("app", "nobody")).toMatchObject({ sessions: 0, events: 0 });
        expect((await store.stats()).totalSessions).toBe(4);
      });

      it("deleteUserData removes a user with more sessions than one batch holds", async () => {
        const store = await fresh();
        const count = 250;
        for (let i = 0; i < count; i += 25) {
          await Promise.all(
            Array.from({ length: 25 }, (_, j) =>
              makeSession(store, `many-${String(i + j).padStart(3, "0")}`, "app", "many"),
            ),
          );
        }
        await makeSession(store, "neighbour", "app", "kept");
        await store.appendEvents("many-000", [newEvent("user_message", 1), newEvent("user_message", 2)]);
        await store.appendEvents("many-249", [newEvent("user_message", 3)]);
        expect(await store.deleteUserData("app", "many")).toMatchObject({ sessions: count, events: 3 });
        expect((await store.listSessions({ limit: 1000 })).map((s) => s.sessionId)).toEqual(["neighbour"]);
        expect(await store.stats()).toEqual({ totalSessions: 1, totalEvents: 0 });
      });

      it("deleteUserData tells live subscribers of each erased session that it is gone", async () => {
        const store = await fresh();
        await tenants(store);
        const notices: SessionNotice[] = [];
        const unsubscribers = ["e1", "e2", "other-user"].map((id) => store.subscribe(id, (n) => notices.push(n)));
        try {
          await store.noticesFlowing?.();
          await store.deleteUserData("app", "erased");
          await waitFor(
            () =>
              notices.some((n) => n.sessionId === "e1" && n.deleted) &&
              notices.some((n) => n.sessionId === "e2" && n.deleted),
          );
          // Notices of the appends made before subscribing may still arrive late; none may say "deleted".
          // A notice of an append made after the erasure comes after any notice the erasure sent.
          const headSeq = (await store.appendEvents("other-user", [newEvent("user_message", "after")])).events[0].seq;
          await waitFor(() => notices.some((n) => n.sessionId === "other-user" && n.headSeq === headSeq));
          expect(notices.filter((n) => n.sessionId === "other-user" && n.deleted)).toEqual([]);
        } finally {
          for (const unsubscribe of unsubscribers) unsubscribe();
        }
      });

      it("cleanup with an app and/or user filter removes only the stale sessions matching it", async () => {
        const store = await fresh();
        for (const [id, app, user] of [
          ["a-u", "a", "u"],
          ["a-v", "a", "v"],
          ["b-u", "b", "u"],
          ["b-v", "b", "v"],
          ["a:u", "a:u", ""],
        ] as const) {
          await makeSession(store, id, app, user);
          await makeSession(store, `${id}-fresh`, app, user);
        }
        // Clock time apart on purpose: the cutoff must fall strictly between the old updates and the new.
        await sleep(20);
        const cutoff = Date.now();
        await sleep(5);
        for (const id of ["a-u", "a-v", "b-u", "b-v", "a:u"])
          await store.appendEvents(`${id}-fresh`, [newEvent("user_message", "x")]);
        const left = async () =>
          (await store.listSessions({ limit: 100 })).map((s) => s.sessionId).filter((id) => !id.endsWith("-fresh"));
        expect(await store.cleanup(cutoff, { appName: "a", userId: "u" })).toBe(1);
        expect(await left()).toEqual(["a-v", "a:u", "b-u", "b-v"]);
        expect(await store.cleanup(cutoff, { userId: "v" })).toBe(2);
        expect(await left()).toEqual(["a:u", "b-u"]);
        expect(await store.cleanup(cutoff, { appName: "b" })).toBe(1);
        expect(await left()).toEqual(["a:u"]);
        expect(await store.cleanup(cutoff, { appName: "a" })).toBe(0);
        // Every fresh session is still there.
        expect((await store.listSessions({ limit: 100 })).filter((s) => s.sessionId.endsWith("-fresh"))).toHaveLength(
          5,
        );
        expect((await store.stats()).totalSessions).toBe(6);
      });
    });

    describe("5. notifications", () => {
      it("notifies subscribers of appends and deletion, and stops after unsubscribe", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        const notices: SessionNotice[] = [];
        const unsubscribe = store.subscribe("s1", (n) => notices.push(n));
        await store.noticesFlowing?.();
        await store.appendEvents("s1", [newEvent("user_message", 1)]);
        await store.appendEvents("s1", [newEvent("user_message", 2), newEvent("user_message", 3)]);
        await waitFor(() => notices.some((n) => n.headSeq === 3));
        // A driver may carry the appended events in its notices: then exactly those, as stored.
        const stored = (await store.readEvents("s1", { limit: 10 })).events;
        for (const n of notices.filter((x) => x.events !== undefined)) {
          expect(n.events!.length).toBeGreaterThan(0);
          expect(n.events![n.events!.length - 1].seq).toBe(n.headSeq);
          expect(n.events).toEqual(stored.filter((e) => e.seq > n.headSeq! - n.events!.length && e.seq <= n.headSeq!));
        }
        await store.deleteSession("s1");
        await waitFor(() => notices.some((n) => n.deleted));
        unsubscribe();
        const count = notices.length;
        // A listener still subscribed hears the next append; by then the one gone would have too.
        const witness: SessionNotice[] = [];
        const unsubscribeWitness = store.subscribe("s1", (n) => witness.push(n));
        try {
          await store.noticesFlowing?.();
          await makeSession(store, "s1");
          await store.appendEvents("s1", [newEvent("user_message", 4)]);
          await waitFor(() => witness.some((n) => n.headSeq === 1 && !n.deleted));
        } finally {
          unsubscribeWitness();
        }
        expect(notices.length).toBe(count);
      });
    });

    describe("5a. listeners", () => {
      it("a listener that throws neither fails the change nor keeps the other listeners from hearing of it", async () => {
        const store = await fresh();
        await makeSession(store, "s1");
        const heard: SessionNotice[] = [];
        const unsubscribeFaulty = store.subscribe("s1", () => {
          throw new Error("a faulty listener");
        });
        const unsubscribe = store.subscribe("s1", (n) => heard.push(n));
        try {
          await store.noticesFlowing?.();
          const appended = await store.appendEvents("s1", [newEvent("user_message", 1)]);
          expect(appended.events.map((e) => e.seq)).toEqual([1]);
          expect(await store.deleteSession("s1")).toBe(true);
          await waitFor(() => heard.some((n) => n.headSeq === 1) && heard.some((n) => n.deleted));
        } finally {
          unsubscribeFaulty();
          unsubscribe();
        }
      });
    });

    describe("5b. incarnations", () => {
      it("a session created again under a deleted one's id is another incarnation, in every read and notice", async () => {
        const store = await fresh();
        const first = await makeSession(store, "s1");
        // Every comparison below would hold for two undefined incarnations.
        expect(first.incarnation).toEqual(expect.any(String));
        expect(first.incarnation).not.toBe("");
        await store.appendEvents("s1", [newEvent("user_message", 1)]);
        expect((await store.getSession("s1"))?.incarnation).toBe(first.incarnation);
        expect((await store.readEvents("s1", { limit: 10 })).incarnation).toBe(first.incarnation);
        expect((await store.readTail("s1", 10)).incarnation).toBe(first.incarnation);
        const notices: SessionNotice[] = [];
        const unsubscribe = store.subscribe("s1", (n) => notices.push(n));
        try {
          await store.noticesFlowing?.();
          await store.deleteSession("s1");
          const second = (
            await store.getOrCreateSession({
              sessionId: "s1",
              appName: "other-app",
              userId: "other-user",
              metadata: {},
              now: Date.now(),
            })
          ).session;
          expect(second.incarnation).not.toBe(first.incarnation);
          expect(second.incarnation).not.toBe("");
          await store.appendEvents("s1", [newEvent("user_message", 2)]);
          expect((await store.getSession("s1"))?.incarnation).toBe(second.incarnation);
          expect((await store.readEvents("s1", { limit: 10 })).incarnation).toBe(second.incarnation);
          expect(
            (
              await store.getOrCreateSession({
                sessionId: "s1",
                appName: "x",
                userId: "y",
                metadata: {},
                now: Date.now(),
              })
            ).session.incarnation,
          ).toBe(second.incarnation);
          await waitFor(() =>
            notices.some((n) => n.headSeq === 1 && !n.deleted && n.incarnation !== first.incarnation),
          );
          // A notice that names an incarnation names the right one: the deletion the first's, the append the second's.
          for (const n of notices.filter((x) => x.deleted && x.incarnation !== undefined))
            expect(n.incarnation).toBe(first.incarnation);
          for (const n of notices.filter((x) => !x.deleted && x.incarnation !== undefined))
            expect(n.incarnation).toBe(second.incarnation);
          // Events carried by a notice are only trusted with their incarnation (StreamHub).
          for (const n of notices.filter((x) => x.events !== undefined)) expect(n.incarnation).toBe(second.incarnation);
        } finally {
          unsubscribe();
        }
      });
    });

    describe("5c. calls expecting an incarnation (StoreCall.expectedIncarnation)", () => {
      /**
       * s1 of (app, user), written to, deleted and created again by another
       * tenant, as between a scoped key's check and its call: the first
       * incarnation as a stale expectation, the second as the current one.
       */
      const replaced = async (store: MemoryStore) => {
        const first = await makeSession(store, "s1");
        await store.appendEvents("s1", [newEvent("user_message", "mine")]);
        await store.deleteSession("s1");
        await makeSession(store, "s1", "other-app", "other-user");
        await store.appendEvents("s1", [newEvent("user_message", "theirs", { eventId: "e1" })]);
        const live = (await store.getSession("s1"))!;
        return {
          stale: { expectedIncarnation: first.incarnation },
          current: { expectedIncarnation: live.incarnation },
          live,
        };
      };
      /** The other tenant's session, events and shared state exactly as they were. */
      const expectUnchanged = async (store: MemoryStore, live: SessionRecord) => {
        expect(await store.getSession("s1")).toEqual(live);
        expect((await store.readEvents("s1", { limit: 10 })).events.map((e) => e.content)).toEqual(["theirs"]);
        expect(await store.sharedState("other-app", "other-user")).toEqual({ app: {}, user: {} });
        expect(await store.stats()).toEqual({ totalSessions: 1, totalEvents: 1 });
      };
      const operations: Array<[string, (store: MemoryStore, call: StoreCall) => Promise<unknown>]> = [
        ["readEvents", (store, call) => store.readEvents("s1", { limit: 10 }, call)],
        [
          "readEvents after a cursor, filtered",
          (store, call) => store.readEvents("s1", { afterSeq: 0, eventTypes: ["user_message"], limit: 10 }, call),
        ],
        ["readTail", (store, call) => store.readTail("s1", 10, undefined, call)],
        ["readTail, filtered", (store, call) => store.readTail("s1", 10, ["user_message"], call)],
        ["listRecentEvents of the session", (store, call) => store.listRecentEvents(10, { sessionId: "s1" }, call)],
        [
          "appendEvents",
          (store, call) => store.appendEvents("s1", [newEvent("user_message", "late")], undefined, call),
        ],
        [
          "appendEvents under expected_seq",
          (store, call) => store.appendEvents("s1", [newEvent("user_message", "late")], 1, call),
        ],
        // A retry of an id the other session holds must not answer that session's stored event either.
        [
          "appendEvents retrying an event id the session holds",
          (store, call) =>
            store.appendEvents("s1", [newEvent("user_message", "theirs", { eventId: "e1" })], undefined, call),
        ],
        [
          "appendEvents carrying a state delta",
          (store, call) =>
            store.appendEvents(
              "s1",
              [newEvent("user_message", "late", { stateDelta: { k: 1, "user:u": 1, "app:a": 1 } })],
              undefined,
              call,
            ),
        ],
        [
          "updateSession",
          (store, call) =>
            store.updateSession(
              "s1",
              { metadata: { late: true }, stateDelta: { k: 1, "user:u": 1, "app:a": 1 }, now: Date.now() },
              call,
            ),
        ],
        [
          "updateSession under expected_version",
          (store, call) =>
            store.updateSession("s1", { metadata: { late: true }, expectedVersion: 0, now: Date.now() }, call),
        ],
        ["deleteSession", (store, call) => store.deleteSession("s1", call)],
      ];
      for (const [operation, run] of operations) {
        it(`${operation} expecting an incarnation that is no longer the session's is NOT_FOUND and changes nothing`, async () => {
          const store = await fresh();
          const { stale, current, live } = await replaced(store);
          const err = await rejection(run(store, stale));
          expect(err.code).toBe("NOT_FOUND");
          expect(err.message).toBe('session_id: session "s1" not found');
          expect(err.reason).toBe("SESSION_NOT_FOUND");
          await expectUnchanged(store, live);
          // The same call expecting the session's own incarnation goes through.
          await run(store, current);
        });
      }

      it("getSession expecting an incarnation that is no longer the session's finds none; the current one finds it", async () => {
        const store = await fresh();
        const { stale, current, live } = await replaced(store);
        expect(await store.getSession("s1", stale)).toBeUndefined();
        expect(await store.getSession("s1", current)).toEqual(live);
      });

      it("deleteSession expecting an incarnation of a session that is gone is NOT_FOUND, not false", async () => {
        const store = await fresh();
        const { current } = await replaced(store);
        expect(await store.deleteSession("s1", current)).toBe(true);
        expect((await rejection(store.deleteSession("s1", current))).code).toBe("NOT_FOUND");
        expect(await store.deleteSession("s1")).toBe(false);
      });
    });

    describe("7. retention", () => {
      const session = (sessionId: string, appName: string, now: number) => ({
        sessionId,
        appName,
        userId: "u",
        metadata: {},
        now,
      });

      it("0 means no cap: 1,001 sessions and 600 events in one session are all kept", async () => {
        const store = await fresh({ maxSessions: 0, maxSessionEvents: 0 });
        const now = Date.now();
        for (let i = 0; i < 1001; i += 77) {
          await Promise.all(
            Array.from({ length: Math.min(77, 1001 - i) }, (_, j) =>
              store.createSession(session(`s${i + j}`, "app", now + i + j)),
            ),
          );
        }
        for (let batch = 0; batch < 6; batch++) {
          await store.appendEvents(
            "s0",
            Array.from({ length: 100 }, (_, i) => newEvent("user_message", batch * 100 + i)),
          );
        }
        expect(await store.stats()).toEqual({ totalSessions: 1001, totalEvents: 600 });
        expect(await store.getSession("s0")).toMatchObject({ firstSeq: 1, headSeq: 600 });
        expect((await store.readEvents("s0", { limit: 1000 })).events.map((e) => e.content)).toEqual(
          Array.from({ length: 600 }, (_, i) => i),
        );
        expect(store.sessionsEvicted).toBe(0);
        expect(store.eventsTrimmed).toBe(0);
      });

      it("an app's events cap replaces the global one, and its sessions cap evicts only its own oldest sessions", async () => {
        const apps = new Map([
          ["small", { maxSessionEvents: 3, maxSessions: 4 }],
          ["free", { maxSessionEvents: 0 }],
        ]);
        const store = await fresh({ maxSessions: 0, maxSessionEvents: 5, apps });
        const now = Date.now();
        await store.createSession(session("other-1", "other", now - 100));
        await store.createSession(session("free-1", "free", now - 100));
        for (let i = 0; i < 4; i++) await store.createSession(session(`small-${i}`, "small", now - 50 + i));
        for (const id of ["other-1", "free-1", "small-3"]) {
          for (let i = 0; i < 8; i++) await store.appendEvents(id, [newEvent("user_message", i)]);
        }
        expect((await store.readEvents("small-3", { limit: 100 })).events.map((e) => e.seq)).toEqual([6, 7, 8]);
        expect((await store.readEvents("free-1", { limit: 100 })).events).toHaveLength(8);
        expect((await store.readEvents("other-1", { limit: 100 })).events.map((e) => e.seq)).toEqual([4, 5, 6, 7, 8]);
        expect(store.eventsTrimmed).toBe(5 + 3);
        expect(store.sessionsEvicted).toBe(0);

        // The fifth "small" session evicts the app's least recently updated one, never another app's older sessions.
        await store.createSession(session("small-4", "small", now));
        expect(store.sessionsEvicted).toBe(1);
        expect(await store.getSession("small-0")).toBeUndefined();
        const left = await store.listSessions({ limit: 100 });
        expect(left.map((s) => s.sessionId)).toEqual(["free-1", "other-1", "small-1", "small-2", "small-3", "small-4"]);
      });

      it("cleanup within a scope removes only that app's sessions, or every app's but the excepted ones", async () => {
        const store = await fresh();
        const old = Date.now() - 60_000;
        for (const app of ["a", "b", "c"]) await store.createSession(session(`${app}-old`, app, old));
        await store.createSession(session("a-new", "a", Date.now()));
        expect(await store.cleanup(old + 1, { appName: "a" })).toBe(1);
        expect(await store.getSession("a-old")).toBeUndefined();
        expect(await store.cleanup(old + 1, { exceptAppNames: ["b"] })).toBe(1);
        expect((await store.listSessions({ limit: 10 })).map((s) => s.sessionId)).toEqual(["a-new", "b-old"]);
      });

      it("cleanup's scope combines a user with excepted apps: that user's stale sessions outside those apps", async () => {
        const store = await fresh();
        const old = Date.now() - 60_000;
        const of = (sessionId: string, appName: string, userId: string) => ({
          sessionId,
          appName,
          userId,
          metadata: {},
          now: old,
        });
        for (const [id, app, user] of [
          ["a-u", "a", "u"],
          ["b-u", "b", "u"],
          ["c-u", "c", "u"],
          ["a-v", "a", "v"],
        ] as const)
          await store.createSession(of(id, app, user));
        expect(await store.cleanup(old + 1, { userId: "u", exceptAppNames: ["b"] })).toBe(2);
        expect((await store.listSessions({ limit: 10 })).map((s) => s.sessionId)).toEqual(["a-v", "b-u"]);
        expect(await store.cleanup(old + 1, { appName: "b", userId: "u", exceptAppNames: ["b"] })).toBe(0);
        expect(await store.cleanup(old + 1, { appName: "a", userId: "u" })).toBe(0);
      });

      it("the idle sweep removes sessions past their app's idle TTL, else the global one, and no other", async () => {
        const apps = new Map([
          ["keep", { sessionIdleMs: 0 }],
          ["short", { sessionIdleMs: 1000 }],
        ]);
        const limits = { ...DEFAULT_LIMITS, sessionIdleMs: 10_000, apps };
        const store = await fresh(limits);
        const now = Date.now();
        await store.createSession(session("global-stale", "any", now - 20_000));
        await store.createSession(session("global-fresh", "any", now - 2000));
        await store.createSession(session("keep-ancient", "keep", now - 1_000_000));
        await store.createSession(session("short-stale", "short", now - 2000));
        await store.createSession(session("short-fresh", "short", now - 100));
        const sweeper = new RetentionSweeper(store, limits, undefined, silentLog);
        expect(sweeper.intervalMs).toBe(500);
        expect(await sweeper.sweep(now)).toBe(2);
        expect((await store.listSessions({ limit: 10 })).map((s) => s.sessionId)).toEqual([
          "global-fresh",
          "keep-ancient",
          "short-fresh",
        ]);
      });
    });

    describe("8. idempotency past retention (the dedupe window)", () => {
      const retry = (id: string, content: JsonValue) => newEvent("user_message", content, { eventId: id });

      it("a retry of a trimmed event inside the window answers its original seq and is not appended again", async () => {
        const store = await fresh({ maxSessionEvents: 3 });
        await makeSession(store, "s1");
        for (let i = 1; i <= 5; i++) await store.appendEvents("s1", [retry(`e${i}`, i)]);
        expect(await store.getSession("s1")).toMatchObject({ firstSeq: 3, headSeq: 5 });

        const again = await store.appendEvents("s1", [retry("e1", 1)], 0);
        expect(again.replayed).toBe(true);
        expect(again.events).toEqual([
          expect.objectContaining({ sessionId: "s1", seq: 1, eventId: "e1", eventType: "user_message", content: 1 }),
        ]);
        // Another payload under a remembered id is a conflict, as for a retained one.
        expect((await rejection(store.appendEvents("s1", [retry("e2", "changed")]))).code).toBe("ALREADY_EXISTS");
        // A batch mixing a trimmed retry and a new event appends only the new one.
        const mixed = await store.appendEvents("s1", [retry("e2", 2), retry("e6", 6)]);
        expect(mixed.replayed).toBe(false);
        expect(mixed.events.map((e) => [e.eventId, e.seq])).toEqual([
          ["e2", 2],
          ["e6", 6],
        ]);
        expect(await store.getSession("s1")).toMatchObject({ firstSeq: 4, headSeq: 6 });
        expect((await store.readEvents("s1", { limit: 10 })).events.map((e) => e.eventId)).toEqual(["e4", "e5", "e6"]);
        expect((await store.stats()).totalEvents).toBe(3);

        // Events of a batch larger than the cap, never kept, are remembered too.
        await makeSession(store, "s2");
        await store.appendEvents("s2", [
          retry("b1", 1),
          retry("b2", 2),
          retry("b3", 3),
          retry("b4", 4),
          retry("b5", 5),
        ]);
        const batchRetry = await store.appendEvents("s2", [
          retry("b1", 1),
          retry("b2", 2),
          retry("b3", 3),
          retry("b4", 4),
          retry("b5", 5),
        ]);
        expect(batchRetry.replayed).toBe(true);
        expect(batchRetry.events.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5]);
        expect((await store.getSession("s2"))!.headSeq).toBe(5);
      });

      it("after the window a trimmed id may be appended again", async () => {
        const store = await fresh({ maxSessionEvents: 2, dedupeWindowMs: 300 });
        await makeSession(store, "s1");
        for (let i = 1; i <= 3; i++) await store.appendEvents("s1", [retry(`e${i}`, i)]);
        expect((await store.appendEvents("s1", [retry("e1", 1)])).replayed).toBe(true);
        // Past the 300 ms dedupe window: the window's end is what is checked.
        await sleep(700);
        const later = await store.appendEvents("s1", [retry("e1", 1)]);
        expect(later.replayed).toBe(false);
        expect(later.events[0].seq).toBe(4);
      });

      it("remembers at most dedupeMaxIds trimmed ids per session, the most recently trimmed", async () => {
        const store = await fresh({ maxSessionEvents: 1, dedupeMaxIds: 2 });
        await makeSession(store, "s1");
        for (let i = 1; i <= 5; i++) await store.appendEvents("s1", [retry(`e${i}`, i)]);
        // Trimmed: e1..e4; remembered: e3, e4.
        expect((await store.appendEvents("s1", [retry("e4", 4)])).events[0].seq).toBe(4);
        expect((await store.appendEvents("s1", [retry("e3", 3)])).events[0].seq).toBe(3);
        const forgotten = await store.appendEvents("s1", [retry("e2", 2)]);
        expect(forgotten.replayed).toBe(false);
        expect(forgotten.events[0].seq).toBe(6);
      });

      it("a session deleted and created again forgets its trimmed ids", async () => {
        const store = await fresh({ maxSessionEvents: 1 });
        await makeSession(store, "s1");
        for (let i = 1; i <= 3; i++) await store.appendEvents("s1", [retry(`e${i}`, i)]);
        await store.deleteSession("s1");
        await makeSession(store, "s1");
        const fresh1 = await store.appendEvents("s1", [retry("e1", "another payload")]);
        expect(fresh1).toMatchObject({ replayed: false, events: [{ seq: 1, content: "another payload" }] });
      });
    });

    describeStateConformance(fresh);

    describe("9. event search (SearchEvents)", () => {
      const search = (
        store: MemoryStore,
        query: string,
        opts: { appName?: string; userId?: string; eventTypes?: string[]; topK?: number } = {},
      ) =>
        searchEvents(store, {
          appName: opts.appName ?? "app",
          userId: opts.userId,
          eventTypes: opts.eventTypes ?? [],
          query,
          topK: opts.topK ?? 10,
        });
      const found = async (store: MemoryStore, query: string, opts: Parameters<typeof search>[2] = {}) =>
        (await search(store, query, opts)).map((h) => `${h.event.sessionId}/${h.event.seq}`);

      it("finds an old event past many newer ones, through the shared analyzer (stems, case, CJK)", async () => {
        const store = await fresh({ maxSessionEvents: 1000 });
        await makeSession(store, "old");
        await store.appendEvents("old", [
          newEvent("user_message", "Alice now prefers aisle SEATS on long flights"),
          newEvent("user_message", { text: "私の名前は太郎です" }),
        ]);
        for (let s = 0; s < 3; s++) {
          await makeSession(store, `newer-${s}`);
          for (let batch = 0; batch < 3; batch++) {
            await store.appendEvents(
              `newer-${s}`,
              Array.from({ length: 100 }, (_, i) =>
                newEvent("user_message", `a note about the long flight, number ${batch * 100 + i}`),
              ),
            );
          }
        }
        expect(await found(store, "book a seat")).toEqual(["old/1"]);
        expect(await found(store, "太郎")).toEqual(["old/2"]);
        const [hit] = await search(store, "seat flights");
        expect(hit.event.seq).toBe(1);
        expect(hit.score).toBeGreaterThan(0);
        expect(hit.snippet).toBe("Alice now prefers aisle SEATS on long flights");
        // Stop words alone match nothing.
        expect(await found(store, "the of and")).toEqual([]);
      });

      it("follows appends, trims, deletions and erasure, and filters by event type", async () => {
        const store = await fresh({ maxSessionEvents: 3 });
        await makeSession(store, "s1", "app", "kim");
        await makeSession(store, "s2", "app", "kim");
        await store.appendEvents("s1", [newEvent("user_message", "the canoe is blue")]);
        expect(await found(store, "canoe")).toEqual(["s1/1"]);
        await store.appendEvents("s2", [newEvent("agent_response", "a red canoe")]);
        expect((await found(store, "canoe")).sort()).toEqual(["s1/1", "s2/1"]);
        expect(await found(store, "canoe", { eventTypes: ["agent_response"] })).toEqual(["s2/1"]);
        await store.appendEvents("s1", [
          newEvent("user_message", "one"),
          newEvent("user_message", "two"),
          newEvent("user_message", "three"),
        ]);
        expect(await found(store, "canoe")).toEqual(["s2/1"]);
        await store.deleteSession("s2");
        expect(await found(store, "canoe")).toEqual([]);
        await makeSession(store, "s3", "app", "kim");
        await store.appendEvents("s3", [newEvent("user_message", "canoe trip")]);
        expect(await found(store, "canoe", { userId: "kim" })).toEqual(["s3/1"]);
        await store.deleteUserData("app", "kim");
        expect(await found(store, "canoe")).toEqual([]);
      });

      it("scores a user's events by that user's events alone, and never shows another user's or app's", async () => {
        const store = await fresh();
        await makeSession(store, "kim-1", "app", "kim");
        await store.appendEvents("kim-1", [
          newEvent("user_message", "We booked the cabin by the lake"),
          newEvent("user_message", "The lake was cold"),
        ]);
        const scores = async () =>
          (await search(store, "lake cabin", { userId: "kim" })).map((h) => [h.event.seq, h.score]);
        const before = await scores();
        expect(before.map(([seq]) => seq)).toEqual([1, 2]);
        for (let round = 0; round < 3; round++) {
          await makeSession(store, `lou-${round}`, "app", "lou");
          await store.appendEvents(`lou-${round}`, [
            newEvent("user_message", "Lou wants a lake cabin"),
            newEvent("user_message", "cabin cabin"),
          ]);
          await makeSession(store, `other-${round}`, "other-app", "kim");
          await store.appendEvents(`other-${round}`, [newEvent("user_message", "a lake cabin elsewhere")]);
          const after = await scores();
          expect(after.map(([seq]) => seq)).toEqual([1, 2]);
          for (const [i, [, score]] of after.entries()) expect(score).toBeCloseTo(before[i][1], 9);
        }
        const kims = await search(store, "lake cabin", { userId: "kim" });
        expect(kims.length, "kim's own hits").toBeGreaterThan(0);
        expect(kims.every((h) => h.event.sessionId === "kim-1")).toBe(true);
        expect((await found(store, "lake cabin", { topK: 20 })).length).toBe(8);
        expect(await found(store, "lake", { appName: "nobody" })).toEqual([]);
      });
    });

    describe("6. tenancy and hostile ids", () => {
      it("keeps (app a, user b:c) and (app a:b, user c) apart", async () => {
        const store = await fresh();
        await makeSession(store, "one", "a", "b:c");
        await makeSession(store, "two", "a:b", "c");
        expect((await store.listSessions({ limit: 10, appName: "a" })).map((s) => s.sessionId)).toEqual(["one"]);
        expect((await store.listSessions({ limit: 10, appName: "a:b" })).map((s) => s.sessionId)).toEqual(["two"]);
        expect(await store.listSessions({ limit: 10, appName: "a", userId: "c" })).toEqual([]);
        expect((await store.listSessions({ limit: 10, appName: "a", userId: "b:c" })).map((s) => s.sessionId)).toEqual([
          "one",
        ]);
      });

      it("treats pattern characters and newlines in ids literally", async () => {
        const store = await fresh();
        const hostile = [
          "*",
          "?",
          "%",
          "_",
          "'",
          "a*",
          "a%",
          "a_b",
          "[ab]",
          "x'; DROP TABLE y; --",
          "line\nbreak",
          "\\",
        ];
        await makeSession(store, "plain", "ab", "user");
        await makeSession(store, "aXb", "aXb", "user");
        for (const [i, name] of hostile.entries()) await makeSession(store, `h${i}`, name, name);
        for (const [i, name] of hostile.entries()) {
          const byApp = await store.listSessions({ limit: 100, appName: name });
          expect(
            byApp.map((s) => s.sessionId),
            `app ${JSON.stringify(name)}`,
          ).toEqual([`h${i}`]);
          const byUser = await store.listSessions({ limit: 100, userId: name });
          expect(
            byUser.map((s) => s.sessionId),
            `user ${JSON.stringify(name)}`,
          ).toEqual([`h${i}`]);
        }
        const ids = ["*", "a?b", "50%", "a_b", "it's", "[x]", "s:1:*"];
        for (const id of ids) {
          await makeSession(store, id);
          await store.appendEvents(id, [newEvent("user_message", id, { eventId: `${id}*%_` })]);
        }
        for (const id of ids) {
          const page = await store.readEvents(id, { limit: 10 });
          expect(page.events.map((e) => e.content)).toEqual([id]);
        }
        expect(await store.deleteSession("*")).toBe(true);
        for (const id of ids.slice(1)) expect(await store.getSession(id)).toBeDefined();
      });
    });
  });
}
