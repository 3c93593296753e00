/**
 * MemoryClient: Engram's MemoryService with the KAOS memory method names,
 * plain objects in and out, on gRPC, Connect or gRPC-Web.
 */
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Interceptor, type Transport } from "@connectrpc/connect";
import * as pb from "./gen/engram/v1/memory_pb.js";
import {
  contextRequest,
  filterFields,
  fromEventInput,
  fromMemoryInput,
  scopeFields,
  toContext,
  toEvent,
  toEventHit,
  toMemory,
  toMemoryChange,
  toNumber,
  toRecall,
  toScoredMemory,
  toSeq,
  toSession,
} from "./convert.js";
import type { ClosableTransport, Protocol, TransportFactory } from "./protocol.js";
import type {
  CallOptions,
  ContextOptions,
  ConversationContext,
  EventHit,
  EventInput,
  EventSearch,
  JsonObject,
  JsonValue,
  MemoriesWritten,
  Memory,
  MemoryChange,
  MemoryDeletion,
  MemoryEvent,
  MemoryListing,
  MemoryPage,
  MemoryScope,
  MemorySearch,
  MemoryStats,
  MemoryInput,
  Recall,
  RecallOptions,
  ScoredMemory,
  Session,
  SessionUpdate,
  UserDataErased,
} from "./types.js";

/** How a resumable stream reconnects. */
export interface ReconnectOptions {
  /** Consecutive failed (re)connections tolerated before the error is thrown (default 8). */
  maxRetries?: number;
  /** First backoff delay in ms (default 100); doubles on each consecutive failure. */
  initialBackoffMs?: number;
  /** Largest backoff delay in ms (default 2000). */
  maxBackoffMs?: number;
}

/** Options of createMemoryClient. */
export interface MemoryClientOptions {
  /** Server address, e.g. "http://127.0.0.1:8000". */
  baseUrl: string;
  /** Wire protocol (default "grpc", gRPC over HTTP/2 cleartext, in Node.js; "connect" in browsers and edge runtimes). */
  protocol?: Protocol;
  /** Connect protocol only: binary protobuf instead of JSON. */
  useBinaryFormat?: boolean;
  /** Deadline for calls that do not set their own (ms). Not applied to streams. */
  timeoutMs?: number;
  interceptors?: Interceptor[];
  /** API key of a server running with MEMORY_AUTH=true: sent as `authorization: Bearer <key>` on every call. */
  apiKey?: string;
  /**
   * Retries of calls that are safe to repeat (reads, getOrCreateSession,
   * appends without expectedSeq, which carry an event_id, writeMemories, whose
   * memories carry a memory_id, and deleteMemories) after UNAVAILABLE or a
   * broken connection (default 2; 0 disables).
   */
  retries?: number;
  /** Reconnection of streamSessionEvents. */
  reconnect?: ReconnectOptions;
}

/** Options of addEvent. */
export interface AddEventOptions extends CallOptions {
  /** Idempotency key (a UUID is generated when omitted). */
  eventId?: string;
  /** Append only if the session's head seq equals this (0: no events yet). */
  expectedSeq?: number | bigint;
  /** When the event happened (the server's clock when omitted). */
  timestamp?: Date;
  /** State changes applied with the append (see EventInput.stateDelta). */
  stateDelta?: JsonObject;
  /** State keys deleted with the append (see EventInput.stateRemovals). */
  stateRemovals?: string[];
  /** Store stateDelta's nulls as values (see EventInput.stateNullsAreValues). */
  stateNullsAreValues?: boolean;
}

/** Options of cleanupOldSessions. */
export interface CleanupOptions extends CallOptions {
  /** Only sessions of this app. */
  appName?: string;
  /** Only sessions of this user. */
  userId?: string;
}

/** Options of streamSessionEvents. */
export interface StreamOptions extends ReconnectOptions {
  /** Start after this seq (default: from the oldest retained event). */
  afterSeq?: number | bigint;
  /** Only these event types. */
  eventTypes?: string[];
  /** Aborting ends the iteration (the loop simply finishes). */
  signal?: AbortSignal;
  /** Called with the head seq each time the replay has caught up (after every (re)connection). */
  onCaughtUp?: (headSeq: number) => void;
  /**
   * Called before each reconnection with the error that ended the previous
   * stream and the number of consecutive failures; a returned promise is
   * awaited before reconnecting.
   */
  onReconnect?: (err: ConnectError, attempt: number) => void | Promise<void>;
}

/** Options of watchMemories. */
export interface WatchOptions extends ReconnectOptions {
  /** Replay the app's changes after this cursor (of an earlier change or started), then go live. Default: live from now. */
  after?: number | bigint;
  /** Aborting ends the iteration (the loop simply finishes). */
  signal?: AbortSignal;
  /**
   * Called before each reconnection with the error that ended the previous
   * watch and the number of consecutive failures; a returned promise is
   * awaited before reconnecting.
   */
  onReconnect?: (err: ConnectError, attempt: number) => void | Promise<void>;
}

const MAX_PAGE = 1000;
/**
 * Stream errors after which resuming from the last seq is worthwhile: the
 * server going away (UNAVAILABLE), and what a cut connection looks like to
 * connect-node (an HTTP/2 RST_STREAM CANCEL, a reset socket, a truncated body).
 * CANCELED counts only when the caller did not cancel.
 */
const RESUMABLE = new Set<Code>([Code.Unavailable, Code.Canceled, Code.Internal, Code.Unknown, Code.Aborted]);

/** Node error codes of a connection that broke or could not be made. */
const CONNECTION_ERRORS = new Set([
  "ECONNRESET",
  "ECONNREFUSED",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ERR_HTTP2_GOAWAY_SESSION",
  "ERR_HTTP2_SESSION_ERROR",
  "ERR_HTTP2_STREAM_CANCEL",
  "ERR_HTTP2_INVALID_SESSION",
]);

/** UNAVAILABLE, or a broken/refused connection (which connect-node may report as INTERNAL or ABORTED). */
export function isTransient(err: ConnectError): boolean {
  if (err.code === Code.Unavailable) return true;
  let cause: unknown = err.cause;
  for (let depth = 0; depth < 8 && cause instanceof Error; depth++) {
    const code = (cause as { code?: unknown }).code;
    if (typeof code === "string" && CONNECTION_ERRORS.has(code)) return true;
    cause = cause.cause;
  }
  return false;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

function backoffMs(attempt: number, initial: number, max: number): number {
  const base = Math.min(max, initial * 2 ** Math.min(attempt - 1, 20));
  return base / 2 + Math.random() * (base / 2); // jitter in [base/2, base]
}

/** A client of Engram's MemoryService. Create with createMemoryClient; call close() when done. */
export class MemoryClient {
  /** The generated connect-es client, for anything this class does not cover. */
  readonly rpc: Client<typeof pb.MemoryService>;
  readonly protocol: Protocol;
  private readonly retries: number;
  private readonly reconnect: Required<ReconnectOptions>;
  private closed = false;

  constructor(
    transport: Transport | ClosableTransport,
    options: { protocol?: Protocol; retries?: number; reconnect?: ReconnectOptions } = {},
  ) {
    const closable = "transport" in transport ? transport : undefined;
    this.rpc = createClient(pb.MemoryService, closable ? closable.transport : (transport as Transport));
    this.closeTransport = closable ? () => closable.close() : () => {};
    this.protocol = closable?.protocol ?? options.protocol ?? "grpc";
    this.retries = options.retries ?? 2;
    this.reconnect = {
      maxRetries: options.reconnect?.maxRetries ?? 8,
      initialBackoffMs: options.reconnect?.initialBackoffMs ?? 100,
      maxBackoffMs: options.reconnect?.maxBackoffMs ?? 2000,
    };
  }

  private readonly closeTransport: () => void;

  /** Runs a call that is safe to repeat, retrying after UNAVAILABLE. */
  private async retrying<T>(call: () => Promise<T>, opts?: CallOptions, retries = this.retries): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await call();
      } catch (err) {
        const ce = ConnectError.from(err);
        if (!isTransient(ce) || attempt >= retries || opts?.signal?.aborted || this.closed) throw ce;
        await sleep(backoffMs(attempt + 1, this.reconnect.initialBackoffMs, this.reconnect.maxBackoffMs), opts?.signal);
      }
    }
  }

  /** Creates a session and returns its id (generated by the server when omitted). ALREADY_EXISTS for a taken id. */
  async createSession(
    appName: string,
    userId: string,
    sessionId?: string,
    metadata?: JsonObject,
    opts?: CallOptions,
  ): Promise<string> {
    const res = await this.rpc.createSession({ appName, userId, sessionId, metadata }, opts);
    return toSession(res.session).sessionId;
  }

  /** Returns the session, creating it when absent; `created` tells whether this call created it. */
  async getOrCreateSession(
    sessionId: string,
    appName = "agent",
    userId = "user",
    metadata?: JsonObject,
    opts?: CallOptions,
  ): Promise<{ sessionId: string; created: boolean; session: Session }> {
    const res = await this.retrying(
      () => this.rpc.getOrCreateSession({ sessionId, appName, userId, metadata }, opts),
      opts,
    );
    const session = toSession(res.session);
    return { sessionId: session.sessionId, created: res.created, session };
  }

  /** One session; NOT_FOUND when there is none. */
  async getSession(sessionId: string, opts?: CallOptions): Promise<Session> {
    const res = await this.retrying(() => this.rpc.getSession({ sessionId }, opts), opts);
    return toSession(res.session);
  }

  /** Sessions in session_id order (every page), optionally filtered by app and user. */
  async listSessions(
    filter: { appName?: string; userId?: string; limit?: number; pageSize?: number } = {},
    opts?: CallOptions,
  ): Promise<Session[]> {
    const out: Session[] = [];
    const limit = filter.limit ?? Infinity;
    let pageToken = "";
    // Each page advances the cursor; the bound only guards against a server that would not.
    for (let pages = 0; pages < 1_000_000 && out.length < limit; pages++) {
      const pageSize = Math.min(filter.pageSize ?? MAX_PAGE, MAX_PAGE, limit - out.length);
      const res = await this.retrying(
        () => this.rpc.listSessions({ appName: filter.appName, userId: filter.userId, pageSize, pageToken }, opts),
        opts,
      );
      for (const s of res.sessions) out.push(toSession(s));
      if (!res.nextPageToken || res.sessions.length === 0 || res.nextPageToken === pageToken) break;
      pageToken = res.nextPageToken;
    }
    return out.slice(0, limit === Infinity ? undefined : limit);
  }

  /**
   * Replaces the session's metadata and/or applies a state delta, and returns
   * the session with its merged state. With expectedVersion, only at that
   * version (FAILED_PRECONDITION otherwise: read the session and try again).
   * Not retried on a lost connection: the update may have been applied.
   */
  async updateSession(sessionId: string, update: SessionUpdate, opts?: CallOptions): Promise<Session> {
    const expectedVersion =
      update.expectedVersion === undefined ? undefined : toSeq(update.expectedVersion, "expectedVersion");
    const res = await this.rpc.updateSession(
      {
        sessionId,
        metadata: update.metadata,
        stateDelta: update.stateDelta,
        stateRemovals: update.stateRemovals,
        stateNullsAreValues: update.stateNullsAreValues,
        expectedVersion,
      },
      opts,
    );
    return toSession(res.session);
  }

  /** Deletes a session and its events; false when there was none. */
  async deleteSession(sessionId: string, opts?: CallOptions): Promise<boolean> {
    const res = await this.rpc.deleteSession({ sessionId }, opts);
    return res.deleted;
  }

  /**
   * Appends one event and returns it as stored (with its seq). Call either as
   * addEvent(id, "user_message", content, metadata, options) or
   * addEvent(id, { eventType, content, metadata, eventId, timestamp }, options).
   * Retrying with the same eventId returns the original event.
   */
  async addEvent(sessionId: string, event: EventInput, opts?: AddEventOptions): Promise<MemoryEvent>;
  async addEvent(
    sessionId: string,
    eventType: string,
    content?: JsonValue,
    metadata?: JsonObject,
    opts?: AddEventOptions,
  ): Promise<MemoryEvent>;
  async addEvent(
    sessionId: string,
    eventOrType: string | EventInput,
    contentOrOpts?: JsonValue | AddEventOptions,
    metadata?: JsonObject,
    options?: AddEventOptions,
  ): Promise<MemoryEvent> {
    let input: EventInput;
    let opts: AddEventOptions;
    if (typeof eventOrType === "string") {
      opts = options ?? {};
      input = { eventType: eventOrType, content: contentOrOpts as JsonValue | undefined, metadata };
    } else {
      opts = (contentOrOpts as AddEventOptions | undefined) ?? {};
      input = { ...eventOrType };
    }
    if (opts.eventId !== undefined) input.eventId = opts.eventId;
    if (opts.timestamp !== undefined) input.timestamp = opts.timestamp;
    if (opts.stateDelta !== undefined) input.stateDelta = opts.stateDelta;
    if (opts.stateRemovals !== undefined) input.stateRemovals = opts.stateRemovals;
    if (opts.stateNullsAreValues !== undefined) input.stateNullsAreValues = opts.stateNullsAreValues;
    const event = fromEventInput(input); // assigns an event_id, so a retry is idempotent
    const expectedSeq = opts.expectedSeq === undefined ? undefined : toSeq(opts.expectedSeq, "expectedSeq");
    const call = () => this.rpc.addEvent({ sessionId, event, expectedSeq }, opts);
    const res = await this.retrying(call, opts, expectedSeq === undefined ? this.retries : 0);
    return toEvent(res.event);
  }

  /** Appends a batch atomically (all or none) and returns the stored events in seq order. */
  async addEvents(
    sessionId: string,
    events: EventInput[],
    opts: CallOptions & { expectedSeq?: number | bigint } = {},
  ): Promise<MemoryEvent[]> {
    const inputs = events.map(fromEventInput);
    const expectedSeq = opts.expectedSeq === undefined ? undefined : toSeq(opts.expectedSeq, "expectedSeq");
    const call = () => this.rpc.addEvents({ sessionId, events: inputs, expectedSeq }, opts);
    const res = await this.retrying(call, opts, expectedSeq === undefined ? this.retries : 0);
    return res.events.map(toEvent);
  }

  /**
   * A session's events in seq order, following page tokens. `limit` caps the
   * total (default: everything stored now); `tail` returns only the newest N.
   * OUT_OF_RANGE when events after `afterSeq` were evicted.
   */
  async getSessionEvents(
    sessionId: string,
    query: { eventTypes?: string[]; afterSeq?: number | bigint; limit?: number; tail?: number; pageSize?: number } = {},
    opts?: CallOptions,
  ): Promise<MemoryEvent[]> {
    const eventTypes = query.eventTypes ?? [];
    if (query.tail !== undefined && query.tail > 0) {
      const res = await this.retrying(
        () => this.rpc.getSessionEvents({ sessionId, eventTypes, tail: query.tail }, opts),
        opts,
      );
      return res.events.map(toEvent);
    }
    const limit = query.limit ?? Infinity;
    const out: MemoryEvent[] = [];
    const afterSeq = query.afterSeq === undefined ? undefined : toSeq(query.afterSeq, "afterSeq");
    let pageToken = "";
    for (let pages = 0; pages < 1_000_000 && out.length < limit; pages++) {
      const pageLimit = Math.min(query.pageSize ?? MAX_PAGE, MAX_PAGE, limit - out.length);
      const res = await this.retrying(
        () =>
          this.rpc.getSessionEvents(
            { sessionId, eventTypes, afterSeq: pageToken ? undefined : afterSeq, limit: pageLimit, pageToken },
            opts,
          ),
        opts,
      );
      for (const e of res.events) out.push(toEvent(e));
      if (!res.nextPageToken || res.events.length === 0 || res.nextPageToken === pageToken) break;
      pageToken = res.nextPageToken;
    }
    return out.slice(0, limit === Infinity ? undefined : limit);
  }

  /**
   * Follows a session: replays the stored events after `afterSeq`, then yields
   * new ones as they are appended. Heartbeats and caught-up markers are not
   * yielded. When the connection is lost (UNAVAILABLE, e.g. a server restart)
   * it reconnects with bounded exponential backoff and resumes after the last
   * seq it yielded, so nothing is skipped or repeated. Other errors (NOT_FOUND,
   * OUT_OF_RANGE, ...) and exhausted retries are thrown. Aborting `signal`
   * (or breaking out of the loop) ends it.
   */
  async *streamSessionEvents(
    sessionId: string,
    options: StreamOptions = {},
  ): AsyncGenerator<MemoryEvent, void, undefined> {
    let cursor = options.afterSeq === undefined ? undefined : toSeq(options.afterSeq, "afterSeq");
    yield* this.resuming(options, "stream", {
      open: (signal) =>
        this.rpc.streamSessionEvents({ sessionId, afterSeq: cursor, eventTypes: options.eventTypes ?? [] }, { signal }),
      take: (res) => {
        const frame = res.frame;
        if (frame.case === "event") {
          const seq = frame.value.seq;
          if (cursor !== undefined && seq <= cursor) return undefined; // never repeat
          cursor = seq;
          return toEvent(frame.value);
        }
        if (frame.case === "caughtUp") options.onCaughtUp?.(toNumber(frame.value.headSeq, "head_seq"));
        return undefined;
      },
    });
  }

  /**
   * The context for a session's next model call, as KAOS text and OpenAI-shaped
   * chat messages. A number is max_events (the KAOS signature); options add a
   * token budget, a query, sections and their budgets (see ContextOptions).
   */
  async buildConversationContext(
    sessionId: string,
    options: number | ContextOptions = 0,
    opts?: CallOptions,
  ): Promise<ConversationContext> {
    const req = contextRequest(sessionId, options);
    const res = await this.retrying(() => this.rpc.buildConversationContext(req, opts), opts);
    return toContext(res);
  }

  /** Totals over the store. */
  async getMemoryStats(opts?: CallOptions): Promise<MemoryStats> {
    const res = await this.retrying(() => this.rpc.getStats({}, opts), opts);
    return {
      totalSessions: toNumber(res.totalSessions, "total_sessions"),
      totalEvents: toNumber(res.totalEvents, "total_events"),
      avgEventsPerSession: res.avgEventsPerSession,
      backend: res.backend,
    };
  }

  /**
   * Removes sessions not updated within `maxAgeHours` (fractions allowed),
   * only those of `appName` and/or `userId` when given, and returns how many went.
   */
  async cleanupOldSessions(maxAgeHours: number, opts: CleanupOptions = {}): Promise<number> {
    if (!(maxAgeHours > 0) || !Number.isFinite(maxAgeHours))
      throw new RangeError("maxAgeHours must be a positive number");
    const { appName, userId, ...call } = opts;
    const res = await this.rpc.cleanup(
      { maxAge: durationFromMs(Math.round(maxAgeHours * 3_600_000)), appName, userId },
      call,
    );
    return toNumber(res.removedSessions, "removed_sessions");
  }

  /**
   * Erases one user of one app: every session and event of theirs. Not
   * retried by the client: a call that fails midway leaves whole sessions,
   * and calling again removes the rest (its counts are what that call removed).
   */
  async deleteUserData(appName: string, userId: string, opts?: CallOptions): Promise<UserDataErased> {
    const res = await this.rpc.deleteUserData({ appName, userId }, opts);
    return {
      removedSessions: toNumber(res.removedSessions, "removed_sessions"),
      removedEvents: toNumber(res.removedEvents, "removed_events"),
      removedMemories: toNumber(res.removedMemories, "removed_memories"),
    };
  }

  /**
   * Stores a batch of long-term memories atomically (all or none). A memory
   * without memoryId gets a UUID before the first try, so the call is
   * retried like a read: writing the same id again returns the stored
   * original. A memory with the supersession key of a valid one in the same
   * scope closes that one's validity (returned in `superseded`).
   */
  async writeMemories(memories: MemoryInput[], opts?: CallOptions): Promise<MemoriesWritten> {
    if (!Array.isArray(memories)) throw new TypeError("memories must be an array");
    const req = { memories: memories.map(fromMemoryInput) };
    const res = await this.retrying(() => this.rpc.writeMemories(req, opts), opts);
    return { memories: res.memories.map(toMemory), superseded: res.superseded.map(toMemory) };
  }

  /** One memory; NOT_FOUND when there is none (or the API key may not see it). */
  async getMemory(appName: string, memoryId: string, opts?: CallOptions): Promise<Memory> {
    const res = await this.retrying(() => this.rpc.getMemory({ appName, memoryId }, opts), opts);
    return toMemory(res.memory);
  }

  /**
   * The memories of a scope ranked by relevance to `query` (lexical, fused
   * with vector similarity, recency and importance), best first. The scope
   * selects what a caller in it may recall ("visible") unless `scopeMatch` says otherwise.
   */
  async searchMemories(search: MemorySearch, opts?: CallOptions): Promise<ScoredMemory[]> {
    const req = {
      ...filterFields(search),
      query: search.query ?? "",
      topK: search.topK ?? 0,
      queryEmbedding: search.queryEmbedding ?? [],
      includeEmbeddings: search.includeEmbeddings ?? false,
    };
    const res = await this.retrying(() => this.rpc.searchMemories(req, opts), opts);
    return res.results.map(toScoredMemory);
  }

  /** One page of a scope's memories, newest first (see listMemories for every page). */
  async listMemoriesPage(listing: MemoryListing, opts?: CallOptions): Promise<MemoryPage> {
    const req = {
      ...filterFields(listing),
      key: listing.key,
      subject: listing.subject,
      predicate: listing.predicate,
      pageSize: listing.pageSize ?? 0,
      pageToken: listing.pageToken ?? "",
      includeEmbeddings: listing.includeEmbeddings ?? false,
    };
    const res = await this.retrying(() => this.rpc.listMemories(req, opts), opts);
    return { memories: res.memories.map(toMemory), nextPageToken: res.nextPageToken };
  }

  /**
   * Every memory of a scope (within it, unless `scopeMatch` says otherwise),
   * newest first, fetching pages as the loop asks for them.
   */
  async *listMemories(listing: MemoryListing, opts?: CallOptions): AsyncGenerator<Memory, void, undefined> {
    let pageToken = listing.pageToken ?? "";
    // Each page advances the cursor; the bound only guards against a server that would not.
    for (let pages = 0; pages < 1_000_000; pages++) {
      const page = await this.listMemoriesPage({ ...listing, pageToken }, opts);
      yield* page.memories;
      if (!page.nextPageToken || page.memories.length === 0 || page.nextPageToken === pageToken) return;
      pageToken = page.nextPageToken;
    }
  }

  /**
   * Forgets memories by ids, or every memory a scope selects, and returns how
   * many this call removed. Retried like a read (forgetting twice forgets the
   * same), so after a lost response the count is what the retry removed.
   */
  async deleteMemories(deletion: MemoryDeletion, opts?: CallOptions): Promise<number> {
    const req = { ...scopeFields(deletion), memoryIds: deletion.memoryIds ?? [] };
    const res = await this.retrying(() => this.rpc.deleteMemories(req, opts), opts);
    return toNumber(res.deletedCount, "deleted_count");
  }

  /**
   * Follows the writes, supersessions and deletions of a scope's memories
   * ("visible" to it unless `scopeMatch` says otherwise). The first change
   * is `{ type: "started", cursor }`; with `after`, the changes the server
   * still retains after it are replayed first. Each change carries its
   * cursor. Heartbeats are not yielded. When the connection is lost
   * (UNAVAILABLE, e.g. a server restart) it reconnects with bounded
   * exponential backoff and resumes after the last cursor it saw, so nothing
   * is skipped or repeated (`started` is yielded once). OUT_OF_RANGE (the
   * resume point is older than the server's retained change log: list or
   * search, then watch again), other errors and exhausted retries are
   * thrown. Aborting `signal` (or breaking out of the loop) ends it.
   */
  async *watchMemories(scope: MemoryScope, options: WatchOptions = {}): AsyncGenerator<MemoryChange, void, undefined> {
    let cursor = options.after === undefined ? undefined : toSeq(options.after, "after");
    let started = false;
    yield* this.resuming(options, "watch", {
      open: (signal) => this.rpc.watchMemories({ ...scopeFields(scope), after: cursor }, { signal }),
      take: (res) => {
        const change = toMemoryChange(res);
        if (!change) return undefined;
        if (change.type === "started") {
          cursor ??= BigInt(change.cursor);
          if (started) return undefined;
          started = true;
          return change;
        }
        if (cursor !== undefined && BigInt(change.cursor) <= cursor) return undefined; // never repeat
        cursor = BigInt(change.cursor);
        return change;
      },
    });
  }

  /**
   * The reconnect loop of every resumable stream: opens it, yields what
   * `take` makes of each frame (undefined: nothing to yield), and on a lost
   * connection (UNAVAILABLE and the other resumable codes) reconnects with
   * bounded exponential backoff; `open` resumes from the cursor `take` kept.
   * Other errors, and exhausted retries, are thrown. Aborting
   * `options.signal`, closing the client or leaving the loop cancels the call.
   */
  private async *resuming<F, T>(
    options: ReconnectOptions & {
      signal?: AbortSignal;
      onReconnect?: (err: ConnectError, attempt: number) => void | Promise<void>;
    },
    what: string,
    stream: { open: (signal: AbortSignal) => AsyncIterable<F>; take: (frame: F) => T | undefined },
  ): AsyncGenerator<T, void, undefined> {
    const maxRetries = options.maxRetries ?? this.reconnect.maxRetries;
    const initial = options.initialBackoffMs ?? this.reconnect.initialBackoffMs;
    const max = options.maxBackoffMs ?? this.reconnect.maxBackoffMs;
    const signal = options.signal;
    if (signal?.aborted) return;
    // Our own controller so that leaving the loop early cancels the call.
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    let failures = 0;
    try {
      for (;;) {
        let error: ConnectError;
        try {
          for await (const frame of stream.open(controller.signal)) {
            failures = 0; // a frame arrived: this connection works
            const item = stream.take(frame);
            if (item !== undefined) yield item;
          }
          // The server ended the stream without a status error: resume as after a disconnect.
          error = new ConnectError(`${what} ended by the server`, Code.Unavailable);
        } catch (err) {
          if (controller.signal.aborted || this.closed) return;
          error = ConnectError.from(err);
          if (!RESUMABLE.has(error.code) && !isTransient(error)) throw error;
        }
        failures++;
        if (failures > maxRetries) throw error;
        await options.onReconnect?.(error, failures);
        await sleep(backoffMs(failures, initial, max), controller.signal);
        if (controller.signal.aborted || this.closed) return;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      controller.abort();
    }
  }

  /**
   * Episodic recall: the events of an app's (or one user's) sessions that
   * best match `query`, with session, seq and a snippet, best first.
   */
  async searchEvents(search: EventSearch, opts?: CallOptions): Promise<EventHit[]> {
    const req = {
      appName: search.appName,
      userId: search.userId,
      query: search.query,
      topK: search.topK ?? 0,
      eventTypes: search.eventTypes ?? [],
    };
    const res = await this.retrying(() => this.rpc.searchEvents(req, opts), opts);
    return res.hits.map(toEventHit);
  }

  /**
   * Everything an agent should know before its next model call, within one
   * token budget: the pinned memories of the session's user, the memories
   * most relevant to `query`, and the session's context, rendered as one text block.
   */
  async recall(sessionId: string, options: RecallOptions = {}, opts?: CallOptions): Promise<Recall> {
    const req = {
      sessionId,
      query: options.query ?? "",
      tokenBudget: options.tokenBudget ?? 0,
      agentId: options.agentId,
      tokenizer: options.tokenizer ?? "",
      topK: options.topK ?? 0,
      queryEmbedding: options.queryEmbedding ?? [],
      includeEmbeddings: options.includeEmbeddings ?? false,
    };
    const res = await this.retrying(() => this.rpc.recall(req, opts), opts);
    return toRecall(res);
  }

  /** Closes the client's connections; open streams end. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.closeTransport();
  }
}

/** Adds `authorization: Bearer <key>` to every call. */
function bearer(apiKey: string): Interceptor {
  const value = `Bearer ${apiKey}`;
  return (next) => (req) => {
    req.header.set("authorization", value);
    return next(req);
  };
}

/**
 * createMemoryClient for one platform: its transports (node:http and HTTP/2 in
 * Node.js, fetch in browsers and edge runtimes) and the protocol it uses when
 * the options name none. The entry points (index.ts, web.ts) each make one.
 */
export function memoryClientFactory(
  createTransport: TransportFactory,
  defaultProtocol: Protocol,
): (options: MemoryClientOptions) => MemoryClient {
  return (options) => {
    if (!options || typeof options.baseUrl !== "string") throw new TypeError("createMemoryClient: baseUrl is required");
    const protocol = options.protocol ?? defaultProtocol;
    const transport = createTransport(protocol, {
      baseUrl: options.baseUrl,
      interceptors: options.apiKey ? [bearer(options.apiKey), ...(options.interceptors ?? [])] : options.interceptors,
      defaultTimeoutMs: options.timeoutMs,
      useBinaryFormat: options.useBinaryFormat,
    });
    return new MemoryClient(transport, { protocol, retries: options.retries, reconnect: options.reconnect });
  };
}
