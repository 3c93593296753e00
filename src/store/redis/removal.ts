/**
 * How the Redis store removes sessions: one session at a time through
 * delete-14.lua (DeleteSession, cleanup, erasure and eviction alike, so
 * counters, indexes and notices stay right), the walk over a tenancy's
 * index, and eviction past the session caps.
 */
import type { LRUCache } from "lru-cache";
import { appSessionCap, evictionCount, type RecentScope } from "../rules.js";
import type { StoreLimits } from "../types.js";
import type { RedisClient } from "../../backends/redis.js";
import type { RedisConnection } from "./connection.js";
import type { Bucket, RedisKeys, Tenancy } from "./keys.js";
import type { RedisScripts } from "./script-runner.js";
import { deleteScript, type DeleteConditions, type DeleteOutcome } from "./scripts.js";

/** Session ids read from a tenancy index at a time (erasure, filtered cleanup); their removals run concurrently. */
const INDEX_BATCH = 100;
/** Tries of a script that answers MOVED (the session id was re-created for another tenancy meanwhile). */
export const MOVED_TRIES = 3;

/** Removes sessions of one RedisStore. */
export class SessionRemoval {
  /** Sessions this process evicted past maxSessions. */
  evicted = 0;

  constructor(
    private readonly connection: RedisConnection,
    private readonly keys: RedisKeys,
    private readonly scripts: RedisScripts,
    private readonly limits: StoreLimits,
    /** The store's cache of session tenancies: a removed session's entry goes. */
    private readonly tenancies: LRUCache<string, Tenancy>,
    /** Sessions in the store (a cluster's create script counts one bucket only). */
    private readonly totalSessions: () => Promise<number>,
  ) {}

  /**
   * Runs delete-14.lua for one session, re-reading its tenancy when it moved.
   * With `scope`, only a session of that app and/or user (and of no excepted
   * app) is removed: one out of scope, or re-created meanwhile under the same
   * id for someone else, is "KEPT". With `incarnation`, a session of another
   * one is "REPLACED". `events`: what a "DELETED" session held.
   */
  async deleteOne(sessionId: string, cond: DeleteConditions): Promise<DeleteOutcome> {
    const { scope, updatedBelow, keepAtLeast, incarnation } = cond;
    for (let attempt = 0; attempt < MOVED_TRIES; attempt++) {
      const [appName, userId, updated, current] = await this.call((redis) =>
        redis.hmget(this.keys.session(sessionId), "app", "user", "updated", "inc"),
      );
      if (appName === null || userId === null) return { outcome: "GONE", events: 0 };
      if (incarnation !== undefined && incarnation !== (current ?? "")) return { outcome: "REPLACED", events: 0 };
      // The script checks the tenancy it is given, so a session moved to another app or user meanwhile is MOVED, never removed out of scope.
      if (scope?.appName !== undefined && appName !== scope.appName) return { outcome: "KEPT", events: 0 };
      if (scope?.userId !== undefined && userId !== scope.userId) return { outcome: "KEPT", events: 0 };
      if (scope?.exceptAppNames?.includes(appName)) return { outcome: "KEPT", events: 0 };
      // Not stale now: no script call (the script re-checks anyway, atomically).
      if (updatedBelow !== undefined && Number(updated) >= updatedBelow) return { outcome: "KEPT", events: 0 };
      const deleted = await this.call(() =>
        this.scripts.run(deleteScript, {
          sessionId,
          tenancy: { appName, userId },
          updatedBelow,
          keepAtLeast,
          incarnation,
        }),
      );
      if (deleted.outcome === "DELETED" || deleted.outcome === "GONE") this.tenancies.delete(sessionId);
      if (deleted.outcome !== "MOVED") return deleted;
    }
    return { outcome: "GONE", events: 0 };
  }

  /**
   * Runs `remove` on every session id of a tenancy's index, bucket by
   * bucket, a page at a time (the page's sessions concurrently), in id order
   * from the start: ids already passed are never revisited, so a stale entry
   * cannot loop it.
   */
  async forEachIndexed(scope: RecentScope, remove: (sessionId: string) => Promise<void>): Promise<void> {
    for (const bucket of this.keys.buckets) {
      const index = this.keys.index(scope, bucket);
      let after: string | undefined;
      for (;;) {
        const ids = await this.call((redis) =>
          redis.zrangebylex(index, after === undefined ? "-" : `(${after}`, "+", "LIMIT", 0, INDEX_BATCH),
        );
        await Promise.all(ids.map(remove));
        if (ids.length < INDEX_BATCH) break;
        after = ids[ids.length - 1];
      }
    }
  }

  /**
   * Past the app's session cap, evicts the app's least recently updated 10%
   * (at least one); past the global cap, the store's, as LocalStore does.
   * 0: no cap.
   */
  async evictAfterCreate(totalSessions: number, appName: string): Promise<void> {
    const appCap = appSessionCap(this.limits, appName);
    if (appCap > 0) await this.evictAppOverLimit(appName, appCap);
    const { maxSessions } = this.limits;
    if (maxSessions === 0) return;
    // A cluster's create script counts its bucket only: the store's count is the sum.
    const total = this.keys.clustered ? await this.totalSessions() : totalSessions;
    if (total <= maxSessions) return;
    const count = evictionCount(maxSessions);
    const perBucket = await Promise.all(
      this.keys.buckets.map((bucket) =>
        this.call((redis) => redis.zrange(this.keys.updated(bucket), 0, count - 1, "WITHSCORES")),
      ),
    );
    const oldest = perBucket
      .flatMap((flat) => pairsOf(flat))
      .sort((a, b) => a.score - b.score)
      .slice(0, count);
    for (const { member, score } of oldest) {
      // Re-checked in the script: a session updated since is kept, and
      // concurrent evictions (other replicas) stop at the same floor (one node; keys.ts).
      const { outcome } = await this.deleteOne(member, {
        updatedBelow: score + 1,
        keepAtLeast: maxSessions + 1 - count,
      });
      if (outcome === "DELETED") this.evicted++;
    }
  }

  /**
   * Evicts the oldest 10% of one app's sessions once it holds more than its
   * cap. Its sessions are read from the app's index and ordered by their
   * update times (ZMSCORE): O(sessions of the app), once per tenth of the cap
   * of creations. Replicas creating at once may each evict a tenth.
   */
  private async evictAppOverLimit(appName: string, cap: number): Promise<void> {
    const appIndex = (bucket: Bucket) => this.keys.index({ appName }, bucket);
    const sizes = await Promise.all(
      this.keys.buckets.map((bucket) => this.call((redis) => redis.zcard(appIndex(bucket)))),
    );
    if (sizes.reduce((a, b) => a + b, 0) <= cap) return;
    const perBucket = await Promise.all(
      this.keys.buckets.map(async (bucket) => {
        const ids = await this.call((redis) => redis.zrange(appIndex(bucket), 0, -1));
        if (ids.length === 0) return [];
        const scores = await this.call((redis) => redis.zmscore(this.keys.updated(bucket), ...ids));
        return ids.map((id, i) => ({ id, updated: scores[i] === null ? Number.NaN : Number(scores[i]) }));
      }),
    );
    const oldest = perBucket
      .flat()
      .filter((s) => !Number.isNaN(s.updated))
      .sort((a, b) => a.updated - b.updated)
      .slice(0, evictionCount(cap));
    for (const { id, updated } of oldest) {
      if ((await this.deleteOne(id, { updatedBelow: updated + 1 })).outcome === "DELETED") this.evicted++;
    }
  }

  private call<T>(run: (redis: RedisClient) => Promise<T>): Promise<T> {
    return this.connection.call(run);
  }
}

/** A flat [member, score, ...] reply as pairs. */
function pairsOf(flat: readonly string[]): Array<{ member: string; score: number }> {
  const pairs: Array<{ member: string; score: number }> = [];
  for (let i = 0; i < flat.length; i += 2) pairs.push({ member: flat[i], score: Number(flat[i + 1]) });
  return pairs;
}
