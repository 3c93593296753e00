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

/** A chat message in the OpenAI chat-completions shape, ready to send to an LLM API. */
export interface ChatMessage {
  role: string;
  content: string;
  name?: string;
  tool_calls?: Array<{ id: string; type: string; function: { name: string; arguments: string } }>;
  tool_call_id?: string;
}

/** BuildConversationContext's answer. */
export interface ConversationContext {
  /** KAOS text form: "User: ...\nAssistant: ..." lines. */
  text: string;
  /** The same turns as chat messages, tool calls paired with their results. */
  messages: ChatMessage[];
  eventsIncluded: number;
  eventsDropped: number;
}

/** Totals over the whole store. */
export interface MemoryStats {
  totalSessions: number;
  totalEvents: number;
  avgEventsPerSession: number;
  /** local, null, redis or postgres. */
  backend: string;
}

/** Per-call options. */
export interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
  headers?: ConstructorParameters<typeof Headers>[0];
}
