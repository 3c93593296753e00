/**
 * Long-term memories of the PostgreSQL store (migrations 0010_memories.sql
 * and 0016_memories_search_indexes.sql).
 *
 * - Words: each memory's text and fact as the shared analyzer makes them
 *   (analyzer.ts), stored as a tsvector under the `simple` configuration
 *   (which neither stems nor drops words again) in `terms`, under a GIN
 *   index. A search is the OR of the query's terms over the WHOLE filtered
 *   scope, ranked by ts_rank with length normalization: a memory matching
 *   more of the terms (and more often) ranks higher; ts_rank uses no corpus
 *   statistics, so a score depends on the memory and the query alone, never
 *   on what other users stored. Rows written before 0016 (analyzer 0) are
 *   analyzed in the background at start-up (reanalyze).
 * - Vectors: `search_vector` holds the embedding for search. With pgvector
 *   it is a `vector`, and each dimension in use has its own HNSW index
 *   (cosine) over the column cast to that dimension, partial to it
 *   (ensureVectorIndex). A search walks it with pgvector's iterative index
 *   scan, so filters (scope, validity, topics) do not empty the top k; when
 *   the scan still returns fewer than asked (the filter keeps too few of the
 *   rows it may visit, hnsw.max_scan_tuples) the same query runs exact, over
 *   the filtered rows only. Without pgvector it is real[] and every search
 *   is that exact scan, in SQL. Either way no memory of the scope is left
 *   out. `embedding` (float32 bytes) stays what reads return.
 * - A batch is one transaction, of a few statements whatever its size: its
 *   memories go in with one INSERT (more only when one batch holds several
 *   memories of one key). Before reading anything it takes a
 *   transaction-scoped advisory lock on each supersession group (app, exact
 *   scope, key) it writes, in one sorted order, so replicas writing the
 *   same key queue instead of both closing the same old memory or both
 *   inserting a "current" one. Nothing else is locked: the primary key
 *   decides which of two writers of one memory id inserts it (ON CONFLICT),
 *   so batches that share no key never wait on each other.
 * - Every change is numbered in its app's change log (migration
 *   0013_memory_changes.sql), inside the transaction that makes it: the
 *   app's row of memory_change_heads is locked and advanced, so numbers
 *   follow commit order; the log keeps the newest MEMORY_CHANGES_RETAINED
 *   changes of the app (references to written and superseded memories, the
 *   ids and scope of deleted ones).
 * - Changes reach other replicas by NOTIFY on the store's channel, sent at
 *   commit: the app and its newest change number only; a replica's watchers
 *   read what they have not seen from the log. This replica's own
 *   subscribers get the full records at once and skip its notices.
 */
import { randomUUID } from "node:crypto";
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
  StoreCall,
} from "../types.js";
import { KeyedListeners } from "../notices.js";
import type { PostgresDatabase } from "../postgres/database.js";
import { queryTerms } from "./analyzer.js";
import { changeWindowOf } from "./rules.js";
import { type ChangeNotice, logChanges, readChanges } from "./postgres/changes.js";
import type { MemoriesContext } from "./postgres/context.js";
import { filterConditions, newestSql, orQueryText, Params, scopeSql } from "./postgres/queries.js";
import { byDistance, COLUMNS, columnsFor, type MemoryRow, toRecord } from "./postgres/rows.js";
import { HNSW_MAX_DIMENSIONS, SearchColumns } from "./postgres/search-columns.js";
import { writeBatch } from "./postgres/writes.js";

/**
 * The smallest candidate list of an HNSW search (hnsw.ef_search; pgvector's
 * default is 40). At 40, 7 of 20 needles among 100,000 memories whose
 * vectors repeat (the same text stored many times) were not found at all.
 */
const EF_SEARCH_MIN = 200;
/** Memories one delete statement (forget, erasure) removes at most: one bounded transaction each. */
const DELETE_BATCH_MEMORIES = 10_000;

/** The PostgreSQL LongTermMemoryStore, living inside a PostgresStore. */
export class PostgresMemories implements LongTermMemoryStore {
  private readonly listeners = new KeyedListeners<MemoryChange>();
  private readonly ctx: MemoriesContext;
  /** The quoted schema, prefixed to every table name. */
  private readonly s: string;

  /** `names.schema`: quoted; `names.schemaName`: unquoted, naming advisory locks; `names.channel`: the store's notice channel. */
  constructor(
    private readonly db: PostgresDatabase,
    names: { schema: string; schemaName: string; channel: string },
  ) {
    this.s = names.schema;
    const search = new SearchColumns(db, names.schema, names.schemaName);
    // origin tells this replica's notices apart from other replicas'.
    this.ctx = {
      db,
      s: names.schema,
      schemaName: names.schemaName,
      channel: names.channel,
      origin: randomUUID(),
      search,
    };
  }

  /**
   * After the migrations: reads how search_vector keeps embeddings; then, in
   * the background, makes sure every dimension in use has its index and
   * re-analyzes rows written before 0016 (search-columns.ts).
   */
  async start(): Promise<void> {
    await this.ctx.search.start();
  }

  /** Resolves once start()'s background indexing has ended (done, or stopped and logged). */
  async indexed(): Promise<void> {
    await this.ctx.search.indexed();
  }

  /** Re-analyzes rows of another analyzer version now; the number rewritten. */
  async reanalyze(): Promise<number> {
    return this.ctx.search.reanalyze();
  }

  async writeMemories(batch: readonly MemoryRecord[], call?: StoreCall): Promise<MemoryWriteResult> {
    if (batch.length === 0) return { memories: [], superseded: [] };
    const { result, changes } = await this.db.retriedTransaction((client) => writeBatch(this.ctx, client, batch), call);
    for (const dimension of new Set(batch.flatMap((m) => (m.embedding ? [m.embedding.length] : []))))
      await this.ctx.search.ensureVectorIndex(dimension);
    for (const [appName, appChanges] of changes) for (const change of appChanges) this.emit(appName, change);
    return result;
  }

  async getMemory(appName: string, memoryId: string, call?: StoreCall): Promise<MemoryRecord | undefined> {
    const { rows } = await this.db.query<MemoryRow>(
      `SELECT ${COLUMNS} FROM ${this.s}.memories WHERE app_name = $1 AND memory_id = $2`,
      [appName, memoryId],
      call,
    );
    return rows[0] && toRecord(rows[0]);
  }

  async searchMemories(filter: MemoryFilter, query: string, limit: number, call?: StoreCall): Promise<RankedMemory[]> {
    const terms = queryTerms(query);
    if (terms.length === 0 || limit <= 0) return [];
    const p = new Params();
    const q = `${p.add(orQueryText(terms))}::tsquery`;
    // Ranked as ids, then the whole rows of the best joined: sorting every
    // match's whole row (embedding included) doubled a search's time.
    // ts_rank, not ts_rank_cd: cover density costs several times more a
    // match, and neither has IDF. Normalization 1: the rank divided by
    // 1 + log(length), so a long memory does not win by repeating words.
    // A custom plan: the tsquery is a constant PostgreSQL estimates its
    // matches of (GIN or a scope index first).
    const where = filterConditions(p, filter, [...scopeSql(p, filter.scope), `terms @@ ${q}`]);
    const { rows } = await this.db.query<MemoryRow & { score: number }>(
      `WITH best AS (
         SELECT memory_id, created_ms, ts_rank(terms, ${q}, 1) AS score FROM ${this.s}.memories WHERE ${where}
         ORDER BY score DESC, created_ms DESC, memory_id DESC LIMIT ${p.add(limit)}
       )
       SELECT ${columnsFor(filter, "m")}, best.score FROM best JOIN ${this.s}.memories m ON m.app_name = ${p.add(filter.scope.appName)} AND m.memory_id = best.memory_id
       ORDER BY best.score DESC, best.created_ms DESC, best.memory_id DESC`,
      p.values,
      call,
      { plan: "custom" },
    );
    return rows.map((row) => ({ memory: toRecord(row), score: row.score }));
  }

  async nearestMemories(
    filter: MemoryFilter,
    embedding: readonly number[],
    limit: number,
    call?: StoreCall,
  ): Promise<RankedMemory[]> {
    if (embedding.length === 0 || limit <= 0) return [];
    if (this.ctx.search.layout.kind === "pgvector" && embedding.length <= HNSW_MAX_DIMENSIONS) {
      // Relaxed order: the scan may hand back neighbours slightly out of
      // order, so the k it found are sorted again; ef_search: the scan's
      // first candidate list holds at least the k asked for.
      const found = await this.db.retriedTransaction(async (client) => {
        await client.query(
          `SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', $1, true)`,
          [String(Math.min(1000, Math.max(EF_SEARCH_MIN, 2 * limit)))],
        );
        const { sql, values } = this.nearestQuery(filter, embedding, limit, true);
        return (await client.query<MemoryRow & { distance: number }>(sql, values)).rows;
      }, call);
      // The index scan gave up before finding k in the filter (it visits
      // hnsw.max_scan_tuples rows at most): the filter keeps few rows, which
      // the exact plan reads alone. Fewer than k exist otherwise.
      if (found.length >= limit) return found.sort((a, b) => a.distance - b.distance).map(byDistance);
    }
    const { sql, values } = this.nearestQuery(filter, embedding, limit, false);
    return (await this.db.query<MemoryRow & { distance: number }>(sql, values, call, { plan: "custom" })).rows.map(
      byDistance,
    );
  }

  /**
   * The best `limit` embedded memories of the filter by cosine similarity
   * to `embedding`, as `score`: through the HNSW index of the query's
   * dimension when `indexed` (the column cast to the dimension, and the
   * index's own predicate, both literals), else exact: every embedded row
   * of the filter of that dimension compared. A memory of another dimension
   * never matches. Public for tests, which EXPLAIN it.
   */
  nearestQuery(
    filter: MemoryFilter,
    embedding: readonly number[],
    limit: number,
    indexed: boolean,
  ): { sql: string; values: unknown[] } {
    const p = new Params();
    const dimension = embedding.length;
    const query = p.add(this.ctx.search.vectorText(embedding));
    const where = scopeSql(p, filter.scope);
    let distance: string;
    if (this.ctx.search.layout.kind === "pgvector") {
      const v = this.ctx.search.layout.schema;
      where.push(`${v}.vector_dims(search_vector) = ${dimension}`);
      distance = indexed
        ? `(search_vector::${v}.vector(${dimension})) OPERATOR(${v}.<=>) ${query}::${v}.vector(${dimension})`
        : `search_vector OPERATOR(${v}.<=>) ${query}::${v}.vector`;
    } else {
      where.push(`cardinality(search_vector) = ${dimension}`);
      // 1 - cosine similarity in double precision; a zero vector is at distance 1 from every other.
      distance = `(SELECT 1 - coalesce(sum(e * q) / nullif(sqrt(sum(e * e) * sum(q * q)), 0), 0) FROM unnest(search_vector::float8[], ${query}::float8[]) AS t(e, q))`;
    }
    const sql = `SELECT ${columnsFor(filter)}, ${distance} AS distance FROM ${this.s}.memories WHERE ${filterConditions(p, filter, where)}
                 ORDER BY distance LIMIT ${p.add(limit)}`;
    return { sql, values: p.values };
  }

  async listMemories(
    filter: MemoryFilter,
    limit: number,
    after?: MemoryCursor,
    call?: StoreCall,
  ): Promise<MemoryRecord[]> {
    const p = new Params();
    const { rows } = await this.db.query<MemoryRow>(
      newestSql(this.s, p, filter, columnsFor(filter), limit, after),
      p.values,
      call,
    );
    return rows.map(toRecord);
  }

  async deleteMemories(appName: string, memoryIds: readonly string[], call?: StoreCall): Promise<MemoryRecord[]> {
    if (memoryIds.length === 0) return [];
    // At most MAX_DELETE_IDS ids (the service's bound): one transaction.
    return this.deleteInBatches(
      appName,
      "app_name = $1 AND memory_id = ANY($2::text[])",
      [appName, [...memoryIds]],
      call,
    );
  }

  async deleteMemoriesInScope(scope: MemoryScopeFilter, call?: StoreCall): Promise<MemoryRecord[]> {
    const p = new Params();
    const where = scopeSql(p, scope).join(" AND ");
    return this.deleteInBatches(scope.appName, where, p.values, call);
  }

  /**
   * Every memory of (appName, userId), whatever its agent, session or
   * validity: DeleteUserData's share. Run again by a resumed erasure, it
   * removes what is left.
   */
  async eraseUser(appName: string, userId: string): Promise<number> {
    return (await this.deleteInBatches(appName, "app_name = $1 AND user_id = $2", [appName, userId])).length;
  }

  /**
   * Deletes the rows `where` selects, DELETE_BATCH_MEMORIES per transaction
   * (forgetting a whole app must not be one unbounded transaction), each with
   * its notices; tells this replica's subscribers after each. A failure
   * leaves the batches before it done: repeating the call removes the rest.
   */
  private async deleteInBatches(
    appName: string,
    where: string,
    params: unknown[],
    call?: StoreCall,
  ): Promise<MemoryRecord[]> {
    const all: MemoryRecord[] = [];
    for (;;) {
      const removed = await this.db.retriedTransaction(async (client) => {
        const { rows } = await client.query<MemoryRow>(
          `DELETE FROM ${this.s}.memories WHERE (app_name, memory_id) IN (
             SELECT app_name, memory_id FROM ${this.s}.memories WHERE ${where} LIMIT ${DELETE_BATCH_MEMORIES}
           ) RETURNING ${COLUMNS}`,
          params,
        );
        const records = rows.map(toRecord);
        const [change] =
          records.length > 0
            ? await logChanges(this.ctx, client, appName, "d", [{ kind: "deleted", memories: records }])
            : [];
        return { records, change };
      }, call);
      if (removed.change) this.emit(appName, removed.change);
      all.push(...removed.records);
      if (removed.records.length < DELETE_BATCH_MEMORIES) return all;
    }
  }

  subscribeMemories(appName: string, listener: MemoryChangeListener): () => void {
    return this.listeners.subscribe(appName, listener);
  }

  async memoryChangeWindow(appName: string, call?: StoreCall): Promise<MemoryChangeWindow> {
    const { rows } = await this.db.query<{ head: string }>(
      `SELECT head FROM ${this.s}.memory_change_heads WHERE app_name = $1`,
      [appName],
      call,
    );
    return changeWindowOf(Number(rows[0]?.head ?? 0));
  }

  async readMemoryChanges(appName: string, after: number, limit: number, call?: StoreCall): Promise<MemoryChangePage> {
    return readChanges(this.ctx, appName, after, limit, call);
  }

  /**
   * A notice from the store's channel (PostgresStore routes those carrying
   * `m` here). This replica's own are skipped: its subscribers heard of the
   * change when it committed. Another replica's tells this replica's
   * watchers of the app how far its log has grown; they read the rest.
   */
  onNotice(payload: unknown): void {
    const notice = payload as Partial<ChangeNotice>;
    if (
      typeof notice.a !== "string" ||
      notice.o === this.ctx.origin ||
      typeof notice.q !== "number" ||
      !this.listeners.has(notice.a)
    )
      return;
    this.emit(notice.a, { seq: notice.q, kind: "remote" });
  }

  /** Forgets every listener and stops the re-analysis (the store is closing). */
  close(): void {
    this.ctx.search.stop();
    this.listeners.clear();
  }

  private emit(appName: string, change: MemoryChange): void {
    this.listeners.emit(appName, change);
  }
}
