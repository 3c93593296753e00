/**
 * The Redis store's conformance suites (sessions, events, state, long-term
 * memories) on Redis' own builds, besides Debian's redis-server that
 * test/store/redis.test.ts runs them on: Redis 6.2.14 built from Redis'
 * source (the oldest Redis supported) and Redis Stack 7.4.1 (a current
 * one, what docker-compose.yml and deploy/ run). Each build is started once
 * for this file (test/support/redis-builds.ts); every store gets a key
 * prefix of its own.
 */
import { afterAll, beforeAll, describe } from "vitest";
import { RedisStore } from "../../src/store/redis.js";
import type { StoreLimits } from "../../src/store/types.js";
import { redis62, redisStack74, type RedisBuild } from "../support/redis-builds.js";
import { startRedisServer, type RedisServer } from "../support/redis-server.js";
import { describeStoreConformance } from "./conformance.js";
import { describeMemoriesConformance } from "./memories-conformance.js";

const DEFAULT_LIMITS: StoreLimits = { maxSessions: 1000, maxSessionEvents: 500 };
let counter = 0;

const BUILDS: Array<[string, () => Promise<RedisBuild>]> = [
  ["redis 6.2.14", redis62],
  ["redis-stack 7.4.1", redisStack74],
];

for (const [name, build] of BUILDS) {
  describe(name, () => {
    let server: RedisServer;
    beforeAll(async () => {
      server = await startRedisServer({ appendonly: false, build: await build() });
    }, 600_000);
    afterAll(async () => {
      await server?.destroy();
    });
    const openStore = (limits: StoreLimits = DEFAULT_LIMITS) =>
      RedisStore.open({ url: server.url, keyPrefix: `b${process.pid}_${++counter}`, limits });

    describeStoreConformance(name, (limits) => openStore(limits), { persistent: true, shared: true, retains: true });
    describeMemoriesConformance(name, () => openStore());
  });
}
