/**
 * Long-term memory on two replicas sharing one Redis, over real sockets on
 * gRPC and Connect: a watch on one replica sees what is written and forgotten
 * through the other, writes of one key through both leave one memory valid,
 * and search, listing, Recall and erasure answer the same on either.
 */
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisStore } from "../../src/store/redis.js";
import { PROTOCOLS, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { FAY_RESUMED_FRAMES, FAY_WATCH_FRAMES, resumeFaysWatch, watchFaysScope } from "../support/memory-watch.js";

const keyPrefix = `memrpc${process.pid}`;
const LIMITS = { maxSessions: 1000, maxSessionEvents: 500 };
// Every test runs on Redis 7.0 (no Query Engine: searches rank in process) and on Valkey with RediSearch.
const SERVERS = [
  ["Redis 7.0", () => process.env.MEMORY_TEST_REDIS_URL!],
  ["the Redis Query Engine", () => process.env.MEMORY_TEST_REDIS_SEARCH_URL!],
] as const;

describe.each(SERVERS)("on %s", (_server, urlOf) => {
  let one: TestServer;
  let two: TestServer;

  beforeAll(async () => {
    const url = urlOf();
    [one, two] = await Promise.all(
      [1, 2].map(async () => startTestServer({ store: await RedisStore.open({ url, keyPrefix, limits: LIMITS }) })),
    );
  });

  afterAll(async () => {
    const url = urlOf();
    await Promise.all([one?.stop(), two?.stop()]);
    const admin = new Redis(url);
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", `${keyPrefix}:*`, "COUNT", 1000);
      if (keys.length > 0) await admin.del(...keys);
      cursor = next;
    } while (cursor !== "0");
    await admin.quit();
  });

  describe.each(PROTOCOLS)("long-term memory on two Redis replicas over %s", (protocol, clientFor) => {
    let writer: MemoryClient;
    let reader: MemoryClient;
    // Each protocol writes into its own app: both suites share the two servers.
    const app = `redis-memories-${protocol.length}`;
    beforeAll(() => {
      writer = clientFor(one);
      reader = clientFor(two);
    });
    afterAll(() => {
      writer?.close();
      reader?.close();
    });

    it("a watch on one replica sees the writes, supersessions and deletions made through the other", async () => {
      expect(await watchFaysScope(reader, writer, app)).toEqual(FAY_WATCH_FRAMES);
    });

    it("a watch on one replica resumed with after replays what the other replica changed while it was away, then goes live", async () => {
      expect(await resumeFaysWatch(reader, writer, `${app}-resume`)).toEqual({
        frames: FAY_RESUMED_FRAMES,
        cursorsRise: true,
      });
    });

    it("writes of one key through both replicas at once leave exactly one memory valid, found by search on either", async () => {
      const writes = Array.from({ length: 10 }, (_, i) =>
        (i % 2 === 0 ? writer : reader).writeMemories({
          memories: [
            { memoryId: `city-${i}`, appName: app, userId: "hal", key: "city", text: `hal lives in city number ${i}` },
          ],
        }),
      );
      await Promise.all(writes);
      const valid = (await reader.listMemories({ appName: app, userId: "hal" })).memories;
      expect(valid).toHaveLength(1);
      const all = (await writer.listMemories({ appName: app, userId: "hal", includeInvalid: true })).memories;
      expect(all).toHaveLength(10);
      for (const client of [writer, reader]) {
        const { results } = await client.searchMemories({ appName: app, userId: "hal", query: "where does hal live" });
        expect(results.map((r) => r.memory!.memoryId)).toEqual([valid[0].memoryId]);
        expect(results[0].lexicalScore).toBeGreaterThan(0);
      }
    });

    it("Recall on one replica returns pinned and relevant memories written through the other; DeleteUserData erases them", async () => {
      const sessionId = `recall-${protocol.length}`;
      await writer.createSession({ appName: app, userId: "ivy", sessionId });
      await writer.writeMemories({
        memories: [
          { memoryId: "ivy-core", appName: app, userId: "ivy", text: "Ivy is allergic to peanuts", pinned: true },
          { memoryId: "ivy-trip", appName: app, userId: "ivy", text: "Ivy plans a trip to Lisbon in May" },
        ],
      });
      const recall = await reader.recall({ sessionId, query: "trip to Lisbon", tokenBudget: 1000 });
      expect(recall.pinned.map((m) => m.memoryId)).toEqual(["ivy-core"]);
      expect(recall.memories.map((r) => r.memory!.memoryId)).toContain("ivy-trip");
      expect((await reader.deleteUserData({ appName: app, userId: "ivy" })).removedMemories).toBe(2n);
      expect((await writer.listMemories({ appName: app, userId: "ivy", includeInvalid: true })).memories).toEqual([]);
    });
  });
});
