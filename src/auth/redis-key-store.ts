/**
 * API keys in Redis: one hash `<prefix>:apikeys` (public id -> JSON record),
 * next to the memory it guards, so every replica sees a revocation.
 *
 * On a Redis Cluster the name is the same: every command touches this one
 * key, and a key without a hash tag is hashed whole, so it has a slot of its
 * own (no tag needed; one-node data stays readable as it is). Lookups are few
 * (the authenticator caches a checked key for MEMORY_AUTH_CACHE_MS), so one
 * shard serving them all is not a bottleneck.
 */
import { MemoryError } from "../errors.js";
import { openRedisClient, type RedisClient } from "../backends/redis.js";
import type { ApiKeyRecord, ApiKeyStore } from "./api-keys.js";

/** Keys kept in the configured Redis. */
export class RedisKeyStore implements ApiKeyStore {
  private readonly key: string;

  private constructor(
    private readonly redis: RedisClient,
    keyPrefix: string,
  ) {
    this.key = `${keyPrefix}:apikeys`;
  }

  /** Connects; rejects UNAVAILABLE when Redis cannot be reached. */
  static async open(url: string, keyPrefix: string): Promise<RedisKeyStore> {
    const redis = openRedisClient(url, keyPrefix, "keys", {
      lazyConnect: true,
      commandTimeout: 4000,
      maxRetriesPerRequest: 1,
      connectTimeout: 4000,
    });
    try {
      await redis.connect();
    } catch (err) {
      redis.disconnect();
      throw new MemoryError("UNAVAILABLE", `Redis is unavailable for API keys: ${(err as Error).message}`);
    }
    return new RedisKeyStore(redis, keyPrefix);
  }

  async create(record: ApiKeyRecord): Promise<void> {
    const created = await this.call(() => this.redis.hsetnx(this.key, record.id, JSON.stringify(record)));
    if (created !== 1) throw new Error(`API key id ${record.id} already exists`);
  }

  async get(id: string): Promise<ApiKeyRecord | undefined> {
    const raw = await this.call(() => this.redis.hget(this.key, id));
    return raw ? (JSON.parse(raw) as ApiKeyRecord) : undefined;
  }

  async list(): Promise<ApiKeyRecord[]> {
    const all = await this.call(() => this.redis.hvals(this.key));
    return all.map((raw) => JSON.parse(raw) as ApiKeyRecord).sort((a, b) => a.createdAt - b.createdAt);
  }

  async revoke(id: string, now = Date.now()): Promise<boolean> {
    // Read-modify-write of one small record; revocations are rare and idempotent.
    const record = await this.get(id);
    if (!record) return false;
    record.revokedAt ??= now;
    await this.call(() => this.redis.hset(this.key, id, JSON.stringify(record)));
    return true;
  }

  async close(): Promise<void> {
    await this.redis.quit().catch(() => this.redis.disconnect());
  }

  private async call<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      throw new MemoryError(
        "UNAVAILABLE",
        `Redis is unavailable for API keys: ${(err as Error).message}`,
        {},
        { cause: err },
      );
    }
  }
}
