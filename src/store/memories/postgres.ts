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
import { endianness } from "node:os";
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
import { log } from "../../log.js";
import { KeyedListeners } from "../notices.js";
import { ANALYZER_VERSION, analyzedText, queryTerms } from "./analyzer.js";
import {
  MEMORY_CHANGES_RETAINED,
  changeWindowOf,
  deletedStub,
  embeddingDimensionMismatch,
  exactScopeKey,
  memoryIdTaken,
  requireRetained,
  supersessionKey,
} from "./rules.js";

/** The largest dimension pgvector's HNSW indexes a `vector` of; an app of more dimensions is searched by exact scan. */
const HNSW_MAX_DIMENSIONS = 2000;
/** How long the client waits for a vector index to be built over stored rows. */
const INDEX_BUILD_TIMEOUT_MS = 24 * 3600_000;
/**
 * The smallest candidate list of an HNSW search (hnsw.ef_search; pgvector's
 * default is 40). At 40, 7 of 20 needles among 100,000 memories whose
 * vectors repeat (the same text stored many times) were not found at all.
 */
const EF_SEARCH_MIN = 200;
/** Memories the background re-analysis (reanalyze) rewrites per transaction. */
const REANALYZE_BATCH = 500;
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
  query<R extends pg.QueryResultRow>(
    sql: string,
    params: unknown[],
    call?: StoreCall,
    shape?: StatementShape,
  ): Promise<pg.QueryResult<R>>;
  /** `fn` in one transaction, run again if the connection broke under it, errors as MemoryError; bounded by the call's deadline when it has one. */
  transaction<T>(fn: (client: pg.PoolClient) => Promise<T>, call?: StoreCall): Promise<T>;
}

const COLUMN_NAMES = [
  ...[
    "app_name",
    "memory_id",
    "user_id",
    "agent_id",
    "session_id",
    "text",
    "fact_subject",
    "fact_predicate",
    "fact_object",
    "key",
    "topics",
    "importance",
    "pinned",
    "metadata",
  ],
  ...[
    "source_session_id",
    "source_from_seq",
    "source_to_seq",
    "created_ms",
    "valid_from_ms",
    "invalid_at_ms",
    "superseded_by",
    "embedding",
    "fingerprint",
  ],
];

/** The column list, of the table named `prefix` (with its dot), the embedding as NULL when `withoutEmbedding`. */
function columnList(prefix: string, withoutEmbedding: boolean): string {
  return COLUMN_NAMES.map((column) =>
    column === "embedding" && withoutEmbedding ? "NULL::bytea AS embedding" : prefix + column,
  ).join(", ");
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
  if (row.fact_subject !== null)
    m.fact = { subject: row.fact_subject, predicate: row.fact_predicate ?? "", object: row.fact_object ?? "" };
  if (row.source_session_id !== null)
    m.source = {
      sessionId: row.source_session_id,
      fromSeq: Number(row.source_from_seq),
      toSeq: Number(row.source_to_seq),
    };
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

/** One string naming a memory within the store: its app and id (names hold no NUL). */
function idOf(m: Pick<MemoryRecord, "appName" | "memoryId">): string {
  return `${m.appName}\u0000${m.memoryId}`;
}

/** A keyed memory's supersession group (app, exact scope, key) as one string; undefined without a key. */
function supersessionGroup(m: MemoryRecord): string | undefined {
  const key = storedSupersessionKey(m);
  return key === "" ? undefined : JSON.stringify([m.appName, exactScopeKey(m), key]);
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
function newestSql(
  schema: string,
  p: Params,
  filter: MemoryFilter,
  columns: string,
  limit: number,
  after?: MemoryCursor,
  extra = "",
): string {
  const cursor = (where: string[]) => {
    if (after)
      where.push(
        `(created_ms, memory_id) < (${p.add(after.createdAt)}::bigint, ${p.add(after.memoryId)}::text COLLATE "C")`,
      );
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

/** The OR of terms as tsquery text: each quoted (quotes doubled, backslashes escaped), so no user text can break its syntax. */
function orQueryText(terms: readonly string[]): string {
  return terms.map((term) => `'${term.replaceAll("\\", "\\\\").replaceAll("'", "''")}'`).join(" | ");
}

/** What `terms` indexes of a memory: its text and its fact, analyzed (analyzer.ts). */
function memoryTerms(m: Pick<MemoryRecord, "text" | "fact">): string {
  return analyzedText(m.fact ? `${m.text} ${m.fact.subject} ${m.fact.predicate} ${m.fact.object}` : m.text);
}

/** A row of nearestSql as ranked: cosine similarity, 0 for a zero vector (whose cosine distance pgvector gives as NaN). */
function byDistance(row: MemoryRow & { distance: number }): RankedMemory {
  return { memory: toRecord(row), score: Number.isNaN(row.distance) ? 0 : 1 - row.distance };
}

/**
 * How search_vector keeps embeddings (migration 0016): pgvector's `vector`,
 * its type and operator qualified by the extension's schema; or real[],
 * searched by an exact scan.
 */
type VectorLayout = { kind: "pgvector"; schema: string } | { kind: "exact" };

/** A change as another replica hears of it: ids only, or ids and scope for deletions. */
/** A notice of an app's changes: m "w" (written, superseded) or "d" (deleted), origin, app, and the newest change number it made. */
type ChangeNotice = { m: "w" | "d"; o: string; a: string; q: number };

/** A change before the app's log numbers it. */
type UnnumberedChange =
  | { kind: "written" | "superseded"; memory: MemoryRecord }
  | { kind: "deleted"; memories: readonly MemoryRecord[] };

/** The PostgreSQL LongTermMemoryStore, living inside a PostgresStore. */
export class PostgresMemories implements LongTermMemoryStore {
  /** Tells this replica's notices apart from other replicas'. */
  private readonly origin = randomUUID();
  private readonly listeners = new KeyedListeners<MemoryChange>();
  private readonly s: string;
  /** How search_vector keeps embeddings; known once start() has read it. */
  private layout: VectorLayout = { kind: "exact" };
  /** Dimensions whose HNSW index exists (or is not wanted): ensureVectorIndex need not ask again. */
  private readonly indexedDimensions = new Set<number>();
  /** start()'s indexing in the background (the vector indexes, then reanalyze), ended by close(). */
  private background: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly db: PostgresMemoriesAccess) {
    this.s = db.schema;
  }

  /**
   * After the migrations: reads how search_vector keeps embeddings (saying
   * once, in the log, when it is the exact scan because pgvector is not
   * there); then, in the background, makes sure every dimension in use has
   * its index and re-analyzes rows written before 0016.
   */
  async start(): Promise<void> {
    const { rows } = await this.db.query<{ type: string; extension_schema: string | null }>(
      `SELECT format_type(a.atttypid, a.atttypmod) AS type,
              (SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'vector') AS extension_schema
       FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attname = 'search_vector'`,
      [`${this.s}.memories`],
    );
    const [row] = rows;
    if (row && row.type !== "real[]" && row.extension_schema) {
      this.layout = { kind: "pgvector", schema: row.extension_schema };
    } else {
      log.warn(
        { schema: this.db.schemaName },
        "PostgreSQL has no pgvector (the vector extension) for this schema: vector search over long-term memories scans each scope exactly, in time linear in its memories",
      );
    }
    // Indexes first: before the re-analysis fills search_vector of older rows they hold few, so writes wait on their build briefly.
    this.background = (async () => {
      const { rows: dimensions } = await this.db.query<{ dimension: number }>(
        `SELECT DISTINCT dimension FROM ${this.s}.memory_dimensions`,
        [],
      );
      for (const { dimension } of dimensions) await this.ensureVectorIndex(dimension);
      await this.reanalyze();
    })().catch((err: unknown) => {
      if (!this.closed) log.warn({ err }, "indexing long-term memories stopped; the next start-up resumes it");
    });
  }

  /** Resolves once start()'s background indexing has ended (done, or stopped and logged). */
  async indexed(): Promise<void> {
    await this.background;
  }

  /**
   * Rewrites `terms` and `search_vector` of rows analyzed by another
   * analyzer version (rows written before migration 0016 read 0),
   * REANALYZE_BATCH per transaction, rows another replica is rewriting
   * skipped; until then such a row is found by listing, not by search. The
   * number of rows rewritten.
   */
  async reanalyze(): Promise<number> {
    let done = 0;
    while (!this.closed) {
      const rewritten = await this.db.transaction(async (client) => {
        const { rows } = await client.query<MemoryRow>(
          `SELECT ${COLUMNS} FROM ${this.s}.memories
           WHERE analyzer <> ${ANALYZER_VERSION} LIMIT ${REANALYZE_BATCH} FOR UPDATE SKIP LOCKED`,
        );
        if (rows.length === 0) return 0;
        const records = rows.map(toRecord);
        await client.query(
          `UPDATE ${this.s}.memories m SET terms = to_tsvector('simple'::regconfig, t.terms), analyzer = ${ANALYZER_VERSION}, search_vector = ${this.vectorParam("t.vector")}
           FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS t(app_name, memory_id, terms, vector)
           WHERE m.app_name = t.app_name AND m.memory_id = t.memory_id`,
          [
            records.map((m) => m.appName),
            records.map((m) => m.memoryId),
            records.map(memoryTerms),
            records.map((m) => this.vectorText(m.embedding)),
          ],
        );
        return rows.length;
      });
      done += rewritten;
      if (rewritten < REANALYZE_BATCH) break;
    }
    return done;
  }

  /** An embedding as search_vector's input text (NULL without one). */
  private vectorText(embedding: readonly number[] | undefined): string | null {
    if (!embedding) return null;
    return this.layout.kind === "pgvector" ? `[${embedding.join(",")}]` : `{${embedding.join(",")}}`;
  }

  /** The SQL turning vectorText's `param` into search_vector's type. */
  private vectorParam(param: string): string {
    return this.layout.kind === "pgvector" ? `${param}::${this.layout.schema}.vector` : `${param}::real[]`;
  }

  /**
   * Creates the HNSW index (cosine) of one dimension unless it exists: over
   * search_vector cast to the dimension, partial to the rows of that
   * dimension. Replicas creating it at once queue on an advisory lock. A
   * plain CREATE INDEX: when a dimension is first written its rows are few
   * (at start-up, before the re-analysis fills search_vector, none), so
   * writes wait on it briefly.
   */
  private async ensureVectorIndex(dimension: number): Promise<void> {
    if (this.layout.kind !== "pgvector" || this.indexedDimensions.has(dimension)) return;
    if (dimension <= HNSW_MAX_DIMENSIONS) {
      const v = this.layout.schema;
      await this.db.transaction(async (client) => {
        await client.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [
          `engram:memory-vector-index:${this.db.schemaName}:${dimension}`,
        ]);
        // Building over rows already stored (at start-up) may outlast a statement's usual bound, on both sides.
        await client.query("SET LOCAL statement_timeout = 0");
        await client.query({
          text: `CREATE INDEX IF NOT EXISTS memories_vector_${dimension} ON ${this.s}.memories
                 USING hnsw ((search_vector::${v}.vector(${dimension})) ${v}.vector_cosine_ops) WHERE ${v}.vector_dims(search_vector) = ${dimension}`,
          // node-pg reads query_timeout per query, though its types do not declare it.
          query_timeout: INDEX_BUILD_TIMEOUT_MS,
        } as pg.QueryConfig);
      });
    }
    this.indexedDimensions.add(dimension);
  }

  async writeMemories(batch: readonly MemoryRecord[], call?: StoreCall): Promise<MemoryWriteResult> {
    if (batch.length === 0) return { memories: [], superseded: [] };
    const { result, changes } = await this.db.transaction((client) => this.writeBatch(client, batch), call);
    for (const dimension of new Set(batch.flatMap((m) => (m.embedding ? [m.embedding.length] : []))))
      await this.ensureVectorIndex(dimension);
    for (const [appName, appChanges] of changes) for (const change of appChanges) this.emit(appName, change);
    return result;
  }

  /**
   * The batch inside its transaction: locks on its supersession groups,
   * every check, then its memories in as few statements as their groups
   * allow (writeRound), the change log, and the notices sent at commit.
   * Only memories with a key are looked up first (a retry must not close
   * their key's memories again); any other memory id already stored is
   * found by the insert itself (ON CONFLICT), and a conflict with other
   * content refuses the batch, which rolls back whole.
   */
  private async writeBatch(
    client: pg.PoolClient,
    batch: readonly MemoryRecord[],
  ): Promise<{ result: MemoryWriteResult; changes: Map<string, MemoryChange[]> }> {
    const writes = batch.map((memory) => ({ memory, id: idOf(memory), group: supersessionGroup(memory) }));
    const keyed = writes.filter((w) => w.group !== undefined);
    await this.lockGroups(
      client,
      keyed.map((w) => w.group!),
    );

    const first = new Map<string, number>();
    writes.forEach((w, i) => first.has(w.id) || first.set(w.id, i));
    const latest = new Map<string, MemoryRecord>();
    const take = (stored: MemoryRecord) => {
      const i = first.get(idOf(stored));
      if (i !== undefined && stored.fingerprint !== batch[i].fingerprint)
        throw memoryIdTaken(`memories[${i}].memory_id`, stored.memoryId);
      latest.set(idOf(stored), stored);
    };
    if (keyed.length > 0)
      (
        await this.readByIds(
          client,
          keyed.map((w) => w.memory),
        )
      ).forEach(take);
    const dimensions = await this.appDimensions(client, batch);

    // First every check, then every change: a refused batch changes nothing.
    const fresh: typeof writes = [];
    writes.forEach((w, i) => {
      const m = w.memory;
      if (m.embedding && m.embedding.length !== dimensions.get(m.appName)) {
        throw embeddingDimensionMismatch(`memories[${i}].embedding`, m.embedding.length, dimensions.get(m.appName)!);
      }
      const earlier = first.get(w.id)!;
      if (earlier !== i && batch[earlier].fingerprint !== m.fingerprint)
        throw memoryIdTaken(`memories[${i}].memory_id`, m.memoryId);
      if (earlier === i && !latest.has(w.id)) fresh.push(w);
    });

    // Round r writes the r-th memory of each supersession group (and, in the first, every memory without one):
    // a group's memories in batch order, each seeing the one before, as if written one by one.
    const rounds: (typeof writes)[] = [];
    const groupSeen = new Map<string, number>();
    for (const w of fresh) {
      const round = w.group === undefined ? 0 : (groupSeen.get(w.group) ?? 0);
      if (w.group !== undefined) groupSeen.set(w.group, round + 1);
      (rounds[round] ??= []).push(w);
    }
    const closedBy = new Map<string, MemoryRecord[]>();
    const written = new Map<string, MemoryRecord>();
    for (const round of rounds) {
      const outcome = await this.writeRound(client, round);
      outcome.stored.forEach(take);
      for (const memory of outcome.written) {
        written.set(idOf(memory), memory);
        latest.set(idOf(memory), memory);
      }
      for (const [by, closed] of outcome.closed) {
        closedBy.set(by, closed);
        for (const memory of closed) latest.set(idOf(memory), memory);
      }
    }

    // The log in batch order: what each memory closed, then the memory itself.
    const unnumbered = new Map<string, UnnumberedChange[]>();
    const change = (appName: string, c: UnnumberedChange) => {
      const list = unnumbered.get(appName);
      if (list) list.push(c);
      else unnumbered.set(appName, [c]);
    };
    const superseded = new Set<string>();
    for (const { id } of fresh) {
      const memory = written.get(id);
      if (!memory) continue;
      for (const record of closedBy.get(id) ?? []) {
        superseded.add(idOf(record));
        change(record.appName, { kind: "superseded", memory: record });
      }
      change(memory.appName, { kind: "written", memory });
    }

    const changes = new Map<string, MemoryChange[]>();
    // Apps in one order: two batches of the same apps lock their log heads without waiting on each other in a cycle.
    for (const appName of [...unnumbered.keys()].sort())
      changes.set(appName, await this.logChanges(client, appName, "w", unnumbered.get(appName)!));
    return {
      result: {
        memories: writes.map((w) => latest.get(w.id)!),
        superseded: [...superseded].map((id) => latest.get(id)!),
      },
      changes,
    };
  }

  /** The stored memories of these ids (absent ones left out). */
  private async readByIds(client: pg.PoolClient, memories: readonly MemoryRecord[]): Promise<MemoryRecord[]> {
    const { rows } = await client.query<MemoryRow>(
      `SELECT ${COLUMNS} FROM ${this.s}.memories WHERE (app_name, memory_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))`,
      [memories.map((m) => m.appName), memories.map((m) => m.memoryId)],
    );
    return rows.map(toRecord);
  }

  /**
   * Locks supersession groups (app, exact scope, key), each exclusively
   * until the transaction ends, in one sorted order: replicas writing the
   * same key queue instead of both closing the same old memory or both
   * inserting a "current" one, and no two wait on each other in a cycle.
   * Nothing else is locked: a memory id is claimed by the primary key
   * (writeRound's ON CONFLICT), so writers of different keys, and of
   * memories without one, never wait on each other. A batch takes at most
   * MAX_BATCH_MEMORIES advisory locks, each a slot of PostgreSQL's shared
   * lock table (max_locks_per_transaction x max_connections).
   */
  private async lockGroups(client: pg.PoolClient, groups: readonly string[]): Promise<void> {
    if (groups.length === 0) return;
    const names = [...new Set(groups)].sort().map((group) => `engram:memory-key:${this.db.schemaName}:${group}`);
    await client.query(
      `SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) FROM unnest($1::text[]) WITH ORDINALITY AS t(k, i)`,
      [names],
    );
  }

  /**
   * Writes memories of distinct supersession groups, none stored yet, in at
   * most three statements: closes what each supersedes (valid when it
   * starts: their validity ends there), finds for each the stored memory of
   * its key that begins after it (then it held only until that one began),
   * and inserts them all. A memory whose id is stored already (by another
   * transaction, or before) is not written: it comes back in `stored`.
   * `closed` maps the id of each memory written to what it closed.
   */
  private async writeRound(
    client: pg.PoolClient,
    round: ReadonlyArray<{ memory: MemoryRecord; id: string; group: string | undefined }>,
  ): Promise<{ written: MemoryRecord[]; closed: Map<string, MemoryRecord[]>; stored: MemoryRecord[] }> {
    const memories = round.map((w) => w.memory);
    const keyed = memories.filter((_, i) => round[i].group !== undefined);
    const closed = new Map<string, MemoryRecord[]>();
    if (keyed.length > 0) {
      const peers = [
        keyed.map((m) => m.appName),
        keyed.map(storedSupersessionKey),
        keyed.map(exactScopeKey),
        keyed.map((m) => m.validFrom),
      ];
      // Spelled as memories_supersession_open (0017) indexes it; "<> ''" because a join key proves nothing of its predicate.
      const { rows: closedRows } = await client.query<MemoryRow>(
        `UPDATE ${this.s}.memories m SET invalid_at_ms = i.valid_from, superseded_by = i.memory_id
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[]) AS i(app_name, supersession_key, scope_key, valid_from, memory_id)
         WHERE m.app_name = i.app_name AND m.supersession_key = i.supersession_key AND m.scope_key = i.scope_key AND m.supersession_key <> ''
           AND coalesce(m.invalid_at_ms, 9223372036854775807) > i.valid_from AND m.valid_from_ms <= i.valid_from
         RETURNING ${COLUMN_LISTS.m.full}`,
        [...peers, keyed.map((m) => m.memoryId)],
      );
      for (const record of closedRows.map(toRecord)) {
        const by = idOf({ appName: record.appName, memoryId: record.supersededBy! });
        const list = closed.get(by);
        if (list) list.push(record);
        else closed.set(by, [record]);
      }
      const { rows: later } = await client.query<{ i: string; memory_id: string; valid_from_ms: string }>(
        `SELECT DISTINCT ON (i.i) i.i, m.memory_id, m.valid_from_ms
         FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS i(app_name, supersession_key, scope_key, valid_from, i)
         JOIN ${this.s}.memories m ON m.app_name = i.app_name AND m.supersession_key = i.supersession_key AND m.scope_key = i.scope_key AND m.valid_from_ms > i.valid_from
          AND m.supersession_key <> ''
         ORDER BY i.i, m.valid_from_ms, m.created_ms, m.memory_id`,
        peers,
      );
      for (const next of later) {
        const input = keyed[Number(next.i) - 1];
        if (input.invalidAt !== undefined && input.invalidAt <= Number(next.valid_from_ms)) continue;
        memories[memories.indexOf(input)] = {
          ...input,
          invalidAt: Number(next.valid_from_ms),
          supersededBy: next.memory_id,
        };
      }
    }
    const { rows: inserted } = await client.query<{ memory_id: string; app_name: string }>(
      `INSERT INTO ${this.s}.memories (${COLUMNS}, scope_key, supersession_key, terms, analyzer, search_vector)
       SELECT r.app_name, r.memory_id, r.user_id, r.agent_id, r.session_id, r.text, r.fact_subject, r.fact_predicate, r.fact_object, r.key, r.topics,
              r.importance, r.pinned, r.metadata, r.source_session_id, r.source_from_seq, r.source_to_seq, r.created_ms, r.valid_from_ms, r.invalid_at_ms,
              r.superseded_by, decode(r.embedding, 'base64'), r.fingerprint, r.scope_key, r.supersession_key,
              to_tsvector('simple'::regconfig, r.terms), ${ANALYZER_VERSION}, ${this.vectorParam("r.vector")}
       FROM json_to_recordset($1::json) AS r(
         app_name text, memory_id text, user_id text, agent_id text, session_id text, text text, fact_subject text, fact_predicate text, fact_object text,
         key text, topics text[], importance double precision, pinned boolean, metadata jsonb, source_session_id text, source_from_seq bigint,
         source_to_seq bigint, created_ms bigint, valid_from_ms bigint, invalid_at_ms bigint, superseded_by text, embedding text, fingerprint text,
         scope_key text, supersession_key text, terms text, vector text)
       ON CONFLICT (app_name, memory_id) DO NOTHING
       RETURNING app_name, memory_id`,
      [JSON.stringify(memories.map((m) => this.insertRow(m)))],
    );
    const insertedIds = new Set(inserted.map((row) => idOf({ appName: row.app_name, memoryId: row.memory_id })));
    const written = memories.filter((m) => insertedIds.has(idOf(m)));
    const stored =
      written.length < memories.length
        ? await this.readByIds(
            client,
            memories.filter((m) => !insertedIds.has(idOf(m))),
          )
        : [];
    return { written, closed, stored };
  }

  /** One memory as a row of writeRound's json_to_recordset. */
  private insertRow(m: MemoryRecord): Record<string, unknown> {
    return {
      app_name: m.appName,
      memory_id: m.memoryId,
      user_id: m.userId ?? null,
      agent_id: m.agentId ?? null,
      session_id: m.sessionId ?? null,
      text: m.text,
      fact_subject: m.fact?.subject ?? null,
      fact_predicate: m.fact?.predicate ?? null,
      fact_object: m.fact?.object ?? null,
      key: m.key,
      topics: m.topics,
      importance: m.importance,
      pinned: m.pinned,
      metadata: m.metadata,
      source_session_id: m.source?.sessionId ?? null,
      source_from_seq: m.source?.fromSeq ?? null,
      source_to_seq: m.source?.toSeq ?? null,
      created_ms: m.createdAt,
      valid_from_ms: m.validFrom,
      invalid_at_ms: m.invalidAt ?? null,
      superseded_by: m.supersededBy ?? null,
      embedding: m.embedding ? encodeEmbedding(m.embedding).toString("base64") : null,
      fingerprint: m.fingerprint,
      scope_key: exactScopeKey(m),
      supersession_key: storedSupersessionKey(m),
      terms: memoryTerms(m),
      vector: this.vectorText(m.embedding),
    };
  }

  /**
   * The embedding dimension of every app the batch embeds into: the stored
   * one, or for an app without one the batch's first embedding's, recorded
   * now. ON CONFLICT DO NOTHING waits for a concurrent first writer of the
   * app and then keeps its row, which the next read returns.
   */
  private async appDimensions(client: pg.PoolClient, batch: readonly MemoryRecord[]): Promise<Map<string, number>> {
    const first = new Map<string, number>();
    for (const m of batch) if (m.embedding && !first.has(m.appName)) first.set(m.appName, m.embedding.length);
    if (first.size === 0) return first;
    const apps = [...first.keys()].sort();
    const read = async () => {
      const { rows } = await client.query<{ app_name: string; dimension: number }>(
        `SELECT app_name, dimension FROM ${this.s}.memory_dimensions WHERE app_name = ANY($1::text[])`,
        [apps],
      );
      return new Map(rows.map((r) => [r.app_name, r.dimension]));
    };
    const stored = await read();
    if (stored.size === apps.length) return stored;
    const missing = apps.filter((a) => !stored.has(a));
    await client.query(
      `INSERT INTO ${this.s}.memory_dimensions (app_name, dimension) SELECT * FROM unnest($1::text[], $2::int[]) ON CONFLICT (app_name) DO NOTHING`,
      [missing, missing.map((a) => first.get(a))],
    );
    return read();
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
    if (this.layout.kind === "pgvector" && embedding.length <= HNSW_MAX_DIMENSIONS) {
      // Relaxed order: the scan may hand back neighbours slightly out of
      // order, so the k it found are sorted again; ef_search: the scan's
      // first candidate list holds at least the k asked for.
      const found = await this.db.transaction(async (client) => {
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
    const query = p.add(this.vectorText(embedding));
    const where = scopeSql(p, filter.scope);
    let distance: string;
    if (this.layout.kind === "pgvector") {
      const v = this.layout.schema;
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
      const removed = await this.db.transaction(async (client) => {
        const { rows } = await client.query<MemoryRow>(
          `DELETE FROM ${this.s}.memories WHERE (app_name, memory_id) IN (
             SELECT app_name, memory_id FROM ${this.s}.memories WHERE ${where} LIMIT ${DELETE_BATCH_MEMORIES}
           ) RETURNING ${COLUMNS}`,
          params,
        );
        const records = rows.map(toRecord);
        const [change] =
          records.length > 0
            ? await this.logChanges(client, appName, "d", [{ kind: "deleted", memories: records }])
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
    // One snapshot for the window and the log: a trim between two reads could otherwise hide evicted changes.
    return this.db.transaction(async (client) => {
      await client.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ");
      const { rows: heads } = await client.query<{ head: string }>(
        `SELECT head FROM ${this.s}.memory_change_heads WHERE app_name = $1`,
        [appName],
      );
      requireRetained(after, changeWindowOf(Number(heads[0]?.head ?? 0)));
      const { rows } = await client.query<{
        seq: string;
        kind: string;
        memory_id: string | null;
        deleted: Array<[string, string | null, string | null, string | null]> | null;
      }>(
        `SELECT seq, kind, memory_id, deleted FROM ${this.s}.memory_changes WHERE app_name = $1 AND seq > $2 ORDER BY seq LIMIT $3`,
        [appName, after, limit],
      );
      const ids = rows.flatMap((row) => (row.memory_id === null ? [] : [row.memory_id]));
      const { rows: memoryRows } =
        ids.length === 0
          ? { rows: [] as MemoryRow[] }
          : await client.query<MemoryRow>(
              `SELECT ${COLUMNS} FROM ${this.s}.memories WHERE app_name = $1 AND memory_id = ANY($2::text[])`,
              [appName, ids],
            );
      const byId = new Map(memoryRows.map((row) => [row.memory_id, toRecord(row)]));
      const changes: MemoryChange[] = [];
      for (const row of rows) {
        const seq = Number(row.seq);
        if (row.kind === "deleted") {
          const memories = (row.deleted ?? []).map(([memoryId, userId, agentId, sessionId]) =>
            deletedStub(appName, memoryId, userId, agentId, sessionId),
          );
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
    if (
      typeof notice.a !== "string" ||
      notice.o === this.origin ||
      typeof notice.q !== "number" ||
      !this.listeners.has(notice.a)
    )
      return;
    this.emit(notice.a, { seq: notice.q, kind: "remote" });
  }

  /** Forgets every listener and stops the re-analysis (the store is closing). */
  close(): void {
    this.closed = true;
    this.listeners.clear();
  }

  private emit(appName: string, change: MemoryChange): void {
    this.listeners.emit(appName, change);
  }

  /**
   * Numbers an app's changes inside their transaction, in one statement:
   * advances (and locks, until commit) the app's log head, appends the
   * changes to its log, trims the log to the newest MEMORY_CHANGES_RETAINED,
   * and notifies other replicas at commit. Last in its transaction, so the
   * head is held only while the transaction commits. The changes, numbered.
   */
  private async logChanges(
    client: pg.PoolClient,
    appName: string,
    kind: ChangeNotice["m"],
    changes: readonly UnnumberedChange[],
  ): Promise<MemoryChange[]> {
    const { rows } = await client.query<{ head: string }>(
      `WITH advanced AS (
         INSERT INTO ${this.s}.memory_change_heads AS h (app_name, head) VALUES ($1, $2)
         ON CONFLICT (app_name) DO UPDATE SET head = h.head + EXCLUDED.head RETURNING head
       ), logged AS (
         INSERT INTO ${this.s}.memory_changes (app_name, seq, kind, memory_id, deleted)
         SELECT $1, a.head - $2 + t.i, t.k, NULLIF(t.m, ''), t.d::jsonb FROM advanced a, unnest($3::text[], $4::text[], $5::text[]) WITH ORDINALITY AS t(k, m, d, i)
       ), trimmed AS (
         DELETE FROM ${this.s}.memory_changes WHERE app_name = $1 AND seq <= (SELECT head FROM advanced) - ${MEMORY_CHANGES_RETAINED}
       )
       SELECT head, pg_notify($6, json_build_object('m', $7::text, 'o', $8::text, 'a', $1::text, 'q', head)::text) FROM advanced`,
      [
        appName,
        changes.length,
        changes.map((c) => c.kind),
        changes.map((c) => (c.kind === "deleted" ? "" : c.memory.memoryId)),
        changes.map((c) =>
          c.kind === "deleted"
            ? JSON.stringify(
                c.memories.map((m) => [m.memoryId, m.userId ?? null, m.agentId ?? null, m.sessionId ?? null]),
              )
            : null,
        ),
        this.db.channel,
        kind,
        this.origin,
      ],
    );
    const first = Number(rows[0].head) - changes.length + 1;
    return changes.map((c, i) => ({ ...c, seq: first + i }) as MemoryChange);
  }
}
