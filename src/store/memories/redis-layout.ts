/**
 * How the Redis store keeps long-term memories. Per app, under
 * `<prefix>:mem:<hex app>:` on one node and `<prefix>:mem:{<hex app>}:` on a
 * Redis Cluster (memory ids, user ids and supersession groups are
 * hex-encoded in members, so that no value can collide with another or with a
 * separator; hash fields are hex ids too):
 *
 *   rec      hash: hex id -> JSON of the record without its validity and embedding (never changes)
 *   emb      hash: hex id -> the embedding as JSON (returned with the memory)
 *   vec      hash: hex id -> the embedding as float64 little-endian bytes (exact
 *            cosine without parsing JSON)
 *   val      hash: hex id -> "<validFrom>:<invalidAt or empty>:<hex supersededBy or empty>"
 *   ix       hash: hex id -> "<created>:<hex user or ->:<hex group or empty>:<from>:<fingerprint>",
 *            the memory's index entries and identity (idempotency, deletion)
 *   order    zset, score 0: "<created>:<hex id>" (created: 16 digits), newest last
 *   user     zset, score 0: "<hex user or ->:<created>:<hex id>", a user's own
 *            (or, under "-", the memories of no user) newest last
 *   groups   zset, score 0: "<hex group>:<from>:<hex id>", the memories that
 *            supersede each other (group: exact scope and supersession key,
 *            rules.ts) by validFrom (from: 16 digits, validFrom + 10^15)
 *   held     zset, the same entries, of those that held for a while only (not
 *            closed where they began): their validities never overlap, so a
 *            write finds what it supersedes in O(log n) (write-n.lua)
 *   meta     hash: dim (the app's embedding dimension, set by the first embedding),
 *            seq (the number of the app's newest change), and with the Query
 *            Engine docchain, docbuild, docready, docat (docs-5.lua: whether
 *            the app's documents are complete)
 *   chg      zset, score = change number: the change log, the newest
 *            MEMORY_CHANGES_RETAINED changes: "<seq>:w:<hex id>" (written),
 *            "<seq>:s:<hex id>" (superseded; both read as they are now),
 *            "<seq>:d:<JSON [id, user, agent, session] per memory>" (deleted)
 *   <prefix>:memdoc:<hex app>:<hex id>  with the Redis Query Engine: the
 *            memory's document (redis-index.ts says its fields and indexes)
 *   <prefix>:memories  pub/sub channel: the changes of every write and deletion
 *
 * On a cluster every key of an app carries the app's hash tag `{<hex app>}`
 * (one slot per app); the one-node names are unchanged (no tag), so an
 * existing deployment's data needs no migration.
 */
import type { ChainableCommander } from "ioredis";
import type { MemoryCursor, MemoryRecord } from "../types.js";
import { isCluster, type RedisClient } from "../../backends/redis.js";
import { created16 } from "./redis-index.js";
import { exactScopeKey, supersessionKey } from "./rules.js";

/** Hex of a string's UTF-8: how ids, users and groups appear in keys and members. */
export const hex = (s: string) => Buffer.from(s, "utf8").toString("hex");
/** The string a hex of its UTF-8 stands for. */
export const unhex = (s: string) => Buffer.from(s, "hex").toString("utf8");

/** Runs a Redis call, mapping what it throws to a MemoryError (the store's own mapping). */
export type RedisCall = <T>(run: () => Promise<T>) => Promise<T>;

/** How many keys one app's memories have (AppKeys). */
export const APP_KEY_COUNT = 11;

/** The keys of one app's memories, in the order the scripts take them. */
export interface AppKeys {
  records: string;
  validity: string;
  entries: string;
  order: string;
  byUser: string;
  groups: string;
  meta: string;
  held: string;
  embeddings: string;
  vectors: string;
  changes: string;
}

/** The member suffix "<created>:<hex id>" a cursor or memory sorts by. */
export function orderSuffix(m: MemoryCursor): string {
  return `${created16(m.createdAt)}:${hex(m.memoryId)}`;
}

/** The hex group of a memory ("" without a supersession key): its exact scope and key. */
export function groupOf(m: MemoryRecord): string {
  const key = supersessionKey(m);
  return key === "" ? "" : hex(`${exactScopeKey(m)}\u0001${key}`);
}

/** The user part of a memory's index entries: its hex user, or "-" for none. */
export function userOf(m: Pick<MemoryRecord, "userId">): string {
  return m.userId === undefined ? "-" : hex(m.userId);
}

/** validFrom as 16 digits that sort as it does: timestamps from year 1 (about -6.2 * 10^13 ms) on are positive past 10^15. */
export const sortableFrom = (validFrom: number) => String(validFrom + 1e15).padStart(16, "0");

/** The index entry write-n.lua stores for a memory (ix), a pure function of its record. */
export function entryOf(m: MemoryRecord): string {
  return `${created16(m.createdAt)}:${userOf(m)}:${groupOf(m)}:${sortableFrom(m.validFrom)}:${m.fingerprint}`;
}

/**
 * A record from its stored JSON (or that JSON parsed, as a notice carries
 * it), validity string and embedding (JSON, parsed, or none: "" or null).
 */
export function decode(record: string | object, validity: string, embedding?: string | number[] | null): MemoryRecord {
  const [validFrom, invalidAt, supersededBy] = validity.split(":");
  const memory = (typeof record === "string" ? JSON.parse(record) : record) as MemoryRecord;
  if (embedding) memory.embedding = typeof embedding === "string" ? (JSON.parse(embedding) as number[]) : embedding;
  memory.validFrom = Number(validFrom);
  if (invalidAt !== "") memory.invalidAt = Number(invalidAt);
  if (supersededBy !== "") memory.supersededBy = unhex(supersededBy);
  return memory;
}

/** The JSON write-n.lua stores: everything but the validity, which supersession changes, and the embedding, kept apart. */
export function encode(m: MemoryRecord): string {
  const { validFrom: _from, invalidAt: _until, supersededBy: _by, embedding: _embedding, ...rest } = m;
  return JSON.stringify(rest);
}

/** An app's stamp from its meta's seq and its order index's count, as the scripts write it (includes/stamp.lua). */
export const stampFrom = (seq: string | null, count: number) => `${seq ?? "0"}:${count}`;

/** An embedding as the vectors hash keeps it. */
export function vectorBytes(embedding: readonly number[]): Buffer {
  return Buffer.from(Float64Array.from(embedding).buffer);
}

/** An embedding from the vectors hash (copied: a Buffer from ioredis need not be 8-byte aligned). */
export function vectorOf(bytes: Buffer): number[] {
  const copy = new Float64Array(bytes.length / 8);
  Buffer.from(copy.buffer).set(bytes);
  return Array.from(copy);
}

/** The Redis the memories live in: the command connection, the key layout and the one way to read an app's keys. */
export class MemoryRedis {
  /** On a Redis Cluster: hash-tagged keys, a channel per app, sharded pub/sub (the header says the layout). */
  readonly clustered: boolean;

  constructor(
    readonly redis: RedisClient,
    readonly prefix: string,
    /** Runs a Redis call, failures as MemoryErrors. */
    readonly call: RedisCall,
  ) {
    this.clustered = isCluster(redis);
  }

  /**
   * Runs the reads `build` queues on one app's keys as one transaction
   * (MULTI/EXEC); their replies in order. Never a pipeline: while the app's
   * slot moves between masters (resharding) its keys sit on both, and ioredis
   * re-sends a pipeline whose command met ASK whole to the node holding that
   * key, where the keys still on the other read as absent (a memory not
   * found, an empty page; lone commands too when auto-pipelining batches
   * them). A transaction is redirected whole, or refused (TRYAGAIN, retried,
   * then UNAVAILABLE); on one node it also reads the keys at one instant.
   */
  transaction(build: (tx: ChainableCommander) => ChainableCommander): Promise<unknown[]> {
    return this.call(async () => {
      const replies = (await build(this.redis.multi()).exec())!;
      return replies.map(([err, value]) => {
        if (err) throw err;
        return value;
      });
    });
  }

  /** PUBLISH on one node (every replica of any release hears it); SPUBLISH to the app's shard on a cluster. */
  get publishCommand(): string {
    return this.clustered ? "SPUBLISH" : "PUBLISH";
  }

  /** The channel of an app's notices: one for every app on one node (today's name), the app's own in its slot on a cluster. */
  channelOf(appName: string): string {
    return this.clustered ? `${this.prefix}:memories:{${hex(appName)}}` : `${this.prefix}:memories`;
  }

  /** The prefix of an app's keys. On a cluster the hash tag puts every key of the app in one slot, so each script stays on one shard. */
  baseOf(appName: string): string {
    return this.clustered ? `${this.prefix}:mem:{${hex(appName)}}` : `${this.prefix}:mem:${hex(appName)}`;
  }

  /** The keys of one app's memories. */
  keysOf(appName: string): AppKeys {
    const base = this.baseOf(appName);
    return {
      records: `${base}:rec`,
      validity: `${base}:val`,
      entries: `${base}:ix`,
      order: `${base}:order`,
      byUser: `${base}:user`,
      groups: `${base}:groups`,
      meta: `${base}:meta`,
      held: `${base}:held`,
      embeddings: `${base}:emb`,
      vectors: `${base}:vec`,
      changes: `${base}:chg`,
    };
  }
}
