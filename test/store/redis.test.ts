/**
 * The Redis driver: the shared conformance suite, then what only Redis has
 * (re-sent scripts, key layout, durability settings, outages). Every store
 * gets its own key prefix, removed after the file.
 */
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventFingerprint } from "../../src/store/fingerprint.js";
import { durabilitySummary, RedisStore } from "../../src/store/redis.js";
import type { DecodedEvents } from "../../src/store/redis/codec.js";
import { loadScripts } from "../../src/store/redis/script-runner.js";
import { StreamHub } from "../../src/service/stream-hub.js";
import type { MemoryChange, MemoryRecord, SessionNotice, StoreLimits } from "../../src/store/types.js";
import { LocalStore } from "../../src/store/local.js";
import fc from "fast-check";
import { freePort, startRedisServer } from "../support/redis-server.js";
import { describeStoreConformance, makeSession, newEvent, rejection, waitFor } from "./conformance.js";
import { describeMemoriesConformance, memory } from "./memories-conformance.js";
import { MEMORY_CHANGES_RETAINED } from "../../src/store/memories/rules.js";

const url = process.env.MEMORY_TEST_REDIS_URL!;
/** The Redis with the Redis Query Engine (test/support/redis-search-server.ts); `url`'s Redis 7.0 has none. */
const searchUrl = process.env.MEMORY_TEST_REDIS_SEARCH_URL!;
const prefixes: string[] = [];
let counter = 0;
const DEFAULT_LIMITS: StoreLimits = { maxSessions: 1000, maxSessionEvents: 500 };

/** A store on the shared test Redis under a prefix of its own. */
async function openStore(limits: StoreLimits = DEFAULT_LIMITS, prefix = `t${process.pid}_${++counter}`) {
  prefixes.push(prefix);
  return RedisStore.open({ url, keyPrefix: prefix, limits });
}

/**
 * A store on the test Redis with the Query Engine, under a prefix of its own
 * (dropped with that server), once its new text index has scanned the
 * keyspace (until then searches rank in process, and the tests are about the index).
 */
async function openSearchStore(limits: StoreLimits = DEFAULT_LIMITS, prefix = `t${process.pid}_${++counter}`) {
  const store = await RedisStore.open({ url: searchUrl, keyPrefix: prefix, limits });
  const client = new Redis(searchUrl);
  try {
    for (const deadline = Date.now() + 60_000; !(await scanned(client, `${prefix}:memidx`)); await sleep(20))
      if (Date.now() > deadline) throw new Error(`${prefix}:memidx did not finish indexing`);
  } finally {
    client.disconnect();
  }
  return store;
}

/** True once an index's scan of the keyspace is done (FT.INFO indexing 0). */
async function scanned(client: Redis, index: string): Promise<boolean> {
  const info = (await client.call("FT.INFO", index)) as unknown[];
  return Number(info[info.indexOf("indexing") + 1]) === 0;
}

let admin: Redis;
beforeAll(() => {
  if (!url) throw new Error("MEMORY_TEST_REDIS_URL is not set: the global setup did not start Redis");
  admin = new Redis(url);
});
afterAll(async () => {
  for (const prefix of prefixes) {
    const keys = await keysOf(`${prefix}:*`);
    if (keys.length > 0) await admin.del(...keys);
  }
  await admin.quit();
});

const keysOfOn = (pattern: string, client: Redis) => keysOf(pattern, client);

/** Every key matching a pattern made of test-chosen characters only. */
async function keysOf(pattern: string, client = admin): Promise<string[]> {
  const out: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await client.scan(cursor, "MATCH", pattern, "COUNT", 1000);
    out.push(...keys);
    cursor = next;
  } while (cursor !== "0");
  return out;
}

const hex = (s: string) => Buffer.from(s).toString("hex");

describeStoreConformance("redis", (limits) => openStore(limits), { persistent: true, shared: true, retains: true });
describeMemoriesConformance("redis", () => openStore());
describeMemoriesConformance("redis on the Redis Query Engine", () => openSearchStore());

describe("RedisStore specifics", () => {
  it("resumeErasures finishes an erasure recorded as in progress; a finished erasure leaves no record", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
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
      await admin.hset(`${prefix}:erasures`, `${hex("app")}:${hex("gone")}`, "token-of-a-dead-replica");
      expect(await store.resumeErasures()).toEqual({ users: 1, sessions: 2, events: 2 });
      expect(await admin.hlen(`${prefix}:erasures`)).toBe(0);
      expect((await store.listSessions({ limit: 10 })).map((s) => s.sessionId)).toEqual(["keep"]);
      expect(await store.deleteUserData("app", "stays")).toEqual({ sessions: 1, events: 0, memories: 0 });
      expect(await admin.exists(`${prefix}:erasures`)).toBe(0);
    } finally {
      await store.close();
    }
  });

  it("decodes a notice's events only for a session this replica has a listener for", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const writer = await openStore(DEFAULT_LIMITS, prefix);
    const replica = await openStore(DEFAULT_LIMITS, prefix);
    try {
      await makeSession(writer, "s1");
      await makeSession(writer, "s2");
      const notices: SessionNotice[] = [];
      replica.subscribe("s1", (n) => notices.push(n));
      await replica.noticesFlowing();
      await writer.appendEvents("s2", [newEvent("user_message", "nobody streams this")]);
      await writer.appendEvents("s1", [newEvent("user_message", "streamed")]);
      // Redis delivers one connection's messages in order: s2's notice came (and went) first.
      await waitFor(() => notices.length === 1);
      expect(notices[0].events?.map((e) => e.content)).toEqual(["streamed"]);
      const { decoded } = replica as unknown as { decoded: DecodedEvents };
      expect(decoded.has("s1", 1)).toBe(true);
      expect(decoded.has("s2", 1)).toBe(false);
    } finally {
      await Promise.all([writer.close(), replica.close()]);
    }
  });

  it("reads a session recreated under its id as it is now, not as this replica decoded it before", async () => {
    const store = await openStore();
    try {
      await makeSession(store, "s1");
      await store.appendEvents("s1", [newEvent("user_message", "before")]);
      expect((await store.readEvents("s1", { afterSeq: 0, limit: 10 })).events.map((e) => e.content)).toEqual([
        "before",
      ]);
      expect(await store.deleteSession("s1")).toBe(true);
      await makeSession(store, "s1");
      await store.appendEvents("s1", [newEvent("user_message", "after")]);
      // The same session id and seq, another stored text: the decoded "before" must not be served.
      const read = (await store.readEvents("s1", { afterSeq: 0, limit: 10 })).events;
      expect(read.map((e) => [e.seq, e.content])).toEqual([[1, "after"]]);
    } finally {
      await store.close();
    }
  });

  it("notices carry the appended events (only those retained, only when small enough), and streams take them instead of reading", async () => {
    const store = await openStore({ ...DEFAULT_LIMITS, maxSessionEvents: 3 });
    try {
      await makeSession(store, "s1");
      const notices: SessionNotice[] = [];
      store.subscribe("s1", (n) => notices.push(n));
      await store.noticesFlowing();
      const one = await store.appendEvents("s1", [
        newEvent("user_message", "a"),
        newEvent("tool_call", { tool: "search", q: "ü \n" }),
      ]);
      // Five events into a cap of three: the notice carries the three kept.
      const five = await store.appendEvents(
        "s1",
        [1, 2, 3, 4, 5].map((i) => newEvent("user_message", i)),
      );
      const big = await store.appendEvents("s1", [newEvent("user_message", "x".repeat(70 * 1024))]);
      await waitFor(() => notices.some((n) => n.headSeq === 8));
      expect(notices.map((n) => n.headSeq)).toEqual([2, 7, 8]);
      expect(notices[0].events).toEqual(one.events);
      expect(notices[1].events).toEqual(five.events.slice(2));
      expect(notices[2].events).toBeUndefined(); // over the notice limit: the head only
      expect(big.events[0].seq).toBe(8);
      // The same decoded object a read returns, so the wire caches are shared too.
      const read = (await store.readEvents("s1", { afterSeq: 5, limit: 10 })).events;
      expect(read[0]).toBe(notices[1].events![1]);

      // Three streams on one hub: after their first read, appends reach them with no further reads.
      const hub = new StreamHub(store, { heartbeatMs: 60_000, pageSize: 64 });
      let reads = 0;
      const readEvents = store.readEvents.bind(store);
      store.readEvents = (...args) => {
        reads++;
        return readEvents(...args);
      };
      const controller = new AbortController();
      const seen: number[][] = [[], [], []];
      let caughtUp = 0;
      const streams = seen.map(async (into) => {
        for await (const frame of hub.subscribe("s1", 8, [], controller.signal)) {
          if (frame.kind === "event") into.push(frame.event.seq);
          else if (frame.kind === "caughtUp") caughtUp++;
        }
      });
      await waitFor(() => caughtUp === 3); // each stream's first read is done
      const readsBefore = reads;
      // Appended faster than the streams follow: a stream a few notices behind still takes the events from them.
      await Promise.all([0, 1, 2, 3, 4].map((i) => store.appendEvents("s1", [newEvent("user_message", `live ${i}`)])));
      await waitFor(() => seen.every((s) => s.length === 5));
      expect(seen).toEqual([
        [9, 10, 11, 12, 13],
        [9, 10, 11, 12, 13],
        [9, 10, 11, 12, 13],
      ]);
      expect(reads - readsBefore).toBe(0);
      controller.abort();
      await Promise.allSettled(streams);
    } finally {
      await store.close();
    }
  });

  it("writes sessions, events, ids, recent entries and notices in the one format every release reads and writes", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    // Connected (its ready check done) before it subscribes: a ready check racing the SUBSCRIBE on a
    // loaded machine fails in subscriber mode, and the notices never arrive.
    const raw = new Redis(url, { lazyConnect: true });
    await raw.connect();
    try {
      const id = "sé:1";
      const session = await store.createSession({
        sessionId: id,
        appName: "äpp",
        userId: "u",
        metadata: { k: "v" },
        now: 1000,
      });
      const base = `${prefix}:s:${hex(id)}`;
      expect(await admin.hgetall(base)).toEqual({
        app: "äpp",
        user: "u",
        meta: '{"k":"v"}',
        created: "1000",
        updated: "1000",
        head: "0",
        first: "1",
        inc: session.incarnation,
      });
      const notices: string[] = [];
      raw.on("message", (_channel: string, message: string) => notices.push(message));
      await raw.subscribe(`${prefix}:notices`);
      // A generated id (fingerprint ""): the store fingerprints it all the same.
      const event = {
        eventId: "ë-1",
        eventType: "tool_call",
        content: { q: "ü" },
        metadata: { m: 1 },
        timestamp: 1234,
        fingerprint: "",
      };
      await store.appendEvents(id, [event]);
      // Type and id framed by their byte lengths ("ë-1" is 4 bytes), then JSON of the rest.
      const encoded = '9:tool_call4:ë-1[1234,{"q":"ü"},{"m":1}]';
      expect(await admin.hget(`${base}:ev`, "1")).toBe(encoded);
      expect(await admin.hget(`${base}:id`, "ë-1")).toBe(`1:${eventFingerprint("tool_call", { q: "ü" }, { m: 1 })}`);
      const member = `${hex(id)}!${"1".padStart(16, "0")}`;
      for (const key of [
        `recent:all`,
        `recent:a:${hex("äpp")}`,
        `recent:u:${hex("u")}`,
        `recent:au:${hex("äpp")}:${hex("u")}`,
      ]) {
        expect(await admin.zrange(`${prefix}:${key}`, 0, -1, "WITHSCORES"), key).toEqual([member, "1"]);
      }
      await waitFor(() => notices.length === 1);
      expect(notices[0]).toBe(
        `{"s":"sé:1","h":1,"i":"${session.incarnation}","k":1}\n${Buffer.byteLength(encoded)}:${encoded}`,
      );
      await store.deleteSession(id);
      await waitFor(() => notices.length === 2);
      expect(notices[1]).toBe(`{"s":"sé:1","d":1,"i":"${session.incarnation}"}`);

      // Written by hand as another release would: read back field for field.
      await store.createSession({ sessionId: "by-hand", appName: "a", userId: "u", metadata: {}, now: 1000 });
      // "ïd" is 3 bytes: lengths count bytes, not characters.
      await admin.hset(`${prefix}:s:${hex("by-hand")}:ev`, "1", '12:user_message3:ïd[5,"hi",{"x":[1]}]');
      await admin.hset(`${prefix}:s:${hex("by-hand")}`, "head", "1");
      expect((await store.readEvents("by-hand", { limit: 10 })).events).toEqual([
        {
          sessionId: "by-hand",
          seq: 1,
          eventId: "ïd",
          eventType: "user_message",
          content: "hi",
          metadata: { x: [1] },
          timestamp: 5,
        },
      ]);
    } finally {
      raw.disconnect();
      await store.close();
    }
  });

  it("writes session state, its deltas and versions in the one format every release reads and writes", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      const id = "st:1";
      await store.createSession({ sessionId: id, appName: "äpp", userId: "ü", metadata: {}, now: 1000 });
      const base = `${prefix}:s:${hex(id)}`;
      const stateDelta = { topic: "ü", "user:lang": "en", "app:n": 1 };
      const event = {
        eventId: "e",
        eventType: "agent_response",
        content: "x",
        metadata: {},
        timestamp: 5,
        fingerprint: "",
        stateDelta,
      };
      await store.appendEvents(id, [event]);
      // The delta is the fourth element of the event's JSON (a release before state reads three).
      expect(await admin.hget(`${base}:ev`, "1")).toBe(
        '14:agent_response1:e[5,"x",{},{"topic":"ü","user:lang":"en","app:n":1}]',
      );
      // Entries "st:<key>" -> value JSON, with their count and bytes (key bytes + value bytes: 5 + 4 for topic).
      expect(await admin.hgetall(base)).toMatchObject({ "st:topic": '"ü"', stn: "1", stb: "9", ver: "1" });
      expect(await admin.hgetall(`${prefix}:st:au:${hex("äpp")}:${hex("ü")}`)).toEqual({
        "st:lang": '"en"',
        stn: "1",
        stb: "8",
      });
      expect(await admin.hgetall(`${prefix}:st:a:${hex("äpp")}`)).toEqual({ "st:n": "1", stn: "1", stb: "2" });
      // Written by hand as another release would: read back.
      await admin.hset(`${prefix}:st:a:${hex("äpp")}`, "st:hand", '{"a":[1]}', "stn", "2", "stb", "15");
      expect(await store.sharedState("äpp", "ü")).toEqual({ app: { n: 1, hand: { a: [1] } }, user: { lang: "en" } });
      // The last entry deleted leaves no key behind.
      await store.updateSession(id, { stateDelta: { "user:lang": null }, now: 2000 });
      expect(await admin.exists(`${prefix}:st:au:${hex("äpp")}:${hex("ü")}`)).toBe(0);
    } finally {
      await store.close();
    }
  });

  it("loads every script with its includes pasted in once, and names a missing include", async () => {
    const scripts = loadScripts();
    expect([...scripts.keys()].sort()).toEqual([
      "append",
      "create",
      "delete",
      "erased",
      "read",
      "shared",
      "statecheck",
      "update",
    ]);
    for (const [name, { lua }] of scripts) {
      expect(lua, name).not.toMatch(/@include/);
      expect(lua.match(/local function readFrame\(/g)?.length ?? 0, name).toBeLessThanOrEqual(1);
    }
    expect(scripts.get("append")!.lua).toContain("local function readFrame(");
    expect(scripts.get("read")!.lua).toContain("local function readFrame(");
    expect(scripts.get("delete")!.lua).toContain("local function recentMember(");
    expect(scripts.get("append")!.numberOfKeys).toBe(12);
    expect(scripts.get("append")!.lua).toContain("local function applyStateChanges(");
    expect(scripts.get("update")!.lua).toContain("local function applyStateChanges(");

    const { mkdtempSync, writeFileSync, mkdirSync, rmSync } = await import("node:fs");
    const dir = mkdtempSync(path.join(tmpdir(), "engram-lua-"));
    try {
      mkdirSync(path.join(dir, "includes"));
      writeFileSync(path.join(dir, "includes", "twice.lua"), "local twice = 2");
      writeFileSync(path.join(dir, "ok-1.lua"), '--- @include "twice"\n--- @include "twice"\nreturn twice');
      expect(
        loadScripts(dir)
          .get("ok")!
          .lua.match(/local twice = 2/g),
      ).toHaveLength(1);
      writeFileSync(path.join(dir, "broken-1.lua"), '--- @include "nowhere"\nreturn 1');
      expect(() => loadScripts(dir)).toThrow(
        'broken-1.lua includes "nowhere", but includes/nowhere.lua cannot be read',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a re-sent append script (same arguments) returns the originals instead of appending twice", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      await makeSession(store, "s1");
      await store.appendEvents("s1", [newEvent("user_message", "before")]);
      // What ioredis re-sends after a reconnect: the identical EVALSHA, generated ids and all.
      const batch = [newEvent("user_message", "a"), newEvent("agent_response", { b: 1 })];
      const sendAppend = () =>
        (store as unknown as { appendEvents: RedisStore["appendEvents"] }).appendEvents("s1", batch, 1);
      const first = await sendAppend();
      const resent = await sendAppend();
      expect(first.replayed).toBe(false);
      expect(resent).toEqual({ events: first.events, replayed: true });
      expect((await store.getSession("s1"))!.headSeq).toBe(3);
      expect((await store.stats()).totalEvents).toBe(3);

      // The same at the wire level: run the script (as loaded: includes resolved) twice with byte-identical arguments.
      const direct = new Redis(url);
      try {
        const { lua } = loadScripts().get("append")!;
        const base = `${prefix}:s:${hex("s1")}`;
        const recent = [
          `${prefix}:recent:all`,
          `${prefix}:recent:a:${hex("app")}`,
          `${prefix}:recent:u:${hex("user")}`,
          `${prefix}:recent:au:${hex("app")}:${hex("user")}`,
        ];
        const keys = [
          base,
          `${base}:ev`,
          `${base}:id`,
          `${prefix}:updated`,
          `${prefix}:stats`,
          ...recent,
          `${base}:tr`,
        ];
        const body = JSON.stringify([Date.now(), "x", {}]);
        const value = `12:user_message${"gen-direct".length}:gen-direct${body}`;
        const args = [
          "s1",
          '"s1"',
          "",
          Date.now(),
          500,
          2000,
          `${hex("s1")}!`,
          `${prefix}:notices`,
          1,
          "gen-direct",
          eventFingerprint("user_message", "x", {}),
          Date.now(),
          value,
          65536,
          "app",
          "user",
          120_000,
          1000,
          0,
        ];
        const once = (await direct.eval(lua, keys.length, ...keys, ...args)) as unknown[];
        const twice = (await direct.eval(lua, keys.length, ...keys, ...args)) as unknown[];
        expect(once.slice(0, 2)).toEqual(["OK", 0]);
        expect(twice.slice(0, 2)).toEqual(["OK", 1]);
        expect(twice[4]).toBe(4);
        expect((await store.getSession("s1"))!.headSeq).toBe(4);
        expect((await store.readEvents("s1", { afterSeq: 3, limit: 10 })).events.map((e) => e.eventId)).toEqual([
          "gen-direct",
        ]);
      } finally {
        direct.disconnect();
      }
    } finally {
      await store.close();
    }
  });

  it("trimming past maxSessionEvents answers OUT_OF_RANGE for a cursor into trimmed events, never a gap", async () => {
    const store = await openStore({ maxSessions: 100, maxSessionEvents: 3, dedupeWindowMs: 0 });
    try {
      await makeSession(store, "s1");
      for (let i = 0; i < 10; i++) await store.appendEvents("s1", [newEvent("user_message", i, { eventId: `e${i}` })]);
      expect(await store.getSession("s1")).toMatchObject({ firstSeq: 8, headSeq: 10 });
      for (const afterSeq of [0, 3, 6]) {
        const err = await rejection(store.readEvents("s1", { afterSeq, limit: 10 }));
        expect(err.code).toBe("OUT_OF_RANGE");
        expect(err.message).toContain("oldest retained seq is 8");
      }
      expect((await store.readEvents("s1", { afterSeq: 7, limit: 10 })).events.map((e) => e.seq)).toEqual([8, 9, 10]);
      // Without a dedupe window trimmed ids left the idempotency index; retained ones did not.
      const ids = await admin.hkeys(`${prefixes.at(-1)}:s:${hex("s1")}:id`);
      expect(ids.sort()).toEqual(["e7", "e8", "e9"]);
      expect(await admin.hlen(`${prefixes.at(-1)}:s:${hex("s1")}:ev`)).toBe(3);
      expect((await store.stats()).totalEvents).toBe(3);
      // Trimmed events left every recent index too.
      const recent = await keysOf(`${prefixes.at(-1)}:recent:*`);
      expect(recent).toHaveLength(4);
      for (const key of recent)
        expect(await admin.zrange(key, 0, -1), key).toEqual(
          [8, 9, 10].map((seq) => `${hex("s1")}!${String(seq).padStart(16, "0")}`),
        );
    } finally {
      await store.close();
    }
  });

  it("keeps trimmed ids in the ids hash, listed by trim time and bounded per session, until the session is deleted", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore({ maxSessions: 0, maxSessionEvents: 2, dedupeMaxIds: 3 }, prefix);
    try {
      await makeSession(store, "s1");
      for (let i = 1; i <= 7; i++) await store.appendEvents("s1", [newEvent("user_message", i, { eventId: `e${i}` })]);
      const base = `${prefix}:s:${hex("s1")}`;
      // Retained e6, e7; trimmed e1..e5, of which the newest three are remembered.
      expect((await admin.zrange(`${base}:tr`, 0, -1)).sort()).toEqual(["e3", "e4", "e5"]);
      expect((await admin.hkeys(`${base}:id`)).sort()).toEqual(["e3", "e4", "e5", "e6", "e7"]);
      expect(store.eventsTrimmed).toBe(5);
      expect(await store.deleteSession("s1")).toBe(true);
      expect(await keysOf(`${base}*`)).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it("deleteSession leaves no key and no index entry of the session", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      const id = "doomed:*?[x]";
      await makeSession(store, id, "app:1", "user*");
      await makeSession(store, "kept", "app:1", "user*");
      await store.appendEvents(id, [newEvent("user_message", "a", { eventId: "e1" }), newEvent("agent_response", "b")]);
      await store.appendEvents("kept", [newEvent("user_message", "c")]);
      expect(await store.deleteSession(id)).toBe(true);
      const keys = await keysOf(`${prefix}:*`);
      expect(keys.filter((k) => k.includes(hex(id)) || k.includes(id))).toEqual([]);
      for (const key of keys) {
        const type = await admin.type(key);
        if (type === "zset") {
          const members = await admin.zrange(key, 0, -1);
          expect(
            members.filter((m) => m === id || m.startsWith(`${hex(id)}!`)),
            key,
          ).toEqual([]);
        }
      }
      expect(await store.stats()).toEqual({ totalSessions: 1, totalEvents: 1 });
      expect((await store.listRecentEvents(10)).map((e) => e.content)).toEqual(["c"]);
    } finally {
      await store.close();
    }
  });

  it("keeps each recent index to its newest 2,000 entries, in ingest order", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore({ maxSessions: 100, maxSessionEvents: 5000 }, prefix);
    try {
      await makeSession(store, "quiet", "quiet", "ann");
      await store.appendEvents("quiet", [newEvent("user_message", "mine", { timestamp: 0 })]);
      await makeSession(store, "loud", "loud", "mallory");
      for (let b = 0; b < 5; b++)
        await store.appendEvents(
          "loud",
          Array.from({ length: 500 }, (_, i) => newEvent("user_message", b * 500 + i)),
        );
      expect(await admin.zcard(`${prefix}:recent:all`)).toBe(2000);
      expect(await admin.zcard(`${prefix}:recent:a:${hex("loud")}`)).toBe(2000);
      expect(await admin.zcard(`${prefix}:recent:au:${hex("loud")}:${hex("mallory")}`)).toBe(2000);
      expect(await admin.zrange(`${prefix}:recent:a:${hex("quiet")}`, 0, -1, "WITHSCORES")).toEqual([
        `${hex("quiet")}!${"1".padStart(16, "0")}`,
        "1",
      ]);
      expect(await admin.hget(`${prefix}:stats`, "ingested")).toBe("2501");
      expect((await store.listRecentEvents(1000)).map((e) => e.content)).toEqual(
        Array.from({ length: 1000 }, (_, i) => 1500 + i),
      );
      expect((await store.listRecentEvents(1000, { userId: "ann" })).map((e) => e.content)).toEqual(["mine"]);
    } finally {
      await store.close();
    }
  });

  it("files an append under the tenancy its session has now, when another replica re-created the id meanwhile", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const one = await openStore(DEFAULT_LIMITS, prefix);
    const two = await openStore(DEFAULT_LIMITS, prefix);
    try {
      await makeSession(one, "s", "x", "ann");
      await one.appendEvents("s", [newEvent("user_message", "x1")]);
      // Replica one remembers "s" as (x, ann); replica two hands the id to another tenant.
      expect(await two.deleteSession("s")).toBe(true);
      await makeSession(two, "s", "y", "bob");
      await one.appendEvents("s", [newEvent("user_message", "y1")]);
      expect(await one.listRecentEvents(10, { appNames: ["x"] })).toEqual([]);
      expect(await one.listRecentEvents(10, { userId: "ann" })).toEqual([]);
      expect((await one.listRecentEvents(10, { appNames: ["y"], userId: "bob" })).map((e) => e.content)).toEqual([
        "y1",
      ]);
      expect((await one.listRecentEvents(10, { userId: "bob" })).map((e) => e.content)).toEqual(["y1"]);
      expect(await admin.exists(`${prefix}:recent:a:${hex("x")}`)).toBe(0);
      // And a session deleted behind its back answers NOT_FOUND, as ever.
      expect(await two.deleteSession("s")).toBe(true);
      expect((await rejection(one.appendEvents("s", [newEvent("user_message", "gone")]))).code).toBe("NOT_FOUND");
    } finally {
      await one.close();
      await two.close();
    }
  });

  it("subscribes the notice channel only while a listener is there; noticesFlowing() resolves once it is subscribed", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const listening = await openStore(DEFAULT_LIMITS, prefix);
    const writer = await openStore(DEFAULT_LIMITS, prefix);
    const subscribers = async () =>
      Number(((await admin.pubsub("NUMSUB", `${prefix}:notices`)) as [string, number])[1]);
    try {
      // No listener on either replica: nobody receives the notices of appends.
      await makeSession(writer, "s1");
      await writer.appendEvents("s1", [newEvent("user_message", 1)]);
      expect(await subscribers()).toBe(0);
      expect(await listening.noticesFlowing()).toBeUndefined();
      // A listener: subscribed once noticesFlowing() resolves; the other replica's appends reach it, with their events.
      const notices: SessionNotice[] = [];
      const unsubscribe = listening.subscribe("s1", (n) => notices.push(n));
      await listening.noticesFlowing();
      expect(await subscribers()).toBe(1);
      await writer.appendEvents("s1", [newEvent("user_message", 2)]);
      await waitFor(() => notices.length > 0);
      expect(notices).toEqual([
        expect.objectContaining({
          sessionId: "s1",
          headSeq: 2,
          events: [expect.objectContaining({ seq: 2, content: 2 })],
        }),
      ]);
      // A listener leaving and another coming within the idle time keep the subscription.
      unsubscribe();
      const again = listening.subscribe("s1", (n) => notices.push(n));
      await listening.noticesFlowing();
      // Still subscribed 1.5 s on: the absence of an unsubscribe is what is checked.
      await sleep(1500);
      expect(await subscribers()).toBe(1);
      // The last listener gone: unsubscribed after the idle time.
      again();
      for (const deadline = Date.now() + 5000; (await subscribers()) !== 0; await sleep(50)) {
        if (Date.now() > deadline) throw new Error("still subscribed 5 s after the last listener left");
      }
      const count = notices.length;
      // A witness on the channel hears the next append's notice; by then a listener still subscribed would have too.
      const witness = admin.duplicate();
      try {
        let heard = false;
        witness.on("message", () => (heard = true));
        await witness.subscribe(`${prefix}:notices`);
        await writer.appendEvents("s1", [newEvent("user_message", 3)]);
        await waitFor(() => heard);
      } finally {
        witness.disconnect();
      }
      expect(notices.length).toBe(count);
      // Subscribed again for a new listener.
      const last = listening.subscribe("s1", (n) => notices.push(n));
      await listening.noticesFlowing();
      await writer.appendEvents("s1", [newEvent("user_message", 4)]);
      await waitFor(() => notices.some((n) => n.headSeq === 4));
      last();
    } finally {
      await listening.close();
      await writer.close();
    }
  });

  it("a stream on a replica with no listener yet reads only once the notice channel is subscribed: an append right after its first read reaches it", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const replica = await openStore(DEFAULT_LIMITS, prefix);
    const writer = await openStore(DEFAULT_LIMITS, prefix);
    // A slow SUBSCRIBE: a stream that read before it took effect would miss the append's notice (its heartbeat is a minute away).
    const subscriber = (replica as unknown as { connection: { subscriber: Redis } }).connection.subscriber;
    const subscribe = subscriber.subscribe.bind(subscriber) as (...channels: string[]) => Promise<unknown>;
    (subscriber as unknown as { subscribe: (...channels: string[]) => Promise<unknown> }).subscribe = async (
      ...channels
    ) => {
      await sleep(300);
      return subscribe(...channels);
    };
    const hub = new StreamHub(replica, { heartbeatMs: 60_000, pageSize: 64 });
    const controller = new AbortController();
    try {
      await makeSession(writer, "s1");
      const seen: number[] = [];
      let caughtUp = false;
      const stream = (async () => {
        for await (const frame of hub.subscribe("s1", 0, [], controller.signal)) {
          if (frame.kind === "event") seen.push(frame.event.seq);
          else if (frame.kind === "caughtUp") caughtUp = true;
        }
      })();
      await waitFor(() => caughtUp);
      await writer.appendEvents("s1", [newEvent("user_message", "right after the first read")]);
      await waitFor(() => seen.length === 1, 3000);
      expect(seen).toEqual([1]);
      controller.abort();
      await stream;
    } finally {
      controller.abort();
      await Promise.all([replica.close(), writer.close()]);
    }
  });

  it("never shows a scope an index entry left behind for a session that now belongs to another tenancy", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      await makeSession(store, "s", "y", "bob");
      await store.appendEvents("s", [newEvent("user_message", "bob's")]);
      // As a replica of an older release might leave it: x's index naming a seq of the session that now holds the id.
      await admin.zadd(`${prefix}:recent:a:${hex("x")}`, 1, `${hex("s")}!${"1".padStart(16, "0")}`);
      await admin.zadd(`${prefix}:recent:u:${hex("ann")}`, 1, `${hex("s")}!${"1".padStart(16, "0")}`);
      expect(await store.listRecentEvents(10, { appNames: ["x"] })).toEqual([]);
      expect(await store.listRecentEvents(10, { userId: "ann" })).toEqual([]);
      expect((await store.listRecentEvents(10, { appNames: ["y"] })).map((e) => e.content)).toEqual(["bob's"]);
    } finally {
      await store.close();
    }
  });

  it("keeps tenants apart whose names only differ in where a separator falls", async () => {
    const store = await openStore();
    try {
      await makeSession(store, "one", "a", "b:c");
      await makeSession(store, "two", "a:b", "c");
      await makeSession(store, "three", "a:b:c", "");
      const ids = async (appName?: string, userId?: string) =>
        (await store.listSessions({ limit: 10, appName, userId })).map((s) => s.sessionId);
      expect(await ids("a", "b:c")).toEqual(["one"]);
      expect(await ids("a:b", "c")).toEqual(["two"]);
      expect(await ids("a:b:c", "")).toEqual(["three"]);
      expect(await ids("a:b")).toEqual(["two"]);
      expect(await ids(undefined, "c")).toEqual(["two"]);
      expect(await ids("*")).toEqual([]);
      // Ids that look like ZRANGEBYLEX syntax or glob patterns are literal cursors too.
      for (const id of ["(", "[", "-", "+", "*", "a\nb", "\u00ff\u0000"]) await makeSession(store, id, "lex", "u");
      const all = await ids("lex");
      expect(all).toEqual([...all].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))));
      expect(all).toHaveLength(7);
      const afterParen = await store.listSessions({ limit: 10, appName: "lex", afterSessionId: "(" });
      expect(afterParen.map((s) => s.sessionId)).toEqual(all.slice(all.indexOf("(") + 1));
    } finally {
      await store.close();
    }
  });

  it("describes durability from the server's AOF settings", async () => {
    const store = await openStore();
    try {
      const d = await store.describeDurability();
      expect(d.settings).toMatchObject({ appendonly: expect.any(String), appendfsync: expect.any(String) });
      if (d.settings.appendonly === "yes" && d.settings.appendfsync === "everysec") {
        expect(d.summary).toContain("fsync every second");
      }
    } finally {
      await store.close();
    }
    expect(durabilitySummary({ appendonly: "yes", appendfsync: "always" })).toContain("power failure");
    expect(durabilitySummary({ appendonly: "no", appendfsync: "everysec", save: "3600 1" })).toMatch(
      /^no AOF: only RDB snapshots/,
    );
    expect(durabilitySummary({ appendonly: "no", appendfsync: "everysec", save: "" })).toMatch(
      /lost when Redis restarts/,
    );
  });

  it("with MEMORY_REDIS_WAIT_REPLICAS=1 and no replica, a write answers UNAVAILABLE saying 0 of 1 acknowledged; its retry is idempotent", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    prefixes.push(prefix);
    // WAIT gets half the command timeout: 300 ms here.
    const waiting = await RedisStore.open({
      url,
      keyPrefix: prefix,
      limits: DEFAULT_LIMITS,
      commandTimeoutMs: 600,
      waitReplicas: 1,
    });
    const plain = await openStore(DEFAULT_LIMITS, prefix);
    try {
      const created = await rejection(makeSession(waiting, "w1"));
      expect(created.code).toBe("UNAVAILABLE");
      expect(created.message).toMatch(/reached 0 of the 1 replicas MEMORY_REDIS_WAIT_REPLICAS asks for/);
      // The write happened on the master all the same: the error says it may have.
      expect(await plain.getSession("w1")).toBeDefined();
      const event = newEvent("user_message", "x", { eventId: "e1" });
      expect((await rejection(waiting.appendEvents("w1", [event]))).code).toBe("UNAVAILABLE");
      // Reads do not wait.
      expect((await waiting.readEvents("w1", { limit: 10 })).events.map((e) => e.eventId)).toEqual(["e1"]);
      const retried = await plain.appendEvents("w1", [event]);
      expect(retried).toMatchObject({ replayed: true, events: [{ seq: 1 }] });
      // Memory writes and deletions wait the same way.
      const written = await rejection(
        waiting.memories.writeMemories([memory({ appName: "wait-app", memoryId: "m1", text: "waits for a replica" })]),
      );
      expect(written.code).toBe("UNAVAILABLE");
      expect(written.message).toMatch(/reached 0 of the 1 replicas/);
      expect(await plain.memories.getMemory("wait-app", "m1")).toBeDefined();
      expect((await rejection(waiting.memories.deleteMemories("wait-app", ["m1"]))).code).toBe("UNAVAILABLE");
      expect(await plain.memories.getMemory("wait-app", "m1")).toBeUndefined();
    } finally {
      await waiting.close();
      await plain.close();
    }
  });

  it("fails UNAVAILABLE quickly when Redis is unreachable, and recovers when it is back", async () => {
    // Nothing listens on a freshly freed port.
    const closedPort = await freePort();
    const started = Date.now();
    const err = await rejection(
      RedisStore.open({ url: `redis://127.0.0.1:${closedPort}`, keyPrefix: "never", limits: DEFAULT_LIMITS }),
    );
    expect(err.code).toBe("UNAVAILABLE");
    expect(err.message).toContain(`127.0.0.1:${closedPort}`);
    expect(Date.now() - started).toBeLessThan(5000);

    // A dedicated server, so stopping it disturbs no other test file.
    const server = await startRedisServer({ appendonly: true });
    const store = await RedisStore.open({ url: server.url, keyPrefix: "outage", limits: DEFAULT_LIMITS });
    try {
      await makeSession(store, "s1");
      await store.appendEvents("s1", [newEvent("user_message", "kept")]);
      await sleep(1100); // let appendfsync everysec flush
      await server.stop();
      for (const call of [
        () => store.appendEvents("s1", [newEvent("user_message", "lost")]),
        () => store.readEvents("s1", { limit: 10 }),
        () => store.getSession("s1"),
        () => store.stats(),
        () => store.ping(),
      ]) {
        const t0 = Date.now();
        expect((await rejection(call())).code).toBe("UNAVAILABLE");
        expect(Date.now() - t0).toBeLessThan(5000);
      }
      await server.restart();
      const deadline = Date.now() + 10_000;
      for (;;) {
        try {
          await store.ping();
          break;
        } catch (e) {
          if (Date.now() > deadline) throw e;
          await sleep(100);
        }
      }
      expect((await store.readEvents("s1", { limit: 10 })).events.map((e) => e.content)).toEqual(["kept"]);
    } finally {
      await store.close();
      await server.destroy();
    }
  });
});

describe.each([
  ["without the Redis Query Engine (Redis 7.0)", () => ({ open: openStore, server: url })],
  ["on the Redis Query Engine", () => ({ open: openSearchStore, server: searchUrl })],
])("RedisStore long-term memories %s", (_server, on) => {
  // This server's: the tests below run on each.
  let admin: Redis;
  beforeAll(() => {
    if (!searchUrl)
      throw new Error(
        "MEMORY_TEST_REDIS_SEARCH_URL is not set: the global setup did not start Redis with the Query Engine",
      );
    admin = new Redis(on().server);
  });
  afterAll(() => admin.quit());
  const openStore = (limits?: StoreLimits, prefix?: string) => on().open(limits, prefix);
  const keysOf = (pattern: string) => keysOfOn(pattern, admin);
  const appKeys = (prefix: string, app = "app") => `${prefix}:mem:${hex(app)}:*`;
  const describeChange = (c: MemoryChange) =>
    c.kind === "deleted"
      ? `deleted ${c.memories.map((m) => m.memoryId).sort()}`
      : c.kind === "remote"
        ? "remote"
        : `${c.kind} ${c.memory.memoryId}`;

  it("two replicas writing one supersession key at once leave exactly one memory of it valid, and delete none", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const [one, two] = await Promise.all([openStore(DEFAULT_LIMITS, prefix), openStore(DEFAULT_LIMITS, prefix)]);
    try {
      const perReplica = 25;
      // Every write starts now: each one must close whichever memory of the key holds when it lands.
      const writer = (store: RedisStore, name: string) =>
        Promise.all(
          Array.from({ length: perReplica }, (_, i) =>
            store.memories.writeMemories([
              memory({
                memoryId: `${name}-${i}`,
                userId: "u",
                key: "drink",
                text: `drink ${name} ${i}`,
                validFrom: 5000,
              }),
            ]),
          ),
        );
      await Promise.all([writer(one, "one"), writer(two, "two")]);
      const all = await one.memories.listMemories({ scope: { appName: "app", userId: "u", match: "exact" } }, 1000);
      expect(all).toHaveLength(2 * perReplica);
      const holding = all.filter((m) => m.invalidAt === undefined);
      expect(holding).toHaveLength(1);
      // Every other one was closed by a memory of the key, none deleted.
      const ids = new Set(all.map((m) => m.memoryId));
      for (const m of all) if (m !== holding[0]) expect(ids.has(m.supersededBy!)).toBe(true);
      expect(
        await two.memories.listMemories({ scope: { appName: "app", userId: "u", match: "exact" }, asOf: 5000 }, 1000),
      ).toEqual(holding);
    } finally {
      await Promise.all([one.close(), two.close()]);
    }
  });

  it("a watch on one replica sees the writes, supersessions and deletions made through another, and its own once", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const [writer, watcher] = await Promise.all([openStore(DEFAULT_LIMITS, prefix), openStore(DEFAULT_LIMITS, prefix)]);
    try {
      const changes: MemoryChange[] = [];
      watcher.memories.subscribeMemories("app", (c) => changes.push(c));
      await writer.memories.writeMemories([memory({ memoryId: "a", key: "k", text: "one", validFrom: 1000 })]);
      await writer.memories.writeMemories([memory({ memoryId: "b", key: "k", text: "two", validFrom: 2000 })]);
      await writer.memories.deleteMemories("app", ["a"]);
      await watcher.memories.writeMemories([memory({ memoryId: "c", text: "three" })]);
      await waitFor(() => changes.length >= 5);
      // Its own change again from the channel would come within this pause.
      await sleep(200);
      expect(changes.map(describeChange)).toEqual(["written a", "superseded a", "written b", "deleted a", "written c"]);
      expect(changes[1]).toMatchObject({ memory: { memoryId: "a", invalidAt: 2000, supersededBy: "b", text: "one" } });
    } finally {
      await Promise.all([writer.close(), watcher.close()]);
    }
  });

  it("a watch hears the other replica again after its subscription connection was dropped", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const [writer, watcher] = await Promise.all([openStore(DEFAULT_LIMITS, prefix), openStore(DEFAULT_LIMITS, prefix)]);
    try {
      const seen: string[] = [];
      watcher.memories.subscribeMemories("app", (c) => c.kind === "written" && seen.push(c.memory.memoryId));
      // CLIENT KILL has no name filter: find the watcher's memories connection (src/store/memories/redis.ts names it).
      const subscribers = async () =>
        ((await admin.call("CLIENT", "LIST", "TYPE", "pubsub")) as string)
          .split("\n")
          .filter((line) => line.includes(` name=${prefix}:memories `))
          .map((line) => /(?:^|\s)id=(\d+)/.exec(line)![1]);
      const before = await subscribers();
      expect(before).toHaveLength(2);
      for (const id of before) await admin.call("CLIENT", "KILL", "ID", id);
      // Bounded: until both replicas subscribed again on new connections.
      for (let i = 0; i < 100; i++) {
        const now = await subscribers();
        if (now.length === 2 && now.every((id) => !before.includes(id))) break;
        await sleep(50);
      }
      await writer.memories.writeMemories([memory({ memoryId: "after", text: "written after the drop" })]);
      await waitFor(() => seen.length >= 1);
      expect(seen).toEqual(["after"]);
    } finally {
      await Promise.all([writer.close(), watcher.close()]);
    }
  });

  it("agrees with the local driver on random writes, retries and deletions of a few keys (supersession read from two index entries)", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const redis = await openStore(DEFAULT_LIMITS, prefix);
    const spec = fc.record({
      userId: fc.constantFrom(undefined, "u1", "u2"),
      key: fc.constantFrom("", "k1", "k2"),
      // Few distinct starts: equal ones (closed where they began) and back-dated writes are common.
      validFrom: fc.integer({ min: 0, max: 6 }).map((i) => 1000 + 10 * i),
      span: fc.option(fc.integer({ min: 1, max: 30 }), { nil: undefined }),
    });
    const op = fc.oneof(
      { weight: 4, arbitrary: fc.record({ write: fc.array(spec, { minLength: 1, maxLength: 3 }) }) },
      { weight: 1, arbitrary: fc.record({ retry: fc.nat() }) },
      { weight: 1, arbitrary: fc.record({ remove: fc.nat() }) },
    );
    let run = 0;
    try {
      await fc.assert(
        // Ids that sort as written, or against it: ties between index entries are broken by id.
        fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 30 }), fc.boolean(), async (ops, descending) => {
          const app = `model-${++run}`;
          const local = new LocalStore(DEFAULT_LIMITS);
          const written: MemoryRecord[] = [];
          // supersededBy compared by what it points at: equal starts may name different (equally valid) peers.
          const startOf = new Map<string, number>();
          const norm = (ms: readonly MemoryRecord[]) =>
            ms
              .map((m) => ({
                id: m.memoryId,
                from: m.validFrom,
                until: m.invalidAt,
                by: m.supersededBy === undefined ? undefined : startOf.get(m.supersededBy),
              }))
              .sort((a, b) => (a.id < b.id ? -1 : 1));
          try {
            for (const step of ops) {
              if ("write" in step) {
                const batch = step.write.map((w) => {
                  const id = `m${String(descending ? 999 - written.length : written.length).padStart(3, "0")}`;
                  const m = memory(
                    {
                      memoryId: id,
                      appName: app,
                      userId: w.userId,
                      key: w.key,
                      text: id,
                      validFrom: w.validFrom,
                      invalidAt: w.span && w.validFrom + w.span,
                    },
                    5000 + written.length,
                  );
                  written.push(m);
                  startOf.set(id, m.validFrom);
                  return m;
                });
                const [want, got] = await Promise.all([
                  local.memories.writeMemories(batch),
                  redis.memories.writeMemories(batch),
                ]);
                expect(norm(got.memories)).toEqual(norm(want.memories));
                expect(norm(got.superseded)).toEqual(norm(want.superseded));
              } else if ("retry" in step && written.length > 0) {
                const again = [written[step.retry % written.length]];
                expect(norm((await redis.memories.writeMemories(again)).memories)).toEqual(
                  norm((await local.memories.writeMemories(again)).memories),
                );
              } else if ("remove" in step && written.length > 0) {
                const ids = [written[step.remove % written.length].memoryId];
                expect(norm(await redis.memories.deleteMemories(app, ids))).toEqual(
                  norm(await local.memories.deleteMemories(app, ids)),
                );
              }
            }
            const everything = { scope: { appName: app, match: "within" as const } };
            expect(norm(await redis.memories.listMemories(everything, 1000))).toEqual(
              norm(await local.memories.listMemories(everything, 1000)),
            );
          } finally {
            await local.close();
          }
        }),
        { numRuns: 60, seed: 18 },
      );
    } finally {
      await redis.close();
    }
  });

  it("returns each memory with its embedding from every call, though scans read records without them", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const [store, replica] = await Promise.all([openStore(DEFAULT_LIMITS, prefix), openStore(DEFAULT_LIMITS, prefix)]);
    try {
      const changes: MemoryChange[] = [];
      replica.memories.subscribeMemories("app", (c) => changes.push(c));
      const embedding = [0.1, -0.2, 1 / 3];
      // Created a second apart, so the listing's newest-first order does not fall to the ids.
      const old = memory(
        { memoryId: "old", key: "k", text: "tea at noon", validFrom: 1000, embedding },
        Date.now() - 1000,
      );
      await store.memories.writeMemories([old]);
      const { superseded } = await store.memories.writeMemories([
        memory({ memoryId: "new", key: "k", text: "coffee at noon", validFrom: 2000, embedding: [1, 0, 0] }),
      ]);
      expect(superseded).toEqual([{ ...old, invalidAt: 2000, supersededBy: "new" }]);
      const everything = { scope: { appName: "app", match: "within" as const } };
      expect((await store.memories.listMemories(everything, 10)).map((m) => m.embedding)).toEqual([
        [1, 0, 0],
        embedding,
      ]);
      expect((await store.memories.searchMemories(everything, "tea", 10))[0].memory).toEqual(superseded[0]);
      expect((await store.memories.nearestMemories(everything, [0.1, -0.2, 0.3], 1))[0].memory).toEqual(superseded[0]);
      expect(await store.memories.deleteMemories("app", ["old"])).toEqual(superseded);
      await waitFor(() => changes.length >= 4);
      expect(
        changes.map((c) =>
          c.kind === "deleted" ? c.memories[0].embedding : c.kind === "remote" ? undefined : c.memory.embedding,
        ),
      ).toEqual([embedding, embedding, [1, 0, 0], embedding]);
      expect(await keysOf(`${prefix}:mem:${hex("app")}:vec`)).toHaveLength(1);
      expect(await admin.hlen(`${prefix}:mem:${hex("app")}:vec`)).toBe(1);
    } finally {
      await Promise.all([store.close(), replica.close()]);
    }
  });

  it("an erasure resumed after a crash removes the user's memories too", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      await store.memories.writeMemories([
        memory({ memoryId: "gone-1", userId: "gone", text: "one" }),
        memory({ memoryId: "gone-2", userId: "gone", agentId: "x", key: "k", text: "two" }),
        memory({ memoryId: "stays", userId: "stays", text: "three" }),
      ]);
      // A replica died right after recording the erasure.
      await admin.hset(`${prefix}:erasures`, `${hex("app")}:${hex("gone")}`, "token-of-a-dead-replica");
      await store.resumeErasures();
      expect(await store.memories.getMemory("app", "gone-1")).toBeUndefined();
      expect(await store.memories.getMemory("app", "gone-2")).toBeUndefined();
      expect(await store.memories.getMemory("app", "stays")).toBeDefined();
    } finally {
      await store.close();
    }
  });

  it("forgetting every memory of an app leaves no record and no index entry behind, only the app's embedding dimension and change log", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      await store.memories.writeMemories([
        memory({ memoryId: "a", userId: "u", key: "k", text: "a", validFrom: 1000, embedding: [1, 0] }),
        memory({ memoryId: "b", userId: "u", key: "k", text: "b", validFrom: 2000 }),
        memory({ memoryId: "c", agentId: "x", fact: { subject: "s", predicate: "p", object: "o" }, text: "c" }),
        memory({ memoryId: "d", text: "d" }),
      ]);
      await store.memories.deleteMemories("app", ["d"]);
      await store.memories.deleteMemoriesInScope({ appName: "app", match: "within" });
      // The change log stays: a watcher resuming from before the forgetting must hear of it.
      expect((await keysOf(appKeys(prefix))).sort()).toEqual([
        `${prefix}:mem:${hex("app")}:chg`,
        `${prefix}:mem:${hex("app")}:meta`,
      ]);
      expect(await keysOf(`${prefix}:memdoc:*`)).toEqual([]);
    } finally {
      await store.close();
    }
  });

  it(`the change log holds the newest ${MEMORY_CHANGES_RETAINED} changes of an app, no more`, async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      const all = Array.from({ length: MEMORY_CHANGES_RETAINED + 5 }, (_, i) =>
        memory({ memoryId: `m${i}`, text: "x" }),
      );
      for (let i = 0; i < all.length; i += 1000) await store.memories.writeMemories(all.slice(i, i + 1000));
      await store.memories.deleteMemories("app", ["m0"]);
      const log = `${prefix}:mem:${hex("app")}:chg`;
      expect(await admin.zcard(log)).toBe(MEMORY_CHANGES_RETAINED);
      expect(await admin.zrange(log, 0, 0)).toEqual([`7:w:${hex("m6")}`]);
    } finally {
      await store.close();
    }
  }, 60_000);

  it("leaves the embeddings out of what it returns when the filter omits them (omitEmbeddings), and only then", async () => {
    const store = await openStore();
    try {
      await store.memories.writeMemories([
        memory({ memoryId: "v", userId: "u", text: "vector memory", embedding: [0.5, 0.25], pinned: true }),
      ]);
      const scope = { appName: "app", userId: "u", match: "visible" as const };
      for (const omitEmbeddings of [false, true]) {
        const expected = omitEmbeddings ? undefined : [0.5, 0.25];
        expect(
          (await store.memories.searchMemories({ scope, omitEmbeddings }, "vector", 5))[0].memory.embedding,
        ).toEqual(expected);
        expect((await store.memories.listMemories({ scope, omitEmbeddings }, 5))[0].embedding).toEqual(expected);
        expect((await store.memories.listMemories({ scope, omitEmbeddings, pinned: true }, 5))[0].embedding).toEqual(
          expected,
        );
      }
    } finally {
      await store.close();
    }
  });

  it('a pinned listing passes over records without "pinned":true undecoded, and still lists exactly the pinned memories: one whose metadata or text says pinned is not', async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      await store.memories.writeMemories([
        memory({ memoryId: "core", userId: "u", text: 'is "pinned":true about itself', pinned: true }, 1000),
        memory({ memoryId: "meta", userId: "u", text: "plain", metadata: { pinned: true } }, 1001),
        memory({ memoryId: "text", userId: "u", text: '"pinned":true' }, 1002),
        memory({ memoryId: "shared", text: "for everyone", pinned: true }, 1003),
      ]);
      const pinned = { scope: { appName: "app", userId: "u", match: "visible" as const }, pinned: true };
      expect((await store.memories.listMemories(pinned, 10)).map((m) => m.memoryId)).toEqual(["shared", "core"]);
      expect((await store.memories.listMemories({ ...pinned, pinned: false }, 10)).map((m) => m.memoryId)).toEqual([
        "text",
        "meta",
      ]);
    } finally {
      await store.close();
    }
  });
});

describe("RedisStore long-term memories on the Redis Query Engine: documents", () => {
  let admin: Redis;
  beforeAll(() => {
    admin = new Redis(searchUrl);
  });
  afterAll(() => admin.quit());
  const ftSearches = async () =>
    Number(/cmdstat_FT\.SEARCH:calls=(\d+)/i.exec(await admin.info("commandstats"))?.[1] ?? 0);
  /** True when the app's documents are complete (docs-5.lua): its build finished and its chain matches its stamp. */
  const complete = async (prefix: string) => {
    const meta = `${prefix}:mem:${hex("app")}:meta`;
    const [[seq, chain, ready, build], count] = [
      await admin.hmget(meta, "seq", "docchain", "docready", "docbuild"),
      await admin.zcard(`${prefix}:mem:${hex("app")}:order`),
    ];
    return ready !== null && ready === build && chain === `${seq ?? "0"}:${count}`;
  };

  it("memories stored before documents, and a change an older release made, are ranked in process until a build in the background gives them documents; then the index serves them", async () => {
    const prefix = `t${process.pid}_${++counter}`;
    const store = await openSearchStore(DEFAULT_LIMITS, prefix);
    const base = Array.from({ length: 1_200 }, (_, i) =>
      memory(
        {
          memoryId: `m${i}`,
          userId: i % 2 ? "u" : undefined,
          text: `note ${i} about ${i % 3 ? "tea" : "coffee"}`,
          embedding: [1, i / 1200],
          pinned: i % 100 === 0,
        },
        10_000 + i,
      ),
    );
    for (let i = 0; i < base.length; i += 500) await store.memories.writeMemories(base.slice(i, i + 500));
    await store.close();
    const scope = { appName: "app", userId: "u", match: "visible" as const };
    const answers = async (s: RedisStore) => [
      (await s.memories.searchMemories({ scope }, "coffee note", 7)).map((r) => [r.memory.memoryId, r.score]),
      (await s.memories.nearestMemories!({ scope }, [1, 0.5], 3)).map((r) => r.memory.memoryId),
      (await s.memories.listMemories({ scope, pinned: true }, 100)).map((m) => m.memoryId),
    ];
    const reopened = await openSearchStore(DEFAULT_LIMITS, prefix);
    const indexed = await answers(reopened);
    await reopened.close();
    // As an older release left them: no documents, no chain; one document of a memory it deleted behind; and one more change of its own.
    const meta = `${prefix}:mem:${hex("app")}:meta`;
    const documents = await keysOf(`${prefix}:memdoc:*`, admin);
    expect(documents).toHaveLength(1_200);
    await admin.del(...documents);
    await admin.hdel(meta, "docchain", "docready", "docbuild", "docat");
    await admin.hset(
      `${prefix}:memdoc:${hex("app")}:${hex("gone")}`,
      "app",
      `h${hex("app")}`,
      "user",
      "n",
      "agent",
      "n",
      "session",
      "n",
      "words",
      "coffee",
      "len",
      "1",
      "dim",
      "0",
    );
    await admin.hincrby(meta, "seq", 1);
    const upgraded = await openSearchStore(DEFAULT_LIMITS, prefix);
    try {
      // Until the build completes, answers come from the whole scope in process, and are the same.
      expect(await answers(upgraded)).toEqual(indexed);
      for (
        const deadline = Date.now() + 30_000;
        !(await complete(prefix)) || !(await scanned(admin, `${prefix}:memidx:v2`));
        await sleep(50)
      ) {
        if (Date.now() > deadline) throw new Error("the documents were not built in time");
      }
      expect(await keysOf(`${prefix}:memdoc:*`, admin)).toHaveLength(1_200);
      const before = await ftSearches();
      expect(await answers(upgraded)).toEqual(indexed);
      expect(await ftSearches()).toBeGreaterThan(before);
      // An older release's write (a change without documents) breaks the chain: in process again, until the next build.
      await admin.hincrby(meta, "seq", 1);
      expect(await complete(prefix)).toBe(false);
      const during = await ftSearches();
      expect(await answers(upgraded)).toEqual(indexed);
      expect(await ftSearches()).toBe(during);
      expect(await upgraded.memories.buildDocuments("app")).toBe(true);
      expect(await complete(prefix)).toBe(true);
    } finally {
      await upgraded.close();
    }
  }, 60_000);
});
