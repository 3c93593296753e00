/** Conversions between the generated protobuf-es messages and plain objects. */
import { create, fromJson, toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampDate, timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import * as pbm from "./gen/engram/v1/memories_pb.js";
import * as pb from "./gen/engram/v1/memory_pb.js";
import type {
  ChatMessage,
  ContentPart,
  ContextOptions,
  ConversationContext,
  EventHit,
  EventInput,
  Memory,
  MemoryChange,
  MemoryEvent,
  MemoryFilter,
  MemoryInput,
  MemoryScope,
  Recall,
  ScopeMatch,
  ScoredMemory,
  Session,
} from "./types.js";

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
  if (!Number.isSafeInteger(value) || value < 0)
    throw new RangeError(`${field} must be a non-negative integer, got ${value}`);
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
    state: s.state ?? {},
    version: toNumber(s.version, "version"),
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
    ...(e.stateDelta && { stateDelta: e.stateDelta }),
    ...(e.stateRemovals.length > 0 && { stateRemovals: e.stateRemovals }),
    ...(e.stateNullsAreValues && { stateNullsAreValues: true }),
  };
}

export function fromEventInput(e: EventInput): pb.EventInput {
  if (!e || typeof e.eventType !== "string") throw new TypeError("event.eventType must be a string");
  return create(pb.EventInputSchema, {
    eventId: e.eventId ?? crypto.randomUUID(),
    eventType: e.eventType,
    content: e.content === undefined ? undefined : fromJson(ValueSchema, e.content as JsonValue),
    metadata: e.metadata as JsonObject | undefined,
    timestamp: e.timestamp ? timestampFromDate(e.timestamp) : undefined,
    stateDelta: e.stateDelta,
    stateRemovals: e.stateRemovals,
    stateNullsAreValues: e.stateNullsAreValues,
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
export function contextRequest(
  sessionId: string,
  options: number | ContextOptions,
): pb.BuildConversationContextRequest {
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

const SCOPE_MATCH: Record<ScopeMatch, pbm.ScopeMatch> = {
  visible: pbm.ScopeMatch.VISIBLE,
  within: pbm.ScopeMatch.WITHIN,
  exact: pbm.ScopeMatch.EXACT,
};

/** A scope as the request fields every memory RPC shares. */
export function scopeFields(s: MemoryScope): {
  appName: string;
  userId?: string;
  agentId?: string;
  sessionId?: string;
  scopeMatch: pbm.ScopeMatch;
} {
  if (!s || typeof s.appName !== "string") throw new TypeError("appName must be a string");
  let scopeMatch = pbm.ScopeMatch.UNSPECIFIED;
  if (s.scopeMatch !== undefined) {
    if (!Object.hasOwn(SCOPE_MATCH, s.scopeMatch))
      throw new RangeError(`scopeMatch must be "visible", "within" or "exact", got ${JSON.stringify(s.scopeMatch)}`);
    scopeMatch = SCOPE_MATCH[s.scopeMatch];
  }
  return { appName: s.appName, userId: s.userId, agentId: s.agentId, sessionId: s.sessionId, scopeMatch };
}

/** The filter fields searchMemories and listMemories share. */
export function filterFields(f: MemoryFilter) {
  return {
    ...scopeFields(f),
    topics: f.topics ?? [],
    asOf: f.asOf ? timestampFromDate(f.asOf) : undefined,
    includeInvalid: f.includeInvalid ?? false,
    pinned: f.pinned,
  };
}

/** A memory to write, with a memory_id assigned when it has none (so that a retry is idempotent). */
export function fromMemoryInput(m: MemoryInput): pbm.Memory {
  if (!m || typeof m.text !== "string") throw new TypeError("memory.text must be a string");
  return create(pbm.MemorySchema, {
    memoryId: m.memoryId ?? crypto.randomUUID(),
    appName: m.appName,
    userId: m.userId,
    agentId: m.agentId,
    sessionId: m.sessionId,
    text: m.text,
    fact: m.fact ? { subject: m.fact.subject, predicate: m.fact.predicate, object: m.fact.object } : undefined,
    key: m.key ?? "",
    topics: m.topics ?? [],
    importance: m.importance ?? 0,
    pinned: m.pinned ?? false,
    metadata: m.metadata as JsonObject | undefined,
    source: m.source
      ? {
          sessionId: m.source.sessionId,
          fromSeq: toSeq(m.source.fromSeq ?? 0, "source.fromSeq"),
          toSeq: toSeq(m.source.toSeq ?? 0, "source.toSeq"),
        }
      : undefined,
    validFrom: m.validFrom ? timestampFromDate(m.validFrom) : undefined,
    invalidAt: m.invalidAt ? timestampFromDate(m.invalidAt) : undefined,
    embedding: m.embedding ?? [],
  });
}

/** A stored memory as a plain object. */
export function toMemory(m: pbm.Memory | undefined): Memory {
  if (!m) throw new Error("server answered without a memory");
  const out: Memory = {
    memoryId: m.memoryId,
    appName: m.appName,
    text: m.text,
    key: m.key,
    topics: [...m.topics],
    importance: m.importance,
    pinned: m.pinned,
    metadata: m.metadata ?? {},
    createdAt: date(m.createdAt),
    validFrom: date(m.validFrom),
    invalidAt: date(m.invalidAt),
    supersededBy: m.supersededBy,
    embedding: [...m.embedding],
  };
  if (m.userId !== undefined) out.userId = m.userId;
  if (m.agentId !== undefined) out.agentId = m.agentId;
  if (m.sessionId !== undefined) out.sessionId = m.sessionId;
  if (m.fact) out.fact = { subject: m.fact.subject, predicate: m.fact.predicate, object: m.fact.object };
  if (m.source) {
    out.source = {
      sessionId: m.source.sessionId,
      fromSeq: toNumber(m.source.fromSeq, "from_seq"),
      toSeq: toNumber(m.source.toSeq, "to_seq"),
    };
  }
  return out;
}

/** A search result as a plain object. */
export function toScoredMemory(r: pbm.ScoredMemory): ScoredMemory {
  return { memory: toMemory(r.memory), score: r.score, lexicalScore: r.lexicalScore, vectorScore: r.vectorScore };
}

/** A watch frame as a change; undefined for heartbeats (and frames this client does not know). */
export function toMemoryChange(r: pbm.WatchMemoriesResponse): MemoryChange | undefined {
  const frame = r.frame;
  switch (frame.case) {
    case "started":
      return { type: "started", cursor: toNumber(frame.value.cursor, "cursor") };
    case "written":
      return { type: "written", memory: toMemory(frame.value), cursor: toNumber(r.cursor, "cursor") };
    case "superseded":
      return { type: "superseded", memory: toMemory(frame.value), cursor: toNumber(r.cursor, "cursor") };
    case "deleted":
      return { type: "deleted", memoryIds: [...frame.value.memoryIds], cursor: toNumber(r.cursor, "cursor") };
    default:
      return undefined;
  }
}

/** An event search hit as a plain object. */
export function toEventHit(h: pb.EventHit): EventHit {
  return {
    sessionId: h.sessionId,
    seq: toNumber(h.seq, "seq"),
    snippet: h.snippet,
    score: h.score,
    event: toEvent(h.event),
  };
}

/** Recall's answer as a plain object. */
export function toRecall(r: pb.RecallResponse): Recall {
  return {
    text: r.text,
    pinned: r.pinned.map(toMemory),
    memories: r.memories.map(toScoredMemory),
    context: r.context ? toContext(r.context) : undefined,
    pinnedTokens: r.pinnedTokens,
    memoryTokens: r.memoryTokens,
    contextTokens: r.contextTokens,
    tokensUsed: r.tokensUsed,
    tokenizer: r.tokenizer,
  };
}
