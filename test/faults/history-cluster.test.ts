/**
 * The history checker (history.ts) on a Redis Cluster of 3 masters + 3
 * replicas dedicated to this file. The blackhole freezes every node
 * (SIGSTOP): connections stay open and the kernel still accepts bytes, but
 * nothing is answered, as with the chaos proxy's blackhole. All nodes thaw
 * together; should a replica still be promoted while they compare notes,
 * it lacks nothing acknowledged (what a master answered before the freeze
 * was already in its replica's socket), so the checker's "nothing lost"
 * holds either way. 8 s keeps the file short and still spans several store
 * timeouts (2 s).
 */
import { startRedisCluster, type RedisCluster } from "../support/redis-cluster.js";
import { describeHistorySuite } from "./history.js";

let cluster: RedisCluster | undefined;

describeHistorySuite("Redis Cluster frozen for 8 s under writers and live streams on two replicas", {
  start: async () => {
    cluster = await startRedisCluster();
    return {
      env: { MEMORY_TYPE: "redis", MEMORY_REDIS_URL: cluster.url, MEMORY_KEY_PREFIX: `history_cluster_${process.pid}` },
      blackhole: async () => {
        for (const node of cluster!.nodes) cluster!.pause(node);
      },
      pass: async () => {
        for (const node of cluster!.nodes) cluster!.resume(node);
        await cluster!.waitForOk();
      },
      blackholeMs: 8000,
    };
  },
  stop: async () => {
    await cluster?.stop();
  },
});
