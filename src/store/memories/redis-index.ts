/**
 * The Redis store's long-term memories on the Redis Query Engine (FT.*, as
 * Redis 8, Redis Stack and Valkey with the search module offer it): the one
 * index schema, each memory's document, the one query builder, and the
 * lexical score both ranking paths share (redis.ts says when each runs).
 *
 * A memory's document is a hash, `<prefix>:memdoc:<hex app>:<hex id>`,
 * written and deleted with the memory by its scripts. Tenancy and selection
 * fields are TAGs whose values are "h<hex of the value>" or "n" (absent), so
 * no value needs escaping and absent never equals a value:
 *
 *   app, user, agent, session, key, subject, predicate   TAG
 *   topics       TAG, "h<hex>" per topic, comma-separated
 *   pinned       TAG "1" or "0"
 *   valid_from   NUMERIC;  invalid_at NUMERIC, "inf" while open
 *   created      NUMERIC (listing cursors);  ord TAG SORTABLE "<created, 16 digits>:<hex id>" (newest first)
 *   words        TEXT NOSTEM: analyzedText(text + fact) (the analyzer already
 *                stemmed and dropped stop words; the index has STOPWORDS 0)
 *   len          NUMERIC: the number of terms (BM25's document length)
 *   rank         TAG SORTABLE "<len, 6 digits>:<tie key>" (tieKey): a term's
 *                documents in the order its share of the score falls, equal
 *                shares in the order ties are broken
 *   dim, vec     the embedding's dimension and FLOAT32 bytes
 *
 * One text index, `<prefix>:memidx`, holds every document (without vectors);
 * one vector index per dimension, `<prefix>:memidx:v<dim>`, holds the
 * documents of that dimension (FILTER @dim==<dim>) with the same selection
 * fields and `vec` as VECTOR HNSW FLOAT32 COSINE. A vector field has one
 * dimension while apps choose theirs (an app's first embedding fixes it), so
 * an index per dimension, created by the first write of an embedding of
 * that dimension, serves every app of it, and a document of another
 * dimension never fails to index.
 */
import type { MemoryFilter, MemoryRecord } from "../types.js";
import { lexicalTerms } from "./lexical.js";

const hex = (s: string) => Buffer.from(s, "utf8").toString("hex");

/** A TAG value: "h<hex>" for a value, "n" for none. */
export const tagOf = (value: string | undefined) => (value === undefined ? "n" : `h${hex(value)}`);

/** Fixed width, so that ord values sort by creation time as strings. */
export const created16 = (createdAt: number) => String(createdAt).padStart(16, "0");

/** The selection fields every index declares (for the query builder's filters). */
const SELECTION_SCHEMA = [
  "app",
  "TAG",
  "user",
  "TAG",
  "agent",
  "TAG",
  "session",
  "TAG",
  "key",
  "TAG",
  "subject",
  "TAG",
  "predicate",
  "TAG",
  "topics",
  "TAG",
  "SEPARATOR",
  ",",
  "pinned",
  "TAG",
  "valid_from",
  "NUMERIC",
  "invalid_at",
  "NUMERIC",
];

/** FT.CREATE's arguments: an index of the documents under `docPrefix` that `filter` admits, by selection + `fields`. */
function indexArgs(name: string, docPrefix: string, filter: string[], fields: string[]): string[] {
  return [
    name,
    "ON",
    "HASH",
    "PREFIX",
    "1",
    docPrefix,
    ...filter,
    "STOPWORDS",
    "0",
    "SCHEMA",
    ...SELECTION_SCHEMA,
    ...fields,
  ];
}

/** FT.CREATE's arguments for the text index over the documents under `docPrefix`. */
export function textIndexArgs(name: string, docPrefix: string): string[] {
  return indexArgs(
    name,
    docPrefix,
    [],
    [
      "created",
      "NUMERIC",
      "ord",
      "TAG",
      "SORTABLE",
      "words",
      "TEXT",
      "NOSTEM",
      "len",
      "NUMERIC",
      "SORTABLE",
      "rank",
      "TAG",
      "SORTABLE",
    ],
  );
}

/** FT.CREATE's arguments for the vector index of one dimension. */
export function vectorIndexArgs(name: string, docPrefix: string, dim: number): string[] {
  return indexArgs(
    name,
    docPrefix,
    ["FILTER", `@dim==${dim}`],
    ["vec", "VECTOR", "HNSW", "6", "TYPE", "FLOAT32", "DIM", String(dim), "DISTANCE_METRIC", "COSINE"],
  );
}

/** Equal scores rank newest first, then by hex id: the order of this key (ascending). */
export const tieKey = (createdAt: number, hexId: string) => `${String(1e16 - createdAt).padStart(16, "0")}:${hexId}`;

/** A memory's document fields but its validity and vector (which the scripts write): JSON for them. */
export function documentFields(m: MemoryRecord): string {
  const terms = lexicalTerms(m);
  return JSON.stringify({
    app: tagOf(m.appName),
    user: tagOf(m.userId),
    agent: tagOf(m.agentId),
    session: tagOf(m.sessionId),
    key: tagOf(m.key),
    subject: tagOf(m.fact?.subject),
    predicate: tagOf(m.fact?.predicate),
    topics: m.topics.map(tagOf).join(","),
    pinned: m.pinned ? "1" : "0",
    created: String(m.createdAt),
    ord: `${created16(m.createdAt)}:${hex(m.memoryId)}`,
    words: terms.join(" "),
    len: String(terms.length),
    rank: `${String(terms.length).padStart(6, "0")}:${tieKey(m.createdAt, hex(m.memoryId))}`,
    dim: String(m.embedding?.length ?? 0),
  });
}

/** An embedding as a VECTOR FLOAT32 field holds it. */
export function float32Bytes(embedding: readonly number[]): Buffer {
  return Buffer.from(Float32Array.from(embedding).buffer);
}

/**
 * The query selecting what the filter selects (rules.ts filterSelects), for
 * DIALECT 2: the scope (visible: the caller's own or none; within: the
 * caller's or below; exact: exactly the caller's), validity at asOf,
 * pinned, key, fact, and any of the topics.
 */
export function filterQuery(filter: MemoryFilter): string {
  const { scope } = filter;
  const parts = [`@app:{${tagOf(scope.appName)}}`];
  for (const [field, want] of [
    ["user", scope.userId],
    ["agent", scope.agentId],
    ["session", scope.sessionId],
  ] as const) {
    if (scope.match === "visible") parts.push(want === undefined ? `@${field}:{n}` : `@${field}:{n | ${tagOf(want)}}`);
    else if (scope.match === "exact" || want !== undefined) parts.push(`@${field}:{${tagOf(want)}}`);
  }
  if (filter.asOf !== undefined) parts.push(`@valid_from:[-inf ${filter.asOf}] @invalid_at:[(${filter.asOf} +inf]`);
  if (filter.pinned !== undefined) parts.push(`@pinned:{${filter.pinned ? 1 : 0}}`);
  if (filter.key !== undefined) parts.push(`@key:{${tagOf(filter.key)}}`);
  if (filter.subject !== undefined) parts.push(`@subject:{${tagOf(filter.subject)}}`);
  if (filter.predicate !== undefined) parts.push(`@predicate:{${tagOf(filter.predicate)}}`);
  if (filter.topics && filter.topics.length > 0) parts.push(`@topics:{${filter.topics.map(tagOf).join(" | ")}}`);
  return parts.join(" ");
}

/** A query term as the query syntax reads it: every character but letters, marks and digits escaped (terms hold none). */
export function termQuery(term: string): string {
  return `@words:${term.replace(/[^\p{L}\p{M}\p{N}]/gu, (c) => `\\${c}`)}`;
}

/** BM25's constants (the usual ones). */
const K1 = 1.2;
const B = 0.75;

/** What the lexical score needs of the documents a caller may see: their count, total length and, per query term, how many hold it. */
export interface LexicalStats {
  documents: number;
  totalLength: number;
  holding: Map<string, number>;
}

/**
 * The lexical score: BM25 over the documents the filter selects, each query
 * term counted once per document (memories are short statements: a
 * repeated word says little, and a score without term frequency is what
 * lets the index find the best matches exactly, redis.ts). It depends only
 * on the document and on `stats`, gathered from what the caller may see.
 */
export class LexicalScore {
  private readonly weights = new Map<string, number>();
  private readonly averageLength: number;

  constructor(stats: LexicalStats) {
    this.averageLength = stats.documents === 0 ? 1 : Math.max(stats.totalLength / stats.documents, 1e-9);
    for (const [term, n] of stats.holding)
      if (n > 0) this.weights.set(term, Math.log(1 + (stats.documents - n + 0.5) / (n + 0.5)));
  }

  /** The query's terms any selected document holds, with their weights. */
  get terms(): ReadonlyMap<string, number> {
    return this.weights;
  }

  /** What a document of `length` terms scores per unit of term weight: less the longer it is. */
  lengthFactor(length: number): number {
    return (K1 + 1) / (1 + K1 * (1 - B + (B * length) / this.averageLength));
  }

  /** A document's score from its terms (repeats allowed), 0 when it holds no query term; documents with the same terms score the same, to the bit. */
  score(terms: readonly string[]): number {
    const held = new Set(terms);
    let weight = 0;
    for (const [term, w] of this.weights) if (held.has(term)) weight += w;
    return weight === 0 ? 0 : weight * this.lengthFactor(terms.length);
  }
}
