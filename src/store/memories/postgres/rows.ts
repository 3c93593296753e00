/** The memories table's columns and rows, and the names a batch groups memories by. */
import { endianness } from "node:os";
import type { JsonObject, MemoryFilter, MemoryRecord, RankedMemory } from "../../types.js";
import { analyzedText } from "../analyzer.js";
import { exactScopeKey, supersessionKey } from "../rules.js";

/** The columns a read returns, in the table's order. */
const COLUMN_NAMES = (
  "app_name memory_id user_id agent_id session_id text fact_subject fact_predicate fact_object key topics importance pinned metadata " +
  "source_session_id source_from_seq source_to_seq created_ms valid_from_ms invalid_at_ms superseded_by embedding fingerprint"
).split(" ");

/** The column list, of the table named `prefix` (with its dot), the embedding as NULL when `withoutEmbedding`. */
function columnList(prefix: string, withoutEmbedding: boolean): string {
  return COLUMN_NAMES.map((column) =>
    column === "embedding" && withoutEmbedding ? "NULL::bytea AS embedding" : prefix + column,
  ).join(", ");
}

export const COLUMNS = columnList("", false);

/** columnsFor's four lists, made once: [table or not][without the embedding or not]. */
export const COLUMN_LISTS = {
  plain: { full: COLUMNS, lean: columnList("", true) },
  m: { full: columnList("m.", false), lean: columnList("m.", true) },
} as const;

/**
 * The columns a read selects, of the memories table named `m` when asked;
 * without the embedding when the filter says the caller will not show it,
 * since each one is ~1.5 kB (384 dimensions) that PostgreSQL writes and the
 * driver parses as ~3 kB of hex, on every row.
 */
export function columnsFor(filter: MemoryFilter, table?: "m"): string {
  const lists = table ? COLUMN_LISTS.m : COLUMN_LISTS.plain;
  return filter.omitEmbeddings ? lists.lean : lists.full;
}

export interface MemoryRow {
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
export function encodeEmbedding(embedding: readonly number[]): Buffer {
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

export function toRecord(row: MemoryRow): MemoryRecord {
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
export function storedSupersessionKey(m: MemoryRecord): string {
  const key = supersessionKey(m);
  return key === "" ? "" : JSON.stringify(key.split("\u0000"));
}

/** One string naming a memory within the store: its app and id (names hold no NUL). */
export function idOf(m: Pick<MemoryRecord, "appName" | "memoryId">): string {
  return `${m.appName}\u0000${m.memoryId}`;
}

/** A keyed memory's supersession group (app, exact scope, key) as one string; undefined without a key. */
export function supersessionGroup(m: MemoryRecord): string | undefined {
  const key = storedSupersessionKey(m);
  return key === "" ? undefined : JSON.stringify([m.appName, exactScopeKey(m), key]);
}

/** What `terms` indexes of a memory: its text and its fact, analyzed (analyzer.ts). */
export function memoryTerms(m: Pick<MemoryRecord, "text" | "fact">): string {
  return analyzedText(m.fact ? `${m.text} ${m.fact.subject} ${m.fact.predicate} ${m.fact.object}` : m.text);
}

/** A row of nearestSql as ranked: cosine similarity, 0 for a zero vector (whose cosine distance pgvector gives as NaN). */
export function byDistance(row: MemoryRow & { distance: number }): RankedMemory {
  return { memory: toRecord(row), score: Number.isNaN(row.distance) ? 0 : 1 - row.distance };
}
