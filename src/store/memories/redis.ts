/**
 * Long-term memories of the Redis store, the driver: what each
 * LongTermMemoryStore operation does. Its rooms: redis-layout.ts (the key
 * layout and stored values), redis-query-engine.ts (searches on the Redis
 * Query Engine and the documents they need), redis-notices.ts (change
 * notices to watchers, per app on a cluster), redis-index.ts (the index
 * schema and queries).
 *
 * On a cluster every key of an app carries the app's hash tag `{<hex app>}`,
 * so all of them live in one slot and each script stays atomic per app. A
 * write batch spanning apps runs one script per app on a cluster: every
 * app's checks run first, then the writes, so a refused batch writes nothing
 * unless another write to the same memory id lands between the checks and
 * the writes (then the apps before the refused one are written; a retry with
 * the same ids is idempotent).
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
import { isCluster, type RedisClient } from "../../backends/redis.js";
import { loadScripts, runThenWait, type WaitForReplicas } from "../redis/script-runner.js";
import { queryTerms } from "./analyzer.js";
import { lexicalTerms } from "./lexical.js";
import { created16, documentFields, float32Bytes, LexicalScore, tieKey } from "./redis-index.js";
import {
  APP_KEY_COUNT,
  decode,
  encode,
  entryOf,
  groupOf,
  hex,
  MemoryRedis,
  orderSuffix,
  sortableFrom,
  userOf,
  vectorBytes,
  vectorOf,
  type AppKeys,
  type RedisCall,
} from "./redis-layout.js";
import { MemoryNotices } from "./redis-notices.js";
import { byScore, MemoryQueryEngine, type Hit } from "./redis-query-engine.js";
import {
  changeWindowOf,
  cosine,
  deletedStub,
  embeddingDimensionMismatch,
  filterSelects,
  MEMORY_CHANGES_RETAINED,
  memoryIdTaken,
  requireRetained,
  scopeSelects,
} from "./rules.js";

/** Index entries read per round trip while listing or ranking a scope in process. */
const LIST_PAGE = 200;
/** Index entries read per round trip while ranking a whole scope in process. */
const SCAN_PAGE = 1000;
/** Memories removed per script call by a deletion by scope or an erasure. */
const DELETE_PAGE = 500;

/** Where the long-term memory scripts are (the Redis store loads them at open: src/store/redis/script-check.ts). */
export const SCRIPTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "redis-scripts");

type Reply = Array<string | number | null>;

/** One index a listing walks: a zset and the prefix its members have before "<created>:<hex id>". */
interface IndexSource {
  key: string;
  prefix: string;
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
  private readonly db: MemoryRedis;
  private readonly engine: MemoryQueryEngine;
  private readonly notices: MemoryNotices;

  constructor(
    private readonly redis: RedisClient,
    prefix: string,
    private readonly call: RedisCall,
    /** MEMORY_REDIS_WAIT_REPLICAS, as the session store waits: after each write and delete script. */
    private readonly wait: WaitForReplicas = { replicas: 0, timeoutMs: 0 },
  ) {
    this.db = new MemoryRedis(redis, prefix, call);
    this.engine = new MemoryQueryEngine(this.db, this.origin);
    this.notices = new MemoryNotices(this.db, this.origin, (appName) => this.head(appName));
    defineScripts(redis);
  }

  /** How this store ranks memories: "query-engine", or "in-process" (whole scopes; listen() decides and logs it). */
  get ranking(): "query-engine" | "in-process" {
    return this.engine.ranking;
  }

  /** Builds the app's documents for the Query Engine now (a search starts it when they are incomplete); false when another build overtook it. */
  buildDocuments(appName: string): Promise<boolean> {
    return this.engine.buildDocuments(appName);
  }

  /** Subscribes to the changes other replicas publish and prepares the Query Engine's index; rejects when Redis cannot be reached. */
  async listen(): Promise<void> {
    await this.notices.listen();
    try {
      await this.engine.prepare();
    } catch (err) {
      this.notices.close();
      throw err;
    }
  }

  /** Drops the subscription and every listener, and stops background builds (the store is closing). */
  close(): void {
    this.engine.close();
    this.notices.close();
  }

  async writeMemories(memories: readonly MemoryRecord[]): Promise<MemoryWriteResult> {
    // One node: the whole batch in one script. A cluster: one script per app (its slot), checked across apps first.
    const batches = new Map<string, number[]>();
    memories.forEach((m, i) => {
      const app = this.db.clustered ? m.appName : "";
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
      keys.push(...Object.values(this.db.keysOf(appName)));
    }
    const args: Array<string | number | Buffer> = [
      this.db.channelOf(memories[batch[0]].appName),
      this.origin,
      batch.length,
    ];
    const prefix = this.engine.documents;
    if (prefix !== undefined && mode === "")
      for (const dim of new Set(batch.map((i) => memories[i].embedding?.length ?? 0)))
        if (dim > 0) await this.call(() => this.engine.vectorIndex(dim));
    for (const i of batch) {
      const m = memories[i];
      const documents = prefix === undefined || mode === "check" ? "" : `${prefix}${hex(m.appName)}:`;
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
    args.push(MEMORY_CHANGES_RETAINED, this.db.publishCommand, mode);
    // On a cluster the key count is fixed (defineScripts): one app per call.
    const reply = await this.call(() =>
      this.runWriting("write", this.db.clustered ? [...keys, ...args] : [keys.length, ...keys, ...args]),
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
    if (reply[1] !== "") this.notices.deliver(reply[1] as string, true);
    const records: MemoryRecord[] = [];
    for (let i = 2; i < reply.length; i += 3)
      records.push(decode(reply[i] as string, reply[i + 1] as string, reply[i + 2] as string));
    return records;
  }

  async getMemory(appName: string, memoryId: string): Promise<MemoryRecord | undefined> {
    const keys = this.db.keysOf(appName);
    const id = hex(memoryId);
    const [record, validity, embedding] = (await this.db.transaction((tx) =>
      tx.hget(keys.records, id).hget(keys.validity, id).hget(keys.embeddings, id),
    )) as Array<string | null>;
    return record === null || validity === null ? undefined : decode(record, validity, embedding);
  }

  async searchMemories(filter: MemoryFilter, query: string, limit: number): Promise<RankedMemory[]> {
    const terms = queryTerms(query);
    if (terms.length === 0 || limit <= 0) return [];
    const hits = (await this.engine.onIndex(filter.scope.appName))
      ? await this.engine.search(filter, terms, limit)
      : await this.searchScope(filter, terms, limit);
    return this.rankedMemories(filter, hits);
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
    const keys = this.db.keysOf(filter.scope.appName);
    const [dim] = (await this.db.transaction((tx) => tx.hget(keys.meta, "dim"))) as [string | null];
    // An app's embeddings all have its dimension: one of another compares with none.
    if (Number(dim) !== embedding.length) return [];
    let ids = await this.engine.nearestIds(filter, embedding, limit);
    if (ids === undefined) {
      ids = [];
      for await (const memory of this.newestFirst(filter.scope, SCAN_PAGE))
        if (filterSelects(filter, memory)) ids.push(hex(memory.memoryId));
    }
    const scored: Hit[] = [];
    // The exact cosine of the stored float64 vectors, a page of them per read.
    for (let at = 0; at < ids.length; at += SCAN_PAGE) {
      const page = ids.slice(at, at + SCAN_PAGE);
      const [vectors] = (await this.db.transaction((tx) => tx.hmgetBuffer(keys.vectors, ...page))) as [
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
    const keys = this.db.keysOf(filter.scope.appName);
    const ids = hits.map((h) => h.id);
    const [records, validities] = (await this.db.transaction((tx) =>
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

  async listMemories(filter: MemoryFilter, limit: number, after?: MemoryCursor): Promise<MemoryRecord[]> {
    if (limit <= 0) return [];
    const indexed = filter.pinned === true && (await this.engine.onIndex(filter.scope.appName));
    return this.withEmbeddings(
      filter,
      indexed ? await this.engine.list(filter, limit, after) : await this.listFrom(filter, limit, after),
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
    return this.notices.subscribe(appName, listener);
  }

  /**
   * On a cluster, resolves once the app's channel is subscribed (UNAVAILABLE
   * when its shard cannot be reached); at once on one node, where one channel
   * carries every app from the start.
   */
  listening(appName: string): Promise<void> {
    return this.notices.listening(appName);
  }

  async memoryChangeWindow(appName: string): Promise<MemoryChangeWindow> {
    return changeWindowOf(await this.head(appName));
  }

  async readMemoryChanges(appName: string, after: number, limit: number): Promise<MemoryChangePage> {
    const keys = this.db.keysOf(appName);
    // One transaction: the head and the log it trimmed agree.
    const [head, entries] = (await this.db.transaction((tx) =>
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
      const [records, validities, embeddings] = (await this.db.transaction((tx) =>
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
    const [embeddings] = (await this.db.transaction((tx) =>
      tx.hmget(this.db.keysOf(filter.scope.appName).embeddings, ...memories.map((m) => hex(m.memoryId))),
    )) as [Array<string | null>];
    return memories.map((m, i) => (embeddings[i] ? { ...m, embedding: JSON.parse(embeddings[i]!) as number[] } : m));
  }

  /** Runs delete-11.lua over [hex id, expected entry] pairs; the removed records. */
  private async remove(appName: string, pairs: ReadonlyArray<readonly [string, string]>): Promise<MemoryRecord[]> {
    const k = this.db.keysOf(appName);
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
        this.db.channelOf(appName),
        this.origin,
        pairs.length,
        ...pairs.flat(),
        MEMORY_CHANGES_RETAINED,
        this.db.publishCommand,
        this.engine.documents === undefined ? "" : `${this.engine.documents}${hex(appName)}:`,
      ]),
    );
    if (reply.length === 0) return [];
    return this.notices.deliver(reply[0] as string, true);
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
    const keys = this.db.keysOf(scope.appName);
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
            const [members] = (await this.db.transaction((tx) =>
              tx.zrevrangebylex(w.key, upper, lower, "LIMIT", 0, pageSize),
            )) as [string[]];
            if (members.length < pageSize) w.done = true;
            if (members.length === 0) return;
            const suffixes = members.map((m) => m.slice(w.prefix.length));
            w.cursor = suffixes[suffixes.length - 1];
            const ids = suffixes.map((s) => s.slice(s.indexOf(":") + 1));
            const [records, validities] = (await this.db.transaction((tx) =>
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

  /** The number of the app's newest change (0: none yet). */
  private async head(appName: string): Promise<number> {
    const [seq] = (await this.db.transaction((tx) => tx.hget(this.db.keysOf(appName).meta, "seq"))) as [string | null];
    return Number(seq ?? 0);
  }
}
