/**
 * The Redis store's conformance suites (sessions, events, state, long-term
 * memories) on a Redis Cluster of Redis Stack 7.4.1 (Redis' own build; 3
 * masters and 3 replicas: test/support/redis-cluster.ts), besides the
 * cluster of Debian's redis-server that test/store/redis-cluster.test.ts and
 * redis-cluster-memories.test.ts run them on. A cluster needs Redis 7.0 or
 * later (sharded pub/sub), so 6.2 has no cluster here. Every store gets a
 * key prefix of its own.
 */
import { afterAll, beforeAll } from "vitest";
import { RedisStore } from "../../src/store/redis.js";
import type { StoreLimits } from "../../src/store/types.js";
import { redisStack74 } from "../support/redis-builds.js";
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { describeStoreConformance } from "./conformance.js";
import { describeMemoriesConformance } from "./memories-conformance.js";

const DEFAULT_LIMITS: StoreLimits = { maxSessions: 1000, maxSessionEvents: 500 };
let cluster: RedisCluster;
let counter = 0;

beforeAll(async () => {
  cluster = await startRedisCluster({ build: await redisStack74() });
}, 600_000);
afterAll(async () => {
  await cluster?.stop();
});

const openStore = (limits: StoreLimits = DEFAULT_LIMITS) =>
  RedisStore.open({ url: cluster.url, keyPrefix: `bc${process.pid}_${++counter}`, limits });

describeStoreConformance("redis-stack 7.4.1 cluster", (limits) => openStore(limits), {
  persistent: true,
  shared: true,
  retains: true,
});
describeMemoriesConformance("redis-stack 7.4.1 cluster", () => openStore());
