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
export async function openApiKeyStore(
  config: Pick<Config, "memoryEnabled" | "memoryType" | "redisUrl" | "postgresUrl" | "keyPrefix" | "authKeysFile">,
): Promise<ApiKeyStore> {
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

/** A key's verdict: its principal, or why it is refused; with when it was looked up. */
interface Verdict {
  principal?: Principal;
  problem?: string;
  checkedAt: number;
}

/**
 * Turns an `authorization` header into a Principal. Verdicts (good or bad)
 * are cached for `cacheMs` by the key's hash, so a hot key costs one hash per
 * call and a flood of wrong keys cannot hammer the backend; a revocation
 * therefore takes effect within `cacheMs` on every replica.
 */
export class Authenticator {
  private readonly cache: LRUCache<string, Verdict>;
  /** Look-ups in flight by key: streams re-checking one key share one. */
  private readonly pending = new Map<string, Promise<Verdict>>();

  constructor(
    private readonly keys: ApiKeyStore,
    /** How long a verdict is trusted (MEMORY_AUTH_CACHE_MS): the revocation delay. */
    readonly cacheMs: number,
  ) {
    this.cache = new LRUCache({ max: CACHE_ENTRIES, ttl: Math.max(cacheMs, 1) });
  }

  /**
   * The caller's principal; UNAUTHENTICATED for a missing, malformed, unknown
   * or revoked key. `maxAgeMs` trusts a cached verdict only that long (a
   * stream re-checking its key looks it up afresh at that age).
   */
  async authenticate(header: string | undefined, maxAgeMs?: number): Promise<Principal> {
    const key = bearerKey(header);
    let verdict = this.cache.get(key);
    if (!verdict || (maxAgeMs !== undefined && Date.now() - verdict.checkedAt > maxAgeMs))
      verdict = await this.freshVerdict(key);
    if (!verdict.principal) throw unauthenticated(verdict.problem!);
    return verdict.principal;
  }

  private freshVerdict(key: string): Promise<Verdict> {
    let lookUp = this.pending.get(key);
    if (!lookUp) {
      lookUp = this.lookUp(key).then((verdict) => {
        this.cache.set(key, verdict);
        return verdict;
      });
      this.pending.set(key, lookUp);
      const done = () => this.pending.delete(key);
      lookUp.then(done, done);
    }
    return lookUp;
  }

  private async lookUp(key: string): Promise<Verdict> {
    const checkedAt = Date.now();
    const id = apiKeyId(key);
    if (!id) return { problem: "not an Engram API key", checkedAt };
    const record = await this.keys.get(id);
    // Same answer for an unknown id and a wrong secret: the id alone proves nothing.
    if (!record || !keyMatches(key, record)) return { problem: "unknown API key", checkedAt };
    if (record.revokedAt !== undefined) return { problem: "this API key was revoked", checkedAt };
    return {
      principal: {
        keyId: record.id,
        role: record.role,
        apps: record.apps,
        userId: record.userId,
        rateLimit: record.rateLimit,
      },
      checkedAt,
    };
  }

  async close(): Promise<void> {
    await this.keys.close();
  }
}
