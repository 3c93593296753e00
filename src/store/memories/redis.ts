/**
 * Long-term memories of the Redis store. Per app, under
 * `<prefix>:mem:<hex app>:` on one node and `<prefix>:mem:{<hex app>}:` on a
 * Redis Cluster (memory ids, user ids and supersession groups are
 * hex-encoded in members, so that no value can collide with another or with a
 * separator; hash fields are hex ids too):
 *
 *   rec      hash: hex id -> JSON of the record without its validity and embedding (never changes)
 *   emb      hash: hex id -> the embedding as JSON (returned with the memory)
 *   vec      hash: hex id -> the embedding as float64 little-endian bytes (ranked by
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
 *            seq (the number of the app's newest change)
 *   chg      zset, score = change number: the change log, the newest
 *            MEMORY_CHANGES_RETAINED changes: "<seq>:w:<hex id>" (written),
 *            "<seq>:s:<hex id>" (superseded; both read as they are now),
 *            "<seq>:d:<JSON [id, user, agent, session] per memory>" (deleted)
 *   pin      zset, score 0: the pinned memories, each twice: "o:<created>:<hex id>"
 *            (as order) and "u:<hex user or ->:<created>:<hex id>" (as user);
 *            used while meta's pinready, pinbuild and pinchain, seq and the
 *            order's count say it is complete (redis-scripts/pinned-5.lua),
 *            else rebuilt
 *   <prefix>:memories  pub/sub channel: the changes of every write and deletion
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
 * supersession and index upkeep happen atomically, so replicas writing one
 * key at once leave exactly one memory of it valid. Deletions are one script
 * per call (or per page of a scope). Scans (listing, ranking candidates)
 * read records without their embeddings, which are fetched only for the
 * memories returned (or, as vectors, for vector ranking). Lexical ranking
 * runs in this process: MiniSearch (BM25, as the local driver) over at most
 * SEARCH_CANDIDATES of the newest memories the scope's index holds (kept
 * decoded per scope while the app's stamp, its change number and memory
 * count, stays the same); vector ranking is cosine over the same
 * candidates. Listing walks the scope's
 * index newest first and filters with rules.ts, the one place the semantics
 * live; a listing of pinned memories walks the pinned index instead, so
 * Recall's core memories cost what there are of them, not what the scope
 * holds.
 */
import { randomUUID } from "node:crypto";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { LRUCache } from "lru-cache";
import type { ChainableCommander, Cluster, Redis } from "ioredis";
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
import { LEXICAL_QUERY, LexicalIndexCache, lexicalDocument } from "./lexical.js";
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

/**
 * How many of the newest memories in the scope's index a search or vector
 * ranking considers (before its filter): the Redis store's scale limit for
 * ranking. Memories older than these in a scope are still listed, got and
 * deleted, but never found by SearchMemories or Recall (README, Long-term memory).
 */
export const SEARCH_CANDIDATES = 2000;
/**
 * How many scopes' candidate windows a replica keeps (each at most
 * SEARCH_CANDIDATES decoded memories, ~2 MB of heap for short ones), reused
 * while their app is unchanged.
 */
export const CANDIDATE_WINDOWS_KEPT = 16;
/** Index entries read per round trip while gathering search candidates. */
const CANDIDATE_PAGE = 500;
/** Index entries read per round trip while listing. */
const LIST_PAGE = 200;
/** Memories removed per script call by a deletion by scope or an erasure. */
const DELETE_PAGE = 500;
/** Memories scanned per script call while building an app's pinned index (each call holds Redis for ~1 ms). */
const PINNED_BUILD_PAGE = 500;
/**
 * The least time between two builds of one app's pinned index started by one
 * replica: while replicas of an older release keep writing (a rolling
 * upgrade), every build is outdated at once, and pinned listings walk the
 * scope meanwhile.
 */
export const PINNED_INDEX_REBUILD_INTERVAL_MS = 60_000;

/** Where the long-term memory scripts are (the Redis store loads them at open: src/store/redis/script-check.ts). */
export const SCRIPTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "redis-scripts");

type Reply = Array<string | number | null>;

const hex = (s: string) => Buffer.from(s, "utf8").toString("hex");
const unhex = (s: string) => Buffer.from(s, "hex").toString("utf8");
/** Fixed width, so that entries sort by creation time as strings. */
const created = (createdAt: number) => String(createdAt).padStart(16, "0");

/** Runs a Redis call, mapping what it throws to a MemoryError (the store's own mapping). */
export type RedisCall = <T>(run: () => Promise<T>) => Promise<T>;

/** How many keys one app's memories have (AppKeys). */
const APP_KEY_COUNT = 12;

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
  pinned: string;
}

/**
 * A scope's newest SEARCH_CANDIDATES memories, read under the app's stamp
 * (RedisMemories.windowOf), and the last subset of them a search ranked,
 * with the key of its BM25 index in the LexicalIndexCache.
 */
interface CandidateWindow {
  stamp: string;
  memories: Promise<MemoryRecord[]>;
  ranking?: { memories: MemoryRecord[]; byId: Map<string, MemoryRecord>; indexKey?: string };
}

/** One index a listing walks: a zset and the prefix its members have before "<created>:<hex id>". */
interface IndexSource {
  key: string;
  prefix: string;
}

/** The member suffix "<created>:<hex id>" a cursor or memory sorts by. */
function orderSuffix(m: MemoryCursor): string {
  return `${created(m.createdAt)}:${hex(m.memoryId)}`;
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
  return `${created(m.createdAt)}:${userOf(m)}:${groupOf(m)}:${sortableFrom(m.validFrom)}:${m.fingerprint}`;
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

/** An app's stamp (RedisMemories.stampOf) from its meta's seq and its order index's count, as the scripts write it. */
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
  /** BM25 indexes of recent candidate sets (searchMemories), reused while a scope's window is unchanged. */
  private readonly lexicalIndexes = new LexicalIndexCache();
  /**
   * The candidate windows of recently searched scopes (their indexes), each
   * with the app's stamp it was read under (stampOf). Their records are
   * shared by every search that reuses them, as the local store shares its
   * own: nothing that reads a record changes it.
   */
  private readonly candidateWindows = new LRUCache<string, CandidateWindow>({ max: CANDIDATE_WINDOWS_KEPT });
  /** A connection of its own for the channel: subscribed while the store is open. */
  private subscriber?: RedisClient;
  /** A cluster: the apps whose channels are subscribed (or being subscribed), each settled once Redis answered. */
  private readonly following = new Map<string, Promise<void>>();
  /** Per app, when this replica last began building its pinned index (rate-limited: PINNED_INDEX_REBUILD_INTERVAL_MS). */
  private readonly pinnedBuilds = new Map<string, number>();
  private builds = 0;

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

  /** Subscribes to the changes other replicas publish; rejects when Redis cannot be reached. */
  async listen(): Promise<void> {
    const subscriber = this.clustered ? this.shardedSubscriber(this.redis as Cluster) : (this.redis as Redis).duplicate({ connectionName: `${this.prefix}:memories`, commandTimeout: undefined });
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
    } catch (err) {
      subscriber.disconnect();
      throw err;
    }
  }

  /** Drops the subscription and every listener (the store is closing). */
  close(): void {
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
  private async runWrite(memories: readonly MemoryRecord[], batch: readonly number[], mode: "check" | ""): Promise<MemoryRecord[]> {
    const apps = new Map<string, number>();
    const keys: string[] = [];
    for (const i of batch) {
      const appName = memories[i].appName;
      if (apps.has(appName)) continue;
      apps.set(appName, apps.size + 1);
      keys.push(...Object.values(this.keysOf(appName)));
    }
    const args: Array<string | number | Buffer> = [this.channelOf(memories[batch[0]].appName), this.origin, batch.length];
    for (const i of batch) {
      const m = memories[i];
      args.push(
        apps.get(m.appName)!,
        hex(m.memoryId),
        m.fingerprint,
        encode(m),
        created(m.createdAt),
        userOf(m),
        groupOf(m),
        m.validFrom,
        m.invalidAt ?? "",
        m.embedding?.length ?? 0,
        sortableFrom(m.validFrom),
        m.embedding ? JSON.stringify(m.embedding) : "",
        m.embedding ? vectorBytes(m.embedding) : "",
        m.pinned ? "1" : "",
      );
    }
    args.push(MEMORY_CHANGES_RETAINED, this.publishCommand, mode);
    // On a cluster the key count is fixed (defineScripts): one app per call.
    const reply = await this.call(() => this.runWriting("write", this.clustered ? [...keys, ...args] : [keys.length, ...keys, ...args]));
    if (reply[0] === "TAKEN") {
      const i = batch[reply[1] as number];
      throw memoryIdTaken(`memories[${i}].memory_id`, memories[i].memoryId);
    }
    if (reply[0] === "DIMENSION") throw embeddingDimensionMismatch(`memories[${batch[reply[1] as number]}].embedding`, reply[2] as number, reply[3] as number);
    if (mode === "check") return [];
    if (reply[1] !== "") this.deliver(reply[1] as string, true);
    const records: MemoryRecord[] = [];
    for (let i = 2; i < reply.length; i += 3) records.push(decode(reply[i] as string, reply[i + 1] as string, reply[i + 2] as string));
    return records;
  }

  async getMemory(appName: string, memoryId: string): Promise<MemoryRecord | undefined> {
    const keys = this.keysOf(appName);
    const id = hex(memoryId);
    const [record, validity, embedding] = (await this.transaction((tx) => tx.hget(keys.records, id).hget(keys.validity, id).hget(keys.embeddings, id))) as Array<string | null>;
    return record === null || validity === null ? undefined : decode(record, validity, embedding);
  }

  async searchMemories(filter: MemoryFilter, query: string, limit: number): Promise<RankedMemory[]> {
    if (query.trim() === "") return [];
    const window = await this.windowOf(filter.scope);
    const candidates = (await window.memories).filter((memory) => filterSelects(filter, memory));
    // The same records as the window's last search ranked (the same objects: a window's records never change): no hash of their texts to find the index.
    let ranking = window.ranking;
    if (!ranking || ranking.memories.length !== candidates.length || ranking.memories.some((memory, i) => memory !== candidates[i])) {
      ranking = window.ranking = { memories: candidates, byId: new Map(candidates.map((m) => [m.memoryId, m])) };
    }
    let index = ranking.indexKey === undefined ? undefined : this.lexicalIndexes.kept(ranking.indexKey);
    if (!index) ({ key: ranking.indexKey, index } = this.lexicalIndexes.keyedIndexOf(candidates.map(lexicalDocument)));
    const hits = index.search(query, LEXICAL_QUERY).slice(0, limit);
    const { byId } = ranking;
    const found = await this.withEmbeddings(filter, hits.map((hit) => byId.get(hit.id as string)!));
    return hits.map((hit, i) => ({ memory: found[i], score: hit.score }));
  }

  async nearestMemories(filter: MemoryFilter, embedding: readonly number[], limit: number): Promise<RankedMemory[]> {
    const candidates = await this.candidates(filter);
    if (candidates.length === 0) return [];
    const keys = this.keysOf(filter.scope.appName);
    const [vectors] = (await this.transaction((tx) => tx.hmgetBuffer(keys.vectors, ...candidates.map((m) => hex(m.memoryId))))) as [Array<Buffer | null>];
    const out: RankedMemory[] = [];
    candidates.forEach((candidate, i) => {
      const bytes = vectors[i];
      // A dimension is 8 bytes: only embeddings of the query's dimension compare.
      if (!bytes || bytes.length !== 8 * embedding.length) return;
      const vector = vectorOf(bytes);
      out.push({ memory: { ...candidate, embedding: vector }, score: cosine(embedding, vector) });
    });
    return out.sort((a, b) => b.score - a.score).slice(0, limit);
  }

  async listMemories(filter: MemoryFilter, limit: number, after?: MemoryCursor): Promise<MemoryRecord[]> {
    if (limit <= 0) return [];
    const { appName } = filter.scope;
    if (filter.pinned === true) {
      const build = await this.completePinnedIndex(appName);
      if (build !== undefined) {
        const listed = await this.listFrom(filter, limit, after, this.sourcesOf(filter.scope, this.keysOf(appName), true));
        // A build that began meanwhile emptied the index, maybe before the pages were read: then listed again by walking the scope.
        if ((await this.pinnedBuild(appName)).ready === build) return this.withEmbeddings(filter, listed);
      }
    }
    return this.withEmbeddings(filter, await this.listFrom(filter, limit, after));
  }

  /** The first `limit` memories the filter selects after the cursor, from the scope's indexes or from `sources`. */
  private async listFrom(filter: MemoryFilter, limit: number, after?: MemoryCursor, sources?: IndexSource[]): Promise<MemoryRecord[]> {
    const out: MemoryRecord[] = [];
    // A pinned memory's stored JSON holds `"pinned":true` (encode): a record without it is passed over undecoded.
    const mayBeSelected = filter.pinned === true ? (record: string) => record.includes('"pinned":true') : undefined;
    for await (const memory of this.newestFirst(filter.scope, Math.min(Math.max(limit, LIST_PAGE), 1000), after, mayBeSelected, sources)) {
      if (!filterSelects(filter, memory)) continue;
      out.push(memory);
      if (out.length === limit) break;
    }
    return out;
  }

  async deleteMemories(appName: string, memoryIds: readonly string[]): Promise<MemoryRecord[]> {
    if (memoryIds.length === 0) return [];
    return this.remove(appName, memoryIds.map((id) => [hex(id), ""]));
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
    const [head, entries] = (await this.transaction((tx) => tx.hget(keys.meta, "seq").zrangebyscore(keys.changes, `(${after}`, "+inf", "LIMIT", 0, limit))) as [string | null, string[]];
    requireRetained(after, changeWindowOf(Number(head ?? 0)));
    const parsed = entries.map((entry) => {
      const [, seq, kind, rest] = /^(\d+):([wsd]):(.*)$/s.exec(entry)!;
      return { seq: Number(seq), kind, rest };
    });
    const ids = parsed.filter((e) => e.kind !== "d").map((e) => e.rest);
    const current = new Map<string, MemoryRecord>();
    if (ids.length > 0) {
      const [records, validities, embeddings] = (await this.transaction((tx) => tx.hmget(keys.records, ...ids).hmget(keys.validity, ...ids).hmget(keys.embeddings, ...ids))) as Array<
        Array<string | null>
      >;
      ids.forEach((id, i) => {
        // Deleted since (or between the reads): its deletion follows.
        if (records[i] !== null && validities[i] !== null) current.set(id, decode(records[i]!, validities[i]!, embeddings[i]));
      });
    }
    const changes: MemoryChange[] = [];
    for (const { seq, kind, rest } of parsed) {
      if (kind === "d") {
        const stubs = JSON.parse(rest) as Array<[string, string | null, string | null, string | null]>;
        changes.push({ seq, kind: "deleted", memories: stubs.map(([memoryId, userId, agentId, sessionId]) => deletedStub(appName, memoryId, userId, agentId, sessionId)) });
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
    const [embeddings] = (await this.transaction((tx) => tx.hmget(this.keysOf(filter.scope.appName).embeddings, ...memories.map((m) => hex(m.memoryId))))) as [Array<string | null>];
    return memories.map((m, i) => (embeddings[i] ? { ...m, embedding: JSON.parse(embeddings[i]!) as number[] } : m));
  }

  /** Runs delete-12.lua over [hex id, expected entry] pairs; the removed records. */
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
        k.pinned,
        this.channelOf(appName),
        this.origin,
        pairs.length,
        ...pairs.flat(),
        MEMORY_CHANGES_RETAINED,
        this.publishCommand,
      ]),
    );
    if (reply.length === 0) return [];
    return this.deliver(reply[0] as string, true);
  }

  /** A writing script (write-n.lua, delete-12.lua), then WAIT when MEMORY_REDIS_WAIT_REPLICAS asks for it. */
  private runWriting(script: "write" | "delete", keysAndArgs: Array<string | number | Buffer>): Promise<Reply> {
    return runThenWait(this.redis, `engram_memories_${script}`, keysAndArgs, this.wait) as Promise<Reply>;
  }

  /**
   * The newest SEARCH_CANDIDATES memories of the scope's index that the
   * filter selects: from the window kept for the scope while the app's stamp
   * is the one it was read under, else read afresh (and kept).
   */
  private async candidates(filter: MemoryFilter): Promise<MemoryRecord[]> {
    return (await (await this.windowOf(filter.scope)).memories).filter((memory) => filterSelects(filter, memory));
  }

  /** The scope's candidate window: the one kept while the app's stamp is the one it was read under, else read afresh (and kept). */
  private async windowOf(scope: MemoryScopeFilter): Promise<CandidateWindow> {
    const keys = this.keysOf(scope.appName);
    const sources = this.sourcesOf(scope, keys);
    const windowKey = sources.map((source) => `${source.key}\u0000${source.prefix}`).join("\u0000");
    // The stamp before the window: a change landing while the window is read moves the stamp, so the next search reads again.
    const stamp = await this.stampOf(keys);
    const kept = this.candidateWindows.get(windowKey);
    if (kept?.stamp === stamp) return kept;
    // One read for every search of the scope that finds the same stamp, however many wait for it.
    const window: CandidateWindow = { stamp, memories: this.readWindow(scope, sources) };
    this.candidateWindows.set(windowKey, window);
    window.memories.catch(() => this.candidateWindows.get(windowKey) === window && this.candidateWindows.delete(windowKey));
    return window;
  }

  /** The newest SEARCH_CANDIDATES memories of the sources. */
  private async readWindow(scope: MemoryScopeFilter, sources: IndexSource[]): Promise<MemoryRecord[]> {
    const memories: MemoryRecord[] = [];
    // Pages smaller than the bound: a scope read from two indexes fetches little more than it scans.
    for await (const memory of this.newestFirst(scope, CANDIDATE_PAGE, undefined, undefined, sources)) {
      memories.push(memory);
      if (memories.length === SEARCH_CANDIDATES) break;
    }
    return memories;
  }

  /**
   * The app's stamp, "<change number>:<memories>": every write and deletion
   * of a memory changes it (each release numbers its changes, and the first
   * releases, which did not, changed the count), and so does closing one's
   * validity (a change of its own).
   */
  private async stampOf(keys: AppKeys): Promise<string> {
    const [seq, count] = (await this.transaction((tx) => tx.hget(keys.meta, "seq").zcard(keys.order))) as [string | null, number];
    return stampFrom(seq, count);
  }

  /**
   * The memories of the indexes that can hold what the scope selects, newest
   * first (created, then id, descending), after the cursor, merged from each
   * index read `pageSize` entries at a time. The caller still filters: an
   * index holds a superset of the scope (e.g. a user's memories of any agent).
   * A record whose stored JSON fails `mayBeSelected` is passed over without
   * being decoded (a cheap test that only rules out what the filter cannot select).
   * `sources`: other indexes to walk (holding a subset of what the scope's do).
   */
  private async *newestFirst(
    scope: MemoryScopeFilter,
    pageSize: number,
    after?: MemoryCursor,
    mayBeSelected?: (record: string) => boolean,
    sources?: IndexSource[],
  ): AsyncGenerator<MemoryRecord> {
    const keys = this.keysOf(scope.appName);
    const walks = (sources ?? this.sourcesOf(scope, keys)).map((source) => ({
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
            const upper = w.cursor !== undefined ? `(${w.prefix}${w.cursor}` : w.prefix === "" ? "+" : `(${w.prefix.slice(0, -1)};`;
            const lower = w.prefix === "" ? "-" : `[${w.prefix}`;
            const [members] = (await this.transaction((tx) => tx.zrevrangebylex(w.key, upper, lower, "LIMIT", 0, pageSize))) as [string[]];
            if (members.length < pageSize) w.done = true;
            if (members.length === 0) return;
            const suffixes = members.map((m) => m.slice(w.prefix.length));
            w.cursor = suffixes[suffixes.length - 1];
            const ids = suffixes.map((s) => s.slice(s.indexOf(":") + 1));
            const [records, validities] = (await this.transaction((tx) => tx.hmget(keys.records, ...ids).hmget(keys.validity, ...ids))) as Array<Array<string | null>>;
            // A memory deleted between the two reads is skipped.
            w.buffer = suffixes.map((suffix, i) => ({
              suffix,
              memory: records[i] === null || validities[i] === null || mayBeSelected?.(records[i]!) === false ? undefined : decode(records[i]!, validities[i]!),
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
   * whole app for WITHIN, else the memories of no user. `pinned`: the same
   * entries of the pinned index (its "u:" and "o:" halves), pinned memories only.
   */
  private sourcesOf(scope: MemoryScopeFilter, keys: AppKeys, pinned = false): IndexSource[] {
    const [byUser, users, whole] = pinned ? [keys.pinned, "u:", { key: keys.pinned, prefix: "o:" }] : [keys.byUser, "", { key: keys.order, prefix: "" }];
    const noUser = { key: byUser, prefix: `${users}-:` };
    if (scope.userId !== undefined) {
      const own = { key: byUser, prefix: `${users}${hex(scope.userId)}:` };
      return scope.match === "visible" ? [own, noUser] : [own];
    }
    return scope.match === "within" ? [whole] : [noUser];
  }

  /** The app's pinned index state (pinned-5.lua): the build it is complete from, if any, and whether changes since were all kept. */
  private async pinnedBuild(appName: string): Promise<{ ready?: string; chained: boolean }> {
    const keys = this.keysOf(appName);
    const [[seq, chain, ready, build], count] = (await this.transaction((tx) => tx.hmget(keys.meta, "seq", "pinchain", "pinready", "pinbuild").zcard(keys.order))) as [Array<string | null>, number];
    return { ready: ready !== null && ready === build ? ready : undefined, chained: chain === stampFrom(seq, count) };
  }

  /**
   * The build the app's pinned index is complete from, when it holds every
   * pinned memory (pinned-5.lua says when); when not, starts building it (at
   * most once per PINNED_INDEX_REBUILD_INTERVAL_MS per app from this
   * replica) and answers undefined, so the caller walks the scope meanwhile.
   */
  private async completePinnedIndex(appName: string): Promise<string | undefined> {
    const { ready, chained } = await this.pinnedBuild(appName);
    if (ready !== undefined && chained) return ready;
    const now = Date.now();
    const last = this.pinnedBuilds.get(appName);
    if (last === undefined || now - last >= PINNED_INDEX_REBUILD_INTERVAL_MS) {
      // Entries past the interval rate-limit nothing: dropped, so many apps from an older release do not pile up.
      if (this.pinnedBuilds.size >= 10_000) for (const [app, at] of this.pinnedBuilds) if (now - at >= PINNED_INDEX_REBUILD_INTERVAL_MS) this.pinnedBuilds.delete(app);
      this.pinnedBuilds.set(appName, now);
      // A failed build leaves the index unused; the next one starts after the interval.
      this.buildPinnedIndex(appName).catch(() => {});
    }
    return undefined;
  }

  /**
   * Builds the app's pinned index afresh (pinned-5.lua), a page per call;
   * false when another build overtook it. Started by pinned listings that
   * find the index incomplete; public for tests that race it with writes.
   */
  async buildPinnedIndex(appName: string): Promise<boolean> {
    const k = this.keysOf(appName);
    const token = `${this.origin}:${++this.builds}`;
    const run = (...args: string[]) => this.call(() => this.runPinned([k.records, k.entries, k.order, k.meta, k.pinned, ...args]));
    await run("begin", token);
    let after = "";
    do {
      const reply = await run("page", token, after, String(PINNED_BUILD_PAGE));
      if (reply[0] === "ABORTED") return false;
      after = reply[1] as string;
    } while (after !== "");
    return (await run("finish", token))[0] === "OK";
  }

  private runPinned(keysAndArgs: string[]): Promise<Reply> {
    return (this.redis as unknown as Record<string, (...args: string[]) => Promise<Reply>>).engram_memories_pinned(...keysAndArgs);
  }

  /** Decodes a notice of the scripts and hands its changes to this replica's listeners; the records it removed. */
  private deliver(notice: string, own: boolean): MemoryRecord[] {
    let parsed: { o: string; q?: number; c?: Array<[string, object, string, number[] | null, number]>; d?: Array<[object, string, number[] | null]> };
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
    if (emit && removed.length > 0) this.emit(removed[0].appName, { seq: parsed.q ?? 0, kind: "deleted", memories: removed });
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
    const redisOptions = { ...cluster.options.redisOptions, connectionName: `${this.prefix}:memories`, commandTimeout: undefined };
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

  private keysOf(appName: string): AppKeys {
    // On a cluster the hash tag puts every key of the app in one slot, so each script stays on one shard.
    const base = this.clustered ? `${this.prefix}:mem:{${hex(appName)}}` : `${this.prefix}:mem:${hex(appName)}`;
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
      pinned: `${base}:pin`,
    };
  }
}
