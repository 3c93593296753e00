/**
 * Plain objects returned by MemoryClient. Seqs and counts are JavaScript
 * numbers: a session would need 2^53 events before one stopped being exact,
 * and the client throws a RangeError rather than round one. Timestamps are
 * Dates; content is the JSON value stored; metadata a JSON object.
 */
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";

export type { JsonObject, JsonValue };

/** One session. */
export interface Session {
  sessionId: string;
  appName: string;
  userId: string;
  metadata: JsonObject;
  createdAt: Date | undefined;
  updatedAt: Date | undefined;
  /** Seq of the newest event (0 when none was ever appended). */
  headSeq: number;
  /** Seq of the oldest retained event (headSeq + 1 when none is). */
  firstSeq: number;
  /** Number of events currently retained. */
  eventCount: number;
  /**
   * The session's state as ADK merges it: its own keys, plus the app-wide
   * state as "app:<key>" and the user's state as "user:<key>".
   */
  state: JsonObject;
  /** Increases with each updateSession and each append carrying a state delta; see updateSession's expectedVersion. */
  version: number;
}

/** What updateSession changes; absent fields stay as they are. */
export interface SessionUpdate {
  /** Replaces the metadata. */
  metadata?: JsonObject;
  /** State changes ("app:" / "user:" / "temp:" keys as for an event's stateDelta; null deletes a key unless stateNullsAreValues). */
  stateDelta?: JsonObject;
  /** Keys to delete before stateDelta applies (named as stateDelta's keys). */
  stateRemovals?: string[];
  /** Store stateDelta's nulls as values (ADK's contract) instead of deleting their keys. */
  stateNullsAreValues?: boolean;
  /** Only when the session's version equals this; otherwise FAILED_PRECONDITION. */
  expectedVersion?: number | bigint;
}

/** One stored event. */
export interface MemoryEvent {
  eventId: string;
  eventType: string;
  /** Any JSON value (null when none was given). */
  content: JsonValue;
  metadata: JsonObject;
  timestamp: Date | undefined;
  /** Position in the session: 1, 2, 3, ... without gaps. */
  seq: number;
  sessionId: string;
  /** The state changes the event carried (without "temp:" keys); absent when none. */
  stateDelta?: JsonObject;
  /** The state keys the event deleted (without "temp:" keys); absent when none. */
  stateRemovals?: string[];
  /** True when stateDelta's nulls were stored as values; absent otherwise. */
  stateNullsAreValues?: boolean;
}

/** An event to append. */
export interface EventInput {
  eventType: string;
  /** Any JSON value; null when omitted. */
  content?: JsonValue;
  metadata?: JsonObject;
  /**
   * Idempotency key. When omitted the client generates a UUID, so that its own
   * retries after a lost connection cannot store the event twice.
   */
  eventId?: string;
  /** When the event happened; the server's clock when omitted. */
  timestamp?: Date;
  /**
   * State changes applied atomically with the append: "app:<key>" to the
   * app-wide state, "user:<key>" to the user's, "temp:<key>" never stored,
   * other keys to the session's; a null value deletes the key, unless
   * stateNullsAreValues.
   */
  stateDelta?: JsonObject;
  /** Keys to delete with the append, before stateDelta applies (named as stateDelta's keys). */
  stateRemovals?: string[];
  /** Store stateDelta's nulls as values (ADK's contract) instead of deleting their keys. */
  stateNullsAreValues?: boolean;
}

/** One part of a multi-part message, in the OpenAI chat-completions shape. */
export type ContentPart =
  | { type: "text"; text: string }
  | { type: "image_url"; image_url: { url: string; detail?: string } };

/** A chat message in the OpenAI chat-completions shape, ready to send to an LLM API. */
export interface ChatMessage {
  role: string;
  /** The text of the message. */
  content: string;
  name?: string;
  tool_calls?: Array<{ id: string; type: string; function: { name: string; arguments: string } }>;
  tool_call_id?: string;
  /**
   * Only on messages that carry images: text and image parts. Send these as
   * `content` to a vision model (`{ ...m, content: m.content_parts ?? m.content }`).
   */
  content_parts?: ContentPart[];
}

/** Options of buildConversationContext; all optional. */
export interface ContextOptions {
  /**
   * Newest events to consider. 0: MEMORY_CONTEXT_LIMIT, or the newest 1000 when
   * a token budget, section budgets or a query is given.
   */
  maxEvents?: number;
  /** Most tokens the messages may take (0: no total budget). */
  tokenBudget?: number;
  /** Text to rank items of large sections by (BM25). */
  query?: string;
  /** "o200k_base" (default), "cl100k_base" or "chars4". */
  tokenizer?: string;
  /** Keep system events first (default true). */
  preserveSystem?: boolean;
  /** Most tokens per section, e.g. { documents: 1000 }. */
  sectionBudgets?: Record<string, number>;
  /** Sections from highest to lowest priority; the lowest are trimmed first. */
  sectionPriority?: string[];
  /** Rank a section by relevance once it holds more than this many items (default 20). */
  retrievalThreshold?: number;
}

/** What one section contributed to a context. */
export interface ContextSection {
  name: string;
  tokensUsed: number;
  eventsIncluded: number;
  eventsDropped: number;
  retrievalUsed: boolean;
}

/** BuildConversationContext's answer. */
export interface ConversationContext {
  /** KAOS text form: "User: ...\nAssistant: ..." lines. */
  text: string;
  /** The same turns as chat messages, tool calls paired with their results. */
  messages: ChatMessage[];
  eventsIncluded: number;
  eventsDropped: number;
  /** Events a summary in the context stands in for. */
  eventsSummarized: number;
  /** Tokens the messages take, counted by `tokenizer`. */
  tokensUsed: number;
  /** True when a section was ranked by relevance to the query. */
  retrievalUsed: boolean;
  /** The tokenizer that counted (chars4 when a BPE tokenizer could not be loaded). */
  tokenizer: string;
  /** Per-section usage, in priority order. */
  sections: ContextSection[];
}

/** Totals over the whole store. */
export interface MemoryStats {
  totalSessions: number;
  totalEvents: number;
  avgEventsPerSession: number;
  /** local, null, redis or postgres. */
  backend: string;
}

/** What one deleteUserData call removed. */
export interface UserDataErased {
  removedSessions: number;
  removedEvents: number;
  /** Long-term memories of the user (user_id equal to it). */
  removedMemories: number;
}

/** Per-call options. */
export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
  headers?: ConstructorParameters<typeof Headers>[0];
}

/**
 * How a scope filter selects memories. "visible": what a caller in that scope
 * may recall (each dimension unset/shared or equal); "within": everything
 * inside the scope (unset filter dimensions match any value); "exact": that
 * scope only. The RPC's default applies when omitted: visible for search and
 * watch, within for list and delete.
 */
export type ScopeMatch = "visible" | "within" | "exact";

/** A scope of memories: an app and any subset of user, agent and session (unset: shared across it). */
export interface MemoryScope {
  appName: string;
  userId?: string;
  agentId?: string;
  sessionId?: string;
  /** How the scope selects memories (the RPC's default when omitted). */
  scopeMatch?: ScopeMatch;
}

/** A fact as subject, predicate and object ("user" "prefers" "tea"). */
export interface MemoryFact {
  subject: string;
  predicate: string;
  object: string;
}

/** The events a memory was drawn from (seqs 0 when unknown). */
export interface MemorySource {
  sessionId: string;
  fromSeq: number;
  toSeq: number;
}

/** One stored long-term memory. Scope fields are undefined when the memory is shared across them. */
export interface Memory {
  memoryId: string;
  appName: string;
  userId?: string;
  agentId?: string;
  sessionId?: string;
  text: string;
  fact?: MemoryFact;
  /** Supersession key ("" when the fact's subject and predicate, if any, serve as one). */
  key: string;
  topics: string[];
  /** 0..1. */
  importance: number;
  /** A core memory: recall always includes it. */
  pinned: boolean;
  metadata: JsonObject;
  source?: MemorySource;
  createdAt: Date | undefined;
  validFrom: Date | undefined;
  /** When it stopped holding; undefined while it still holds. */
  invalidAt: Date | undefined;
  /** The memory whose write closed this one's validity ("" when none). */
  supersededBy: string;
  embedding: number[];
}

/** A memory to write; only appName and text are required. */
export interface MemoryInput {
  /**
   * Idempotency key. When omitted the client generates a UUID before the
   * first try, so that its own retries cannot store the memory twice.
   */
  memoryId?: string;
  appName: string;
  userId?: string;
  agentId?: string;
  sessionId?: string;
  text: string;
  fact?: MemoryFact;
  /** Supersession key: a newer memory with the same key in the same scope closes this one's validity. */
  key?: string;
  topics?: string[];
  /** 0..1. */
  importance?: number;
  pinned?: boolean;
  metadata?: JsonObject;
  source?: { sessionId: string; fromSeq?: number | bigint; toSeq?: number | bigint };
  /** From when it holds (the server's clock when omitted). */
  validFrom?: Date;
  /** Until when it held, for a memory written as already past. */
  invalidAt?: Date;
  /** Embedding of `text` (one dimension per app). */
  embedding?: number[];
}

/** What writeMemories stored. */
export interface MemoriesWritten {
  /** The stored memories in input order (the originals of retried ids). */
  memories: Memory[];
  /** Memories whose validity this write closed, as they are now. */
  superseded: Memory[];
}

/** Filters shared by searchMemories and listMemories. */
export interface MemoryFilter extends MemoryScope {
  /** Only memories with at least one of these topics. */
  topics?: string[];
  /** Only memories valid at that time (now when omitted). */
  asOf?: Date;
  /** Also memories no longer (or not yet) valid; not with asOf. */
  includeInvalid?: boolean;
  /** Only pinned (true) or unpinned (false) memories. */
  pinned?: boolean;
}

/** A searchMemories query. */
export interface MemorySearch extends MemoryFilter {
  /** Text to rank by; empty ranks by importance and recency alone. */
  query?: string;
  /** Most results, 1..100 (10 when omitted). */
  topK?: number;
  /** Embedding of the query, for vector similarity. */
  queryEmbedding?: number[];
  /** Return each memory with its embedding (left out by default; ranking uses it either way). */
  includeEmbeddings?: boolean;
}

/** A search result. */
export interface ScoredMemory {
  memory: Memory;
  /** The fused score it was ranked by (higher first). */
  score: number;
  /** Its BM25 score for the query (0 when it did not match). */
  lexicalScore: number;
  /** Cosine similarity with the query embedding (0 when either is missing). */
  vectorScore: number;
}

/** A listMemories query. */
export interface MemoryListing extends MemoryFilter {
  /** Only memories with this explicit key. */
  key?: string;
  /** Only memories whose fact has this subject. */
  subject?: string;
  /** Only memories whose fact has this predicate. */
  predicate?: string;
  /** Memories per request, 1..1000 (100 when omitted). */
  pageSize?: number;
  /** Continue from a previous page's nextPageToken. */
  pageToken?: string;
  /** Return each memory with its embedding (an export, a re-index); left out by default. */
  includeEmbeddings?: boolean;
}

/** One page of listMemoriesPage, newest first. */
export interface MemoryPage {
  memories: Memory[];
  /** Cursor of the next page; "" on the last one. */
  nextPageToken: string;
}

/**
 * What deleteMemories forgets: the listed ids, or (without ids) every memory
 * the scope selects ("within" by default; with no scope field, scopeMatch must
 * be given: "within" forgets the whole app, "exact" its app-wide memories).
 */
export interface MemoryDeletion extends MemoryScope {
  memoryIds?: string[];
}

/** One change a watchMemories iterator yields. */
export type MemoryChange =
  /** The watch is live: every change after `cursor` (the app's change number it starts from) is delivered. Always first. */
  | { type: "started"; cursor: number }
  /** A memory was written (`cursor`: the change's number in its app, the point to resume after). */
  | { type: "written"; memory: Memory; cursor: number }
  /** A memory's validity was closed by a newer one (its new state). */
  | { type: "superseded"; memory: Memory; cursor: number }
  /** Memories were forgotten. */
  | { type: "deleted"; memoryIds: string[]; cursor: number };

/** A searchEvents query: episodic recall over the events of an app's (or a user's) sessions. */
export interface EventSearch {
  appName: string;
  /** Only sessions of this user. */
  userId?: string;
  /** Required: the text to search for. */
  query: string;
  /** Most hits, 1..100 (10 when omitted). */
  topK?: number;
  /** Only events of these types. */
  eventTypes?: string[];
}

/** One event matching searchEvents. */
export interface EventHit {
  sessionId: string;
  seq: number;
  /** The event's text around the first match. */
  snippet: string;
  /** Its BM25 score (higher first). */
  score: number;
  event: MemoryEvent;
}

/** Options of recall. */
export interface RecallOptions {
  /** Text to rank memories by (usually the latest user message). */
  query?: string;
  /** Most tokens the whole recall may take (4000 when omitted). */
  tokenBudget?: number;
  /** The calling agent: memories of other agents are left out. */
  agentId?: string;
  /** "o200k_base" (default), "cl100k_base" or "chars4". */
  tokenizer?: string;
  /** Most relevant memories considered, 1..100 (10 when omitted). */
  topK?: number;
  /** Embedding of the query, for vector similarity. */
  queryEmbedding?: number[];
  /** Return each memory with its embedding (left out by default: the answer is for a prompt). */
  includeEmbeddings?: boolean;
}

/** Recall's answer: pinned memories, relevant memories and the session's context, within one budget. */
export interface Recall {
  /** Every part rendered as one text block, ready for a system prompt. */
  text: string;
  /** Pinned memories that fit, most important first. */
  pinned: Memory[];
  /** Relevant memories that fit, best first. */
  memories: ScoredMemory[];
  /** The session's context, within what the memories left of the budget (undefined when none fit). */
  context: ConversationContext | undefined;
  pinnedTokens: number;
  memoryTokens: number;
  contextTokens: number;
  /** Tokens of `text` in all (at most the budget). */
  tokensUsed: number;
  /** The tokenizer that counted. */
  tokenizer: string;
}
