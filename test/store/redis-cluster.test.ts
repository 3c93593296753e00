/**
 * The Redis driver on a real Redis Cluster (3 masters, 3 replicas:
 * test/support/redis-cluster.ts), started once for this file: the shared
 * conformance suites (sessions, events, state), then what only a cluster
 * has: one slot per script, listings merged across buckets, the outbox of
 * shared state, sharded notices between stores. Every store gets a key
 * prefix of its own.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisStore } from "../../src/store/redis.js";
import { CLUSTER_BUCKETS, RedisKeys } from "../../src/store/redis/keys.js";
import {
  appendScript,
  applySharedScript,
  createScript,
  deleteScript,
  erasedScript,
  readScript,
  stateCheckScript,
  updateScript,
  type Script,
  type ScriptContext,
} from "../../src/store/redis/scripts.js";
import { loadScripts } from "../../src/store/redis/script-runner.js";
import type { SessionNotice, StoreLimits } from "../../src/store/types.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { describeStoreConformance, makeSession, newEvent, rejection, waitFor } from "./conformance.js";

const DEFAULT_LIMITS: StoreLimits = { maxSessions: 1000, maxSessionEvents: 500 };
let cluster: RedisCluster;
let admin: Cluster;
let counter = 0;

/** A store on the test cluster under a prefix of its own. */
async function openStore(limits: StoreLimits = DEFAULT_LIMITS, prefix = `c${process.pid}_${++counter}`) {
  return RedisStore.open({ url: cluster.url, keyPrefix: prefix, limits });
}

beforeAll(async () => {
  cluster = await startRedisCluster();
  admin = new Cluster([{ host: "127.0.0.1", port: cluster.nodes[0].port }]);
}, 120_000);
afterAll(async () => {
  await admin?.quit();
  await cluster?.stop();
});

describeStoreConformance("redis cluster", (limits) => openStore(limits), {
  persistent: true,
  shared: true,
  retains: true,
});

describe("RedisStore on a cluster", () => {
  it("puts every key of every script call in one slot, and a session's keys in its bucket's slot", async () => {
    const keys = new RedisKeys("p", CLUSTER_BUCKETS);
    const context: ScriptContext = { keys, limits: DEFAULT_LIMITS };
    const tenancy = { appName: "app ✓", userId: "user {x}" };
    const delta = { "app:a": 1, "user:u": 2, s: 3 };
    const calls: Array<[Script<never, unknown>, unknown]> = [];
    const sessionIds = ["s1", "another session", "{b3}", "ü", ...Array.from({ length: 40 }, (_, i) => `s-${i}`)];
    for (const sessionId of sessionIds) {
      const session = { sessionId, ...tenancy, metadata: {}, now: 1 };
      calls.push(
        [createScript, { session, incarnation: "i", mode: "create" }],
        [
          appendScript,
          {
            sessionId,
            tenancy,
            events: [{ ...newEvent("user_message", 1), stateDelta: delta }],
            now: 1,
            ingestBase: 5,
          },
        ],
        [updateScript, { sessionId, tenancy, update: { now: 1, stateDelta: delta } }],
        [deleteScript, { sessionId, tenancy, keepAtLeast: 3 }],
        [readScript, { sessionId, direction: "asc", limit: 1, types: [] }],
      );
    }
    calls.push(
      [stateCheckScript, { tenancy, changes: [["u", "k", "1"]] }],
      [applySharedScript, { tenancy, changes: [["a", "k", "1"]], field: "f", now: 1 }],
      [erasedScript, { tenancy, token: "t" }],
    );
    const counts = loadScripts();
    const buckets = new Set<string>();
    for (const [script, input] of calls) {
      const keyCount = counts.get(script.name)!.numberOfKeys!;
      const callKeys = script
        .args(context, input as never)
        .slice(0, keyCount)
        .map(String);
      const slots = new Set(await Promise.all(callKeys.map((key) => cluster.slotOf(key))));
      expect(slots.size, `${script.name}: ${callKeys.join(" ")}`).toBe(1);
    }
    for (const sessionId of sessionIds) {
      const bucket = keys.bucketOf(sessionId);
      buckets.add(bucket);
      // The notice channel of the session's bucket is in the same slot (SPUBLISH from the script).
      expect(await cluster.slotOf(keys.channel(bucket))).toBe(await cluster.slotOf(keys.session(sessionId)));
    }
    expect(buckets.size).toBeGreaterThan(10);
  });

  it("keeps a session's bucket stable: a fixed hash of its id, recorded bucket count", async () => {
    const keys = new RedisKeys("p", CLUSTER_BUCKETS);
    // Pinned: changing the hash or the count would orphan every session stored on a cluster.
    expect(["s1", "s2", "", "ü"].map((id) => keys.bucketOf(id))).toEqual(["{b39}:", "{b12}:", "{b46}:", "{b61}:"]);
    expect(keys.session("s1")).toBe(`p:{b39}:s:${Buffer.from("s1").toString("hex")}`);
    const prefix = `c${process.pid}_${++counter}`;
    await admin.set(`${prefix}:buckets`, 8);
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      await makeSession(store, "s1");
      // The recorded count wins over CLUSTER_BUCKETS: s1 is in bucket (hash mod 8).
      expect(await admin.exists(new RedisKeys(prefix, 8).session("s1"))).toBe(1);
    } finally {
      await store.close();
    }
  });

  it("pages sessions across buckets by id, each session once, in byte order, with the last id as the cursor", async () => {
    const store = await openStore();
    try {
      const ids = Array.from({ length: 37 }, (_, i) => `p${String(i).padStart(2, "0")}`);
      for (const id of ids) await makeSession(store, id, "app", id.endsWith("3") ? "u3" : "u");
      const seen: string[] = [];
      let after: string | undefined;
      for (let page = 0; page < 20; page++) {
        const sessions = await store.listSessions({ limit: 5, afterSessionId: after });
        seen.push(...sessions.map((s) => s.sessionId));
        if (sessions.length < 5) break;
        after = sessions[sessions.length - 1].sessionId;
      }
      expect(seen).toEqual(ids);
      expect((await store.listSessions({ limit: 100, userId: "u3" })).map((s) => s.sessionId)).toEqual(
        ids.filter((id) => id.endsWith("3")),
      );
      expect(await store.stats()).toEqual({ totalSessions: 37, totalEvents: 0 });
    } finally {
      await store.close();
    }
  });

  it("merges the recent events of every bucket newest first", async () => {
    const store = await openStore();
    try {
      const ids = ["r1", "r2", "r3", "r4", "r5", "r6"];
      for (const id of ids) await makeSession(store, id);
      for (let round = 0; round < 3; round++)
        for (const id of ids) await store.appendEvents(id, [newEvent("user_message", `${id}-${round}`)]);
      const recent = await store.listRecentEvents(10);
      const expected = [1, 2].flatMap((round) => ids.map((id) => `${id}-${round}`)).slice(-10);
      expect(recent.map((e) => e.content)).toEqual(expected);
    } finally {
      await store.close();
    }
  });

  it("pages sessions and appends events without a loss or a repeat while a bucket's slot migrates to another master", async () => {
    const prefix = `c${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      const keys = new RedisKeys(prefix, CLUSTER_BUCKETS);
      const ids = Array.from({ length: 60 }, (_, i) => `m${String(i).padStart(2, "0")}`);
      for (const id of ids) await makeSession(store, id);
      // The bucket holding most of them: its slot moves, key by key, while the store works.
      const byBucket = new Map<string, string[]>();
      for (const id of ids) byBucket.set(keys.bucketOf(id), [...(byBucket.get(keys.bucketOf(id)) ?? []), id]);
      const [, moving] = [...byBucket].sort((a, b) => b[1].length - a[1].length)[0];
      const slot = await cluster.slotOf(keys.session(moving[0]));
      const from = await cluster.masterOf(slot);
      const masters = await Promise.all([0, 8000, 16383].map((other) => cluster.masterOf(other)));
      const to = masters.find((master) => master.id !== from.id)!;
      for (const id of moving) await store.appendEvents(id, [newEvent("user_message", 0, { eventId: `${id}-0` })]);

      /** An append as a client makes it: retried with the same event id while the slot answers TRYAGAIN (UNAVAILABLE); bounded. */
      const appendUntilDone = async (id: string, n: number) => {
        for (let attempt = 0; attempt < 60; attempt++) {
          try {
            return await store.appendEvents(id, [newEvent("user_message", n, { eventId: `${id}-${n}` })]);
          } catch (err) {
            if ((err as { code?: string }).code !== "UNAVAILABLE") throw err;
            await sleep(100);
          }
        }
        throw new Error(`append ${id}-${n} still refused after 60 tries`);
      };
      const seen: string[] = [];
      let after: string | undefined;
      let done = false;
      const appends: Array<Promise<unknown>> = [];
      let round = 0;
      await cluster.migrateSlots([slot], to, {
        keysPerBatch: 3,
        betweenBatches: async () => {
          round++;
          appends.push(appendUntilDone(moving[round % moving.length], round));
          if (done) return;
          const page = await store.listSessions({ limit: 4, afterSessionId: after });
          seen.push(...page.map((s) => s.sessionId));
          if (page.length < 4) done = true;
          else after = page[page.length - 1].sessionId;
        },
      });
      expect(await cluster.masterOf(slot)).toMatchObject({ id: to.id });
      expect(round).toBeGreaterThan(3);
      await Promise.all(appends);
      for (let page = 0; page < 30 && !done; page++) {
        const rest = await store.listSessions({ limit: 4, afterSessionId: after });
        seen.push(...rest.map((s) => s.sessionId));
        if (rest.length < 4) done = true;
        else after = rest[rest.length - 1].sessionId;
      }
      expect(seen).toEqual(ids);
      // Every append once, at consecutive seqs.
      for (const id of moving) {
        const { events } = await store.readEvents(id, { limit: 100 });
        expect(events.map((e) => e.seq)).toEqual(events.map((_, i) => i + 1));
        expect(new Set(events.map((e) => e.eventId)).size).toBe(events.length);
      }
      const total = (
        await Promise.all(moving.map(async (id) => (await store.readEvents(id, { limit: 100 })).events.length))
      ).reduce((a, b) => a + b, 0);
      expect(total).toBe(moving.length + round);
    } finally {
      await store.close();
    }
  });

  it("applies user and app state in the app's slot once, and re-drives an outbox entry a replica left behind", async () => {
    const prefix = `c${process.pid}_${++counter}`;
    const store = await openStore(DEFAULT_LIMITS, prefix);
    try {
      await makeSession(store, "o1", "app", "u");
      await store.appendEvents("o1", [
        { ...newEvent("user_message", 1), stateDelta: { "user:lang": "fr", "app:plan": "pro" } },
      ]);
      expect(await store.sharedState("app", "u")).toEqual({ app: { plan: "pro" }, user: { lang: "fr" } });
      // A replica that died between the two steps: its entry is still in the outbox, not applied.
      const keys = new RedisKeys(prefix, CLUSTER_BUCKETS);
      const outbox = keys.outbox(keys.bucketOf("o1"));
      const entry = JSON.stringify({ app: "app", user: "u", at: 1, changes: [["u", "lang", '"de"']] });
      await admin.hset(outbox, `${Buffer.from("o1").toString("hex")}!left!9`, entry);
      // (The store's own sweep may get there first on a slow box: either way it is applied once.)
      await store.applyLeftOutboxEntries();
      expect((await store.sharedState("app", "u")).user).toEqual({ lang: "de" });
      expect(await admin.hlen(outbox)).toBe(0);
      // Applied ids are remembered: the same entry again (two replicas sweeping at once) changes nothing.
      await store.appendEvents("o1", [{ ...newEvent("user_message", 2), stateDelta: { "user:lang": "it" } }]);
      await admin.hset(outbox, `${Buffer.from("o1").toString("hex")}!left!9`, entry);
      await store.applyLeftOutboxEntries();
      expect((await store.sharedState("app", "u")).user).toEqual({ lang: "it" });
      expect(await admin.hlen(outbox)).toBe(0);
      // DeleteUserData drops the user's entries still waiting: none brings the erased state back.
      await admin.hset(
        outbox,
        `${Buffer.from("o1").toString("hex")}!left!10`,
        JSON.stringify({ app: "app", user: "u", at: 1, changes: [["u", "lang", '"en"']] }),
      );
      await store.deleteUserData("app", "u");
      await store.applyLeftOutboxEntries();
      expect(await store.sharedState("app", "u")).toEqual({ app: { plan: "pro" }, user: {} });
    } finally {
      await store.close();
    }
  });

  it("WAITs for the replica of the session's master: 1 is acknowledged, 2 is UNAVAILABLE saying 1 of 2", async () => {
    const prefix = `c${process.pid}_${++counter}`;
    const one = await RedisStore.open({ url: cluster.url, keyPrefix: prefix, limits: DEFAULT_LIMITS, waitReplicas: 1 });
    const two = await RedisStore.open({
      url: cluster.url,
      keyPrefix: prefix,
      limits: DEFAULT_LIMITS,
      commandTimeoutMs: 1000,
      waitReplicas: 2,
    });
    try {
      for (const id of ["w1", "w2", "w3"]) {
        await makeSession(one, id);
        await one.appendEvents(id, [{ ...newEvent("user_message", id), stateDelta: { "user:seen": id } }]);
      }
      const refused = await rejection(two.appendEvents("w1", [newEvent("user_message", "more")]));
      expect(refused.code).toBe("UNAVAILABLE");
      expect(refused.message).toMatch(/reached 1 of the 2 replicas/);
      // The start-up line's durability comes from a master's own settings (the test cluster runs AOF).
      expect((await one.describeDurability()).settings).toMatchObject({ appendonly: "yes" });
    } finally {
      await one.close();
      await two.close();
    }
  });

  it("delivers an append made through one store to a listener of another over sharded pub/sub", async () => {
    const prefix = `c${process.pid}_${++counter}`;
    const writer = await openStore(DEFAULT_LIMITS, prefix);
    const reader = await openStore(DEFAULT_LIMITS, prefix);
    try {
      const ids = ["n1", "n2", "n3", "n4"];
      const heard: SessionNotice[] = [];
      for (const id of ids) {
        await makeSession(writer, id);
        reader.subscribe(id, (notice) => heard.push(notice));
      }
      for (const id of ids) await writer.appendEvents(id, [newEvent("user_message", id)]);
      await waitFor(() => ids.every((id) => heard.some((n) => n.sessionId === id && n.headSeq === 1)), 10_000);
      await writer.deleteSession("n1");
      await waitFor(() => heard.some((n) => n.sessionId === "n1" && n.deleted), 10_000);
    } finally {
      await writer.close();
      await reader.close();
    }
  });

  // Last in the file: it kills a master (its replica takes over; the cluster stays whole, one replica short).
  it("after kill -9 of a bucket's master, a listener hears appends again once the replica is promoted, and hears the head it missed", async () => {
    const prefix = `c${process.pid}_${++counter}`;
    const writer = await openStore(DEFAULT_LIMITS, prefix);
    const reader = await openStore(DEFAULT_LIMITS, prefix);
    try {
      const keys = new RedisKeys(prefix, CLUSTER_BUCKETS);
      await makeSession(writer, "k1");
      const heard: SessionNotice[] = [];
      reader.subscribe("k1", (notice) => heard.push(notice));
      await writer.appendEvents("k1", [newEvent("user_message", 1)]);
      await waitFor(() => heard.some((n) => n.headSeq === 1), 10_000);
      const killed = await cluster.killMaster(keys.session("k1"));
      await cluster.waitForFailover(killed, 30_000);
      // Appends resume on the promoted replica (bounded retries while clients learn the new master).
      for (let attempt = 0; ; attempt++) {
        try {
          await writer.appendEvents("k1", [newEvent("user_message", 2, { eventId: "after-failover" })]);
          break;
        } catch (err) {
          if (attempt >= 50 || (err as { code?: string }).code !== "UNAVAILABLE") throw err;
          await sleep(200);
        }
      }
      // The reader's sharded subscription moved to the new master: either the notice itself, or the head re-read after resubscribing.
      await waitFor(() => heard.some((n) => n.headSeq !== undefined && n.headSeq >= 2), 20_000);
      expect((await reader.readEvents("k1", { limit: 10 })).events.map((e) => e.seq)).toEqual([1, 2]);
    } finally {
      await writer.close();
      await reader.close();
    }
  }, 90_000);
});
