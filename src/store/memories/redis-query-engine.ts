/**
 * The Redis Query Engine under the Redis memories (one node with the search
 * module: Redis 8, Redis Stack, Valkey with valkey-search's
 * RediSearch-compatible module): the indexes, each app's documents, and the
 * searches and listings that run on them.
 *
 * Ranking. With the Redis Query Engine searches run on its indexes over an app's whole scope, filter
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
 */
import type { Redis } from "ioredis";
import { log } from "../../log.js";
import type { MemoryCursor, MemoryFilter, MemoryRecord } from "../types.js";
import { decode, hex, orderSuffix, stampFrom, unhex, type MemoryRedis } from "./redis-layout.js";
import {
  documentFields,
  filterQuery,
  float32Bytes,
  LexicalScore,
  termQuery,
  textIndexArgs,
  vectorIndexArgs,
} from "./redis-index.js";
import { filterSelects } from "./rules.js";

/** Index entries read per round trip while listing a scope. */
const LIST_PAGE = 200;
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

type Reply = Array<string | number | null>;

/** A ranked memory before its record is read: its hex id, score, and tie key (redis-index.ts tieKey). */
export interface Hit {
  id: string;
  score: number;
  tie: string;
}

/** Best first; equal scores by tie key (newest first). */
export const byScore = (a: Hit, b: Hit) => b.score - a.score || (a.tie < b.tie ? -1 : a.tie > b.tie ? 1 : 0);
/** How far apart two sums of the same weights in another order can be: scores this close are equal. */
const SAME_SCORE = 1e-9;

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

/** The Query Engine's indexes and documents of one store's memories; without the engine (`documents` undefined) everything ranks in process. */
export class MemoryQueryEngine {
  /** With the Redis Query Engine: the documents' key prefix (`<prefix>:memdoc:`); undefined ranks in process (listen() decides). */
  documents?: string;
  /** The vector indexes of each dimension: created (or found) once per replica. */
  private readonly vectorIndexes = new Map<number, Promise<void>>();
  /** Indexes found fully indexed, and when (INDEX_READY_TRUSTED_MS). */
  private readonly indexedAt = new Map<string, number>();
  /** Per app, when this replica last began building its documents (rate-limited: DOCUMENT_REBUILD_INTERVAL_MS). */
  private readonly documentBuilds = new Map<string, number>();
  private builds = 0;
  private closed = false;

  constructor(
    private readonly db: MemoryRedis,
    /** The store's origin: build tokens start with it. */
    private readonly origin: string,
  ) {}

  /** How this store ranks memories: "query-engine", or "in-process" (whole scopes; listen() decides and logs it). */
  get ranking(): "query-engine" | "in-process" {
    return this.documents === undefined ? "in-process" : "query-engine";
  }

  /** The text index's name. */
  get textIndex(): string {
    return `${this.db.prefix}:memidx`;
  }

  /**
   * Finds the Redis Query Engine (FT._LIST) and creates the text index when
   * missing; without it (or on a cluster) searches rank in process. Logs
   * which, once. Then gives the documents of apps stored before them in the
   * background.
   */
  async prepare(): Promise<void> {
    let reason: string | undefined;
    if (this.db.clustered) reason = "a Redis Cluster (the Redis Query Engine has no coordinator across shards)";
    else {
      try {
        const names = (await this.db.redis.call("FT._LIST")) as string[];
        if (!names.includes(this.textIndex))
          await this.createIndex(textIndexArgs(this.textIndex, `${this.db.prefix}:memdoc:`));
        this.documents = `${this.db.prefix}:memdoc:`;
      } catch (err) {
        if (!/unknown command/i.test(String((err as Error).message))) throw err;
        reason = "this Redis has no Redis Query Engine (no FT.* commands)";
      }
    }
    if (reason === undefined)
      log.info(
        { prefix: this.db.prefix, index: this.textIndex },
        "long-term memory: searches run on the Redis Query Engine",
      );
    else
      log.warn(
        { prefix: this.db.prefix },
        `long-term memory: ${reason}; searches rank each whole scope in process (exact, O(scope) per search)`,
      );
    if (this.documents !== undefined) void this.buildAllDocuments().catch(() => {});
  }

  /** FT.CREATE; an index another replica created meanwhile is as good. */
  private async createIndex(args: string[]): Promise<void> {
    try {
      await this.db.redis.call("FT.CREATE", ...args);
    } catch (err) {
      if (!/already exists/i.test(String((err as Error).message))) throw err;
    }
  }

  /** The vector index of a dimension, created when missing (once per replica). */
  vectorIndex(dim: number): Promise<void> {
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
    const info = (await this.db.call(() => this.db.redis.call("FT.INFO", name))) as unknown[];
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
  async onIndex(appName: string, index = this.textIndex): Promise<boolean> {
    if (this.documents === undefined) return false;
    const keys = this.db.keysOf(appName);
    const [[seq, chain, ready, build], count] = (await this.db.transaction((tx) =>
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
    const metaOf = new RegExp(`^${this.db.prefix.replace(/[^\w]/g, "\\$&")}:mem:([0-9a-f]*):meta$`);
    do {
      const [next, keys] = (await this.db.call(() =>
        (this.db.redis as Redis).scan(cursor, "MATCH", `${this.db.prefix}:mem:*:meta`, "COUNT", 1000),
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
    const k = this.db.keysOf(appName);
    const prefix = `${this.documents!}${hex(appName)}:`;
    const token = `${this.origin}:${++this.builds}`;
    const run = (...args: Array<string | Buffer | number>) =>
      this.db.call(() =>
        this.runDocs([k.records, k.validity, k.order, k.meta, `${this.db.baseOf(appName)}:pin`, ...args]),
      );
    let after = (await run("begin", token, "resume"))[1] as string;
    for (;;) {
      if (this.closed) return false;
      const [members] = (await this.db.transaction((tx) =>
        tx.zrangebylex(k.order, after === "" ? "-" : `(${after}`, "+", "LIMIT", 0, DOCUMENT_BUILD_PAGE),
      )) as [string[]];
      const ids = members.map((m) => m.slice(m.indexOf(":") + 1));
      const args: Array<string | Buffer> = [];
      if (ids.length > 0) {
        const [records, embeddings] = (await this.db.transaction((tx) =>
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
    const k = this.db.keysOf(appName);
    const prefix = `${this.documents!}${hex(appName)}:`;
    let cursor = "0";
    do {
      const [next, keys] = (await this.db.call(() =>
        (this.db.redis as Redis).scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000),
      )) as [string, string[]];
      cursor = next;
      const ids = keys.map((key) => key.slice(prefix.length)).filter((id) => /^[0-9a-f]*$/.test(id));
      if (ids.length > 0)
        await this.db.call(() =>
          this.runDocs([
            k.records,
            k.validity,
            k.order,
            k.meta,
            `${this.db.baseOf(appName)}:pin`,
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
      this.db.redis as unknown as Record<string, (...args: Array<string | Buffer | number>) => Promise<Reply>>
    ).engram_memories_docs(...keysAndArgs);
  }

  /**
   * The best `limit` by LexicalScore, on the index: statistics among what the
   * filter selects, then each term's documents shortest first, a page per
   * term per round (pages doubling), until no unread document can beat the
   * best `limit` (the header says why this is exact).
   */
  async search(filter: MemoryFilter, terms: string[], limit: number): Promise<Hit[]> {
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

  /**
   * The ids (hex) of the `limit` memories the filter selects nearest to
   * `embedding` by the vector index's KNN; undefined when the app's search
   * cannot run on the index (ranked in process then).
   */
  async nearestIds(filter: MemoryFilter, embedding: readonly number[], limit: number): Promise<string[] | undefined> {
    if (this.documents === undefined) return undefined;
    const index = `${this.textIndex}:v${embedding.length}`;
    await this.db.call(() => this.vectorIndex(embedding.length));
    if (!(await this.onIndex(filter.scope.appName, index))) return undefined;
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
    return searchRows(reply as unknown[]).map(([, fields]) => fields.get("ord")!.slice(17));
  }

  /** A listing on the text index (pinned memories): the filter's query, newest first ("<created>:<hex id>" descending), a page at a time. */
  async list(filter: MemoryFilter, limit: number, after?: MemoryCursor): Promise<MemoryRecord[]> {
    const keys = this.db.keysOf(filter.scope.appName);
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
        const [records, validities] = (await this.db.transaction((tx) =>
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

  /** FT commands in one round trip (one node only: the engine never runs on a cluster); their replies, or the first error. */
  private ftPipeline(commands: Array<Array<string | Buffer>>): Promise<unknown[]> {
    return this.db.call(async () => {
      const pipeline = (this.db.redis as Redis).pipeline();
      for (const [name, ...args] of commands) pipeline.call(name as string, ...args);
      return (await pipeline.exec())!.map(([err, value]) => {
        if (err) throw err;
        return value;
      });
    });
  }

  /** Stops background builds (the store is closing). */
  close(): void {
    this.closed = true;
  }
}
