/** Conversions between the generated protobuf-es messages and plain objects. */
import { create, fromJson, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { randomUUID } from "node:crypto";
import * as pb from "./gen/engram/v1/memory_pb.js";
import type { ChatMessage, ContentPart, ContextOptions, ConversationContext, EventInput, MemoryEvent, Session } from "./types.js";

/** A uint64 from the wire as a number; throws rather than round. */
export function toNumber(value: bigint, field: string): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw new RangeError(`${field} ${value} exceeds Number.MAX_SAFE_INTEGER`);
  }
  return Number(value);
}

/** A seq given by the caller (number or bigint) as a uint64. */
export function toSeq(value: number | bigint, field: string): bigint {
  if (typeof value === "bigint") {
    if (value < 0n) throw new RangeError(`${field} must be >= 0`);
    return value;
  }
  if (!Number.isSafeInteger(value) || value < 0) throw new RangeError(`${field} must be a non-negative integer, got ${value}`);
  return BigInt(value);
}

function date(ts: Timestamp | undefined): Date | undefined {
  return ts ? timestampDate(ts) : undefined;
}

export function toSession(s: pb.Session | undefined): Session {
  if (!s) throw new Error("server answered without a session");
  return {
    sessionId: s.sessionId,
    appName: s.appName,
    userId: s.userId,
    metadata: s.metadata ?? {},
    createdAt: date(s.createdAt),
    updatedAt: date(s.updatedAt),
    headSeq: toNumber(s.headSeq, "head_seq"),
    firstSeq: toNumber(s.firstSeq, "first_seq"),
    eventCount: toNumber(s.eventCount, "event_count"),
  };
}

export function toEvent(e: pb.Event | undefined): MemoryEvent {
  if (!e) throw new Error("server answered without an event");
  return {
    eventId: e.eventId,
    eventType: e.eventType,
    content: e.content ? toJson(ValueSchema, e.content) : null,
    metadata: e.metadata ?? {},
    timestamp: date(e.timestamp),
    seq: toNumber(e.seq, "seq"),
    sessionId: e.sessionId,
  };
}

export function fromEventInput(e: EventInput): pb.EventInput {
  if (!e || typeof e.eventType !== "string") throw new TypeError("event.eventType must be a string");
  return create(pb.EventInputSchema, {
    eventId: e.eventId ?? randomUUID(),
    eventType: e.eventType,
    content: e.content === undefined ? undefined : fromJson(ValueSchema, e.content as JsonValue),
    metadata: e.metadata as JsonObject | undefined,
    timestamp: e.timestamp ? timestampFromDate(e.timestamp) : undefined,
  });
}

function toChatMessage(m: pb.ChatMessage): ChatMessage {
  const out: ChatMessage = { role: m.role, content: m.content };
  if (m.name) out.name = m.name;
  if (m.toolCalls.length > 0) {
    out.tool_calls = m.toolCalls.map((c) => ({
      id: c.id,
      type: c.type,
      function: { name: c.function?.name ?? "", arguments: c.function?.arguments ?? "" },
    }));
  }
  if (m.toolCallId) out.tool_call_id = m.toolCallId;
  if (m.contentParts.length > 0) out.content_parts = m.contentParts.map(toContentPart);
  return out;
}

function toContentPart(p: pb.ContentPart): ContentPart {
  if (p.type === "image_url") {
    const image: { url: string; detail?: string } = { url: p.imageUrl?.url ?? "" };
    if (p.imageUrl?.detail) image.detail = p.imageUrl.detail;
    return { type: "image_url", image_url: image };
  }
  return { type: "text", text: p.text };
}

/** The request of buildConversationContext: a number is max_events (the KAOS signature). */
export function contextRequest(sessionId: string, options: number | ContextOptions): pb.BuildConversationContextRequest {
  const o: ContextOptions = typeof options === "number" ? { maxEvents: options } : options;
  return create(pb.BuildConversationContextRequestSchema, {
    sessionId,
    maxEvents: o.maxEvents ?? 0,
    tokenBudget: o.tokenBudget ?? 0,
    query: o.query ?? "",
    tokenizer: o.tokenizer ?? "",
    preserveSystem: o.preserveSystem,
    sectionBudgets: o.sectionBudgets ?? {},
    sectionPriority: o.sectionPriority ?? [],
    retrievalThreshold: o.retrievalThreshold,
  });
}

export function toContext(r: pb.BuildConversationContextResponse): ConversationContext {
  return {
    text: r.text,
    messages: r.messages.map(toChatMessage),
    eventsIncluded: r.eventsIncluded,
    eventsDropped: r.eventsDropped,
    eventsSummarized: r.eventsSummarized,
    tokensUsed: r.tokensUsed,
    retrievalUsed: r.retrievalUsed,
    tokenizer: r.tokenizer,
    sections: r.sections.map((s) => ({
      name: s.name,
      tokensUsed: s.tokensUsed,
      eventsIncluded: s.eventsIncluded,
      eventsDropped: s.eventsDropped,
      retrievalUsed: s.retrievalUsed,
    })),
  };
}
