/**
 * The replica suite on a Redis Cluster of 3 masters + 3 replicas
 * (test/support/redis-cluster.ts), dedicated to this file: live streams on
 * one Engram replica see appends made through another over sharded pub/sub,
 * and the operator's faults are the cluster's: a full restart of every node
 * (each flushes its AOF and keeps its nodes.conf) and every node stopped.
 */
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { describeReplicaSuite } from "./suite.js";

let cluster: RedisCluster | undefined;

describeReplicaSuite(
  () => ({
    name: "redis-cluster",
    env: () => ({ MEMORY_TYPE: "redis", MEMORY_REDIS_URL: cluster!.url, MEMORY_KEY_PREFIX: `replicas_cluster_${process.pid}` }),
    interrupt: () => cluster!.restartAll(),
    outage: async () => {
      await cluster!.stopAll();
      return () => cluster!.restartAll();
    },
  }),
  {
    beforeAll: async () => {
      cluster = await startRedisCluster();
    },
    afterAll: async () => {
      await cluster?.stop();
    },
  },
  {
    // With every node down, a node's connection of the cluster client queues its commands (ioredis
    // keeps a cluster node's offline queue), where no command timeout applies. The store bounds each call
    // by MEMORY_STORE_TIMEOUT_MS (src/store/redis/connection.ts), so a call without a deadline answers
    // UNAVAILABLE by then instead of hanging; but a call whose deadline is no later than that (4 s here,
    // the default store timeout) still ends DEADLINE_EXCEEDED, where one node answers UNAVAILABLE at once.
    outage: "a cluster node's offline queue holds a call until MEMORY_STORE_TIMEOUT_MS, not failing it at once",
  },
);
