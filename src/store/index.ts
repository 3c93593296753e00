/** Opens the store the configuration names. */
import type { Config } from "../config.js";
import { LocalStore } from "./local.js";
import { NullStore } from "./null.js";
import { StoreIncompatibleError } from "./incompatible.js";
import type { MemoryStore, StoreLimits } from "./types.js";

/** The retention the configuration asks of the store. */
export function storeLimits(config: Config): StoreLimits {
  return {
    maxSessions: config.maxSessions,
    maxSessionEvents: config.maxSessionEvents,
    sessionIdleMs: config.sessionIdleMs,
    apps: config.retentionApps,
    dedupeWindowMs: config.dedupeWindowMs,
    dedupeMaxIds: config.dedupeMaxIds,
  };
}

/** Creates (and for network stores, connects) the configured MemoryStore. */
export async function openStore(config: Config): Promise<MemoryStore> {
  const limits = storeLimits(config);
  if (!config.memoryEnabled) return new NullStore();
  switch (config.memoryType) {
    case "local":
      return new LocalStore(limits);
    // BEGIN redis
    case "redis": {
      // Loaded on demand: local deployments never load ioredis.
      const { RedisStore } = await import("./redis.js");
      // open() connects, subscribes and fails with UNAVAILABLE naming the (masked) URL when Redis is unreachable.
      return RedisStore.open({
        url: config.redisUrl!,
        keyPrefix: config.keyPrefix,
        limits,
        commandTimeoutMs: config.storeTimeoutMs,
        waitReplicas: config.redisWaitReplicas,
      });
    }
    // END redis
    // BEGIN postgres
    case "postgres": {
      // Loaded on demand so other backends never load pg.
      const { PostgresStore } = await import("./postgres.js");
      try {
        return await PostgresStore.open({
          url: config.postgresUrl!,
          schema: config.keyPrefix,
          limits,
          queryTimeoutMs: config.storeTimeoutMs,
        });
      } catch (err) {
        // No `cause`: the logger would print the same reason once more per level.
        const reason = err instanceof Error ? err.message : String(err);
        const message = `MEMORY_TYPE=postgres: cannot open schema ${JSON.stringify(config.keyPrefix)} at MEMORY_POSTGRES_URL: ${reason}`;
        // Kept apart from an outage: start-up must stop on it, not retry (src/main.ts).
        throw err instanceof StoreIncompatibleError ? new StoreIncompatibleError(message) : new Error(message);
      }
    }
    // END postgres
  }
}
