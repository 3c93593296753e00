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
    env: () => ({
      MEMORY_TYPE: "redis",
      MEMORY_REDIS_URL: cluster!.url,
      MEMORY_KEY_PREFIX: `replicas_cluster_${process.pid}`,
    }),
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
);
