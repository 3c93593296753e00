/**
 * How memories are made searchable: `terms` (the analyzer's words as a
 * tsvector) and `search_vector` (the embedding as pgvector's `vector`, or
 * real[] without it), the HNSW index of each dimension in use, and the
 * background re-analysis of rows an older analyzer wrote.
 */
import type pg from "pg";
import { log } from "../../../log.js";
import type { PostgresDatabase } from "../../postgres/database.js";
import { ANALYZER_VERSION } from "../analyzer.js";
import { COLUMNS, type MemoryRow, memoryTerms, toRecord } from "./rows.js";

/** The largest dimension pgvector's HNSW indexes a `vector` of; an app of more dimensions is searched by exact scan. */
export const HNSW_MAX_DIMENSIONS = 2000;
/** How long the client waits for a vector index to be built over stored rows. */
const INDEX_BUILD_TIMEOUT_MS = 24 * 3600_000;
/** Memories the background re-analysis (reanalyze) rewrites per transaction. */
const REANALYZE_BATCH = 500;

/**
 * How search_vector keeps embeddings (migration 0016): pgvector's `vector`,
 * its type and operator qualified by the extension's schema; or real[],
 * searched by an exact scan.
 */
export type VectorLayout = { kind: "pgvector"; schema: string } | { kind: "exact" };

/** The search columns of one schema's memories table. */
export class SearchColumns {
  /** How search_vector keeps embeddings; known once start() has read it. */
  layout: VectorLayout = { kind: "exact" };
  /** Dimensions whose HNSW index exists (or is not wanted): ensureVectorIndex need not ask again. */
  private readonly indexedDimensions = new Set<number>();
  /** start()'s indexing in the background (the vector indexes, then reanalyze), ended by stop(). */
  private background: Promise<void> | undefined;
  private stopped = false;

  /** `s`: the quoted schema; `schemaName`: the unquoted one, naming the advisory locks. */
  constructor(
    private readonly db: PostgresDatabase,
    private readonly s: string,
    private readonly schemaName: string,
  ) {}

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
        { schema: this.schemaName },
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
      if (!this.stopped) log.warn({ err }, "indexing long-term memories stopped; the next start-up resumes it");
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
    while (!this.stopped) {
      const rewritten = await this.db.retriedTransaction(async (client) => {
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
  vectorText(embedding: readonly number[] | undefined): string | null {
    if (!embedding) return null;
    return this.layout.kind === "pgvector" ? `[${embedding.join(",")}]` : `{${embedding.join(",")}}`;
  }

  /** The SQL turning vectorText's `param` into search_vector's type. */
  vectorParam(param: string): string {
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
  async ensureVectorIndex(dimension: number): Promise<void> {
    if (this.layout.kind !== "pgvector" || this.indexedDimensions.has(dimension)) return;
    if (dimension <= HNSW_MAX_DIMENSIONS) {
      const v = this.layout.schema;
      await this.db.retriedTransaction(async (client) => {
        await client.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [
          `engram:memory-vector-index:${this.schemaName}:${dimension}`,
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

  /** Stops the re-analysis (the store is closing). */
  stop(): void {
    this.stopped = true;
  }
}
