/**
 * The Redis store keeps no long-term memories yet (PostgreSQL does: its
 * driver runs the memories conformance suite in test/store/postgres.test.ts): every
 * memory RPC answers FAILED_PRECONDITION naming the store, over real sockets,
 * never a silent success; DeleteUserData reports no memories removed.
 */
import { Code } from "@connectrpc/connect";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { RedisStore } from "../../src/store/redis.js";
import type { MemoryStore } from "../../src/store/types.js";
import { connectClient, errorOf, grpcJsClient } from "../support/clients.js";
import { startTestServer } from "../support/engram.js";

const LIMITS = { maxSessions: 1000, maxSessionEvents: 500 };
const redisPrefix = `memunavail${process.pid}`;

afterAll(async () => {
  const redis = new Redis(process.env.MEMORY_TEST_REDIS_URL!);
  const keys = await redis.keys(`${redisPrefix}:*`);
  if (keys.length > 0) await redis.del(...keys);
  await redis.quit();
});

const STORES: Array<[string, () => Promise<MemoryStore>]> = [
  ["redis", () => RedisStore.open({ url: process.env.MEMORY_TEST_REDIS_URL!, keyPrefix: redisPrefix, limits: LIMITS })],
];

describe.each(STORES)("long-term memory on the %s store", (backend, open) => {
  it("answers FAILED_PRECONDITION naming the store on every memory RPC, on gRPC and Connect", async () => {
    const server = await startTestServer({ store: await open() });
    const clients = [grpcJsClient(server.address), connectClient(server.baseUrl)];
    try {
      for (const client of clients) {
        const calls: Array<[string, Promise<unknown>]> = [
          ["WriteMemories", client.writeMemories({ memories: [{ appName: "app", text: "x" }] })],
          ["GetMemory", client.getMemory({ appName: "app", memoryId: "m" })],
          ["SearchMemories", client.searchMemories({ appName: "app", query: "x" })],
          ["ListMemories", client.listMemories({ appName: "app" })],
          ["DeleteMemories", client.deleteMemories({ appName: "app", memoryIds: ["m"] })],
          ["SearchEvents", client.searchEvents({ appName: "app", query: "x" })],
          [
            "WatchMemories",
            (async () => {
              for await (const _ of client.watchMemories({ appName: "app" }, { timeoutMs: 10_000 } as never)) return;
            })(),
          ],
        ];
        for (const [method, call] of calls) {
          const err = await errorOf(call);
          expect(err.code, method).toBe(Code.FailedPrecondition);
          expect(err.rawMessage, method).toBe(`long-term memory is not yet available on the ${backend} store`);
        }
        expect((await client.deleteUserData({ appName: "app", userId: "nobody" })).removedMemories).toBe(0n);
      }
    } finally {
      for (const c of clients) c.close();
      await server.stop();
    }
  });
});
