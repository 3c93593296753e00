/**
 * Long-term memories of the Redis store. Per app, under
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
 * Ranking. With the Redis Query Engine (one node with the search module:
 * Redis 8, Redis Stack, Valkey with valkey-search's RediSearch-compatible
 * module) searches run on its indexes over an app's whole scope, filter
 * included in the query: SearchMemories scores with redis-index.ts's
 * LexicalScore, whose statistics (documents, their length, how many hold
 * each term) are counted among what the filter selects (a LIMIT 0 0 count
 * per term and one aggregate, pipelined), never index-wide, so another
 * user's memories change no caller's score. Each query term's documents are
 * read shortest first (a term's share of the score falls with the length
 * alone), and reading stops once the best `limit` score at least what any
 * unread document could (the threshold algorithm): exact, and reading little
 * more than the best matches. nearestMemories is a KNN query with the filter
 * as its pre-filter (HNSW; RediSearch falls back to brute force for small
 * filtered sets), rescored with the exact cosine of the stored float64
 * vectors. Pinned listings (Recall's core memories) are one query sorted
 * newest first.
 *
 * Without the engine (a Redis without the module, or a Redis Cluster, where
 * RediSearch has no coordinator) nothing is dropped: searches rank the whole
 * filtered scope in this process (exact, same scores, but O(scope) per
 * search: docs/memories.md), and so does an app whose documents are
 * not complete yet (memories from before documents, or changed by an older
 * release: docs-5.lua builds them in the background, a page per call).
 * Start-up logs which path the store takes.
 *
 * On a cluster every key of an app carries the app's hash tag `{<hex app>}`,
 * so all of them live in one slot and each script stays atomic per app; the
 * apps spread over the shards. The one-node names are unchanged (no tag), so
 * an existing deployment's data needs no migration. Notices go to a channel
 * per app in the app's slot, `<prefix>:memories:{<hex app>}`, by SPUBLISH
 * from the script itself (sharded pub/sub: each shard carries its own apps'
 * notices, instead of every node relaying all of them); a replica
 * SSUBSCRIBEs to the channels of the apps it has watchers for, and once a
 * subscription is acknowledged (or renewed after a failover or a slot move)
 * tells those watchers to catch up from the change log, so nothing committed
 * before it counts is missed. A write batch spanning apps runs one script
 * per app on a cluster: every app's checks run first, then the writes, so a
 * refused batch writes nothing unless another write to the same memory id
 * lands between the checks and the writes (then the apps before the refused
 * one are written; a retry with the same ids is idempotent).
 *
 * Every write batch is one Lua script (redis-scripts/write-n.lua): checks,
 * supersession, documents and index upkeep happen atomically, so replicas
 * writing one key at once leave exactly one memory of it valid. Deletions
 * are one script per call (or per page of a scope). Listing walks the
 * scope's index newest first and filters with rules.ts, the one place the
 * semantics live.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { ChainableCommander, Cluster, Redis } from "ioredis";
import { log } from "../../log.js";
import type {
  LongTermMemoryStore,
  MemoryChange,
  MemoryChangeListener,
  MemoryChangePage,
  MemoryChangeWindow,
  MemoryCursor,
  MemoryFilter,
  MemoryRecord,
  MemoryScopeFilter,
  MemoryWriteResult,
  RankedMemory,
} from "../types.js";
import { KeyedListeners } from "../notices.js";
import { isCluster, type RedisClient } from "../redis/connection.js";
import { loadScripts, runThenWait, type WaitForReplicas } from "../redis/scripts.js";
import { queryTerms } from "./analyzer.js";
import { lexicalTerms } from "./lexical.js";
import {
  created16,
  documentFields,
  filterQuery,
  float32Bytes,
  LexicalScore,
  termQuery,
  textIndexArgs,
  tieKey,
  vectorIndexArgs,
} from "./redis-index.js";
import {
  changeWindowOf,
  cosine,
  deletedStub,
  embeddingDimensionMismatch,
  exactScopeKey,
  filterSelects,
  MEMORY_CHANGES_RETAINED,
  memoryIdTaken,
  requireRetained,
  scopeSelects,
  supersessionKey,
} from "./rules.js";

/** Index entries read per round trip while listing or ranking a scope in process. */
const LIST_PAGE = 200;
/** Index entries read per round trip while ranking a whole scope in process. */
const SCAN_PAGE = 1000;
/** Memories removed per script call by a deletion by scope or an erasure. */
const DELETE_PAGE = 500;
/** Memories given documents per script call while building an app's documents (docs-5.lua): each vector's HNSW insertion holds Redis ~0.3-1 ms. */
const DOCUMENT_BUILD_PAGE = 100;
/**
 * The least time between two builds of one app's documents started by one
 * replica: while replicas of an older release keep writing (a rolling
 * upgrade), every build is outdated at once, and the app ranks in process
 * meanwhile.
 */
export const DOCUMENT_REBUILD_INTERVAL_MS = 60_000;
/** How long an index found fully indexed is trusted before FT.INFO is asked again (a restarted server re-indexes). */
const INDEX_READY_TRUSTED_MS = 1000;

/** Where the long-term memory scripts are (the Redis store loads them at open: src/store/redis/script-check.ts). */
export const SCRIPTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "redis-scripts");

type Reply = Array<string | number | null>;

const hex = (s: string) => Buffer.from(s, "utf8").toString("hex");
const unhex = (s: string) => Buffer.from(s, "hex").toString("utf8");

/** Runs a Redis call, mapping what it throws to a MemoryError (the store's own mapping). */
export type RedisCall = <T>(run: () => Promise<T>) => Promise<T>;

/** How many keys one app's memories have (AppKeys). */
const APP_KEY_COUNT = 11;

/** The keys of one app's memories, in the order the scripts take them. */
interface AppKeys {
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

/** One index a listing walks: a zset and the prefix its members have before "<created>:<hex id>". */
interface IndexSource {
  key: string;
  prefix: string;
}

/** A ranked memory before its record is read: its hex id, score, and tie key (redis-index.ts tieKey). */
interface Hit {
  id: string;
  score: number;
  tie: string;
}

/** Best first; equal scores by tie key (newest first). */
const byScore = (a: Hit, b: Hit) => b.score - a.score || (a.tie < b.tie ? -1 : a.tie > b.tie ? 1 : 0);
/** How far apart two sums of the same weights in another order can be: scores this close are equal. */
const SAME_SCORE = 1e-9;

/** The member suffix "<created>:<hex id>" a cursor or memory sorts by. */
function orderSuffix(m: MemoryCursor): string {
  return `${created16(m.createdAt)}:${hex(m.memoryId)}`;
}

/** The hex group of a memory ("" without a supersession key): its exact scope and key. */
function groupOf(m: MemoryRecord): string {
  const key = supersessionKey(m);
  return key === "" ? "" : hex(`${exactScopeKey(m)}\u0001${key}`);
}

/** The user part of a memory's index entries: its hex user, or "-" for none. */
function userOf(m: Pick<MemoryRecord, "userId">): string {
  return m.userId === undefined ? "-" : hex(m.userId);
}

/** validFrom as 16 digits that sort as it does: timestamps from year 1 (about -6.2 * 10^13 ms) on are positive past 10^15. */
const sortableFrom = (validFrom: number) => String(validFrom + 1e15).padStart(16, "0");

/** The index entry write-n.lua stores for a memory (ix), a pure function of its record. */
function entryOf(m: MemoryRecord): string {
  return `${created16(m.createdAt)}:${userOf(m)}:${groupOf(m)}:${sortableFrom(m.validFrom)}:${m.fingerprint}`;
}

/**
 * A record from its stored JSON (or that JSON parsed, as a notice carries
 * it), validity string and embedding (JSON, parsed, or none: "" or null).
 */
function decode(record: string | object, validity: string, embedding?: string | number[] | null): MemoryRecord {
  const [validFrom, invalidAt, supersededBy] = validity.split(":");
  const memory = (typeof record === "string" ? JSON.parse(record) : record) as MemoryRecord;
  if (embedding) memory.embedding = typeof embedding === "string" ? (JSON.parse(embedding) as number[]) : embedding;
  memory.validFrom = Number(validFrom);
  if (invalidAt !== "") memory.invalidAt = Number(invalidAt);
  if (supersededBy !== "") memory.supersededBy = unhex(supersededBy);
  return memory;
}

/** The JSON write-n.lua stores: everything but the validity, which supersession changes, and the embedding, kept apart. */
function encode(m: MemoryRecord): string {
  const { validFrom: _from, invalidAt: _until, supersededBy: _by, embedding: _embedding, ...rest } = m;
  return JSON.stringify(rest);
}

/** An app's stamp from its meta's seq and its order index's count, as the scripts write it (includes/stamp.lua). */
const stampFrom = (seq: string | null, count: number) => `${seq ?? "0"}:${count}`;

/** An embedding as the vectors hash keeps it. */
function vectorBytes(embedding: readonly number[]): Buffer {
  return Buffer.from(Float64Array.from(embedding).buffer);
}

/** An embedding from the vectors hash (copied: a Buffer from ioredis need not be 8-byte aligned). */
function vectorOf(bytes: Buffer): number[] {
  const copy = new Float64Array(bytes.length / 8);
  Buffer.from(copy.buffer).set(bytes);
  return Array.from(copy);
}

/** FT.SEARCH's reply (DIALECT 2, RESP2) as [document key, its returned fields]. */
function searchRows(reply: unknown[]): Array<[string, Map<string, string>]> {
  const rows: Array<[string, Map<string, string>]> = [];
  for (let i = 1; i < reply.length; i += 2) {
    const pairs = (reply[i + 1] ?? []) as string[];
    const fields = new Map<string, string>();
    for (let j = 0; j + 1 < pairs.length; j += 2) fields.set(String(pairs[j]), String(pairs[j + 1]));
    rows.push([String(reply[i]), fields]);
  }
  return rows;
}

/** Loads redis-scripts/<name>-<keys>.lua as commands; "n" keys: the caller passes the key count first. */
function defineScripts(redis: RedisClient): void {
  for (const [name, { lua, numberOfKeys }] of loadScripts(SCRIPTS_DIR)) {
    const command = `engram_memories_${name}`;
    // A cluster call holds one app's keys: a fixed count, so ioredis' auto-pipelining (when on) routes it by its first key, not by the count.
    const keys = numberOfKeys ?? (isCluster(redis) ? APP_KEY_COUNT : undefined);
    redis.defineCommand(command, keys === undefined ? { lua } : { numberOfKeys: keys, lua });
  }
}

/** The Redis LongTermMemoryStore: a RedisStore's `memories`, on its command connection and key prefix. */
export class RedisMemories implements LongTermMemoryStore {
  /** Tells this replica's notices from others': its own changes are delivered at once, not again from the channel. */
  private readonly origin = randomUUID();
  /** On a Redis Cluster: hash-tagged keys, a channel per app, sharded pub/sub (the header says the layout). */
  private readonly clustered: boolean;
  private readonly listeners = new KeyedListeners<MemoryChange>();
  /** A connection of its own for the channel: subscribed while the store is open. */
  private subscriber?: RedisClient;
  /** A cluster: the apps whose channels are subscribed (or being subscribed), each settled once Redis answered. */
  private readonly following = new Map<string, Promise<void>>();
  /** With the Redis Query Engine: the documents' key prefix (`<prefix>:memdoc:`); undefined ranks in process (listen() decides). */
  private documents?: string;
  /** The vector indexes of each dimension: created (or found) once per replica. */
  private readonly vectorIndexes = new Map<number, Promise<void>>();
  /** Indexes found fully indexed, and when (INDEX_READY_TRUSTED_MS). */
  private readonly indexedAt = new Map<string, number>();
  /** Per app, when this replica last began building its documents (rate-limited: DOCUMENT_REBUILD_INTERVAL_MS). */
  private readonly documentBuilds = new Map<string, number>();
  private builds = 0;
  private closed = false;

  constructor(
    private readonly redis: RedisClient,
    private readonly prefix: string,
    private readonly call: RedisCall,
    /** MEMORY_REDIS_WAIT_REPLICAS, as the session store waits: after each write and delete script. */
    private readonly wait: WaitForReplicas = { replicas: 0, timeoutMs: 0 },
  ) {
    this.clustered = isCluster(redis);
    defineScripts(redis);
  }

  /** How this store ranks memories: "query-engine", or "in-process" (whole scopes; listen() decides and logs it). */
  get ranking(): "query-engine" | "in-process" {
    return this.documents === undefined ? "in-process" : "query-engine";
  }

  /** The text index's name. */
  private get textIndex(): string {
    return `${this.prefix}:memidx`;
  }

  /**
   * Finds the Redis Query Engine (FT._LIST) and creates the text index when
   * missing; without it (or on a cluster) searches rank in process. Logs
   * which, once. Then gives the documents of apps stored before them in the
   * background.
   */
  private async prepareIndex(): Promise<void> {
    let reason: string | undefined;
    if (this.clustered) reason = "a Redis Cluster (the Redis Query Engine has no coordinator across shards)";
    else {
      try {
        const names = (await this.redis.call("FT._LIST")) as string[];
        if (!names.includes(this.textIndex))
          await this.createIndex(textIndexArgs(this.textIndex, `${this.prefix}:memdoc:`));
        this.documents = `${this.prefix}:memdoc:`;
      } catch (err) {
        if (!/unknown command/i.test(String((err as Error).message))) throw err;
        reason = "this Redis has no Redis Query Engine (no FT.* commands)";
      }
    }
    if (reason === undefined)
      log.info(
        { prefix: this.prefix, index: this.textIndex },
        "long-term memory: searches run on the Redis Query Engine",
      );
    else
      log.warn(
        { prefix: this.prefix },
        `long-term memory: ${reason}; searches rank each whole scope in process (exact, O(scope) per search)`,
      );
    if (this.documents !== undefined) void this.buildAllDocuments().catch(() => {});
  }

  /** FT.CREATE; an index another replica created meanwhile is as good. */
  private async createIndex(args: string[]): Promise<void> {
    try {
      await this.redis.call("FT.CREATE", ...args);
    } catch (err) {
      if (!/already exists/i.test(String((err as Error).message))) throw err;
    }
  }

  /** The vector index of a dimension, created when missing (once per replica). */
  private vectorIndex(dim: number): Promise<void> {
    let created = this.vectorIndexes.get(dim);
    if (!created) {
      created = this.createIndex(vectorIndexArgs(`${this.textIndex}:v${dim}`, this.documents!, dim));
      created.catch(() => this.vectorIndexes.get(dim) === created && this.vectorIndexes.delete(dim));
      this.vectorIndexes.set(dim, created);
    }
    return created;
  }

  /** True when FT.INFO says the index has indexed every document it covers (a new index over old documents, a restarted server, first scan them). */
  private async indexed(name: string): Promise<boolean> {
    const at = this.indexedAt.get(name);
    if (at !== undefined && Date.now() - at < INDEX_READY_TRUSTED_MS) return true;
    const info = (await this.call(() => this.redis.call("FT.INFO", name))) as unknown[];
    const field = info.indexOf("indexing");
    const ready = field >= 0 && Number(info[field + 1]) === 0;
    if (ready) this.indexedAt.set(name, Date.now());
    return ready;
  }

  /**
   * Whether a search of the app runs on the index: the engine is there, the
   * app's documents are complete (else a build starts, and this search
   * ranks in process), and the index has scanned them all.
   */
  private async onIndex(appName: string, index = this.textIndex): Promise<boolean> {
    if (this.documents === undefined) return false;
    const keys = this.keysOf(appName);
    const [[seq, chain, ready, build], count] = (await this.transaction((tx) =>
      tx.hmget(keys.meta, "seq", "docchain", "docready", "docbuild").zcard(keys.order),
    )) as [Array<string | null>, number];
    if (ready === null || ready !== build || chain !== stampFrom(seq, count)) {
      this.startDocumentBuild(appName);
      return false;
    }
    return this.indexed(index);
  }

  /** Starts building the app's documents, at most once per DOCUMENT_REBUILD_INTERVAL_MS per app from this replica. */
  private startDocumentBuild(appName: string): void {
    const now = Date.now();
    const last = this.documentBuilds.get(appName);
    if (last !== undefined && now - last < DOCUMENT_REBUILD_INTERVAL_MS) return;
    // Entries past the interval rate-limit nothing: dropped, so many apps from an older release do not pile up.
    if (this.documentBuilds.size >= 10_000)
      for (const [app, at] of this.documentBuilds)
        if (now - at >= DOCUMENT_REBUILD_INTERVAL_MS) this.documentBuilds.delete(app);
    this.documentBuilds.set(appName, now);
    // A failed build leaves the app ranked in process; the next one starts after the interval.
    this.buildDocuments(appName).catch(() => {});
  }

  /** At start: every app whose documents are not complete gets them, one app at a time, in the background. */
  private async buildAllDocuments(): Promise<void> {
    let cursor = "0";
    const metaOf = new RegExp(`^${this.prefix.replace(/[^\w]/g, "\\$&")}:mem:([0-9a-f]*):meta$`);
    do {
      const [next, keys] = (await this.call(() =>
        (this.redis as Redis).scan(cursor, "MATCH", `${this.prefix}:mem:*:meta`, "COUNT", 1000),
      )) as [string, string[]];
      cursor = next;
      for (const key of keys) {
        const app = metaOf.exec(key)?.[1];
        if (app === undefined || this.closed) continue;
        await this.onIndex(unhex(app));
      }
    } while (cursor !== "0" && !this.closed);
  }

  /**
   * Builds the app's documents (docs-5.lua), a page per call, resuming an
   * interrupted build; false when another build overtook it. Started when a
   * search finds them incomplete; public for tests.
   */
  async buildDocuments(appName: string): Promise<boolean> {
    const k = this.keysOf(appName);
    const prefix = `${this.documents!}${hex(appName)}:`;
    const token = `${this.origin}:${++this.builds}`;
    const run = (...args: Array<string | Buffer | number>) =>
      this.call(() => this.runDocs([k.records, k.validity, k.order, k.meta, `${this.baseOf(appName)}:pin`, ...args]));
    let after = (await run("begin", token, "resume"))[1] as string;
    for (;;) {
      if (this.closed) return false;
      const [members] = (await this.transaction((tx) =>
        tx.zrangebylex(k.order, after === "" ? "-" : `(${after}`, "+", "LIMIT", 0, DOCUMENT_BUILD_PAGE),
      )) as [string[]];
      const ids = members.map((m) => m.slice(m.indexOf(":") + 1));
      const args: Array<string | Buffer> = [];
      if (ids.length > 0) {
        const [records, embeddings] = (await this.transaction((tx) =>
          tx.hmget(k.records, ...ids).hmget(k.embeddings, ...ids),
        )) as Array<Array<string | null>>;
        for (const [i, id] of ids.entries()) {
          if (records[i] === null) continue;
          const memory = decode(records[i]!, "0::", embeddings[i]);
          if (memory.embedding) await this.vectorIndex(memory.embedding.length);
          args.push(id, documentFields(memory), memory.embedding ? float32Bytes(memory.embedding) : "");
        }
      }
      const last = members.length < DOCUMENT_BUILD_PAGE ? "" : members[members.length - 1];
      if ((await run("page", token, last, prefix, args.length / 3, ...args))[0] === "ABORTED") return false;
      if (last === "") break;
      after = last;
    }
    await this.pruneDocuments(appName, token);
    return (await run("finish", token))[0] === "OK";
  }

  /** Removes the app's documents whose memory is gone (an older release deleted it without its document). */
  private async pruneDocuments(appName: string, token: string): Promise<void> {
    const k = this.keysOf(appName);
    const prefix = `${this.documents!}${hex(appName)}:`;
    let cursor = "0";
    do {
      const [next, keys] = (await this.call(() =>
        (this.redis as Redis).scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000),
      )) as [string, string[]];
      cursor = next;
      const ids = keys.map((key) => key.slice(prefix.length)).filter((id) => /^[0-9a-f]*$/.test(id));
      if (ids.length > 0)
        await this.call(() =>
          this.runDocs([
            k.records,
            k.validity,
            k.order,
            k.meta,
            `${this.baseOf(appName)}:pin`,
            "prune",
            token,
            prefix,
            ids.length,
            ...ids,
          ]),
        );
    } while (cursor !== "0" && !this.closed);
  }

  private runDocs(keysAndArgs: Array<string | Buffer | number>): Promise<Reply> {
    return (
      this.redis as unknown as Record<string, (...args: Array<string | Buffer | number>) => Promise<Reply>>
    ).engram_memories_docs(...keysAndArgs);
  }

  /** Subscribes to the changes other replicas publish and prepares the index (prepareIndex); rejects when Redis cannot be reached. */
  async listen(): Promise<void> {
    const subscriber = this.clustered
      ? this.shardedSubscriber(this.redis as Cluster)
      : (this.redis as Redis).duplicate({ connectionName: `${this.prefix}:memories`, commandTimeout: undefined });
    // Without a listener ioredis reports every failed reconnect as an unhandled error event.
    subscriber.on("error", () => {});
    if (this.clustered) {
      subscriber.on("smessage", (channel: string, message: string) => {
        if (channel.startsWith(`${this.prefix}:memories:{`) && this.listeners.size > 0) this.deliver(message, false);
      });
      // After a failover or a slot move ioredis subscribes again; what was published meanwhile is in the change log.
      subscriber.on("subscribersReady", () => void this.catchUp());
    } else {
      const channel = this.channelOf("");
      subscriber.on("message", (from: string, message: string) => {
        if (from === channel && this.listeners.size > 0) this.deliver(message, false);
      });
    }
    this.subscriber = subscriber;
    // ioredis subscribes again by itself after a reconnect; changes published meanwhile are lost, as WatchMemories says.
    try {
      await subscriber.connect();
      // On a cluster each app's channel is subscribed while it has watchers (subscribeMemories).
      if (!this.clustered) await subscriber.subscribe(this.channelOf(""));
      await this.prepareIndex();
    } catch (err) {
      subscriber.disconnect();
      throw err;
    }
  }

  /** Drops the subscription and every listener (the store is closing). */
  close(): void {
    this.closed = true;
    this.listeners.clear();
    this.following.clear();
    this.subscriber?.disconnect();
  }

  async writeMemories(memories: readonly MemoryRecord[]): Promise<MemoryWriteResult> {
    // One node: the whole batch in one script. A cluster: one script per app (its slot), checked across apps first.
    const batches = new Map<string, number[]>();
    memories.forEach((m, i) => {
      const app = this.clustered ? m.appName : "";
      let batch = batches.get(app);
      if (!batch) batches.set(app, (batch = []));
      batch.push(i);
    });
    if (batches.size > 1) for (const batch of batches.values()) await this.runWrite(memories, batch, "check");
    const written: MemoryRecord[] = new Array<MemoryRecord>(memories.length);
    const superseded: MemoryRecord[] = [];
    for (const batch of batches.values()) {
      const records = await this.runWrite(memories, batch, "");
      batch.forEach((i, j) => (written[i] = records[j]));
      superseded.push(...records.slice(batch.length));
    }
    return { memories: written, superseded };
  }

  /**
   * Runs write-n.lua on `memories[i]` for each i of `batch` (apps sharing a
   * slot on a cluster), refusals named by their index in `memories`; the
   * batch's records as stored, then those it closed ([] for a check).
   */
  private async runWrite(
    memories: readonly MemoryRecord[],
    batch: readonly number[],
    mode: "check" | "",
  ): Promise<MemoryRecord[]> {
    const apps = new Map<string, number>();
    const keys: string[] = [];
    for (const i of batch) {
      const appName = memories[i].appName;
      if (apps.has(appName)) continue;
      apps.set(appName, apps.size + 1);
      keys.push(...Object.values(this.keysOf(appName)));
    }
    const args: Array<string | number | Buffer> = [
      this.channelOf(memories[batch[0]].appName),
      this.origin,
      batch.length,
    ];
    if (this.documents !== undefined && mode === "")
      for (const dim of new Set(batch.map((i) => memories[i].embedding?.length ?? 0)))
        if (dim > 0) await this.call(() => this.vectorIndex(dim));
    for (const i of batch) {
      const m = memories[i];
      const documents = this.documents === undefined || mode === "check" ? "" : `${this.documents}${hex(m.appName)}:`;
      args.push(
        apps.get(m.appName)!,
        hex(m.memoryId),
        m.fingerprint,
        encode(m),
        created16(m.createdAt),
        userOf(m),
        groupOf(m),
        m.validFrom,
        m.invalidAt ?? "",
        m.embedding?.length ?? 0,
        sortableFrom(m.validFrom),
        m.embedding ? JSON.stringify(m.embedding) : "",
        m.embedding ? vectorBytes(m.embedding) : "",
        documents,
        documents === "" ? "" : documentFields(m),
        documents !== "" && m.embedding ? float32Bytes(m.embedding) : "",
      );
    }
    args.push(MEMORY_CHANGES_RETAINED, this.publishCommand, mode);
    // On a cluster the key count is fixed (defineScripts): one app per call.
    const reply = await this.call(() =>
      this.runWriting("write", this.clustered ? [...keys, ...args] : [keys.length, ...keys, ...args]),
    );
    if (reply[0] === "TAKEN") {
      const i = batch[reply[1] as number];
      throw memoryIdTaken(`memories[${i}].memory_id`, memories[i].memoryId);
    }
    if (reply[0] === "DIMENSION")
      throw embeddingDimensionMismatch(
        `memories[${batch[reply[1] as number]}].embedding`,
        reply[2] as number,
        reply[3] as number,
      );
    if (mode === "check") return [];
    if (reply[1] !== "") this.deliver(reply[1] as string, true);
    const records: MemoryRecord[] = [];
    for (let i = 2; i < reply.length; i += 3)
      records.push(decode(reply[i] as string, reply[i + 1] as string, reply[i + 2] as string));
    return records;
  }

  async getMemory(appName: string, memoryId: string): Promise<MemoryRecord | undefined> {
    const keys = this.keysOf(appName);
    const id = hex(memoryId);
    const [record, validity, embedding] = (await this.transaction((tx) =>
      tx.hget(keys.records, id).hget(keys.validity, id).hget(keys.embeddings, id),
    )) as Array<string | null>;
    return record === null || validity === null ? undefined : decode(record, validity, embedding);
  }

  async searchMemories(filter: MemoryFilter, query: string, limit: number): Promise<RankedMemory[]> {
    const terms = queryTerms(query);
    if (terms.length === 0 || limit <= 0) return [];
    const hits = (await this.onIndex(filter.scope.appName))
      ? await this.searchIndex(filter, terms, limit)
      : await this.searchScope(filter, terms, limit);
    return this.rankedMemories(filter, hits);
  }

  /**
   * The best `limit` by LexicalScore, on the index: statistics among what the
   * filter selects, then each term's documents shortest first, a page per
   * term per round (pages doubling), until no unread document can beat the
   * best `limit` (the header says why this is exact).
   */
  private async searchIndex(filter: MemoryFilter, terms: string[], limit: number): Promise<Hit[]> {
    const selected = filterQuery(filter);
    const [totals, ...holding] = await this.ftPipeline([
      [
        "FT.AGGREGATE",
        this.textIndex,
        selected,
        "GROUPBY",
        "0",
        "REDUCE",
        "COUNT",
        "0",
        "AS",
        "n",
        "REDUCE",
        "SUM",
        "1",
        "@len",
        "AS",
        "total",
        "DIALECT",
        "2",
      ],
      ...terms.map((term) => [
        "FT.SEARCH",
        this.textIndex,
        `${selected} ${termQuery(term)}`,
        "LIMIT",
        "0",
        "0",
        "DIALECT",
        "2",
      ]),
    ]);
    // One group (GROUPBY 0): [1, [name, value, ...]], or no row when nothing is selected.
    const row = searchRows([0, "totals", (totals as unknown[])[1] ?? []])[0][1];
    const score = new LexicalScore({
      documents: Number(row.get("n") ?? 0),
      totalLength: Number(row.get("total") ?? 0),
      holding: new Map(terms.map((term, i) => [term, Number((holding[i] as unknown[])[0])])),
    });
    const lists = [...score.terms].map(([term, weight]) => ({
      term,
      weight,
      read: 0,
      shortest: 0,
      last: "",
      done: false,
    }));
    const seen = new Map<string, Hit>();
    for (let page = Math.max(limit, 64); ; page *= 2) {
      const reading = lists.filter((l) => !l.done);
      if (reading.length === 0) break;
      const replies = await this.ftPipeline(
        reading.map((l) => [
          "FT.SEARCH",
          this.textIndex,
          `${selected} ${termQuery(l.term)}`,
          "SORTBY",
          "rank",
          "ASC",
          "LIMIT",
          String(l.read),
          String(page),
          "RETURN",
          "2",
          "words",
          "rank",
          "DIALECT",
          "2",
        ]),
      );
      reading.forEach((l, i) => {
        const rows = searchRows(replies[i] as unknown[]);
        for (const [, fields] of rows) {
          const words = (fields.get("words") ?? "").split(" ");
          const tie = (fields.get("rank") ?? "").slice(7);
          l.shortest = words.length;
          l.last = tie;
          if (!seen.has(tie)) seen.set(tie, { id: tie.slice(17), tie, score: score.score(words) });
        }
        l.read += rows.length;
        if (rows.length < page) l.done = true;
      });
      // What a document no list has reached yet could score at most: each term's weight at the length its list has reached;
      // it scores that much only at that length in every list, where it comes after the last read, so it loses a tie to any
      // hit ahead of the last read of some list.
      let bound = 0;
      let lastRead = "";
      for (const l of lists) {
        if (l.done) continue;
        bound += l.weight * score.lengthFactor(l.shortest);
        if (l.last > lastRead) lastRead = l.last;
      }
      const kth = [...seen.values()].sort(byScore)[limit - 1];
      if (
        kth &&
        (kth.score > bound * (1 + SAME_SCORE) || (kth.score >= bound * (1 - SAME_SCORE) && kth.tie <= lastRead))
      )
        break;
    }
    return [...seen.values()].sort(byScore).slice(0, limit);
  }

  /** The best `limit` by LexicalScore over the whole filtered scope, read and ranked in this process. */
  private async searchScope(filter: MemoryFilter, terms: string[], limit: number): Promise<Hit[]> {
    const documents: Array<{ memory: MemoryRecord; terms: string[] }> = [];
    for await (const memory of this.newestFirst(filter.scope, SCAN_PAGE))
      if (filterSelects(filter, memory)) documents.push({ memory, terms: lexicalTerms(memory) });
    const holding = new Map(terms.map((term) => [term, 0]));
    let totalLength = 0;
    for (const d of documents) {
      totalLength += d.terms.length;
      for (const term of new Set(d.terms)) if (holding.has(term)) holding.set(term, holding.get(term)! + 1);
    }
    const score = new LexicalScore({ documents: documents.length, totalLength, holding });
    const hits: Hit[] = [];
    for (const d of documents) {
      const s = score.score(d.terms);
      if (s > 0)
        hits.push({ id: hex(d.memory.memoryId), tie: tieKey(d.memory.createdAt, hex(d.memory.memoryId)), score: s });
    }
    return hits.sort(byScore).slice(0, limit);
  }

  async nearestMemories(filter: MemoryFilter, embedding: readonly number[], limit: number): Promise<RankedMemory[]> {
    if (limit <= 0 || embedding.length === 0) return [];
    const keys = this.keysOf(filter.scope.appName);
    const [dim] = (await this.transaction((tx) => tx.hget(keys.meta, "dim"))) as [string | null];
    // An app's embeddings all have its dimension: one of another compares with none.
    if (Number(dim) !== embedding.length) return [];
    const index = `${this.textIndex}:v${embedding.length}`;
    if (this.documents !== undefined) await this.call(() => this.vectorIndex(embedding.length));
    let ids: string[];
    if (await this.onIndex(filter.scope.appName, index)) {
      const [reply] = await this.ftPipeline([
        [
          "FT.SEARCH",
          index,
          `(${filterQuery(filter)})=>[KNN ${limit} @vec $vector AS distance]`,
          "PARAMS",
          "2",
          "vector",
          float32Bytes(embedding),
          "SORTBY",
          "distance",
          "ASC",
          "LIMIT",
          "0",
          String(limit),
          "RETURN",
          "1",
          "ord",
          "DIALECT",
          "2",
        ],
      ]);
      ids = searchRows(reply as unknown[]).map(([, fields]) => fields.get("ord")!.slice(17));
    } else {
      ids = [];
      for await (const memory of this.newestFirst(filter.scope, SCAN_PAGE))
        if (filterSelects(filter, memory)) ids.push(hex(memory.memoryId));
    }
    const scored: Hit[] = [];
    // The exact cosine of the stored float64 vectors, a page of them per read.
    for (let at = 0; at < ids.length; at += SCAN_PAGE) {
      const page = ids.slice(at, at + SCAN_PAGE);
      const [vectors] = (await this.transaction((tx) => tx.hmgetBuffer(keys.vectors, ...page))) as [
        Array<Buffer | null>,
      ];
      page.forEach((id, i) => {
        const bytes = vectors[i];
        if (bytes && bytes.length === 8 * embedding.length)
          scored.push({ id, tie: "", score: cosine(embedding, vectorOf(bytes)) });
      });
    }
    return this.rankedMemories(filter, scored.sort(byScore).slice(0, limit));
  }

  /** The hits' memories, read now, in the hits' order (a memory deleted meanwhile is left out). */
  private async rankedMemories(filter: MemoryFilter, hits: Hit[]): Promise<RankedMemory[]> {
    if (hits.length === 0) return [];
    const keys = this.keysOf(filter.scope.appName);
    const ids = hits.map((h) => h.id);
    const [records, validities] = (await this.transaction((tx) =>
      tx.hmget(keys.records, ...ids).hmget(keys.validity, ...ids),
    )) as Array<Array<string | null>>;
    const found: RankedMemory[] = [];
    hits.forEach((hit, i) => {
      if (records[i] !== null && validities[i] !== null)
        found.push({ memory: decode(records[i]!, validities[i]!), score: hit.score });
    });
    const memories = await this.withEmbeddings(
      filter,
      found.map((f) => f.memory),
    );
    return found.map((f, i) => ({ memory: memories[i], score: f.score }));
  }

  /** FT commands in one round trip (one node only: the engine never runs on a cluster); their replies, or the first error. */
  private ftPipeline(commands: Array<Array<string | Buffer>>): Promise<unknown[]> {
    return this.call(async () => {
      const pipeline = (this.redis as Redis).pipeline();
      for (const [name, ...args] of commands) pipeline.call(name as string, ...args);
      return (await pipeline.exec())!.map(([err, value]) => {
        if (err) throw err;
        return value;
      });
    });
  }

  async listMemories(filter: MemoryFilter, limit: number, after?: MemoryCursor): Promise<MemoryRecord[]> {
    if (limit <= 0) return [];
    const indexed = filter.pinned === true && (await this.onIndex(filter.scope.appName));
    return this.withEmbeddings(
      filter,
      indexed ? await this.listIndexed(filter, limit, after) : await this.listFrom(filter, limit, after),
    );
  }

  /** The first `limit` memories the filter selects after the cursor, from the scope's indexes. */
  private async listFrom(filter: MemoryFilter, limit: number, after?: MemoryCursor): Promise<MemoryRecord[]> {
    const out: MemoryRecord[] = [];
    // A pinned memory's stored JSON holds `"pinned":true` (encode): a record without it is passed over undecoded.
    const mayBeSelected = filter.pinned === true ? (record: string) => record.includes('"pinned":true') : undefined;
    for await (const memory of this.newestFirst(
      filter.scope,
      Math.min(Math.max(limit, LIST_PAGE), 1000),
      after,
      mayBeSelected,
    )) {
      if (!filterSelects(filter, memory)) continue;
      out.push(memory);
      if (out.length === limit) break;
    }
    return out;
  }

  /** listFrom on the text index: the filter's query, newest first ("<created>:<hex id>" descending), a page at a time. */
  private async listIndexed(filter: MemoryFilter, limit: number, after?: MemoryCursor): Promise<MemoryRecord[]> {
    const keys = this.keysOf(filter.scope.appName);
    const cursor = after === undefined ? undefined : orderSuffix(after);
    // Memories created with the cursor's (same millisecond, a larger id) are read and passed over.
    const query = `${filterQuery(filter)}${after === undefined ? "" : ` @created:[-inf ${after.createdAt}]`}`;
    const page = Math.min(Math.max(limit, LIST_PAGE), 1000);
    const out: MemoryRecord[] = [];
    for (let offset = 0; out.length < limit; offset += page) {
      const [reply] = await this.ftPipeline([
        [
          "FT.SEARCH",
          this.textIndex,
          query,
          "SORTBY",
          "ord",
          "DESC",
          "LIMIT",
          String(offset),
          String(page),
          "RETURN",
          "1",
          "ord",
          "DIALECT",
          "2",
        ],
      ]);
      const ids = searchRows(reply as unknown[])
        .map(([, fields]) => fields.get("ord")!)
        .filter((ord) => cursor === undefined || ord < cursor)
        .map((ord) => ord.slice(17));
      if (ids.length > 0) {
        const [records, validities] = (await this.transaction((tx) =>
          tx.hmget(keys.records, ...ids).hmget(keys.validity, ...ids),
        )) as Array<Array<string | null>>;
        for (const [i] of ids.entries()) {
          // A memory deleted since the query is passed over.
          if (records[i] === null || validities[i] === null) continue;
          const memory = decode(records[i]!, validities[i]!);
          if (filterSelects(filter, memory) && out.length < limit) out.push(memory);
        }
      }
      if ((reply as unknown[]).length - 1 < 2 * page) break;
    }
    return out;
  }

  async deleteMemories(appName: string, memoryIds: readonly string[]): Promise<MemoryRecord[]> {
    if (memoryIds.length === 0) return [];
    return this.remove(
      appName,
      memoryIds.map((id) => [hex(id), ""]),
    );
  }

  async deleteMemoriesInScope(scope: MemoryScopeFilter): Promise<MemoryRecord[]> {
    const removed: MemoryRecord[] = [];
    let page: Array<[string, string]> = [];
    // Removed a page at a time as the walk goes: its cursor is past them, so nothing is skipped or seen twice.
    for await (const memory of this.newestFirst(scope, DELETE_PAGE)) {
      if (!scopeSelects(scope, memory)) continue;
      page.push([hex(memory.memoryId), entryOf(memory)]);
      if (page.length === DELETE_PAGE) {
        removed.push(...(await this.remove(scope.appName, page)));
        page = [];
      }
    }
    if (page.length > 0) removed.push(...(await this.remove(scope.appName, page)));
    return removed;
  }

  subscribeMemories(appName: string, listener: MemoryChangeListener): () => void {
    const unsubscribe = this.listeners.subscribe(appName, listener);
    if (!this.clustered) return unsubscribe;
    if (!this.following.has(appName)) this.follow(appName);
    return () => {
      unsubscribe();
      if (!this.listeners.has(appName)) this.unfollow(appName);
    };
  }

  /**
   * On a cluster, resolves once the app's channel is subscribed (UNAVAILABLE
   * when its shard cannot be reached); at once on one node, where one channel
   * carries every app from the start.
   */
  async listening(appName: string): Promise<void> {
    await this.following.get(appName);
  }

  async memoryChangeWindow(appName: string): Promise<MemoryChangeWindow> {
    return changeWindowOf(await this.head(appName));
  }

  async readMemoryChanges(appName: string, after: number, limit: number): Promise<MemoryChangePage> {
    const keys = this.keysOf(appName);
    // One transaction: the head and the log it trimmed agree.
    const [head, entries] = (await this.transaction((tx) =>
      tx.hget(keys.meta, "seq").zrangebyscore(keys.changes, `(${after}`, "+inf", "LIMIT", 0, limit),
    )) as [string | null, string[]];
    requireRetained(after, changeWindowOf(Number(head ?? 0)));
    const parsed = entries.map((entry) => {
      const [, seq, kind, rest] = /^(\d+):([wsd]):(.*)$/s.exec(entry)!;
      return { seq: Number(seq), kind, rest };
    });
    const ids = parsed.filter((e) => e.kind !== "d").map((e) => e.rest);
    const current = new Map<string, MemoryRecord>();
    if (ids.length > 0) {
      const [records, validities, embeddings] = (await this.transaction((tx) =>
        tx
          .hmget(keys.records, ...ids)
          .hmget(keys.validity, ...ids)
          .hmget(keys.embeddings, ...ids),
      )) as Array<Array<string | null>>;
      ids.forEach((id, i) => {
        // Deleted since (or between the reads): its deletion follows.
        if (records[i] !== null && validities[i] !== null)
          current.set(id, decode(records[i]!, validities[i]!, embeddings[i]));
      });
    }
    const changes: MemoryChange[] = [];
    for (const { seq, kind, rest } of parsed) {
      if (kind === "d") {
        const stubs = JSON.parse(rest) as Array<[string, string | null, string | null, string | null]>;
        changes.push({
          seq,
          kind: "deleted",
          memories: stubs.map(([memoryId, userId, agentId, sessionId]) =>
            deletedStub(appName, memoryId, userId, agentId, sessionId),
          ),
        });
        continue;
      }
      const memory = current.get(rest);
      if (memory) changes.push({ seq, kind: kind === "s" ? "superseded" : "written", memory });
    }
    return { changes, through: parsed.length > 0 ? parsed[parsed.length - 1].seq : after };
  }

  /**
   * Every memory of (appName, userId), whatever its agent, session or
   * validity: DeleteUserData's share. Idempotent, so an erasure resumed after
   * a crash (resumeErasures) finishes it.
   */
  async eraseUser(appName: string, userId: string): Promise<number> {
    return (await this.deleteMemoriesInScope({ appName, userId, match: "within" })).length;
  }

  /** The memories of a scan (read without embeddings), each with its embedding when it has one, unless the filter omits them. */
  private async withEmbeddings(filter: MemoryFilter, memories: MemoryRecord[]): Promise<MemoryRecord[]> {
    if (memories.length === 0 || filter.omitEmbeddings) return memories;
    const [embeddings] = (await this.transaction((tx) =>
      tx.hmget(this.keysOf(filter.scope.appName).embeddings, ...memories.map((m) => hex(m.memoryId))),
    )) as [Array<string | null>];
    return memories.map((m, i) => (embeddings[i] ? { ...m, embedding: JSON.parse(embeddings[i]!) as number[] } : m));
  }

  /** Runs delete-11.lua over [hex id, expected entry] pairs; the removed records. */
  private async remove(appName: string, pairs: ReadonlyArray<readonly [string, string]>): Promise<MemoryRecord[]> {
    const k = this.keysOf(appName);
    const reply = await this.call(() =>
      this.runWriting("delete", [
        k.records,
        k.validity,
        k.entries,
        k.order,
        k.byUser,
        k.groups,
        k.held,
        k.embeddings,
        k.vectors,
        k.meta,
        k.changes,
        this.channelOf(appName),
        this.origin,
        pairs.length,
        ...pairs.flat(),
        MEMORY_CHANGES_RETAINED,
        this.publishCommand,
        this.documents === undefined ? "" : `${this.documents}${hex(appName)}:`,
      ]),
    );
    if (reply.length === 0) return [];
    return this.deliver(reply[0] as string, true);
  }

  /** A writing script (write-n.lua, delete-11.lua), then WAIT when MEMORY_REDIS_WAIT_REPLICAS asks for it. */
  private runWriting(script: "write" | "delete", keysAndArgs: Array<string | number | Buffer>): Promise<Reply> {
    return runThenWait(this.redis, `engram_memories_${script}`, keysAndArgs, this.wait) as Promise<Reply>;
  }

  /**
   * The memories of the indexes that can hold what the scope selects, newest
   * first (created, then id, descending), after the cursor, merged from each
   * index read `pageSize` entries at a time. The caller still filters: an
   * index holds a superset of the scope (e.g. a user's memories of any agent).
   * A record whose stored JSON fails `mayBeSelected` is passed over without
   * being decoded (a cheap test that only rules out what the filter cannot select).
   */
  private async *newestFirst(
    scope: MemoryScopeFilter,
    pageSize: number,
    after?: MemoryCursor,
    mayBeSelected?: (record: string) => boolean,
  ): AsyncGenerator<MemoryRecord> {
    const keys = this.keysOf(scope.appName);
    const walks = this.sourcesOf(scope, keys).map((source) => ({
      ...source,
      cursor: after === undefined ? undefined : orderSuffix(after),
      buffer: [] as Array<{ suffix: string; memory?: MemoryRecord }>,
      done: false,
    }));
    for (;;) {
      await Promise.all(
        walks
          .filter((w) => w.buffer.length === 0 && !w.done)
          .map(async (w) => {
            const upper =
              w.cursor !== undefined ? `(${w.prefix}${w.cursor}` : w.prefix === "" ? "+" : `(${w.prefix.slice(0, -1)};`;
            const lower = w.prefix === "" ? "-" : `[${w.prefix}`;
            const [members] = (await this.transaction((tx) =>
              tx.zrevrangebylex(w.key, upper, lower, "LIMIT", 0, pageSize),
            )) as [string[]];
            if (members.length < pageSize) w.done = true;
            if (members.length === 0) return;
            const suffixes = members.map((m) => m.slice(w.prefix.length));
            w.cursor = suffixes[suffixes.length - 1];
            const ids = suffixes.map((s) => s.slice(s.indexOf(":") + 1));
            const [records, validities] = (await this.transaction((tx) =>
              tx.hmget(keys.records, ...ids).hmget(keys.validity, ...ids),
            )) as Array<Array<string | null>>;
            // A memory deleted between the two reads is skipped.
            w.buffer = suffixes.map((suffix, i) => ({
              suffix,
              memory:
                records[i] === null || validities[i] === null || mayBeSelected?.(records[i]!) === false
                  ? undefined
                  : decode(records[i]!, validities[i]!),
            }));
          }),
      );
      let next: (typeof walks)[number] | undefined;
      for (const w of walks) if (w.buffer.length > 0 && (!next || w.buffer[0].suffix > next.buffer[0].suffix)) next = w;
      if (!next) return;
      const { memory } = next.buffer.shift()!;
      if (memory) yield memory;
    }
  }

  /**
   * The indexes holding every memory the scope can select: a named user's
   * own (and, for VISIBLE, the memories of no user); without a user, the
   * whole app for WITHIN, else the memories of no user.
   */
  private sourcesOf(scope: MemoryScopeFilter, keys: AppKeys): IndexSource[] {
    const noUser = { key: keys.byUser, prefix: "-:" };
    if (scope.userId !== undefined) {
      const own = { key: keys.byUser, prefix: `${hex(scope.userId)}:` };
      return scope.match === "visible" ? [own, noUser] : [own];
    }
    return scope.match === "within" ? [{ key: keys.order, prefix: "" }] : [noUser];
  }

  /** Decodes a notice of the scripts and hands its changes to this replica's listeners; the records it removed. */
  private deliver(notice: string, own: boolean): MemoryRecord[] {
    let parsed: {
      o: string;
      q?: number;
      c?: Array<[string, object, string, number[] | null, number]>;
      d?: Array<[object, string, number[] | null]>;
    };
    try {
      parsed = JSON.parse(notice);
    } catch {
      return [];
    }
    // Our own changes were delivered when the script returned.
    const emit = own || parsed.o !== this.origin;
    for (const [kind, record, validity, embedding, seq] of parsed.c ?? []) {
      const memory = decode(record, validity, embedding);
      if (emit) this.emit(memory.appName, { seq, kind: kind === "s" ? "superseded" : "written", memory });
    }
    const removed = (parsed.d ?? []).map(([record, validity, embedding]) => decode(record, validity, embedding));
    if (emit && removed.length > 0)
      this.emit(removed[0].appName, { seq: parsed.q ?? 0, kind: "deleted", memories: removed });
    return removed;
  }

  /** The number of the app's newest change (0: none yet). */
  private async head(appName: string): Promise<number> {
    const [seq] = (await this.transaction((tx) => tx.hget(this.keysOf(appName).meta, "seq"))) as [string | null];
    return Number(seq ?? 0);
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
  private transaction(build: (tx: ChainableCommander) => ChainableCommander): Promise<unknown[]> {
    return this.call(async () => {
      const replies = (await build(this.redis.multi()).exec())!;
      return replies.map(([err, value]) => {
        if (err) throw err;
        return value;
      });
    });
  }

  private emit(appName: string, change: MemoryChange): void {
    this.listeners.emit(appName, change);
  }

  /**
   * A cluster: SSUBSCRIBEs to the app's channel; once Redis acknowledges,
   * the app's watchers catch up from the log (what was committed before the
   * subscription counted). ioredis keeps the channel and subscribes again
   * after failovers and slot moves ("subscribersReady" in listen()).
   */
  private follow(appName: string): void {
    const subscriber = this.subscriber as Cluster | undefined;
    if (!subscriber) return;
    const subscribed = this.call(async () => void (await subscriber.ssubscribe(this.channelOf(appName))));
    // Failed (its shard is unreachable): forgotten, so that the next watcher of the app tries again.
    subscribed.catch(() => this.following.get(appName) === subscribed && this.following.delete(appName));
    this.following.set(appName, subscribed);
  }

  /** A cluster: the app's last watcher left, so its channel is dropped. */
  private unfollow(appName: string): void {
    this.following.delete(appName);
    (this.subscriber as Cluster | undefined)?.sunsubscribe(this.channelOf(appName)).catch(() => {});
  }

  /**
   * A cluster's subscriptions were renewed (a failover, a slot move): the
   * notices published meanwhile are lost, so each watched app's watchers hear
   * how far its log has grown and read what they missed from it.
   */
  private async catchUp(): Promise<void> {
    for (const appName of this.listeners.keys()) {
      const head = await this.head(appName).catch(() => 0);
      if (head > 0) this.emit(appName, { seq: head, kind: "remote" });
    }
  }

  /**
   * The sharded subscriber of a cluster: a Cluster of its own with one
   * subscriber connection per master (ioredis' shardedSubscribers), which
   * follows the slots as they move.
   */
  private shardedSubscriber(cluster: Cluster): Cluster {
    const redisOptions = {
      ...cluster.options.redisOptions,
      connectionName: `${this.prefix}:memories`,
      commandTimeout: undefined,
    };
    return cluster.duplicate(undefined, { shardedSubscribers: true, lazyConnect: true, redisOptions });
  }

  /** PUBLISH on one node (every replica of any release hears it); SPUBLISH to the app's shard on a cluster. */
  private get publishCommand(): string {
    return this.clustered ? "SPUBLISH" : "PUBLISH";
  }

  /** The channel of an app's notices: one for every app on one node (today's name), the app's own in its slot on a cluster. */
  private channelOf(appName: string): string {
    return this.clustered ? `${this.prefix}:memories:{${hex(appName)}}` : `${this.prefix}:memories`;
  }

  /** The prefix of an app's keys. On a cluster the hash tag puts every key of the app in one slot, so each script stays on one shard. */
  private baseOf(appName: string): string {
    return this.clustered ? `${this.prefix}:mem:{${hex(appName)}}` : `${this.prefix}:mem:${hex(appName)}`;
  }

  private keysOf(appName: string): AppKeys {
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
