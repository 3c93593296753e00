/**
 * The memory service: validation, semantics and context assembly, written
 * once against the generated protobuf-es types and free of any protocol. The
 * gRPC (grpc-js) and Connect (connect-node) adapters in src/server both call
 * these methods, so both protocols behave identically. A unary method takes
 * the call's context (src/service/call-context.ts) after the request and
 * hands it to every store method it calls, as their StoreCall: that is how
 * the client's deadline reaches the backend.
 */
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import {
  AddEventsResponseSchema,
  type SearchEventsRequest,
  type SearchEventsResponse,
  type RecallRequest,
  type RecallResponse,
  CaughtUpSchema,
  CleanupResponseSchema,
  CreateSessionResponseSchema,
  DeleteSessionResponseSchema,
  DeleteUserDataResponseSchema,
  GetOrCreateSessionResponseSchema,
  GetSessionEventsResponseSchema,
  GetSessionResponseSchema,
  GetStatsResponseSchema,
  HeartbeatSchema,
  ListEventsResponseSchema,
  ListSessionsResponseSchema,
  StreamSessionEventsResponseSchema,
  type AddEventRequest,
  type AddEventResponse,
  type AddEventsRequest,
  type AddEventsResponse,
  type BuildConversationContextRequest,
  type BuildConversationContextResponse,
  type CleanupRequest,
  type CleanupResponse,
  type CreateSessionRequest,
  type CreateSessionResponse,
  type DeleteSessionRequest,
  type DeleteSessionResponse,
  type DeleteUserDataRequest,
  type DeleteUserDataResponse,
  type Event,
  type EventInput,
  type GetOrCreateSessionRequest,
  type GetOrCreateSessionResponse,
  type GetSessionEventsRequest,
  type GetSessionEventsResponse,
  type GetSessionRequest,
  type GetSessionResponse,
  type GetStatsRequest,
  type GetStatsResponse,
  type ListEventsRequest,
  type ListEventsResponse,
  type ListSessionsRequest,
  type ListSessionsResponse,
  type StreamSessionEventsRequest,
  type StreamSessionEventsResponse,
  type UpdateSessionRequest,
  type UpdateSessionResponse,
  type WatchSessionsRequest,
  type WatchSessionsResponse,
  type CountEventTokensRequest,
  type CountEventTokensResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { invalidArgument, sessionNotFound } from "../errors.js";
import { eventFingerprint } from "../store/fingerprint.js";
import { copyStateChange } from "../store/state.js";
import type { JsonObject, MemoryStore, NewEvent, StoredEvent } from "../store/types.js";
import type { CallContext } from "./call-context.js";
import { checkSummaryCovers } from "./context/index.js";
import { timestampToMs, toWireEvent, valueToJson } from "./convert.js";
import { renameStateField, SessionStateService } from "./state/service.js";
import type {
  DeleteMemoriesRequest,
  DeleteMemoriesResponse,
  GetMemoryRequest,
  GetMemoryResponse,
  ListMemoriesRequest,
  ListMemoriesResponse,
  SearchMemoriesRequest,
  SearchMemoriesResponse,
  WatchMemoriesRequest,
  WatchMemoriesResponse,
  WriteMemoriesRequest,
  WriteMemoriesResponse,
} from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import type { EmbeddingsClient } from "./memories/embeddings.js";
import type { Reranker } from "./memories/reranker.js";
import { FactExtractor, type ExtractionSettings } from "./memories/extraction.js";
import { LongTermMemoryService } from "./memories/service.js";
import { RecallService } from "./memories/recall.js";
import { ConversationContexts } from "./context/conversation.js";
import { newEventId } from "./event-id.js";
import type { ServiceLimits } from "./limits.js";
import { decodePageToken, encodePageToken } from "./page-token.js";
import { jsonBytes, RecentCache } from "./recent-cache.js";
import { StreamHub } from "./stream-hub.js";
import { recentEventsScope } from "./tenancy.js";
import { watchedCursors, watchSessions } from "./watch-sessions.js";
import {
  checkEventSize,
  checkJson,
  pageSize,
  requireEventType,
  requireId,
  requireName,
  seqNumber,
} from "./validation.js";

/** Wire forms kept for the most recently appended or read events: at most this many… */
const RECENT_WIRE_EVENTS = 4096;
/** …and events of at most about this many bytes in all (per cache). */
const RECENT_WIRE_BYTES = 16 * 1024 * 1024;
/** Estimated heap bytes of a stored event (what a cache entry keeps alive). */
const eventBytes = (e: StoredEvent) => 200 + jsonBytes(e.content) + jsonBytes(e.metadata);

/**
 * Events a stream reads from the store at a time. A stream holds at most one
 * page its reader has not taken yet (the transport's backpressure stops it
 * there), so this bounds what a slow reader costs the server: 64 events of
 * at most MEMORY_MAX_EVENT_BYTES each, not the 1,000 of a GetSessionEvents page.
 */
const STREAM_PAGE_EVENTS = 64;

/** An optional app_name / user_id filter: absent means "any"; present, it must be a valid name (never ""). */
function optionalFilter(field: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (value === "") throw invalidArgument(field, "must not be empty when set (leave it unset to match every value)");
  return requireName(field, value);
}

/** Settings of the service. */
export interface MemoryServiceOptions {
  limits: ServiceLimits;
  /** Default max_events of BuildConversationContext (MEMORY_CONTEXT_LIMIT). */
  contextLimit: number;
  /** Idle time between stream heartbeats. */
  heartbeatMs: number;
  /** The MEMORY_EMBEDDINGS_URL endpoint's client, when set (src/service/memories/embeddings.ts). */
  embeddings?: EmbeddingsClient;
  /** The MEMORY_RERANK_URL endpoint's client, when set (src/service/memories/reranker.ts). */
  reranker?: Reranker;
  /** The MEMORY_EXTRACTION_URL endpoint, when set: facts are extracted from appended events in the background (src/service/memories/extraction.ts). */
  extraction?: ExtractionSettings;
}

/** The memory service; one instance per process. */
/** google.protobuf.Duration's largest number of seconds (10,000 years). */
const MAX_DURATION_SECONDS = 315_576_000_000n;

export class MemoryService {
  readonly hub: StreamHub;
  /** Wire form of recent stored events, built once per stored object and shared by readers and streams. */
  private readonly wireEvents = new RecentCache<StoredEvent, Event>(RECENT_WIRE_EVENTS, RECENT_WIRE_BYTES, eventBytes);
  /** Stream frames of recent events: one message per event, so its bytes can be shared by every subscriber. */
  private readonly eventFrames = new RecentCache<StoredEvent, StreamSessionEventsResponse>(
    RECENT_WIRE_EVENTS,
    RECENT_WIRE_BYTES,
    eventBytes,
  );
  /** BuildConversationContext and CountEventTokens (src/service/context/conversation.ts). */
  private readonly conversations: ConversationContexts;
  /** Recall (src/service/memories/recall.ts). */
  private readonly recalls: RecallService;

  /** Long-term memories (src/service/memories/). */
  readonly longTerm: LongTermMemoryService;
  /** Background fact extraction from appended events; absent unless MEMORY_EXTRACTION_URL is set. */
  readonly extractor?: FactExtractor;
  /** Session state (src/service/state/). */
  readonly state: SessionStateService;

  constructor(
    readonly store: MemoryStore,
    readonly options: MemoryServiceOptions,
  ) {
    this.hub = new StreamHub(store, { heartbeatMs: options.heartbeatMs, pageSize: STREAM_PAGE_EVENTS });
    this.state = new SessionStateService(store, options.limits.maxJsonDepth);
    this.longTerm = new LongTermMemoryService(store, {
      limits: options.limits,
      heartbeatMs: options.heartbeatMs,
      embeddings: options.embeddings,
      reranker: options.reranker,
    });
    if (options.extraction)
      this.extractor = new FactExtractor(store, this.longTerm, options.limits, options.extraction);
    this.conversations = new ConversationContexts(store, options.limits, options.contextLimit);
    this.recalls = new RecallService(store, this.longTerm, this.conversations);
  }

  async createSession(req: CreateSessionRequest, call?: CallContext): Promise<CreateSessionResponse> {
    const sessionId =
      req.sessionId === undefined
        ? (this.store.newSessionId?.() ?? randomUUID())
        : requireId("session_id", req.sessionId);
    const session = await this.store.createSession(
      {
        sessionId,
        appName: requireName("app_name", req.appName),
        userId: requireName("user_id", req.userId),
        metadata: this.metadata("metadata", req.metadata),
        now: Date.now(),
      },
      call,
    );
    return create(CreateSessionResponseSchema, { session: await this.state.wireSession(session, call) });
  }

  async getOrCreateSession(req: GetOrCreateSessionRequest, call?: CallContext): Promise<GetOrCreateSessionResponse> {
    const result = await this.store.getOrCreateSession(
      {
        sessionId: requireId("session_id", req.sessionId),
        appName: requireName("app_name", req.appName || "agent"),
        userId: requireName("user_id", req.userId || "user"),
        metadata: this.metadata("metadata", req.metadata),
        now: Date.now(),
      },
      call,
    );
    return create(GetOrCreateSessionResponseSchema, {
      session: await this.state.wireSession(result.session, call),
      created: result.created,
    });
  }

  async getSession(req: GetSessionRequest, call?: CallContext): Promise<GetSessionResponse> {
    const sessionId = requireId("session_id", req.sessionId);
    const session = await this.store.getSession(sessionId, call);
    if (!session) throw sessionNotFound(sessionId);
    return create(GetSessionResponseSchema, { session: await this.state.wireSession(session, call) });
  }

  async listSessions(req: ListSessionsRequest, call?: CallContext): Promise<ListSessionsResponse> {
    const appName = req.appName === undefined ? undefined : requireName("app_name", req.appName);
    const userId = req.userId === undefined ? undefined : requireName("user_id", req.userId);
    const limit = pageSize("page_size", req.pageSize, this.options.limits);
    const filters = ["sessions", appName ?? null, userId ?? null];
    const after = req.pageToken ? decodePageToken<string>(req.pageToken, "string", filters) : undefined;
    // One extra row tells whether another page exists.
    const rows = await this.store.listSessions({ appName, userId, afterSessionId: after, limit: limit + 1 }, call);
    const page = rows.slice(0, limit);
    const nextPageToken = rows.length > limit ? encodePageToken(page[page.length - 1].sessionId, filters) : "";
    return create(ListSessionsResponseSchema, { sessions: await this.state.wireSessions(page, call), nextPageToken });
  }

  /** Metadata and state under an optional expected version (src/service/state/). */
  async updateSession(req: UpdateSessionRequest, call?: CallContext): Promise<UpdateSessionResponse> {
    return this.state.updateSession(req, call);
  }

  async deleteSession(req: DeleteSessionRequest, call?: CallContext): Promise<DeleteSessionResponse> {
    const deleted = await this.store.deleteSession(requireId("session_id", req.sessionId), call);
    return create(DeleteSessionResponseSchema, { deleted });
  }

  async addEvent(req: AddEventRequest, call?: CallContext): Promise<AddEventResponse> {
    const sessionId = requireId("session_id", req.sessionId);
    if (!req.event) throw invalidArgument("event", "is required");
    const event = this.newEvent("event", req.event);
    const expectedSeq = req.expectedSeq === undefined ? undefined : seqNumber("expected_seq", req.expectedSeq);
    const result = await this.store.appendEvents(sessionId, [event], expectedSeq, call).catch((err: unknown) => {
      throw renameStateField(err, "event");
    });
    // After the append succeeded, and only queued: extraction never delays or fails it. A retry is re-extracted to the same ids.
    this.extractor?.onAppended(sessionId, result.events, call?.expectedIncarnation);
    // A literal, as create() would build it without reflection (every append answers one).
    return { $typeName: "engram.v1.AddEventResponse", event: this.wire(result.events[0]) };
  }

  async addEvents(req: AddEventsRequest, call?: CallContext): Promise<AddEventsResponse> {
    const sessionId = requireId("session_id", req.sessionId);
    const { maxBatchEvents } = this.options.limits;
    if (req.events.length === 0) throw invalidArgument("events", "must hold at least one event");
    if (req.events.length > maxBatchEvents)
      throw invalidArgument("events", `must hold at most ${maxBatchEvents} events`);
    const events = req.events.map((e, i) => this.newEvent(`events[${i}]`, e));
    const seen = new Set<string>();
    events.forEach((e, i) => {
      if (seen.has(e.eventId)) throw invalidArgument(`events[${i}].event_id`, "repeats an event_id of the same batch");
      seen.add(e.eventId);
    });
    const expectedSeq = req.expectedSeq === undefined ? undefined : seqNumber("expected_seq", req.expectedSeq);
    const result = await this.store.appendEvents(sessionId, events, expectedSeq, call).catch((err: unknown) => {
      throw renameStateField(err, "events");
    });
    this.extractor?.onAppended(sessionId, result.events, call?.expectedIncarnation);
    return create(AddEventsResponseSchema, { events: result.events.map((e) => this.wire(e)) });
  }

  async getSessionEvents(req: GetSessionEventsRequest, call?: CallContext): Promise<GetSessionEventsResponse> {
    const sessionId = requireId("session_id", req.sessionId);
    const eventTypes = req.eventTypes.map((t, i) => requireEventType(`event_types[${i}]`, t));
    const limit = pageSize("limit", req.limit, this.options.limits);
    if (req.tail > 0) {
      if (req.tail > this.options.limits.maxPageSize)
        throw invalidArgument("tail", `must be at most ${this.options.limits.maxPageSize}`);
      if (req.afterSeq !== undefined || req.pageToken)
        throw invalidArgument("tail", "cannot be combined with after_seq or page_token");
      const page = await this.store.readTail(sessionId, req.tail, eventTypes, call);
      return create(GetSessionEventsResponseSchema, {
        events: page.events.map((e) => this.wire(e)),
        headSeq: BigInt(page.headSeq),
      });
    }
    const filters = ["events", sessionId, [...eventTypes].sort()];
    const afterSeq = req.pageToken
      ? decodePageToken<number>(req.pageToken, "number", filters)
      : req.afterSeq === undefined
        ? undefined
        : seqNumber("after_seq", req.afterSeq);
    const page = await this.store.readEvents(sessionId, { afterSeq, eventTypes, limit }, call);
    const last = page.events[page.events.length - 1];
    const nextPageToken =
      page.events.length === limit && last.seq < page.headSeq ? encodePageToken(last.seq, filters) : "";
    return create(GetSessionEventsResponseSchema, {
      events: page.events.map((e) => this.wire(e)),
      nextPageToken,
      headSeq: BigInt(page.headSeq),
    });
  }

  async listEvents(req: ListEventsRequest, ctx?: CallContext): Promise<ListEventsResponse> {
    const sessionId = req.sessionId === undefined ? undefined : requireId("session_id", req.sessionId);
    const limit = pageSize("limit", req.limit, this.options.limits);
    const events = await this.store.listRecentEvents(
      limit,
      sessionId !== undefined ? { sessionId } : recentEventsScope(ctx?.tenant),
      ctx,
    );
    return create(ListEventsResponseSchema, { events: events.map((e) => this.wire(e)) });
  }

  /** Passes no deadline to the store: the hub's reads serve every subscriber of the session, not one caller. */
  async *streamSessionEvents(
    req: StreamSessionEventsRequest,
    ctx: CallContext & { signal: AbortSignal },
  ): AsyncGenerator<StreamSessionEventsResponse> {
    const sessionId = requireId("session_id", req.sessionId);
    const eventTypes = req.eventTypes.map((t, i) => requireEventType(`event_types[${i}]`, t));
    const afterSeq = req.afterSeq === undefined ? undefined : seqNumber("after_seq", req.afterSeq);
    for await (const frame of this.hub.subscribe(
      sessionId,
      afterSeq,
      eventTypes,
      ctx.signal,
      ctx.expectedIncarnation,
    )) {
      switch (frame.kind) {
        case "event":
          yield this.eventFrames.get(frame.event, (e) =>
            create(StreamSessionEventsResponseSchema, { frame: { case: "event", value: this.wire(e) } }),
          );
          break;
        case "caughtUp":
          yield create(StreamSessionEventsResponseSchema, {
            frame: { case: "caughtUp", value: create(CaughtUpSchema, { headSeq: BigInt(frame.headSeq) }) },
          });
          break;
        case "heartbeat":
          yield create(StreamSessionEventsResponseSchema, {
            frame: { case: "heartbeat", value: create(HeartbeatSchema, { headSeq: BigInt(frame.headSeq) }) },
          });
          break;
      }
    }
  }

  /** Several sessions on one stream (src/service/watch-sessions.ts); like a single stream, it passes no deadline to the store. */
  async *watchSessions(
    req: WatchSessionsRequest,
    ctx: CallContext & { signal: AbortSignal },
  ): AsyncGenerator<WatchSessionsResponse> {
    yield* watchSessions(this.hub, (e) => this.wire(e), watchedCursors(req), ctx.signal, ctx.watched);
  }

  /** Each event's tokens in a context, by the same tokenizer and rendering as BuildConversationContext. */
  async countEventTokens(req: CountEventTokensRequest, call?: CallContext): Promise<CountEventTokensResponse> {
    return this.conversations.countEventTokens(req, call);
  }

  async buildConversationContext(
    req: BuildConversationContextRequest,
    call?: CallContext,
  ): Promise<BuildConversationContextResponse> {
    return this.conversations.build(req, call);
  }

  async getStats(_req: GetStatsRequest, call?: CallContext): Promise<GetStatsResponse> {
    const stats = await this.store.stats(call);
    return create(GetStatsResponseSchema, {
      totalSessions: BigInt(stats.totalSessions),
      totalEvents: BigInt(stats.totalEvents),
      avgEventsPerSession: stats.totalSessions === 0 ? 0 : stats.totalEvents / stats.totalSessions,
      backend: this.store.backend,
    });
  }

  async cleanup(req: CleanupRequest, call?: CallContext): Promise<CleanupResponse> {
    const maxAge = req.maxAge;
    if (!maxAge) throw invalidArgument("max_age", "is required");
    // google.protobuf.Duration's range, which Connect JSON enforces while decoding and binary protobuf does not.
    if (
      maxAge.seconds > MAX_DURATION_SECONDS ||
      maxAge.seconds < -MAX_DURATION_SECONDS ||
      Math.abs(maxAge.nanos) > 999_999_999
    ) {
      throw invalidArgument(
        "max_age",
        "must be within ±315,576,000,000 s (10,000 years) and nanos within ±999,999,999, google.protobuf.Duration's range",
      );
    }
    const ms = Number(maxAge.seconds) * 1000 + Math.floor(maxAge.nanos / 1_000_000);
    if (!(ms > 0)) throw invalidArgument("max_age", "must be positive");
    const appName = optionalFilter("app_name", req.appName);
    const userId = optionalFilter("user_id", req.userId);
    const removed = await this.store.cleanup(Date.now() - ms, { appName, userId }, call);
    return create(CleanupResponseSchema, { removedSessions: BigInt(removed) });
  }

  async deleteUserData(req: DeleteUserDataRequest, call?: CallContext): Promise<DeleteUserDataResponse> {
    const appName = requireName("app_name", req.appName);
    const userId = requireName("user_id", req.userId);
    const erased = await this.store.deleteUserData(appName, userId, call);
    return create(DeleteUserDataResponseSchema, {
      removedSessions: BigInt(erased.sessions),
      removedEvents: BigInt(erased.events),
      removedMemories: BigInt(erased.memories ?? 0),
    });
  }

  // Long-term memory (proto/engram/v1/memories.proto), served by src/service/memories/.
  async writeMemories(req: WriteMemoriesRequest, ctx?: CallContext): Promise<WriteMemoriesResponse> {
    return this.longTerm.writeMemories(req, ctx);
  }

  async getMemory(req: GetMemoryRequest, ctx?: CallContext): Promise<GetMemoryResponse> {
    return this.longTerm.getMemory(req, ctx);
  }

  async searchMemories(req: SearchMemoriesRequest, ctx?: CallContext): Promise<SearchMemoriesResponse> {
    return this.longTerm.searchMemories(req, ctx);
  }

  async listMemories(req: ListMemoriesRequest, ctx?: CallContext): Promise<ListMemoriesResponse> {
    return this.longTerm.listMemories(req, ctx);
  }

  async deleteMemories(req: DeleteMemoriesRequest, ctx?: CallContext): Promise<DeleteMemoriesResponse> {
    return this.longTerm.deleteMemories(req, ctx);
  }

  watchMemories(req: WatchMemoriesRequest, ctx?: CallContext): AsyncGenerator<WatchMemoriesResponse> {
    return this.longTerm.watchMemories(req, ctx);
  }

  async searchEvents(req: SearchEventsRequest, ctx?: CallContext): Promise<SearchEventsResponse> {
    return this.longTerm.searchEvents(req, ctx);
  }

  /** Pinned memories, relevant memories and the session's context within one token budget (src/service/memories/recall.ts). */
  async recall(req: RecallRequest, call?: CallContext): Promise<RecallResponse> {
    return this.recalls.recall(req, call);
  }

  private metadata(field: string, value: JsonObject | undefined): JsonObject {
    if (!value) return {};
    checkJson(field, value, this.options.limits.maxJsonDepth);
    return value;
  }

  private newEvent(field: string, input: EventInput): NewEvent {
    const clientId = input.eventId !== "";
    const eventId = clientId ? requireId(`${field}.event_id`, input.eventId) : newEventId();
    const eventType = requireEventType(`${field}.event_type`, input.eventType);
    const content = valueToJson(`${field}.content`, input.content, this.options.limits.maxJsonDepth);
    const metadata = this.metadata(`${field}.metadata`, input.metadata);
    checkEventSize(field, content, metadata, this.options.limits);
    checkSummaryCovers(field, eventType, metadata);
    const state = this.state.eventChange(field, input);
    const event: NewEvent = {
      eventId,
      eventType,
      content,
      metadata,
      timestamp: input.timestamp ? timestampToMs(`${field}.timestamp`, input.timestamp) : Date.now(),
      // Only a client-chosen id can be retried; a generated one never collides.
      fingerprint: clientId ? eventFingerprint(eventType, content, metadata, state) : "",
    };
    return copyStateChange(event, state);
  }

  private wire(e: StoredEvent): Event {
    return this.wireEvents.get(e, toWireEvent);
  }
}
