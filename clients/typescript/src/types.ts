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
}

/** One part of a multi-part message, in the OpenAI chat-completions shape. */
export type ContentPart = { type: "text"; text: string } | { type: "image_url"; image_url: { url: string; detail?: string } };

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
}

/** Per-call options. */
export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
  headers?: ConstructorParameters<typeof Headers>[0];
}
