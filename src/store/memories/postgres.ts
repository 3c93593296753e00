/**
 * Long-term memories of the PostgreSQL store (migration 0010_memories.sql).
 *
 * - Lexical ranking is PostgreSQL full-text search: a generated tsvector
 *   (English stemming and stop words) under a GIN index, ranked by
 *   ts_rank with length normalization. The query is the OR of the query
 *   text's lexemes, built from to_tsvector (so no user text can make it
 *   fail to parse): a memory matching any term is a candidate and matching
 *   more terms (and more often) ranks higher, as BM25 over OR does in the other
 *   stores; an AND query would drop a memory for one word it lacks. Only
 *   the newest LEXICAL_CANDIDATES matches are ranked: ranking every
 *   match made a search's cost grow with the app (a bounded candidate set,
 *   stated in the README, as for vectors). A word in more memories than
 *   that window holds (by the table's statistics: commonLexemes) does not
 *   choose candidates when the query has a rarer word: the window is the
 *   newest matches of the rarer words, and only when they rank fewer than
 *   the answer asks for is the rest filled from the newest memories that
 *   match only the common words; every candidate is ranked on every word.
 *   So an old memory with a rare word of the query is not crowded out of
 *   the window by newer ones that only share a common word, and a search
 *   whose rare words match enough reads their few matches instead of the
 *   common words' many.
 * - A batch is one transaction. Before reading anything it takes
 *   transaction-scoped advisory locks on every memory id and every
 *   supersession group (app, exact scope, key) it touches (a large batch:
 *   on its apps), in one sorted order, so replicas writing the same id or
 *   key queue instead of both closing the same old memory or both inserting
 *   a "current" one.
 * - Embeddings are float32 bytea; the app's dimension lives in
 *   memory_dimensions. Vector similarity is cosine computed here over the
 *   newest NEAREST_CANDIDATES embedded memories the filter selects (no
 *   pgvector): a bounded candidate set, stated in the README. The candidates
 *   come as ids; their embeddings from a bounded cache of decoded vectors
 *   (EMBEDDING_CACHE_BYTES), PostgreSQL sending only the ones it lacks.
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
import { endianness } from "node:os";
import { LRUCache } from "lru-cache";
import type pg from "pg";
import type {
  JsonObject,
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
import { changeWindowOf, deletedStub, embeddingDimensionMismatch, exactScopeKey, memoryIdTaken, requireRetained, supersessionKey } from "./rules.js";

/** Advisory locks a batch takes on its ids and keys at most; a larger batch locks its apps instead (see lockBatch). */
const FINE_LOCKS_MAX = 16;
/** Embedded memories nearestMemories compares at most (the newest the filter selects). */
export const NEAREST_CANDIDATES = 2000;
/** Matching memories searchMemories ranks at most (the newest the filter selects). */
export const LEXICAL_CANDIDATES = 1000;
/** How long the common lexemes read from the table's statistics are used before they are read again. */
const COMMON_LEXEMES_TTL_MS = 60_000;
/** Bytes of decoded embeddings (float32) nearestMemories keeps between calls, in all apps: ~43,000 vectors of 384 dimensions. */
export const EMBEDDING_CACHE_BYTES = 64 * 1024 * 1024;
/** Apps whose cache warmth nearestMemories remembers (the least recently searched forgotten first: their next search reads embeddings with its candidates). */
const WARM_APPS_MAX = 10_000;
/** Memories one delete statement (forget, erasure) removes at most: one bounded transaction each. */
const DELETE_BATCH_MEMORIES = 10_000;

/** How a statement is planned. */
export interface StatementShape {
  /**
   * "prepared" (the default): a named prepared statement per pooled
   * connection, parsed once, whose plan PostgreSQL may make generic after
   * five calls. "custom": unnamed, planned at every call with its
   * parameters' values, for statements whose best plan depends on them. A
   * search's words fold into a constant tsquery only in a custom plan: a
   * generic one estimated their matches blind and evaluated to_tsvector of
   * the query again for every memory it walked.
   */
  plan?: "prepared" | "custom";
}

/** What the driver needs of its PostgresStore: the quoted schema, the channel, and the store's statement helpers. */
export interface PostgresMemoriesAccess {
  /** The quoted schema, prefixed to every table name. */
  schema: string;
  /** The unquoted schema, naming the store's advisory locks. */
  schemaName: string;
  /** The store's LISTEN/NOTIFY channel. */
  channel: string;
  /** One pooled statement, retried if its connection broke, errors as MemoryError; bounded by the call's deadline when it has one. */
  query<R extends pg.QueryResultRow>(sql: string, params: unknown[], call?: StoreCall, shape?: StatementShape): Promise<pg.QueryResult<R>>;
  /** `fn` in one transaction, run again if the connection broke under it, errors as MemoryError; bounded by the call's deadline when it has one. */
  transaction<T>(fn: (client: pg.PoolClient) => Promise<T>, call?: StoreCall): Promise<T>;
}

const COLUMN_NAMES = [
  ...["app_name", "memory_id", "user_id", "agent_id", "session_id", "text", "fact_subject", "fact_predicate", "fact_object", "key", "topics", "importance", "pinned", "metadata"],
  ...["source_session_id", "source_from_seq", "source_to_seq", "created_ms", "valid_from_ms", "invalid_at_ms", "superseded_by", "embedding", "fingerprint"],
];

/** The column list, of the table named `prefix` (with its dot), the embedding as NULL when `withoutEmbedding`. */
function columnList(prefix: string, withoutEmbedding: boolean): string {
  return COLUMN_NAMES.map((column) => (column === "embedding" && withoutEmbedding ? "NULL::bytea AS embedding" : prefix + column)).join(", ");
}

const COLUMNS = columnList("", false);

/** columnsFor's four lists, made once: [table or not][without the embedding or not]. */
const COLUMN_LISTS = {
  plain: { full: COLUMNS, lean: columnList("", true) },
  m: { full: columnList("m.", false), lean: columnList("m.", true) },
} as const;

/**
 * The columns a read selects, of the memories table named `m` when asked;
 * without the embedding when the filter says the caller will not show it,
 * since each one is ~1.5 kB (384 dimensions) that PostgreSQL writes and the
 * driver parses as ~3 kB of hex, on every row.
 */
function columnsFor(filter: MemoryFilter, table?: "m"): string {
  const lists = table ? COLUMN_LISTS.m : COLUMN_LISTS.plain;
  return filter.omitEmbeddings ? lists.lean : lists.full;
}

interface MemoryRow {
  app_name: string;
  memory_id: string;
  user_id: string | null;
  agent_id: string | null;
  session_id: string | null;
  text: string;
  fact_subject: string | null;
  fact_predicate: string | null;
  fact_object: string | null;
  key: string;
  topics: string[];
  importance: number;
  pinned: boolean;
  metadata: JsonObject;
  source_session_id: string | null;
  source_from_seq: string | null;
  source_to_seq: string | null;
  created_ms: string;
  valid_from_ms: string;
  invalid_at_ms: string | null;
  superseded_by: string | null;
  embedding: Buffer | null;
  fingerprint: string;
}

/** float32 little-endian, as the wire's `repeated float`. */
function encodeEmbedding(embedding: readonly number[]): Buffer {
  const bytes = Buffer.alloc(embedding.length * 4);
  embedding.forEach((x, i) => bytes.writeFloatLE(x, i * 4));
  return bytes;
}

/** Float32Array reads the platform's byte order; the stored one is little-endian. */
const LITTLE_ENDIAN = endianness() === "LE";

/**
 * A stored float32 embedding as its own Float32Array. Copied byte for byte
 * into a fresh (so aligned) array: the row's bytes sit at any offset of a
 * pooled buffer, which a cached vector must not pin either; four times
 * faster than readFloatLE per dimension.
 */
function storedFloats(stored: Buffer): Float32Array {
  const n = stored.length / 4;
  if (!LITTLE_ENDIAN) return Float32Array.from({ length: n }, (_, i) => stored.readFloatLE(i * 4));
  const floats = new Float32Array(n);
  new Uint8Array(floats.buffer).set(stored);
  return floats;
}

function decodeEmbedding(bytes: Buffer): number[] {
  const floats = storedFloats(bytes);
  const out = new Array<number>(floats.length);
  for (let i = 0; i < floats.length; i++) out[i] = floats[i];
  return out;
}

/** Sum of squares of a vector: the squared norm cosine divides by. */
function squaredNorm(v: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < v.length; i++) sum += v[i] * v[i];
  return sum;
}

/**
 * Cosine similarity of the query with a stored embedding: the same
 * arithmetic as rules.ts's cosine over the float32 values as stored, with
 * both squared norms computed once (the query's per search, the stored
 * vector's when cached), so only the dot product runs per candidate.
 */
function cosineToStored(query: readonly number[], querySquares: number, stored: CachedEmbedding): number {
  const { floats, squares } = stored;
  let dot = 0;
  for (let i = 0; i < query.length; i++) dot += query[i] * floats[i];
  return querySquares === 0 || squares === 0 ? 0 : dot / Math.sqrt(querySquares * squares);
}

function toRecord(row: MemoryRow): MemoryRecord {
  const m: MemoryRecord = {
    memoryId: row.memory_id,
    appName: row.app_name,
    text: row.text,
    key: row.key,
    topics: row.topics,
    importance: row.importance,
    pinned: row.pinned,
    metadata: row.metadata,
    createdAt: Number(row.created_ms),
    validFrom: Number(row.valid_from_ms),
    fingerprint: row.fingerprint,
  };
  // Absent fields stay absent, as the service builds records.
  if (row.user_id !== null) m.userId = row.user_id;
  if (row.agent_id !== null) m.agentId = row.agent_id;
  if (row.session_id !== null) m.sessionId = row.session_id;
  if (row.fact_subject !== null) m.fact = { subject: row.fact_subject, predicate: row.fact_predicate ?? "", object: row.fact_object ?? "" };
  if (row.source_session_id !== null) m.source = { sessionId: row.source_session_id, fromSeq: Number(row.source_from_seq), toSeq: Number(row.source_to_seq) };
  if (row.invalid_at_ms !== null) m.invalidAt = Number(row.invalid_at_ms);
  if (row.superseded_by !== null) m.supersededBy = row.superseded_by;
  if (row.embedding !== null) m.embedding = decodeEmbedding(row.embedding);
  return m;
}

/** The supersession key as stored: JSON, since PostgreSQL text cannot hold the NUL separators of rules.ts; "" when none. */
function storedSupersessionKey(m: MemoryRecord): string {
  const key = supersessionKey(m);
  return key === "" ? "" : JSON.stringify(key.split("\u0000"));
}

/** Numbered parameters for one statement. */
class Params {
  readonly values: unknown[] = [];
  /** Adds a value; returns its placeholder. */
  add(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }
}

const SCOPE_COLUMNS = [
  ["user_id", "userId"],
  ["agent_id", "agentId"],
  ["session_id", "sessionId"],
] as const;

/** The SQL condition of a scope filter (ScopeMatch in memories.proto; scopeSelects in rules.ts). Only the conditions the filter needs, so each shape keeps its index. */
function scopeSql(p: Params, scope: MemoryScopeFilter): string[] {
  const where = [`app_name = ${p.add(scope.appName)}`];
  for (const [column, dimension] of SCOPE_COLUMNS) {
    const want = scope[dimension];
    switch (scope.match) {
      case "visible":
        where.push(want === undefined ? `${column} IS NULL` : `(${column} IS NULL OR ${column} = ${p.add(want)})`);
        break;
      case "within":
        if (want !== undefined) where.push(`${column} = ${p.add(want)}`);
        break;
      case "exact":
        where.push(want === undefined ? `${column} IS NULL` : `${column} = ${p.add(want)}`);
        break;
    }
  }
  return where;
}

/** The filter's conditions besides the scope, added to `where`. */
function filterConditions(p: Params, filter: MemoryFilter, where: string[]): string {
  if (filter.asOf !== undefined) {
    const at = p.add(filter.asOf);
    where.push(`valid_from_ms <= ${at} AND (invalid_at_ms IS NULL OR invalid_at_ms > ${at})`);
  }
  // A literal, not a parameter: a generic plan could not otherwise use the partial index of pinned memories.
  if (filter.pinned !== undefined) where.push(filter.pinned ? "pinned" : "NOT pinned");
  if (filter.key !== undefined) where.push(`key = ${p.add(filter.key)}`);
  if (filter.subject !== undefined) where.push(`fact_subject = ${p.add(filter.subject)}`);
  if (filter.predicate !== undefined) where.push(`fact_predicate = ${p.add(filter.predicate)}`);
  if (filter.topics && filter.topics.length > 0) where.push(`topics && ${p.add([...filter.topics])}::text[]`);
  return where.join(" AND ");
}

/**
 * The filter's memories newest first (created, then id, descending), at
 * most `limit`, after the cursor, as a statement selecting `columns`. A
 * VISIBLE scope naming a user selects the user's memories OR the shared
 * ones: an OR no index keeps in order, so PostgreSQL would walk the app's
 * whole listing index filtering out other users' rows. Instead each half
 * walks its own index (memories_by_user_created, memories_shared_created)
 * newest first, and the two are merged: O(limit) rows whatever the app holds.
 */
function newestSql(schema: string, p: Params, filter: MemoryFilter, columns: string, limit: number, after?: MemoryCursor, extra = ""): string {
  const cursor = (where: string[]) => {
    if (after) where.push(`(created_ms, memory_id) < (${p.add(after.createdAt)}::bigint, ${p.add(after.memoryId)}::text COLLATE "C")`);
    if (extra) where.push(extra);
    return where;
  };
  const order = `ORDER BY created_ms DESC, memory_id DESC LIMIT ${p.add(limit)}`;
  const { scope } = filter;
  if (scope.match !== "visible" || scope.userId === undefined) {
    return `SELECT ${columns} FROM ${schema}.memories WHERE ${filterConditions(p, filter, cursor(scopeSql(p, scope)))} ${order}`;
  }
  const half = (user: "own" | "shared") => {
    const where = scopeSql(p, { ...scope, userId: undefined, match: "visible" });
    // scopeSql wrote "user_id IS NULL" for the absent user: the shared half; the own half wants the user.
    if (user === "own") where[where.indexOf("user_id IS NULL")] = `user_id = ${p.add(scope.userId)}`;
    return `(SELECT ${columns} FROM ${schema}.memories WHERE ${filterConditions(p, filter, cursor(where))} ${order})`;
  };
  return `SELECT * FROM (${half("own")} UNION ALL ${half("shared")}) both_halves ${order}`;
}

/**
 * The OR of the query's lexemes as a tsquery, from to_tsvector: stripped of
 * positions, a tsvector's text is its lexemes each quoted (quotes doubled,
 * backslashes escaped) and separated by one space, which no lexeme holds;
 * joined by " | " instead it is a tsquery, so no user text can break its
 * syntax. NULL (nothing matches) when the query holds only stop words or
 * punctuation. Every function here is immutable, so with the query bound
 * PostgreSQL folds the whole expression into a constant while planning and
 * estimates how many memories its words match from the column's statistics.
 * A subquery here (an InitPlan, unknown while planning) made it guess a few
 * hundred matches for common words and sort all 31,000 of them (188 ms at
 * 100k memories) instead of walking the newest first (12 ms).
 */
const OR_QUERY = (param: string) => `NULLIF(regexp_replace(strip(to_tsvector('english'::regconfig, ${param}))::text, ''' ''', ''' | ''', 'g'), '')::tsquery`;

/** The OR of lexemes as tsquery text: each quoted as a stripped tsvector's text quotes it (quotes doubled, backslashes escaped). */
function orQueryText(lexemes: readonly string[]): string {
  return lexemes.map((lexeme) => `'${lexeme.replaceAll("\\", "\\\\").replaceAll("'", "''")}'`).join(" | ");
}

/** A candidate of nearestMemories: its id and row version, and its embedding when read with it. */
interface EmbeddedRow {
  memory_id: string;
  version: string;
  embedding?: Buffer | null;
}

/** A decoded embedding of nearestMemories' cache, and the row version it came from. */
interface CachedEmbedding {
  version: string;
  floats: Float32Array;
  /** squaredNorm(floats). */
  squares: number;
}

/** A change as another replica hears of it: ids only, or ids and scope for deletions. */
/** A notice of an app's changes: m "w" (written, superseded) or "d" (deleted), origin, app, and the newest change number it made. */
type ChangeNotice = { m: "w" | "d"; o: string; a: string; q: number };

/** A change before the app's log numbers it. */
type UnnumberedChange = { kind: "written" | "superseded"; memory: MemoryRecord } | { kind: "deleted"; memories: readonly MemoryRecord[] };

/** The PostgreSQL LongTermMemoryStore, living inside a PostgresStore. */
export class PostgresMemories implements LongTermMemoryStore {
  /** Tells this replica's notices apart from other replicas'. */
  private readonly origin = randomUUID();
  private readonly listeners = new KeyedListeners<MemoryChange>();
  private readonly s: string;
  /**
   * Decoded embeddings by app and memory id, each with the version of the
   * row it was read from: its xmin (the transaction that wrote that row
   * version) and created_ms. A row's embedding never changes while the row
   * lives; a memory deleted and written again under the same id is a new
   * row, so a new xmin, and a stale entry is never used (wraparound would
   * also need the same created_ms). Shipping 2,000 candidate embeddings as
   * hex (~6 MB) per vector search was most of its cost on both sides.
   */
  private readonly embeddings = new LRUCache<string, CachedEmbedding>({
    maxSize: EMBEDDING_CACHE_BYTES,
    sizeCalculation: (entry) => entry.floats.byteLength + 64,
  });
  /** Whether an app's next vector search finds its candidates' vectors cached, by app; absent: never searched (see embeddingsOf). */
  private readonly warmApps = new LRUCache<string, boolean>({ max: WARM_APPS_MAX });
  /** The common lexemes (see commonLexemes) and when they were read; a read in progress is shared. */
  private common: { lexemes: ReadonlySet<string>; readAt: number } | undefined;
  private commonRead: Promise<ReadonlySet<string>> | undefined;

  constructor(private readonly db: PostgresMemoriesAccess) {
    this.s = db.schema;
  }

  async writeMemories(batch: readonly MemoryRecord[], call?: StoreCall): Promise<MemoryWriteResult> {
    if (batch.length === 0) return { memories: [], superseded: [] };
    const { result, changes } = await this.db.transaction((client) => this.writeBatch(client, batch), call);
    for (const [appName, appChanges] of changes) for (const change of appChanges) this.emit(appName, change);
    return result;
  }

  /** The batch inside its transaction: locks, every check, then every change in order, and the notices sent at commit. */
  private async writeBatch(client: pg.PoolClient, batch: readonly MemoryRecord[]): Promise<{ result: MemoryWriteResult; changes: Map<string, MemoryChange[]> }> {
    const id = (appName: string, memoryId: string) => JSON.stringify([appName, memoryId]);
    const groupOf = (m: MemoryRecord) => {
      const key = storedSupersessionKey(m);
      return key === "" ? undefined : { key, scope: exactScopeKey(m) };
    };
    await this.lockBatch(client, batch, groupOf);

    const { rows: existingRows } = await client.query<MemoryRow>(
      `SELECT ${COLUMNS} FROM ${this.s}.memories WHERE (app_name, memory_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
      [batch.map((m) => m.appName), batch.map((m) => m.memoryId)],
    );
    const latest = new Map(existingRows.map((row) => [id(row.app_name, row.memory_id), toRecord(row)]));
    const dimensions = await this.appDimensions(client, batch);

    // First every check, then every change: a refused batch changes nothing.
    batch.forEach((m, i) => {
      if (m.embedding && m.embedding.length !== dimensions.get(m.appName)) {
        throw embeddingDimensionMismatch(`memories[${i}].embedding`, m.embedding.length, dimensions.get(m.appName)!);
      }
      const stored = latest.get(id(m.appName, m.memoryId));
      if (stored && stored.fingerprint !== m.fingerprint) throw memoryIdTaken(`memories[${i}].memory_id`, m.memoryId);
      const earlier = batch.findIndex((o) => o.appName === m.appName && o.memoryId === m.memoryId);
      if (earlier !== i && batch[earlier].fingerprint !== m.fingerprint) throw memoryIdTaken(`memories[${i}].memory_id`, m.memoryId);
    });

    const unnumbered = new Map<string, UnnumberedChange[]>();
    const change = (appName: string, c: UnnumberedChange) => {
      const changes = unnumbered;
      const list = changes.get(appName);
      if (list) list.push(c);
      else changes.set(appName, [c]);
    };
    const supersededIds: string[] = [];
    for (const input of batch) {
      if (latest.has(id(input.appName, input.memoryId))) continue;
      let memory = input;
      const group = groupOf(input);
      if (group) {
        const peers = [input.appName, group.key, group.scope, input.validFrom];
        // Valid when the new one starts: their validity ends there.
        const { rows: closed } = await client.query<MemoryRow>(
          `UPDATE ${this.s}.memories SET invalid_at_ms = $4, superseded_by = $5
           WHERE app_name = $1 AND supersession_key = $2 AND scope_key = $3 AND valid_from_ms <= $4 AND (invalid_at_ms IS NULL OR invalid_at_ms > $4)
           RETURNING ${COLUMNS}`,
          [...peers, input.memoryId],
        );
        for (const row of closed) {
          const record = toRecord(row);
          const key = id(record.appName, record.memoryId);
          if (!supersededIds.includes(key)) supersededIds.push(key);
          latest.set(key, record);
          change(record.appName, { kind: "superseded", memory: record });
        }
        // A later memory of the same key already exists: the new one held only until it began.
        const { rows: later } = await client.query<{ memory_id: string; valid_from_ms: string }>(
          `SELECT memory_id, valid_from_ms FROM ${this.s}.memories
           WHERE app_name = $1 AND supersession_key = $2 AND scope_key = $3 AND valid_from_ms > $4
           ORDER BY valid_from_ms, created_ms, memory_id LIMIT 1`,
          peers,
        );
        const next = later[0];
        if (next && (memory.invalidAt === undefined || memory.invalidAt > Number(next.valid_from_ms))) {
          memory = { ...memory, invalidAt: Number(next.valid_from_ms), supersededBy: next.memory_id };
        }
      }
      await this.insert(client, memory, group?.key ?? "");
      latest.set(id(memory.appName, memory.memoryId), memory);
      change(memory.appName, { kind: "written", memory });
    }

    const changes = new Map<string, MemoryChange[]>();
    // Apps in one order: two batches of the same apps lock their log heads without waiting on each other in a cycle.
    for (const appName of [...unnumbered.keys()].sort()) changes.set(appName, await this.logChanges(client, appName, "w", unnumbered.get(appName)!));
    return {
      result: {
        memories: batch.map((m) => latest.get(id(m.appName, m.memoryId))!),
        superseded: supersededIds.map((key) => latest.get(key)!),
      },
      changes,
    };
  }

  /**
   * Locks what the batch writes, until its transaction ends: each memory id
   * and supersession group (app, exact scope, key) exclusively, under a
   * shared lock of each app. Advisory locks take slots of PostgreSQL's
   * shared lock table (max_locks_per_transaction x max_connections), so a
   * batch needing more than FINE_LOCKS_MAX of them locks its apps
   * exclusively instead, which excludes every other writer of those apps.
   * Apps first, then the rest, each in one sorted order: no two writers wait
   * on each other in a cycle.
   */
  private async lockBatch(client: pg.PoolClient, batch: readonly MemoryRecord[], groupOf: (m: MemoryRecord) => { key: string; scope: string } | undefined): Promise<void> {
    const schema = this.db.schemaName;
    const fine = new Set<string>();
    for (const m of batch) {
      fine.add(`engram:memory:${schema}:${JSON.stringify([m.appName, m.memoryId])}`);
      const group = groupOf(m);
      if (group) fine.add(`engram:memory-key:${schema}:${JSON.stringify([m.appName, group.scope, group.key])}`);
    }
    const apps = [...new Set(batch.map((m) => `engram:memory-app:${schema}:${JSON.stringify(m.appName)}`))].sort();
    const lockAll = (fn: string, keys: string[]) =>
      client.query(`SELECT count(${fn}(hashtextextended(k, 0))) FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i)`, [keys]);
    if (fine.size > FINE_LOCKS_MAX) {
      await lockAll("pg_advisory_xact_lock", apps);
      return;
    }
    await lockAll("pg_advisory_xact_lock_shared", apps);
    await lockAll("pg_advisory_xact_lock", [...fine].sort());
  }

  /**
   * The embedding dimension of every app the batch embeds into: the stored
   * one, or for an app without one the batch's first embedding's, recorded
   * now. ON CONFLICT DO NOTHING waits for a concurrent first writer of the
   * app and then keeps its row, which the next statement reads.
   */
  private async appDimensions(client: pg.PoolClient, batch: readonly MemoryRecord[]): Promise<Map<string, number>> {
    const first = new Map<string, number>();
    for (const m of batch) if (m.embedding && !first.has(m.appName)) first.set(m.appName, m.embedding.length);
    if (first.size === 0) return first;
    const apps = [...first.keys()].sort();
    await client.query(
      `INSERT INTO ${this.s}.memory_dimensions (app_name, dimension) SELECT * FROM unnest($1::text[], $2::int[]) ON CONFLICT (app_name) DO NOTHING`,
      [apps, apps.map((a) => first.get(a))],
    );
    const { rows } = await client.query<{ app_name: string; dimension: number }>(`SELECT app_name, dimension FROM ${this.s}.memory_dimensions WHERE app_name = ANY($1::text[])`, [apps]);
    return new Map(rows.map((r) => [r.app_name, r.dimension]));
  }

  private async insert(client: pg.PoolClient, m: MemoryRecord, supersession: string): Promise<void> {
    await client.query(
      `INSERT INTO ${this.s}.memories (${COLUMNS}, scope_key, supersession_key)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::text[], $12, $13, $14::jsonb, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)`,
      [
        m.appName,
        m.memoryId,
        m.userId ?? null,
        m.agentId ?? null,
        m.sessionId ?? null,
        m.text,
        m.fact?.subject ?? null,
        m.fact?.predicate ?? null,
        m.fact?.object ?? null,
        m.key,
        m.topics,
        m.importance,
        m.pinned,
        JSON.stringify(m.metadata),
        m.source?.sessionId ?? null,
        m.source?.fromSeq ?? null,
        m.source?.toSeq ?? null,
        m.createdAt,
        m.validFrom,
        m.invalidAt ?? null,
        m.supersededBy ?? null,
        m.embedding ? encodeEmbedding(m.embedding) : null,
        m.fingerprint,
        exactScopeKey(m),
        supersession,
      ],
    );
  }

  async getMemory(appName: string, memoryId: string, call?: StoreCall): Promise<MemoryRecord | undefined> {
    const { rows } = await this.db.query<MemoryRow>(`SELECT ${COLUMNS} FROM ${this.s}.memories WHERE app_name = $1 AND memory_id = $2`, [appName, memoryId], call);
    return rows[0] && toRecord(rows[0]);
  }

  async searchMemories(filter: MemoryFilter, query: string, limit: number, call?: StoreCall): Promise<RankedMemory[]> {
    if (query.trim() === "" || limit <= 0) return [];
    const p = new Params();
    const split = await this.rareAndCommon(query, call);
    // Without common words, the query's words as an expression PostgreSQL folds while planning (OR_QUERY).
    const all = split ? `${p.add(orQueryText(split.all))}::tsquery` : OR_QUERY(p.add(query));
    const rare = split ? `${p.add(orQueryText(split.rare))}::tsquery` : all;
    const columns = "memory_id, created_ms, search";
    // The newest matches first (newestSql: a user's VISIBLE scope walks the
    // user's and the shared memories' own indexes, not every user's rows),
    // then ranked. Ranked as ids, then the whole rows of the best joined:
    // sorting every match's whole row (embedding included) doubled a
    // search's time.
    // ts_rank, not ts_rank_cd: cover density cost ~15 µs a memory against
    // ts_rank's ~2 µs (most of a search's time at 1,000 candidates), and
    // neither has IDF. Normalization 1: the rank divided by 1 + log(length),
    // so a long memory does not win by repeating words. Every candidate is
    // ranked on all the query's words.
    const l = p.add(limit);
    const ranked = (window: string) =>
      `(SELECT memory_id, created_ms, ts_rank(search, ${all}, 1) AS score FROM (${window}) newest ORDER BY score DESC, created_ms DESC, memory_id DESC LIMIT ${l})`;
    let best = ranked(newestSql(this.s, p, filter, columns, Math.max(limit, LEXICAL_CANDIDATES), undefined, `search @@ ${rare}`));
    if (rare !== all) {
      // The rare words' window, then, only if it ranks fewer than `limit`
      // (the Append under the LIMIT stops before its second part), the
      // newest `limit` memories that match only the common words.
      const fill = ranked(newestSql(this.s, p, filter, columns, limit, undefined, `search @@ ${all} AND NOT search @@ ${rare}`));
      best = `SELECT * FROM (${best} UNION ALL ${fill} LIMIT ${l}) rare_then_common`;
    }
    // One statement: the best ids joined to their rows by primary key (a
    // second round trip for the rows cost each side more than the join).
    const { rows } = await this.db.query<MemoryRow & { score: number }>(
      `WITH best AS (${best})
       SELECT ${columnsFor(filter, "m")}, best.score FROM best JOIN ${this.s}.memories m ON m.app_name = ${p.add(filter.scope.appName)} AND m.memory_id = best.memory_id
       ORDER BY best.score DESC, best.created_ms DESC, best.memory_id DESC`,
      p.values,
      call,
      { plan: "custom" },
    );
    return rows.map((row) => ({ memory: toRecord(row), score: row.score }));
  }

  /**
   * The query's lexemes (as the search column makes them: English stemming
   * and stop words), all of them and those that are not common, when it has
   * both common and rarer ones; undefined otherwise (no common lexemes
   * known, or the query's words all common or all rare), and then without
   * asking PostgreSQL when none are known.
   */
  private async rareAndCommon(query: string, call: StoreCall | undefined): Promise<{ all: string[]; rare: string[] } | undefined> {
    const common = await this.commonLexemes(call);
    if (common.size === 0) return undefined;
    const { rows } = await this.db.query<{ lexemes: string[] }>(`SELECT tsvector_to_array(to_tsvector('english'::regconfig, $1)) AS lexemes`, [query], call);
    const all = rows[0]?.lexemes ?? [];
    const rare = all.filter((lexeme) => !common.has(lexeme));
    return rare.length > 0 && rare.length < all.length ? { all, rare } : undefined;
  }

  /**
   * The lexemes PostgreSQL's statistics of the memories table (ANALYZE, run
   * by autovacuum) estimate in at least LEXICAL_CANDIDATES memories, of every
   * app: a word that alone could fill a search's window. Read again after
   * COMMON_LEXEMES_TTL_MS; none before the table has been analyzed, and
   * none on a table that small, so a search then works as if every word
   * were rare. A failed read keeps the last known ones (or none) until the
   * next read is due, so searches do not each pay for a read that fails.
   */
  private async commonLexemes(call: StoreCall | undefined): Promise<ReadonlySet<string>> {
    const known = this.common;
    if (known && Date.now() - known.readAt < COMMON_LEXEMES_TTL_MS) return known.lexemes;
    this.commonRead ??= this.db
      .query<{ lexemes: string[] | null }>(
        `SELECT ARRAY(
           SELECT lexeme FROM unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS e(lexeme, freq)
           WHERE lexeme IS NOT NULL AND freq * c.reltuples >= $3
         ) AS lexemes
         FROM pg_stats s
         JOIN pg_namespace n ON n.nspname = s.schemaname
         JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = s.tablename
         WHERE s.schemaname = $1 AND s.tablename = $2 AND s.attname = 'search'`,
        [this.db.schemaName, "memories", LEXICAL_CANDIDATES],
        call,
      )
      .then(
        ({ rows }) => new Set(rows[0]?.lexemes ?? []),
        () => known?.lexemes ?? new Set<string>(),
      )
      .then((lexemes) => {
        this.common = { lexemes, readAt: Date.now() };
        return lexemes;
      })
      .finally(() => (this.commonRead = undefined));
    return this.commonRead;
  }

  /** The whole rows of ranked ids, in the ranking's order; a memory deleted between the two reads is left out. */
  private async rowsOf(filter: MemoryFilter, best: { memoryId: string; score: number }[], call: StoreCall | undefined): Promise<RankedMemory[]> {
    if (best.length === 0) return [];
    const appName = filter.scope.appName;
    const { rows } = await this.db.query<MemoryRow>(`SELECT ${columnsFor(filter)} FROM ${this.s}.memories WHERE app_name = $1 AND memory_id = ANY($2::text[])`, [
      appName,
      best.map((b) => b.memoryId),
    ], call);
    const byId = new Map(rows.map((row) => [row.memory_id, toRecord(row)]));
    return best.flatMap(({ memoryId, score }) => {
      const memory = byId.get(memoryId);
      return memory ? [{ memory, score }] : [];
    });
  }

  async nearestMemories(filter: MemoryFilter, embedding: readonly number[], limit: number, call?: StoreCall): Promise<RankedMemory[]> {
    if (embedding.length === 0 || limit <= 0) return [];
    const p = new Params();
    const appName = filter.scope.appName;
    // The candidates (through 0011's indexes of embedded memories) with
    // their row versions and sizes, and, while the app's vectors are not
    // cached, their embeddings; then the embeddings the cache lacks; then
    // the whole rows of the best. Every embedding of an app has one
    // dimension: a query of another matches none. That is checked here, not
    // in SQL, where a condition on octet_length made PostgreSQL expect a
    // handful of rows and sort thousands of whole embeddings on disk.
    const inline = this.warmApps.get(appName) !== true;
    const candidatesSql = newestSql(
      this.s,
      p,
      filter,
      `memory_id, created_ms, xmin::text || ':' || created_ms AS version, octet_length(embedding) AS bytes${inline ? ", embedding" : ""}`,
      NEAREST_CANDIDATES,
      undefined,
      "embedding IS NOT NULL",
    );
    const { rows } = await this.db.query<EmbeddedRow & { bytes: number }>(candidatesSql, p.values, call);
    const candidates = rows.filter((row) => row.bytes === embedding.length * 4);
    const vectors = await this.embeddingsOf(appName, candidates, call);
    const querySquares = squaredNorm(embedding);
    const best = candidates
      .flatMap((row) => {
        const stored = vectors.get(row.memory_id);
        // Deleted since the candidates were read: left out, as rowsOf would.
        return stored?.floats.length === embedding.length ? [{ memoryId: row.memory_id, score: cosineToStored(embedding, querySquares, stored) }] : [];
      })
      .sort((a, b) => b.score - a.score)
      .slice(0, limit);
    return this.rowsOf(filter, best, call);
  }

  /**
   * The decoded embeddings of candidate rows: those a row carries (decoded
   * unless the cache holds its version), the cache's, and the rest read in
   * one statement; every one read is cached. An app is warm (its next
   * search reads no embedding with its candidates) after its first search
   * and while at least half of a search's candidates were cached before it:
   * reading 2,000 missing ones by id after their ids costs about twice the
   * one statement that reads them with the candidates, so an app whose
   * vectors do not stay cached reads them with its candidates until they do.
   */
  private async embeddingsOf(appName: string, candidates: readonly EmbeddedRow[], call: StoreCall | undefined): Promise<Map<string, CachedEmbedding>> {
    const vectors = new Map<string, CachedEmbedding>();
    const missing: string[] = [];
    const remember = (row: EmbeddedRow & { embedding: Buffer }) => {
      const floats = storedFloats(row.embedding);
      const entry = { version: row.version, floats, squares: squaredNorm(floats) };
      this.embeddings.set(`${appName}\u0000${row.memory_id}`, entry);
      vectors.set(row.memory_id, entry);
    };
    let hits = 0;
    for (const row of candidates) {
      const cached = this.embeddings.get(`${appName}\u0000${row.memory_id}`);
      if (cached?.version === row.version) {
        hits++;
        vectors.set(row.memory_id, cached);
      } else if (row.embedding) remember({ ...row, embedding: row.embedding });
      else missing.push(row.memory_id);
    }
    this.warmApps.set(appName, hits * 2 >= candidates.length || this.warmApps.get(appName) === undefined);
    if (missing.length === 0) return vectors;
    const { rows } = await this.db.query<EmbeddedRow>(
      `SELECT memory_id, xmin::text || ':' || created_ms AS version, embedding FROM ${this.s}.memories WHERE app_name = $1 AND memory_id = ANY($2::text[])`,
      [appName, missing],
      call,
    );
    // Each row as read now (it may have changed since the candidates were listed): scored and cached under its own version.
    for (const row of rows) if (row.embedding) remember({ ...row, embedding: row.embedding });
    return vectors;
  }

  async listMemories(filter: MemoryFilter, limit: number, after?: MemoryCursor, call?: StoreCall): Promise<MemoryRecord[]> {
    const p = new Params();
    const { rows } = await this.db.query<MemoryRow>(newestSql(this.s, p, filter, columnsFor(filter), limit, after), p.values, call);
    return rows.map(toRecord);
  }

  async deleteMemories(appName: string, memoryIds: readonly string[], call?: StoreCall): Promise<MemoryRecord[]> {
    if (memoryIds.length === 0) return [];
    // At most MAX_DELETE_IDS ids (the service's bound): one transaction.
    return this.deleteInBatches(appName, "app_name = $1 AND memory_id = ANY($2::text[])", [appName, [...memoryIds]], call);
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
  private async deleteInBatches(appName: string, where: string, params: unknown[], call?: StoreCall): Promise<MemoryRecord[]> {
    const all: MemoryRecord[] = [];
    for (;;) {
      const removed = await this.db.transaction(async (client) => {
        const { rows } = await client.query<MemoryRow>(
          `DELETE FROM ${this.s}.memories WHERE (app_name, memory_id) IN (
             SELECT app_name, memory_id FROM ${this.s}.memories WHERE ${where} LIMIT ${DELETE_BATCH_MEMORIES}
           ) RETURNING ${COLUMNS}`,
          params,
        );
        const records = rows.map(toRecord);
        const [change] = records.length > 0 ? await this.logChanges(client, appName, "d", [{ kind: "deleted", memories: records }]) : [];
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
    const { rows } = await this.db.query<{ head: string }>(`SELECT head FROM ${this.s}.memory_change_heads WHERE app_name = $1`, [appName], call);
    return changeWindowOf(Number(rows[0]?.head ?? 0));
  }

  async readMemoryChanges(appName: string, after: number, limit: number, call?: StoreCall): Promise<MemoryChangePage> {
    // One snapshot for the window and the log: a trim between two reads could otherwise hide evicted changes.
    return this.db.transaction(async (client) => {
      await client.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
      const { rows: heads } = await client.query<{ head: string }>(`SELECT head FROM ${this.s}.memory_change_heads WHERE app_name = $1`, [appName]);
      requireRetained(after, changeWindowOf(Number(heads[0]?.head ?? 0)));
      const { rows } = await client.query<{ seq: string; kind: string; memory_id: string | null; deleted: Array<[string, string | null, string | null, string | null]> | null }>(
        `SELECT seq, kind, memory_id, deleted FROM ${this.s}.memory_changes WHERE app_name = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
        [appName, after, limit],
      );
      const ids = rows.flatMap((row) => (row.memory_id === null ? [] : [row.memory_id]));
      const { rows: memoryRows } =
        ids.length === 0 ? { rows: [] as MemoryRow[] } : await client.query<MemoryRow>(`SELECT ${COLUMNS} FROM ${this.s}.memories WHERE app_name = $1 AND memory_id = ANY($2::text[])`, [appName, ids]);
      const byId = new Map(memoryRows.map((row) => [row.memory_id, toRecord(row)]));
      const changes: MemoryChange[] = [];
      for (const row of rows) {
        const seq = Number(row.seq);
        if (row.kind === "deleted") {
          const memories = (row.deleted ?? []).map(([memoryId, userId, agentId, sessionId]) => deletedStub(appName, memoryId, userId, agentId, sessionId));
          changes.push({ seq, kind: "deleted", memories });
          continue;
        }
        const memory = byId.get(row.memory_id ?? "");
        // Deleted since: its deletion follows.
        if (memory) changes.push({ seq, kind: row.kind === "superseded" ? "superseded" : "written", memory });
      }
      return { changes, through: rows.length > 0 ? Number(rows[rows.length - 1].seq) : after };
    }, call);
  }

  /**
   * A notice from the store's channel (PostgresStore routes those carrying
   * `m` here). This replica's own are skipped: its subscribers heard of the
   * change when it committed. Another replica's tells this replica's
   * watchers of the app how far its log has grown; they read the rest.
   */
  onNotice(payload: unknown): void {
    const notice = payload as Partial<ChangeNotice>;
    if (typeof notice.a !== "string" || notice.o === this.origin || typeof notice.q !== "number" || !this.listeners.has(notice.a)) return;
    this.emit(notice.a, { seq: notice.q, kind: "remote" });
  }

  /** Forgets every listener and cached vector (the store is closing). */
  close(): void {
    this.listeners.clear();
    this.embeddings.clear();
    this.warmApps.clear();
  }

  private emit(appName: string, change: MemoryChange): void {
    this.listeners.emit(appName, change);
  }


  /**
   * Numbers an app's changes inside their transaction: advances (and locks,
   * until commit) the app's log head, appends the changes to its log, trims
   * the log to the newest MEMORY_CHANGES_RETAINED, and notifies other
   * replicas at commit. The changes, numbered.
   */
  private async logChanges(client: pg.PoolClient, appName: string, kind: ChangeNotice["m"], changes: readonly UnnumberedChange[]): Promise<MemoryChange[]> {
    const { rows } = await client.query<{ head: string }>(
      `INSERT INTO ${this.s}.memory_change_heads AS h (app_name, head) VALUES ($1, $2)
       ON CONFLICT (app_name) DO UPDATE SET head = h.head + EXCLUDED.head RETURNING head`,
      [appName, changes.length],
    );
    const head = Number(rows[0].head);
    const first = head - changes.length + 1;
    const numbered = changes.map((c, i) => ({ ...c, seq: first + i }) as MemoryChange);
    await client.query(
      `INSERT INTO ${this.s}.memory_changes (app_name, seq, kind, memory_id, deleted)
       SELECT $1, s, k, NULLIF(m, ''), d::jsonb FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[]) AS t(s, k, m, d)`,
      [
        appName,
        numbered.map((c) => c.seq),
        numbered.map((c) => c.kind),
        numbered.map((c) => (c.kind === "deleted" ? "" : (c as { memory: MemoryRecord }).memory.memoryId)),
        numbered.map((c) =>
          c.kind === "deleted" ? JSON.stringify(c.memories.map((m) => [m.memoryId, m.userId ?? null, m.agentId ?? null, m.sessionId ?? null])) : null,
        ),
      ],
    );
    const floor = changeWindowOf(head).floor;
    if (floor > 0) await client.query(`DELETE FROM ${this.s}.memory_changes WHERE app_name = $1 AND seq <= $2`, [appName, floor]);
    await this.notify(client, [{ m: kind, o: this.origin, a: appName, q: head }]);
    return numbered;
  }

  /** Sends the notices at commit (NOTIFY is transactional). */
  private async notify(client: pg.PoolClient, notices: readonly ChangeNotice[]): Promise<void> {
    if (notices.length === 0) return;
    await client.query("SELECT count(pg_notify($1, n)) FROM unnest($2::text[]) AS n", [this.db.channel, notices.map((n) => JSON.stringify(n))]);
  }
}
