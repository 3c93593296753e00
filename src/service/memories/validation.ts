/**
 * Validation of the long-term memory requests: every field is checked and a
 * bad one answers INVALID_ARGUMENT naming its path ("memories[2].fact.subject").
 * The limits are documented in docs/memories.md (Limits).
 */
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { ScopeMatch as WireScopeMatch, type Memory } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { invalidArgument } from "../../errors.js";
import { memoryFingerprint } from "../../store/memories/rules.js";
import type { JsonObject, MemoryFilter, MemoryRecord, MemoryScopeFilter, ScopeMatch } from "../../store/types.js";
import { MAX_QUERY_LENGTH } from "../context/index.js";
import { timestampToMs } from "../convert.js";
import type { ServiceLimits } from "../limits.js";
import { checkJson, checkText, requireId, requireName } from "../validation.js";

/** Memories in one WriteMemories batch. */
export const MAX_BATCH_MEMORIES = 100;
/** Ids in one DeleteMemories call. */
export const MAX_DELETE_IDS = 1000;
/** Characters of a fact's subject, predicate or object. */
export const MAX_FACT_PART_LENGTH = 1024;
/** Topics of one memory, and of one filter. */
export const MAX_TOPICS = 32;
/** Characters of one topic. */
export const MAX_TOPIC_LENGTH = 64;
/** Dimensions of an embedding. */
export const MAX_EMBEDDING_DIMENSIONS = 4096;
/** Default and largest top_k of SearchMemories, SearchEvents and Recall. */
export const DEFAULT_TOP_K = 10;
export const MAX_TOP_K = 100;

/** The memory as the client wrote it, ready for the store; `now` becomes createdAt (and validFrom when unset). */
export function newMemory(
  field: string,
  input: Memory,
  now: number,
  limits: ServiceLimits,
  generateId: () => string,
): MemoryRecord {
  const memoryId = input.memoryId === "" ? generateId() : requireId(`${field}.memory_id`, input.memoryId);
  const appName = requireName(`${field}.app_name`, input.appName);
  const userId = optionalName(`${field}.user_id`, input.userId);
  const agentId = optionalName(`${field}.agent_id`, input.agentId);
  const sessionId = input.sessionId === undefined ? undefined : requireId(`${field}.session_id`, input.sessionId);
  if (input.text.trim() === "") throw invalidArgument(`${field}.text`, "is required (what is remembered, in words)");
  checkText(`${field}.text`, input.text);
  let fact: MemoryRecord["fact"];
  if (input.fact) {
    fact = {
      subject: factPart(`${field}.fact.subject`, input.fact.subject),
      predicate: factPart(`${field}.fact.predicate`, input.fact.predicate),
      object: factPart(`${field}.fact.object`, input.fact.object),
    };
  }
  if (input.key !== "") requireName(`${field}.key`, input.key);
  const topics = checkTopics(`${field}.topics`, input.topics);
  if (!(input.importance >= 0 && input.importance <= 1))
    throw invalidArgument(`${field}.importance`, "must be between 0 and 1");
  const metadata: JsonObject = input.metadata ?? {};
  checkJson(`${field}.metadata`, metadata, limits.maxJsonDepth);
  let source: MemoryRecord["source"];
  if (input.source) {
    const s = input.source;
    const fromSeq = Number(s.fromSeq);
    const toSeq = Number(s.toSeq);
    if (s.fromSeq > BigInt(Number.MAX_SAFE_INTEGER) || s.toSeq > BigInt(Number.MAX_SAFE_INTEGER))
      throw invalidArgument(`${field}.source`, "seqs are out of range");
    if (toSeq !== 0 && fromSeq > toSeq) throw invalidArgument(`${field}.source.to_seq`, "must not be below from_seq");
    source = { sessionId: requireId(`${field}.source.session_id`, s.sessionId), fromSeq, toSeq };
  }
  const clientValidFrom = input.validFrom ? timestampToMs(`${field}.valid_from`, input.validFrom) : undefined;
  const validFrom = clientValidFrom ?? now;
  const invalidAt = input.invalidAt ? timestampToMs(`${field}.invalid_at`, input.invalidAt) : undefined;
  if (invalidAt !== undefined && invalidAt <= validFrom)
    throw invalidArgument(`${field}.invalid_at`, "must be after valid_from");
  let embedding: number[] | undefined;
  if (input.embedding.length > 0) {
    if (input.embedding.length > MAX_EMBEDDING_DIMENSIONS)
      throw invalidArgument(`${field}.embedding`, `must have at most ${MAX_EMBEDDING_DIMENSIONS} dimensions`);
    if (!input.embedding.every(Number.isFinite)) throw invalidArgument(`${field}.embedding`, "numbers must be finite");
    embedding = [...input.embedding];
  }
  const bytes =
    Buffer.byteLength(input.text, "utf8") +
    Buffer.byteLength(JSON.stringify(metadata), "utf8") +
    (fact ? Buffer.byteLength(JSON.stringify(fact), "utf8") : 0);
  if (bytes > limits.maxEventBytes) {
    throw invalidArgument(
      field,
      `text, fact and metadata take ${bytes} bytes, over the limit of ${limits.maxEventBytes}`,
    );
  }
  const content = {
    memoryId,
    appName,
    userId,
    agentId,
    sessionId,
    text: input.text,
    fact,
    key: input.key,
    topics,
    importance: input.importance,
    pinned: input.pinned,
    metadata,
    source,
    embedding,
  };
  const record: MemoryRecord = {
    ...content,
    createdAt: now,
    validFrom,
    invalidAt,
    fingerprint: memoryFingerprint(content, clientValidFrom),
  };
  // Absent fields stay absent (stores compare records, and JSON drops undefined anyway).
  for (const k of Object.keys(record) as (keyof MemoryRecord)[]) if (record[k] === undefined) delete record[k];
  return record;
}

/** user_id / agent_id of a scope: absent, or a valid name (never ""). */
export function optionalName(field: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (value === "") throw invalidArgument(field, 'must not be empty when set (leave it unset for "shared" or "any")');
  return requireName(field, value);
}

function factPart(field: string, value: string): string {
  if (value === "") throw invalidArgument(field, "is required when fact is set");
  if (value.length > MAX_FACT_PART_LENGTH)
    throw invalidArgument(field, `must be at most ${MAX_FACT_PART_LENGTH} characters`);
  checkText(field, value);
  return value;
}

function checkTopics(field: string, topics: readonly string[]): string[] {
  if (topics.length > MAX_TOPICS) throw invalidArgument(field, `must hold at most ${MAX_TOPICS} topics`);
  topics.forEach((t, i) => {
    if (t === "" || t.length > MAX_TOPIC_LENGTH)
      throw invalidArgument(`${field}[${i}]`, `must be 1-${MAX_TOPIC_LENGTH} characters`);
    checkText(`${field}[${i}]`, t);
  });
  return [...topics];
}

/** The request fields naming a scope. */
interface ScopeFields {
  appName: string;
  userId?: string;
  agentId?: string;
  sessionId?: string;
  scopeMatch: WireScopeMatch;
}

const MATCHES: Record<number, ScopeMatch> = {
  [WireScopeMatch.VISIBLE]: "visible",
  [WireScopeMatch.WITHIN]: "within",
  [WireScopeMatch.EXACT]: "exact",
};

/** A validated scope filter; `fallback` is the RPC's default match. */
export function scopeFilter(req: ScopeFields, fallback: ScopeMatch): MemoryScopeFilter {
  const match = req.scopeMatch === WireScopeMatch.UNSPECIFIED ? fallback : MATCHES[req.scopeMatch];
  if (match === undefined)
    throw invalidArgument(
      "scope_match",
      `must be SCOPE_MATCH_VISIBLE, SCOPE_MATCH_WITHIN or SCOPE_MATCH_EXACT (got ${req.scopeMatch})`,
    );
  const scope: MemoryScopeFilter = { appName: requireName("app_name", req.appName), match };
  const userId = optionalName("user_id", req.userId);
  const agentId = optionalName("agent_id", req.agentId);
  const sessionId = req.sessionId === undefined ? undefined : requireId("session_id", req.sessionId);
  if (userId !== undefined) scope.userId = userId;
  if (agentId !== undefined) scope.agentId = agentId;
  if (sessionId !== undefined) scope.sessionId = sessionId;
  return scope;
}

/** The request fields of a search or listing besides the scope. */
interface FilterFields {
  topics: readonly string[];
  asOf?: Timestamp;
  includeInvalid: boolean;
  pinned?: boolean;
}

/** A validated filter: valid at as_of (now when unset) unless include_invalid. */
export function memoryFilter(scope: MemoryScopeFilter, req: FilterFields, now: number): MemoryFilter {
  if (req.includeInvalid && req.asOf) throw invalidArgument("include_invalid", "cannot be combined with as_of");
  const filter: MemoryFilter = { scope, topics: checkTopics("topics", req.topics) };
  if (!req.includeInvalid) filter.asOf = req.asOf ? timestampToMs("as_of", req.asOf) : now;
  if (req.pinned !== undefined) filter.pinned = req.pinned;
  return filter;
}

/** A query: at most MAX_QUERY_LENGTH characters of text. */
export function checkQuery(field: string, query: string): string {
  if (query.length > MAX_QUERY_LENGTH) throw invalidArgument(field, `must be at most ${MAX_QUERY_LENGTH} characters`);
  checkText(field, query);
  return query;
}

/** top_k: 0 means DEFAULT_TOP_K; above MAX_TOP_K is refused. */
export function topK(field: string, value: number): number {
  if (value > MAX_TOP_K) throw invalidArgument(field, `must be at most ${MAX_TOP_K}`);
  return value === 0 ? DEFAULT_TOP_K : value;
}

/** A query embedding: finite numbers, at most MAX_EMBEDDING_DIMENSIONS; undefined when empty. */
export function queryEmbedding(field: string, values: readonly number[]): number[] | undefined {
  if (values.length === 0) return undefined;
  if (values.length > MAX_EMBEDDING_DIMENSIONS)
    throw invalidArgument(field, `must have at most ${MAX_EMBEDDING_DIMENSIONS} dimensions`);
  if (!values.every(Number.isFinite)) throw invalidArgument(field, "numbers must be finite");
  return [...values];
}
