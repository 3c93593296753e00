/**
 * Where the Redis store keeps what, under `<prefix>:`. Ids are hex-encoded in
 * key names so that no id, whatever bytes it holds, can collide with another
 * or act as a pattern. These names are the data format shared by every
 * replica of every release: change them only with a migration.
 *
 * Two layouts, one code path. On one Redis server there is a single bucket
 * whose tag is empty: every name below is exactly what it was before
 * clusters (existing data keeps working, no migration). On a Redis Cluster
 * sessions are spread over CLUSTER_BUCKETS buckets; a session's bucket is a
 * stable hash of its id, and every key of a session AND every per-bucket
 * index or counter its scripts touch carries the bucket's hash tag right
 * after the prefix, `<prefix>:{b17}:s:<hex id>`, so each script touches one
 * slot. Listings read every bucket's index and merge (stats sum the
 * buckets' counters). The bucket count is recorded in `<prefix>:buckets` the
 * first time a store opens on a cluster and read from there ever after.
 *
 * Per bucket (`<tag>` is "" on one node, "{b<n>}:" on a cluster):
 *
 *   <tag>s:<hex id>      hash: app, user, meta, created, updated, head, first, inc (incarnation),
 *                        ver (state version, absent: 0), and the session's state:
 *                        "st:<key>" -> value JSON, stn (entries), stb (bytes) (scripts/includes/state.lua)
 *   <tag>s:<hex id>:ev   hash: seq -> encoded event (seqs first..head, consecutive; codec.ts)
 *   <tag>s:<hex id>:id   hash: event id -> "seq:fingerprint" (idempotency; trimmed
 *                        events' ids stay for the dedupe window)
 *   <tag>s:<hex id>:tr   zset: trimmed event ids by trim time (the dedupe window)
 *   <tag>updated         zset: session id by updatedAt (eviction, cleanup)
 *   <tag>ix:all, <tag>ix:a:<hex app>, <tag>ix:u:<hex user>, <tag>ix:au:<hex app>:<hex user>
 *                        zsets, score 0: session ids in byte (= code-point) order
 *   <tag>recent:all, <tag>recent:a:<hex app>, <tag>recent:u:<hex user>, <tag>recent:au:<hex app>:<hex user>
 *                        zsets: "<hex id>!<seq, 16 digits>" by ingest position,
 *                        each capped at RECENT_CAP; an event is in the four of
 *                        its session's tenancy, so a scoped listing reads its
 *                        own index and no other tenant's appends crowd it out.
 *                        One node: the position is the stats field "ingested"
 *                        (events appended store-wide). Cluster: the writing
 *                        replica's clock in µs, kept increasing per bucket by
 *                        "ingested" (the bucket's last position), so buckets merge
 *                        by time: exact within a bucket, by clock across them
 *   <tag>stats           hash: sessions, events, ingested (kept by the scripts: O(1) stats per bucket)
 *   <tag>notices         pub/sub channel: {"s": id, "h": head, "i": incarnation} or {"s": id, "d": 1, "i": incarnation}
 *                        (notices.ts reads them); PUBLISH on one node, SPUBLISH on a cluster
 *   {b<n>}:outbox        cluster only, hash: "<hex id>!<incarnation>!<ver>" -> the app:/user:
 *                        state changes of a write, waiting to be applied in the app's slot (redis.ts)
 *
 * State shared by sessions (session state's app: and user: keys):
 *
 *   one node:  st:a:<hex app>, st:au:<hex app>:<hex user>
 *   cluster:   {st:<hex app>}:a, {st:<hex app>}:au:<hex user> (one slot per app, so the
 *              app's and its users' states change together), and
 *              {st:<hex app>}:applied, zset: outbox entries applied, by time (idempotency)
 *              hashes: fields as the session's ("st:<key>", stn, stb); the user's goes with DeleteUserData
 *
 * Store-wide (one key each, so no tag is needed on a cluster):
 *
 *   erasures             hash: "<hex app>:<hex user>" -> token, erasures in progress (resumeErasures)
 *   buckets              cluster only: the bucket count, written once
 */
import { createHash } from "node:crypto";
import { MemoryError } from "../../errors.js";
import { scopesOfSession, type RecentScope } from "../rules.js";
import type { RedisConnection } from "./connection.js";

/**
 * Session buckets on a cluster. A bucket is one slot, so the buckets bound
 * how many masters share the session writes; each listing reads every
 * bucket. 64 spreads writes evenly over up to ~16 masters (four buckets each
 * at least) while a listing stays 64 small reads, pipelined per node.
 */
export const CLUSTER_BUCKETS = 64;

/** The hex of a text's UTF-8 bytes, as ids stand in key names. */
function hex(text: string): string {
  return Buffer.from(text, "utf8").toString("hex");
}

/** The text a hex key part stands for. */
function unhex(hexText: string): string {
  return Buffer.from(hexText, "hex").toString("utf8");
}

/** A session's tenancy: it names the session's index keys and never changes while the session lives. */
export interface Tenancy {
  appName: string;
  userId: string;
}

/** A bucket, by the tag its keys carry after the prefix: "" (one node) or "{b<n>}:" (cluster). */
export type Bucket = string;

/** A session's four keys of one kind, one per scope it is listed in: all, app, user, app + user. */
type ScopeKeys = [string, string, string, string];

/** The key names of one store (one MEMORY_KEY_PREFIX). */
export class RedisKeys {
  /** Every bucket: [""] on one node. */
  readonly buckets: readonly Bucket[];
  /** True on a cluster: tagged names, the outbox for shared state. */
  readonly clustered: boolean;
  /** Erasures in progress. */
  readonly erasures: string;
  /** Cluster only: the recorded bucket count. */
  readonly bucketCount: string;

  /** `buckets`: 0 for one node, else the cluster's (recorded) bucket count. */
  constructor(
    private readonly prefix: string,
    buckets = 0,
  ) {
    this.clustered = buckets > 0;
    this.buckets = this.clustered ? Array.from({ length: buckets }, (_, n) => `{b${n}}:`) : [""];
    this.erasures = this.key("erasures");
    this.bucketCount = this.key("buckets");
  }

  /** The bucket of a session: a stable hash of its id ("" on one node). */
  bucketOf(sessionId: string): Bucket {
    if (!this.clustered) return "";
    return this.buckets[createHash("sha1").update(sessionId, "utf8").digest().readUInt32BE(0) % this.buckets.length];
  }

  /** A bucket's sessions by updatedAt. */
  updated(bucket: Bucket): string {
    return this.key(`${bucket}updated`);
  }

  /** A bucket's counters: sessions, events, ingested. */
  stats(bucket: Bucket): string {
    return this.key(`${bucket}stats`);
  }

  /** A bucket's pub/sub channel of session notices. */
  channel(bucket: Bucket): string {
    return this.key(`${bucket}notices`);
  }

  /** Every notice channel. */
  channels(): string[] {
    return this.buckets.map((bucket) => this.channel(bucket));
  }

  /** Cluster: a bucket's app:/user: state changes waiting to be applied. */
  outbox(bucket: Bucket): string {
    return this.key(`${bucket}outbox`);
  }

  /** The session's hash. */
  session(sessionId: string): string {
    return this.key(`${this.bucketOf(sessionId)}s:${hex(sessionId)}`);
  }

  /** The session's events hash (seq -> encoded event). */
  events(sessionId: string): string {
    return `${this.session(sessionId)}:ev`;
  }

  /** Session hash, events hash, event ids hash. */
  sessionKeys(sessionId: string): [string, string, string] {
    const base = this.session(sessionId);
    return [base, `${base}:ev`, `${base}:id`];
  }

  /** The session's trimmed ids by trim time (the dedupe window). */
  trimmedIds(sessionId: string): string {
    return `${this.session(sessionId)}:tr`;
  }

  /** The app's state (session state's "app:" keys). */
  appState(appName: string): string {
    return this.key(this.clustered ? `{st:${hex(appName)}}:a` : `st:a:${hex(appName)}`);
  }

  /** The user's state in one app (session state's "user:" keys). */
  userState(tenancy: Tenancy): string {
    return this.key(
      this.clustered
        ? `{st:${hex(tenancy.appName)}}:au:${hex(tenancy.userId)}`
        : `st:au:${hex(tenancy.appName)}:${hex(tenancy.userId)}`,
    );
  }

  /** Cluster: the outbox entries already applied to an app's (and its users') state. */
  stateApplied(appName: string): string {
    return this.key(`{st:${hex(appName)}}:applied`);
  }

  /** A bucket's session index answering one filter (all, app, user, app + user). */
  index(scope: RecentScope, bucket: Bucket): string {
    return this.key(`${bucket}ix:${scopeSuffix(scope)}`);
  }

  /** The four index keys a session belongs to: all, app, user, app + user. */
  indexesOf(tenancy: Tenancy, bucket: Bucket): ScopeKeys {
    return scopesOfSession(tenancy.appName, tenancy.userId).map((scope) => this.index(scope, bucket)) as ScopeKeys;
  }

  /** A bucket's recent-events index of one scope (src/store/rules.ts RecentScope). */
  recent(scope: RecentScope, bucket: Bucket): string {
    return this.key(`${bucket}recent:${scopeSuffix(scope)}`);
  }

  /** The four recent-events indexes a session's events go into: all, app, user, app + user. */
  recentOf(tenancy: Tenancy, bucket: Bucket): ScopeKeys {
    return scopesOfSession(tenancy.appName, tenancy.userId).map((scope) => this.recent(scope, bucket)) as ScopeKeys;
  }

  private key(name: string): string {
    return `${this.prefix}:${name}`;
  }
}

/** "all", "a:<hex app>", "u:<hex user>" or "au:<hex app>:<hex user>". */
function scopeSuffix(scope: RecentScope): string {
  if (scope.appName !== undefined && scope.userId !== undefined) return `au:${hex(scope.appName)}:${hex(scope.userId)}`;
  if (scope.appName !== undefined) return `a:${hex(scope.appName)}`;
  if (scope.userId !== undefined) return `u:${hex(scope.userId)}`;
  return "all";
}

/** Member prefix of the session's entries in the recent indexes; "!" sorts below every hex digit. */
export function recentMemberPrefix(sessionId: string): string {
  return `${hex(sessionId)}!`;
}

/** The event a recent-index member names ("<hex id>!<seq>"; the Lua side is includes/recent.lua). */
export function recentMemberRef(member: string): { sessionId: string; seq: number } {
  const bang = member.indexOf("!");
  return { sessionId: unhex(member.slice(0, bang)), seq: Number(member.slice(bang + 1)) };
}

/** The erasures hash field of a tenancy. */
export function erasureField(tenancy: Tenancy): string {
  return `${hex(tenancy.appName)}:${hex(tenancy.userId)}`;
}

/** The tenancy an erasures hash field names. */
export function erasureTenancy(field: string): Tenancy {
  const [appName, userId] = field.split(":").map(unhex);
  return { appName, userId };
}

/**
 * Cluster: the bucket count recorded under `<prefix>:buckets`, written
 * (CLUSTER_BUCKETS) by the first store to open: every later one, of any
 * release, reads the same count, so a session's bucket never changes.
 */
export async function recordedBuckets(connection: RedisConnection, keyPrefix: string): Promise<number> {
  const key = new RedisKeys(keyPrefix, CLUSTER_BUCKETS).bucketCount;
  await connection.call((redis) => redis.set(key, CLUSTER_BUCKETS, "NX"));
  const recorded = Number(await connection.call((redis) => redis.get(key)));
  if (!Number.isInteger(recorded) || recorded < 1)
    throw new MemoryError(
      "FAILED_PRECONDITION",
      `${key} holds ${recorded}, not a bucket count: this key prefix holds something else`,
    );
  return recorded;
}

/** Byte order of UTF-8 strings: how a zset with equal scores sorts its members. */
export function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}
