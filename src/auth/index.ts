/**
 * Authentication: opens the configured key store and checks presented keys.
 * Keys live where the memory lives (Redis hash, PostgreSQL table), or in a
 * file for the in-process and null stores.
 */
import { LRUCache } from "lru-cache";
import type { Config } from "../config.js";
import { apiKeyId, bearerKey, keyMatches, unauthenticated, type ApiKeyStore, type Principal } from "./api-keys.js";
import { FileKeyStore } from "./file-key-store.js";

/** Opens the key store of the configured backend. */
export async function openApiKeyStore(config: Pick<Config, "memoryEnabled" | "memoryType" | "redisUrl" | "postgresUrl" | "keyPrefix" | "authKeysFile">): Promise<ApiKeyStore> {
  if (config.memoryEnabled && config.memoryType === "redis") {
    const { RedisKeyStore } = await import("./redis-key-store.js");
    return RedisKeyStore.open(config.redisUrl!, config.keyPrefix);
  }
  if (config.memoryEnabled && config.memoryType === "postgres") {
    const { PostgresKeyStore } = await import("./postgres-key-store.js");
    return PostgresKeyStore.open(config.postgresUrl!, config.keyPrefix);
  }
  return new FileKeyStore(config.authKeysFile);
}

/** Largest number of presented keys whose verdict is remembered. */
const CACHE_ENTRIES = 10_000;

/**
 * Turns an `authorization` header into a Principal. Verdicts (good or bad)
 * are cached for `cacheMs` by the key's hash, so a hot key costs one hash per
 * call and a flood of wrong keys cannot hammer the backend; a revocation
 * therefore takes effect within `cacheMs` on every replica.
 */
export class Authenticator {
  private readonly cache: LRUCache<string, { principal?: Principal; problem?: string }>;

  constructor(
    private readonly keys: ApiKeyStore,
    cacheMs: number,
  ) {
    this.cache = new LRUCache({ max: CACHE_ENTRIES, ttl: Math.max(cacheMs, 1) });
  }

  /** The caller's principal; UNAUTHENTICATED for a missing, malformed, unknown or revoked key. */
  async authenticate(header: string | undefined): Promise<Principal> {
    const key = bearerKey(header);
    let verdict = this.cache.get(key);
    if (!verdict) {
      verdict = await this.lookUp(key);
      this.cache.set(key, verdict);
    }
    if (!verdict.principal) throw unauthenticated(verdict.problem!);
    return verdict.principal;
  }

  private async lookUp(key: string): Promise<{ principal?: Principal; problem?: string }> {
    const id = apiKeyId(key);
    if (!id) return { problem: "not an Engram API key" };
    const record = await this.keys.get(id);
    // Same answer for an unknown id and a wrong secret: the id alone proves nothing.
    if (!record || !keyMatches(key, record)) return { problem: "unknown API key" };
    if (record.revokedAt !== undefined) return { problem: "this API key was revoked" };
    return { principal: { keyId: record.id, role: record.role, apps: record.apps, userId: record.userId, rateLimit: record.rateLimit } };
  }

  async close(): Promise<void> {
    await this.keys.close();
  }
}
