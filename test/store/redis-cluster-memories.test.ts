/**
 * Long-term memories, API keys and rate limits on a real Redis Cluster (3
 * masters, 3 replicas: test/support/redis-cluster.ts, one per file): the
 * memories conformance suite, the key layout of both deployments pinned
 * (one node: today's names; a cluster: every key of an app in the app's
 * slot), notices over sharded pub/sub between two replicas, and two
 * in-process servers sharing the cluster for WatchMemories and API keys.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Code } from "@connectrpc/connect";
import { Cluster, Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey } from "../../src/auth/api-keys.js";
import { openApiKeyStore } from "../../src/auth/index.js";
import { loadConfig } from "../../src/config.js";
import { RedisStore } from "../../src/store/redis.js";
import type { MemoryChange, StoreLimits } from "../../src/store/types.js";
import { codeOf, connectClient, grpcJsClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { FAY_WATCH_FRAMES, watchFaysScope } from "../support/memory-watch.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { rejection, waitFor } from "./conformance.js";
import { describeMemoriesConformance, memory } from "./memories-conformance.js";

const LIMITS: StoreLimits = { maxSessions: 1000, maxSessionEvents: 500 };
const hex = (s: string) => Buffer.from(s).toString("hex");
let counter = 0;
const freshPrefix = () => `cm${process.pid}_${++counter}`;

let cluster: RedisCluster;
/** A cluster client for the tests' own reads (CLUSTER KEYSLOT, SCAN per master). */
let admin: Cluster;

beforeAll(async () => {
  cluster = await startRedisCluster();
  admin = new Cluster(cluster.nodes.map((node) => ({ host: "127.0.0.1", port: node.port })));
}, 180_000);

afterAll(async () => {
  admin?.disconnect();
  await cluster?.stop();
});

/** A store (one replica) on the cluster, under `prefix`. */
const openOnCluster = (prefix = freshPrefix()) =>
  RedisStore.open({ url: cluster.url, keyPrefix: prefix, limits: LIMITS });

/** Every key of one node matching `pattern` (made of test-chosen characters only). */
async function scanAll(node: Redis, pattern: string): Promise<string[]> {
  const out: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await node.scan(cursor, "MATCH", pattern, "COUNT", 1000);
    out.push(...keys);
    cursor = next;
  } while (cursor !== "0");
  return out;
}

/** Every key under `prefix` on every master of the cluster. */
async function clusterKeys(prefix: string): Promise<string[]> {
  const out: string[] = [];
  for (const node of admin.nodes("master")) out.push(...(await scanAll(node, `${prefix}:*`)));
  return out.sort();
}

/** App names whose slots are served by `count` different masters (found by CLUSTER KEYSLOT). */
async function appsOnDistinctMasters(count: number): Promise<string[]> {
  const byMaster = new Map<number, string>();
  for (let i = 0; byMaster.size < count && i < 200; i++) {
    const app = `spread-${i}`;
    const master = await cluster.masterOf(`{${hex(app)}}`);
    if (!byMaster.has(master.index)) byMaster.set(master.index, app);
  }
  return [...byMaster.values()];
}

describeMemoriesConformance("redis cluster", () => openOnCluster());

describe("memories key layout", () => {
  const SUFFIXES = ["chg", "emb", "groups", "held", "ix", "meta", "order", "rec", "user", "val", "vec"];
  /** One memory of each kind of index entry: a user's, with a key (groups, held) and an embedding (emb, vec). */
  const everyKey = [memory({ memoryId: "m", userId: "u", key: "k", text: "t", embedding: [1, 0] })];

  it("on one node keeps today's names byte for byte, and publishes on the one channel <prefix>:memories", async () => {
    const prefix = freshPrefix();
    const url = process.env.MEMORY_TEST_REDIS_URL!;
    const store = await RedisStore.open({ url, keyPrefix: prefix, limits: LIMITS });
    const node = new Redis(url);
    try {
      const channels = await node.pubsub("CHANNELS", `${prefix}:*`);
      expect(channels).toContain(`${prefix}:memories`);
      await store.memories.writeMemories(everyKey);
      expect((await scanAll(node, `${prefix}:mem:*`)).sort()).toEqual(
        SUFFIXES.map((s) => `${prefix}:mem:${hex("app")}:${s}`),
      );
    } finally {
      await store.close();
      const keys = await scanAll(node, `${prefix}:*`);
      if (keys.length > 0) await node.del(...keys);
      await node.quit();
    }
  });

  it("on a cluster tags every key of an app with the app, so all of them share its slot, and apps spread over the masters", async () => {
    const prefix = freshPrefix();
    const store = await openOnCluster(prefix);
    try {
      const apps = await appsOnDistinctMasters(3);
      expect(apps).toHaveLength(3);
      for (const appName of apps) await store.memories.writeMemories(everyKey.map((m) => ({ ...m, appName })));
      const keys = (await clusterKeys(prefix)).filter((key) => key.startsWith(`${prefix}:mem:`));
      expect(keys).toEqual(apps.flatMap((app) => SUFFIXES.map((s) => `${prefix}:mem:{${hex(app)}}:${s}`)).sort());
      for (const app of apps) {
        const slots = new Set(
          await Promise.all(
            SUFFIXES.map(async (s) => Number(await admin.cluster("KEYSLOT", `${prefix}:mem:{${hex(app)}}:${s}`))),
          ),
        );
        expect(slots.size).toBe(1);
      }
    } finally {
      await store.close();
    }
  });
});

describe("memories on two replicas sharing the cluster", () => {
  const describeChange = (c: MemoryChange) =>
    c.kind === "deleted"
      ? `deleted ${c.memories.map((m) => m.memoryId)}`
      : c.kind === "remote"
        ? "remote"
        : `${c.kind} ${c.memory.memoryId}`;

  it("a watch on one replica hears the changes made through the other, over each app's sharded channel on its own master, and only its app's", async () => {
    const prefix = freshPrefix();
    const [writer, watcher] = await Promise.all([openOnCluster(prefix), openOnCluster(prefix)]);
    try {
      const apps = await appsOnDistinctMasters(3);
      const heard = new Map<string, string[]>(apps.map((app) => [app, []]));
      for (const app of apps) {
        watcher.memories.subscribeMemories(app, (c) => heard.get(app)!.push(describeChange(c)));
        await watcher.memories.listening!(app);
      }
      for (const appName of apps) {
        await writer.memories.writeMemories([
          memory({ appName, memoryId: "a", key: "k", text: "one", validFrom: 1000 }),
        ]);
        await writer.memories.writeMemories([
          memory({ appName, memoryId: "b", key: "k", text: "two", validFrom: 2000 }),
        ]);
        await writer.memories.deleteMemories(appName, ["a"]);
      }
      await waitFor(() => [...heard.values()].every((changes) => changes.length >= 4));
      for (const app of apps) expect(heard.get(app)).toEqual(["written a", "superseded a", "written b", "deleted a"]);
      // Each app's channel is in its slot: SPUBLISH reached the shard serving the app, and the watcher subscribed there.
      for (const app of apps) {
        const master = await cluster.masterOf(`{${hex(app)}}`);
        expect(await cluster.admin(master).call("PUBSUB", "SHARDCHANNELS", `${prefix}:memories:*`)).toEqual([
          `${prefix}:memories:{${hex(app)}}`,
        ]);
      }
    } finally {
      await Promise.all([writer.close(), watcher.close()]);
    }
  });

  it("listening() resolves only once the app's shard has acknowledged the subscription, so a watch reads its window after that", async () => {
    const prefix = freshPrefix();
    const store = await openOnCluster(prefix);
    const [appName] = await appsOnDistinctMasters(1);
    const master = await cluster.masterOf(`{${hex(appName)}}`);
    let listening = false;
    // A paused master answers nothing; paused well under cluster-node-timeout, so no failover starts.
    cluster.pause(master);
    try {
      store.memories.subscribeMemories(appName, () => {});
      void store.memories.listening!(appName).then(() => (listening = true));
      await sleep(300);
      expect(listening).toBe(false);
    } finally {
      cluster.resume(master);
    }
    try {
      await store.memories.listening!(appName);
      expect(await cluster.admin(master).call("PUBSUB", "SHARDCHANNELS", `${prefix}:memories:*`)).toEqual([
        `${prefix}:memories:{${hex(appName)}}`,
      ]);
    } finally {
      await store.close();
    }
  });

  it("a batch spanning apps on different masters is checked across all of them first: a refusal writes none of it", async () => {
    const prefix = freshPrefix();
    const store = await openOnCluster(prefix);
    try {
      const [first, second] = await appsOnDistinctMasters(2);
      await store.memories.writeMemories([memory({ appName: second, memoryId: "taken", text: "stored first" })]);
      const err = await rejection(
        store.memories.writeMemories([
          memory({ appName: first, memoryId: "new", text: "would be written" }),
          memory({ appName: second, memoryId: "taken", text: "other content" }),
        ]),
      );
      expect(err.code).toBe("ALREADY_EXISTS");
      expect(err.field).toBe("memories[1].memory_id");
      expect(await store.memories.getMemory(first, "new")).toBeUndefined();
      // Accepted, the batch answers in input order whichever app's script ran first.
      const { memories } = await store.memories.writeMemories([
        memory({ appName: second, memoryId: "two", text: "b" }),
        memory({ appName: first, memoryId: "one", text: "a" }),
        memory({ appName: second, memoryId: "three", text: "c" }),
      ]);
      expect(memories.map((m) => `${m.appName}/${m.memoryId}`)).toEqual([
        `${second}/two`,
        `${first}/one`,
        `${second}/three`,
      ]);
    } finally {
      await store.close();
    }
  });
});

describe("an app's slot moving to another master", () => {
  it("loses no memory, breaks no listing cursor and no change log, and refuses a write only with UNAVAILABLE while half-moved", async () => {
    const prefix = freshPrefix();
    const store = await openOnCluster(prefix);
    try {
      const appName = `moving-${prefix}`;
      const slot = await cluster.slotOf(`{${hex(appName)}}`);
      const from = await cluster.masterOf(slot);
      const to = cluster.nodes.find((node) => node.index !== from.index && node.index < 3 && node.running)!;
      // Created a millisecond apart, newest last, so the listing's order is known; every kind of key (a user's,
      // keyed, with an embedding), so all 11 of the app's keys move, one at a time.
      const before = Array.from({ length: 120 }, (_, i) =>
        memory(
          {
            appName,
            memoryId: `m${String(i).padStart(3, "0")}`,
            userId: i % 2 ? "u" : undefined,
            key: `k${i}`,
            text: `memory ${i}`,
            embedding: [1, i],
          },
          1_000_000 + i,
        ),
      );
      await store.memories.writeMemories(before);
      const everything = { scope: { appName, match: "within" as const } };
      const listed: string[] = [];
      const nextPage = async () => {
        const last = listed.length === 0 ? undefined : before.find((m) => m.memoryId === listed[listed.length - 1]);
        const page = await store.memories.listMemories(
          everything,
          10,
          last && { createdAt: last.createdAt, memoryId: last.memoryId },
        );
        listed.push(...page.map((m) => m.memoryId));
      };
      await nextPage();
      const during: string[] = [];
      const refusals: string[] = [];
      /** What a call answered while the slot was half-moved: its value, or the code it failed with (then recorded). */
      const settle = async <T>(call: Promise<T>): Promise<T | undefined> => {
        try {
          return await call;
        } catch (err) {
          refusals.push((err as { code?: string }).code ?? String(err));
          return undefined;
        }
      };
      let states = 0;
      let answered = 0;
      /** Writes that succeeded while the slot moved: each one change more. */
      let stored = 0;
      // One key at a time: every call below meets the slot with the app's keys split between the two masters.
      await cluster.migrateSlots([slot], to, {
        keysPerBatch: 1,
        betweenBatches: async () => {
          states++;
          // A page arrives whole or not at all (UNAVAILABLE: its reads span both masters); the cursor stays where it was.
          await settle(nextPage());
          // Read back whole or not at all: never a record without its validity or embedding, never "absent".
          const read = await settle(store.memories.getMemory(appName, before[7].memoryId));
          if (read !== undefined) {
            expect(read).toEqual(before[7]);
            answered++;
          }
          // Reads at once (ioredis may batch them into one pipeline): each right or UNAVAILABLE, never empty.
          const [window, page, again] = await Promise.all([
            settle(store.memories.memoryChangeWindow(appName)),
            settle(store.memories.listMemories(everything, 3)),
            settle(store.memories.getMemory(appName, before[8].memoryId)),
          ]);
          if (window !== undefined) expect(window.head).toBe(before.length + stored);
          if (page !== undefined) expect(page).toHaveLength(3);
          if (again !== undefined) expect(again).toEqual(before[8]);
          const memoryId = `during-${during.length}`;
          during.push(memoryId);
          if (
            await settle(
              store.memories.writeMemories([
                memory({ appName, memoryId, text: "written while the slot moves" }, 2_000_000 + during.length - 1),
              ]),
            )
          )
            stored++;
        },
      });
      // The app's 11 keys (and any other key that shares the slot).
      expect(states).toBeGreaterThanOrEqual(11);
      // A read whose keys are all on one side still answers while the others move.
      expect(answered).toBeGreaterThan(0);
      while (listed.length < before.length) await nextPage();
      // Every memory of before, newest first, once each (what was written during the move is newer than the cursor).
      expect(listed).toEqual(before.map((m) => m.memoryId).reverse());
      expect(refusals.every((code) => code === "UNAVAILABLE")).toBe(true);
      // A refused write is retried after the move (idempotent by memory_id): then every one is there.
      for (const [i, memoryId] of during.entries())
        await store.memories.writeMemories([
          memory({ appName, memoryId, text: "written while the slot moves" }, 2_000_000 + i),
        ]);
      expect((await store.memories.listMemories(everything, 1000)).map((m) => m.memoryId).sort()).toEqual(
        [...before.map((m) => m.memoryId), ...during].sort(),
      );
      // The change log has every change once, numbered without holes.
      const log = await store.memories.readMemoryChanges(appName, 0, 1000);
      expect(log.changes.map((c) => c.seq)).toEqual(
        Array.from({ length: before.length + during.length }, (_, i) => i + 1),
      );
      expect((await cluster.masterOf(slot)).index).toBe(to.index);
    } finally {
      await store.close();
    }
  }, 120_000);
});

describe("two servers on the cluster", () => {
  const keyPrefix = freshPrefix();
  let one: TestServer;
  let two: TestServer;
  beforeAll(async () => {
    const config = {
      memoryType: "redis" as const,
      memoryEnabled: true,
      redisUrl: cluster.url,
      keyPrefix,
      auth: true,
      authCacheMs: 200,
    };
    [one, two] = await Promise.all(
      [1, 2].map(async () =>
        startTestServer({ store: await RedisStore.open({ url: cluster.url, keyPrefix, limits: LIMITS }), config }),
      ),
    );
  }, 60_000);
  afterAll(async () => {
    await Promise.all([one?.stop(), two?.stop()]);
  });

  /** The authorization header of a new write key for every app, stored on the cluster as an operator's CLI would. */
  async function writerHeaders(): Promise<{ authorization: string }> {
    const keys = await openApiKeyStore(
      loadConfig([], { MEMORY_TYPE: "redis", MEMORY_REDIS_URL: cluster.url, MEMORY_KEY_PREFIX: keyPrefix }),
    );
    try {
      const made = generateApiKey({ role: "write", apps: ["*"] });
      await keys.create(made.record);
      return { authorization: `Bearer ${made.key}` };
    } finally {
      await keys.close();
    }
  }

  it("an API key made on the cluster works on both servers and shares one rate budget; a key from nowhere does not; its revocation reaches both", async () => {
    const keys = await openApiKeyStore(
      loadConfig([], { MEMORY_TYPE: "redis", MEMORY_REDIS_URL: cluster.url, MEMORY_KEY_PREFIX: keyPrefix }),
    );
    try {
      const made = generateApiKey({ role: "write", apps: ["keyed-app"], rateLimit: 5 });
      await keys.create(made.record);
      const clients = [
        grpcJsClient(one.address, { headers: { authorization: `Bearer ${made.key}` } }),
        connectClient(two.baseUrl, { headers: { authorization: `Bearer ${made.key}` } }),
      ];
      const stranger = connectClient(one.baseUrl, {
        headers: { authorization: `Bearer ${generateApiKey({ role: "admin", apps: ["*"] }).key}` },
      });
      try {
        await clients[0].writeMemories({
          memories: [{ appName: "keyed-app", memoryId: "k1", text: "written through one" }],
        });
        expect((await clients[1].getMemory({ appName: "keyed-app", memoryId: "k1" })).memory?.text).toBe(
          "written through one",
        );
        await sleep(1100); // a fresh one-second window
        // 12 calls at once, half to each server: 5 per second in all (counted on the cluster), not per server.
        const outcomes = await Promise.all(
          Array.from({ length: 12 }, (_, i) =>
            codeOf(clients[i % 2].getMemory({ appName: "keyed-app", memoryId: "k1" })),
          ),
        );
        const ok = outcomes.filter((o) => o === "ok").length;
        expect(outcomes.filter((o) => o !== "ok").every((o) => o === Code.ResourceExhausted)).toBe(true);
        expect(ok).toBeGreaterThan(0);
        // One window of 5 across both (one more if the calls straddle a window's end; per-server counting would let 10 through).
        expect(ok).toBeLessThanOrEqual(6);
        await sleep(1100);
        expect(await codeOf(stranger.getMemory({ appName: "keyed-app", memoryId: "k1" }))).toBe(Code.Unauthenticated);
        expect(await keys.revoke(made.record.id)).toBe(true);
        // The servers trust a checked key for MEMORY_AUTH_CACHE_MS (200 ms here): bounded wait until both refuse it.
        for (const client of clients) {
          let code = await codeOf(client.getMemory({ appName: "keyed-app", memoryId: "k1" }));
          for (let i = 0; i < 100 && code !== Code.Unauthenticated; i++) {
            await sleep(100);
            code = await codeOf(client.getMemory({ appName: "keyed-app", memoryId: "k1" }));
          }
          expect(code).toBe(Code.Unauthenticated);
        }
      } finally {
        for (const client of [...clients, stranger]) client.close();
      }
    } finally {
      await keys.close();
    }
  });

  it("WatchMemories on one server sees the writes, supersessions and deletions made through the other", async () => {
    const headers = await writerHeaders();
    const [appName] = await appsOnDistinctMasters(1);
    const watcher = connectClient(two.baseUrl, { headers });
    const writer = grpcJsClient(one.address, { headers });
    try {
      expect(await watchFaysScope(watcher, writer, appName)).toEqual(FAY_WATCH_FRAMES);
    } finally {
      watcher.close();
      writer.close();
    }
  });

  // Last in the file: it kills a master (restarted afterwards, as a replica).
  it("a watch on one server keeps hearing the other after its app's master is killed and its replica promoted", async () => {
    const headers = await writerHeaders();
    const [appName] = await appsOnDistinctMasters(1);
    const watcher = connectClient(two.baseUrl, { headers });
    const writer = grpcJsClient(one.address, { headers });
    const abort = new AbortController();
    const written: string[] = [];
    let started!: () => void;
    const ready = new Promise<void>((resolve) => (started = resolve));
    const watch = (async () => {
      try {
        for await (const f of watcher.watchMemories(
          { appName },
          { signal: AbortSignal.any([abort.signal, AbortSignal.timeout(60_000)]) },
        )) {
          if (f.frame.case === "started") started();
          if (f.frame.case === "written") written.push(f.frame.value.memoryId);
          if (written.includes("after")) return;
        }
      } catch {
        // Aborted or timed out: `written` says what arrived.
      }
    })();
    await ready;
    const killed = await cluster.killMaster(`{${hex(appName)}}`);
    try {
      await cluster.waitForFailover(killed);
      // Bounded: the writer's store may take a few tries to learn the new master.
      let code = await codeOf(
        writer.writeMemories({ memories: [{ appName, memoryId: "after", text: "written after the failover" }] }),
      );
      for (let i = 0; i < 30 && code !== "ok"; i++) {
        await sleep(500);
        code = await codeOf(
          writer.writeMemories({ memories: [{ appName, memoryId: "after", text: "written after the failover" }] }),
        );
      }
      expect(code).toBe("ok");
      await watch;
      expect(written).toContain("after");
    } finally {
      abort.abort();
      watcher.close();
      writer.close();
      await cluster.restartNode(killed);
    }
  }, 120_000);
});
