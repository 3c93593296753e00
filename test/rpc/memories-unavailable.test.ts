/**
 * The PostgreSQL store keeps no long-term memories yet: every
 * memory RPC answers FAILED_PRECONDITION naming the store, over real sockets,
 * never a silent success; DeleteUserData reports no memories removed.
 */
import { Code } from "@connectrpc/connect";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { PostgresStore } from "../../src/store/postgres.js";
import type { MemoryStore } from "../../src/store/types.js";
import { connectClient, errorOf, grpcJsClient } from "../support/clients.js";
import { startTestServer } from "../support/engram.js";

const LIMITS = { maxSessions: 1000, maxSessionEvents: 500 };
const pgSchema = `memunavail_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;

afterAll(async () => {
  const admin = new pg.Client({ connectionString: process.env.MEMORY_TEST_POSTGRES_URL! });
  await admin.connect();
  await admin.query(`DROP SCHEMA IF EXISTS ${pg.escapeIdentifier(pgSchema)} CASCADE`);
  await admin.end();
});

const STORES: Array<[string, () => Promise<MemoryStore>]> = [
  ["postgres", () => PostgresStore.open({ url: process.env.MEMORY_TEST_POSTGRES_URL!, schema: pgSchema, limits: LIMITS })],
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
