/**
 * The replica suite on Redis: a dedicated redis-server (AOF, fsync every
 * second) that the suite may restart and stop; never the shared test Redis.
 */
import { startRedisServer, type RedisServer } from "../support/redis-server.js";
import { describeReplicaSuite } from "./suite.js";

let server: RedisServer | undefined;

describeReplicaSuite(
  () => ({
    name: "redis",
    env: () => ({ MEMORY_TYPE: "redis", MEMORY_REDIS_URL: server!.url, MEMORY_KEY_PREFIX: `replicas_${process.pid}` }),
    // SIGTERM makes Redis fsync the AOF; restart() waits until it answers PING again.
    interrupt: () => server!.restart(),
    outage: async () => {
      await server!.stop();
      return () => server!.restart();
    },
  }),
  {
    beforeAll: async () => {
      server = await startRedisServer({ appendonly: true });
    },
    afterAll: async () => {
      await server?.destroy();
    },
  },
);
