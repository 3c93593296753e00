/**
 * Per-key quotas: calls per second (rate-limiter-flexible, counted in Redis or
 * PostgreSQL when the memory lives there, so every replica shares one budget
 * per key) and live streams per key and per replica (counted in-process:
 * a stream holds resources of the replica that serves it).
 */
import { openPostgresPool } from "../backends/postgres.js";
import { openRedisClient } from "../backends/redis.js";
import {
  RateLimiterMemory,
  RateLimiterPostgres,
  RateLimiterRedis,
  RateLimiterRes,
  type RateLimiterAbstract,
} from "rate-limiter-flexible";
import type { Config } from "../config.js";
import { MemoryError } from "../errors.js";

/** Trailer / error metadata telling the client how long to wait before retrying. */
export const RETRY_AFTER_TRAILER = "retry-after-ms";

type LimiterFactory = (points: number) => RateLimiterAbstract;

/** Rate limits and stream counts. */
export class Quotas {
  private readonly limiters = new Map<number, RateLimiterAbstract>();
  private readonly streamsByKey = new Map<string, number>();
  private streams = 0;

  private constructor(
    private readonly options: Pick<Config, "rateLimit" | "maxStreams" | "maxStreamsPerKey">,
    private readonly makeLimiter: LimiterFactory,
    private readonly closeBackend: () => Promise<void>,
  ) {}

  /** Opens the counters where the configured memory lives. */
  static async open(
    config: Pick<
      Config,
      | "rateLimit"
      | "maxStreams"
      | "maxStreamsPerKey"
      | "memoryEnabled"
      | "memoryType"
      | "redisUrl"
      | "postgresUrl"
      | "keyPrefix"
    >,
  ): Promise<Quotas> {
    const keyPrefix = `${config.keyPrefix}:rl`;
    // When the shared counter store is down, each replica limits on its own instead of failing calls.
    const insurance = (points: number) => new RateLimiterMemory({ points, duration: 1, keyPrefix });
    // Without a URL (a test's store handed in ready-made) there is no shared Redis to count in.
    if (config.memoryEnabled && config.memoryType === "redis" && config.redisUrl !== undefined) {
      // One counter key per API key (`<prefix>:rl:<key id>`): on a cluster the keys spread over the shards by id.
      const redis = openRedisClient(config.redisUrl, config.keyPrefix, "quotas", {
        commandTimeout: 1000,
        maxRetriesPerRequest: 1,
      });
      return new Quotas(
        config,
        (points) =>
          new RateLimiterRedis({
            storeClient: redis,
            points,
            duration: 1,
            keyPrefix,
            insuranceLimiter: insurance(points),
          }),
        async () => void (await redis.quit().catch(() => redis.disconnect())),
      );
    }
    if (config.memoryEnabled && config.memoryType === "postgres") {
      const pool = openPostgresPool(
        { connectionString: config.postgresUrl, max: 2, connectionTimeoutMillis: 1000, statement_timeout: 1000 },
        config.keyPrefix,
        "quotas",
      );
      return new Quotas(
        config,
        (points) =>
          new RateLimiterPostgres({
            storeClient: pool,
            storeType: "pool",
            schemaName: config.keyPrefix,
            tableName: "rate_limits",
            tableCreated: true, // migration 0002
            clearExpiredByTimeout: false, // one row per key: nothing piles up
            points,
            duration: 1,
            keyPrefix,
            insuranceLimiter: insurance(points),
          }),
        () => pool.end(),
      );
    }
    return new Quotas(config, insurance, async () => {});
  }

  /** Counts one call of `keyId`; RESOURCE_EXHAUSTED with a retry hint past its calls per second. */
  async consume(keyId: string, keyRateLimit?: number): Promise<void> {
    const points = keyRateLimit || this.options.rateLimit;
    if (!points) return;
    let limiter = this.limiters.get(points);
    if (!limiter) this.limiters.set(points, (limiter = this.makeLimiter(points)));
    try {
      await limiter.consume(keyId);
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) throw err;
      const wait = Math.max(1, Math.ceil(err.msBeforeNext));
      throw new MemoryError(
        "RESOURCE_EXHAUSTED",
        `rate limit: this API key may make ${points} calls per second; retry in ${wait} ms`,
        { [RETRY_AFTER_TRAILER]: String(wait) },
        { reason: "RATE_LIMITED", info: { calls_per_second: String(points) }, retryAfterMs: wait },
      );
    }
  }

  /** Takes a stream slot for `keyId` (undefined: no key); returns its release. */
  openStream(keyId: string | undefined): () => void {
    if (this.streams >= this.options.maxStreams) {
      throw new MemoryError(
        "RESOURCE_EXHAUSTED",
        `streams: this replica serves at most ${this.options.maxStreams} live streams; retry later or on another replica`,
        { [RETRY_AFTER_TRAILER]: "1000" },
        { reason: "REPLICA_STREAM_LIMIT", info: { max_streams: String(this.options.maxStreams) }, retryAfterMs: 1000 },
      );
    }
    const mine = keyId === undefined ? 0 : (this.streamsByKey.get(keyId) ?? 0);
    if (keyId !== undefined && mine >= this.options.maxStreamsPerKey) {
      throw new MemoryError(
        "RESOURCE_EXHAUSTED",
        `streams: this API key may hold at most ${this.options.maxStreamsPerKey} live streams per replica; close one first`,
        { [RETRY_AFTER_TRAILER]: "1000" },
        {
          reason: "KEY_STREAM_LIMIT",
          info: { max_streams_per_key: String(this.options.maxStreamsPerKey) },
          retryAfterMs: 1000,
        },
      );
    }
    this.streams++;
    if (keyId !== undefined) this.streamsByKey.set(keyId, mine + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.streams--;
      if (keyId === undefined) return;
      const left = (this.streamsByKey.get(keyId) ?? 1) - 1;
      if (left === 0) this.streamsByKey.delete(keyId);
      else this.streamsByKey.set(keyId, left);
    };
  }

  /** Live streams on this replica. */
  get activeStreams(): number {
    return this.streams;
  }

  async close(): Promise<void> {
    await this.closeBackend();
  }
}
