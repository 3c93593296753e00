/**
 * The MemoryStore contract: what every storage driver (local, null, redis,
 * postgres) implements. Drivers speak plain records, never protobuf, and
 * throw MemoryError (src/errors.ts). The same conformance suite
 * (test/store/conformance.ts) runs against every driver.
 */
import type { JsonObject, JsonValue, StoreCall } from "./base-types.js";
import type { LongTermMemoryStore } from "./memories/contract.js";

// The contract's other parts, so that every driver and caller imports the whole contract from here.
export type * from "./base-types.js";
export type * from "./memories/contract.js";

/** A session as stores keep it. Times are epoch milliseconds. */
export interface SessionRecord {
  sessionId: string;
  appName: string;
  userId: string;
  metadata: JsonObject;
  createdAt: number;
  updatedAt: number;
  /** Seq of the newest event; 0 when none was ever appended. */
  headSeq: number;
  /** Seq of the oldest retained event; headSeq + 1 when none is retained. */
  firstSeq: number;
  /**
   * Which session of this id it is: a value the store assigns at creation
   * that a session deleted and created again under the same id never shares
   * with its predecessor. A live stream belongs to one incarnation, so it can
   * tell "my session moved on" from "another session took my id" even when
   * every notice of the deletion was lost. "" for sessions stored before
   * incarnations existed.
   */
  incarnation: string;
  /** The session's own state (ADK's model; src/store/state.ts): keys without prefix. {} when none. */
  state: JsonObject;
  /** Increases by one with each updateSession and each append that carried a non-empty state delta; 0 until then. */
  version: number;
}

/**
 * The state changes an event or an update carries (src/store/state.ts
 * splitStateChange reads them): keys removed first, then the delta applied.
 */
export interface StateChange {
  /**
   * State changes (temp: keys already dropped); absent when none. A null
   * value deletes its key, unless stateNullsAreValues.
   */
  stateDelta?: JsonObject;
  /** Keys deleted before stateDelta applies (temp: keys already dropped); absent when none. */
  stateRemovals?: string[];
  /** True when stateDelta's nulls are stored as values (ADK's contract); set only when it holds one. */
  stateNullsAreValues?: boolean;
}

/** An event as a client submits it, validated and with ids and time filled in. */
export interface NewEvent extends StateChange {
  eventId: string;
  eventType: string;
  content: JsonValue;
  metadata: JsonObject;
  /** Epoch milliseconds. */
  timestamp: number;
  /**
   * Canonical JSON of (event_type, content, metadata): two submissions with
   * the same event_id are the same event exactly when fingerprints match.
   * "" when the server generated the id: such an event is new by construction,
   * and its id is a flat string (src/service/event-id.ts).
   */
  fingerprint: string;
}

/** An event as stored, with its position in the session, and the state changes it carried. */
export interface StoredEvent extends StateChange {
  sessionId: string;
  seq: number;
  eventId: string;
  eventType: string;
  content: JsonValue;
  metadata: JsonObject;
  /** Epoch milliseconds. */
  timestamp: number;
}

/** What updateSession changes; absent fields stay as they are (state changes as an event's). */
export interface SessionUpdate extends StateChange {
  /** Replaces the metadata. */
  metadata?: JsonObject;
  /** Only when the session's version equals it; otherwise FAILED_PRECONDITION (versionConflict). */
  expectedVersion?: number;
  /** Epoch ms: becomes updatedAt. */
  now: number;
}

/** Input of createSession / getOrCreateSession. */
export interface NewSession {
  sessionId: string;
  appName: string;
  userId: string;
  metadata: JsonObject;
  /** Epoch milliseconds; becomes createdAt and updatedAt. */
  now: number;
}

/** Filter and cursor of listSessions; sessions come in session_id order. */
export interface SessionQuery {
  appName?: string;
  userId?: string;
  /** Only sessions whose id sorts after this one (code-point order). */
  afterSessionId?: string;
  limit: number;
}

/**
 * Which events listRecentEvents covers. With `sessionId`, that session's
 * newest events. Otherwise events of every session, narrowed to sessions of
 * `appNames` (any app when absent; none when empty) and of `userId` (any
 * user when absent): a scoped listing reads the scope's own recent index, so
 * it costs O(limit) whatever other tenants store.
 */
export interface RecentEventsFilter {
  sessionId?: string;
  appNames?: readonly string[];
  userId?: string;
}

/** A range read of one session. */
export interface EventQuery {
  /** Only events with seq > afterSeq; events after it must all be retained. */
  afterSeq?: number;
  /** Only these event types when non-empty. */
  eventTypes?: readonly string[];
  limit: number;
}

/** What searchEvents looks for: events of an app's (or one user's) sessions matching a text query. */
export interface EventTextQuery {
  appName: string;
  /** Only sessions of this user when present. */
  userId?: string;
  /** The query as the caller wrote it; the store matches it through the shared analyzer (src/store/memories/analyzer.ts). */
  query: string;
  /** Only events of these types when non-empty. */
  eventTypes: readonly string[];
  limit: number;
}

/** An event found by searchEvents, with its relevance (greater is better). */
export interface ScoredEvent {
  event: StoredEvent;
  score: number;
}

/** What a range read returns, with the session's bounds and incarnation at read time. */
export interface EventPage {
  events: StoredEvent[];
  headSeq: number;
  firstSeq: number;
  /** The incarnation of the session the events were read from (SessionRecord.incarnation). */
  incarnation: string;
}

/**
 * Result of an append: the stored events, or the originals of a retry.
 *
 * A retry of an event that was trimmed (past maxSessionEvents) but is still
 * inside the dedupe window answers with the original's seq and the event as
 * the retry submitted it (its content is gone; its fingerprint matched, so
 * type, content and metadata are the original's; the timestamp is the
 * retry's). It is not appended again.
 */
export interface AppendResult {
  events: StoredEvent[];
  /** True when every event was already stored, or trimmed inside the dedupe window (an idempotent retry). */
  replayed: boolean;
}

/**
 * Which sessions cleanup() looks at besides the cutoff; any fields may be
 * given together (all must hold). appName/userId come from Cleanup's filters
 * and from the per-app idle TTL; exceptAppNames from the global idle TTL.
 */
export interface CleanupScope {
  /** Only sessions of this app_name. */
  appName?: string;
  /** Only sessions of this user_id. */
  userId?: string;
  /** No sessions of these app_names (apps with their own idle TTL). */
  exceptAppNames?: readonly string[];
}

/** Totals over the whole store. */
export interface StoreStats {
  totalSessions: number;
  totalEvents: number;
}

/** What one deleteUserData call removed. */
export interface ErasureResult {
  /** Sessions removed by this call. */
  sessions: number;
  /** Events those sessions held when they were removed. */
  events: number;
  /** Long-term memories of the user removed by this call (absent: the store keeps none). */
  memories?: number;
}

/** What resumeErasures finished. */
export interface ResumedErasures {
  /** Erasures found unfinished (one per app and user). */
  users: number;
  /** Sessions they still had to remove. */
  sessions: number;
  /** Events those sessions held. */
  events: number;
}

/** A change notification: carries positions only, never event data. */
export interface SessionNotice {
  sessionId: string;
  /** Head seq after the change, when known. */
  headSeq?: number;
  /** The session was deleted (or evicted, or cleaned up). */
  deleted?: boolean;
  /**
   * The incarnation the change happened to, when the driver knows it. A
   * notice carrying `events` must carry it: readers deliver those events only
   * to streams of that incarnation.
   */
  incarnation?: string;
  /**
   * The events the change appended, when the driver can include them: in
   * seq order, contiguous, the last one at headSeq. Readers may deliver them
   * without reading them back; a notice without them says only where the
   * head is.
   */
  events?: readonly StoredEvent[];
}

/** Receives notices for one session. */
export type NoticeListener = (notice: SessionNotice) => void;

/** What a driver can do beyond the required contract. */
export interface StoreCapabilities {
  /** Data survives a restart of the server process. */
  persistent: boolean;
  /** Several server replicas can share the store and see each other's writes. */
  shared: boolean;
  /** The store keeps data at all (false for the null store). */
  retains: boolean;
}

/** The effective durability of acknowledged writes, as read from the backend. */
export interface StoreDurability {
  /** One line an operator can act on, e.g. "fsync once per second (appendonly yes, appendfsync everysec)". */
  summary: string;
  /** The raw settings it was derived from. */
  settings: Record<string, string>;
}

/**
 * Retention of one app_name, overriding the global settings for its sessions.
 * An absent field falls back to the global value; 0 means "no cap" (never).
 */
export interface AppRetention {
  /** Events retained per session of this app, replacing the global cap. */
  maxSessionEvents?: number;
  /** Sessions of this app retained, in addition to the global cap; past it the app's least recently updated 10% are evicted. */
  maxSessions?: number;
  /** Sessions of this app not updated for this many ms are removed by the idle sweep, replacing the global TTL. */
  sessionIdleMs?: number;
}

/**
 * What a store keeps, and for how long. Every cap is 0 for "no cap": a
 * durable store deletes nothing unless the operator asked for it.
 */
export interface StoreLimits {
  /** Events retained per session; older ones are trimmed (ring buffer). 0: no cap. */
  maxSessionEvents: number;
  /** Sessions retained; past it the least recently updated 10% are evicted. 0: no cap. */
  maxSessions: number;
  /**
   * Sessions not updated for this many ms are removed by the idle sweep
   * (src/service/retention.ts, through cleanup()); 0: never. Stores do not
   * act on it themselves.
   */
  sessionIdleMs?: number;
  /** Per app_name overrides (a Map: app names are data, never object keys). */
  apps?: ReadonlyMap<string, AppRetention>;
  /**
   * How long (ms) the id, fingerprint and seq of a trimmed event are kept
   * after the trim, so that a retry is recognised after its original is gone
   * (JetStream's duplicate window). 0: forgotten at once. Default 120000.
   */
  dedupeWindowMs?: number;
  /** At most this many trimmed ids kept per session (the newest trimmed). 0: none. Default 1000. */
  dedupeMaxIds?: number;
}

/** The state shared beyond one session (src/store/state.ts): the app's and the user's, keys without prefix. */
export interface SharedState {
  app: JsonObject;
  user: JsonObject;
}

/** The storage contract every driver implements. */
export interface MemoryStore {
  /** "local", "null", "redis" or "postgres". */
  readonly backend: string;
  readonly capabilities: StoreCapabilities;
  /** Long-term memories: every driver keeps them (the null store acknowledges and forgets). */
  readonly memories: LongTermMemoryStore;
  /**
   * The id given to a session created without one; a random UUID when absent.
   * The null store names every such session "null-session", as KAOS's NullMemory does.
   */
  newSessionId?(): string;

  /** Creates a session; ALREADY_EXISTS when the id is taken. */
  createSession(input: NewSession, call?: StoreCall): Promise<SessionRecord>;
  /** Returns the session, creating it atomically when absent. */
  getOrCreateSession(input: NewSession, call?: StoreCall): Promise<{ session: SessionRecord; created: boolean }>;
  /** Returns the session or undefined. */
  getSession(sessionId: string, call?: StoreCall): Promise<SessionRecord | undefined>;
  /** Sessions in session_id order after the cursor, filtered; at most `limit`. */
  listSessions(query: SessionQuery, call?: StoreCall): Promise<SessionRecord[]>;
  /**
   * Changes the session's metadata and state in one atomic step and bumps
   * its version. A state that would pass a cap of src/store/state.ts:
   * INVALID_ARGUMENT (field "state_delta") and nothing changes. NOT_FOUND.
   */
  updateSession(sessionId: string, update: SessionUpdate, call?: StoreCall): Promise<SessionRecord>;
  /** The app's state and the user's state of that app ({} when none), as one read. */
  sharedState(appName: string, userId: string, call?: StoreCall): Promise<SharedState>;
  /** Removes the session and every event of it; false when absent (NOT_FOUND when the call expects an incarnation). */
  deleteSession(sessionId: string, call?: StoreCall): Promise<boolean>;

  /**
   * Appends events atomically (all or none) and assigns consecutive seqs.
   * Events whose eventId is already retained with the same fingerprint are not
   * appended again: their stored originals are returned in place; so are
   * events whose id was trimmed inside the dedupe window (see AppendResult).
   * A retained or remembered eventId with another fingerprint: ALREADY_EXISTS. When every event is such a
   * retry the call succeeds whatever expectedSeq says; otherwise an
   * expectedSeq other than the head: FAILED_PRECONDITION. Unknown session:
   * NOT_FOUND. The state deltas of the appended events (never of retries)
   * apply in order in the same atomic step, bumping the session's version
   * once; a state that would pass a cap: INVALID_ARGUMENT (field
   * "state_delta") and nothing is appended.
   */
  appendEvents(
    sessionId: string,
    events: readonly NewEvent[],
    expectedSeq?: number,
    call?: StoreCall,
  ): Promise<AppendResult>;
  /** Reads in seq order; OUT_OF_RANGE when afterSeq < firstSeq - 1; NOT_FOUND. */
  readEvents(sessionId: string, query: EventQuery, call?: StoreCall): Promise<EventPage>;
  /** The newest `limit` events matching the filter, in seq order; NOT_FOUND. */
  readTail(sessionId: string, limit: number, eventTypes?: readonly string[], call?: StoreCall): Promise<EventPage>;
  /**
   * The newest `limit` events of one session or of every session in a scope,
   * oldest first. "Newest" is ingest order: the order in which the store
   * stored them, never the client-settable timestamp. NOT_FOUND for an
   * unknown `sessionId`.
   */
  listRecentEvents(limit: number, filter?: RecentEventsFilter, call?: StoreCall): Promise<StoredEvent[]>;
  /**
   * The best `limit` retained events of the query's scope by full-text
   * relevance to any of the query's analyzed terms, best first, from an
   * index the store keeps. Scores depend only on the events of the scope
   * (the app's sessions, or that user's). Optional: without it SearchEvents
   * reads the scope's events and ranks them itself
   * (src/service/memories/event-search.ts).
   */
  searchEvents?(query: EventTextQuery, call?: StoreCall): Promise<ScoredEvent[]>;

  /** Totals over the store. */
  stats(call?: StoreCall): Promise<StoreStats>;
  /** Sessions this process evicted past maxSessions (global or per app) since it opened the store (a metrics counter). */
  readonly sessionsEvicted: number;
  /** Events this process trimmed past maxSessionEvents since it opened the store (a metrics counter). */
  readonly eventsTrimmed: number;
  /** Removes sessions with updatedAt < cutoff (epoch ms), within the scope; returns how many. */
  cleanup(cutoff: number, scope?: CleanupScope, call?: StoreCall): Promise<number>;
  /**
   * Erases one user of one app: every session of (appName, userId), each
   * removed as deleteSession removes one (atomically, with its events, its
   * index entries and a deleted notice to live streams), and every other
   * record the store keeps for that user. Counts only what this call removed.
   * Safe to repeat: an interrupted call leaves whole sessions behind and the
   * next call removes them. Sessions of another user or app are never
   * touched, even one re-created meanwhile under an id the user had.
   *
   * The one place erasure happens: any later feature that stores data keyed
   * by app or user (long-term memories, session state, ...) must remove it
   * here, in every driver, and add a case to the conformance suite's
   * deleteUserData block.
   *
   * Persistent stores record the erasure (app and user) before removing
   * anything and clear the record once it is done, so that resumeErasures
   * on any replica can finish one cut short by a crash.
   */
  deleteUserData(appName: string, userId: string, call?: StoreCall): Promise<ErasureResult>;
  /**
   * Persistent stores only: runs again every erasure recorded as in
   * progress, i.e. left unfinished by a replica that died or lost its
   * backend midway (or still running on another replica: erasures are
   * idempotent, each session is removed by exactly one of them). Called at
   * start-up.
   */
  resumeErasures?(): Promise<ResumedErasures>;

  /**
   * Calls `listener` when the session changes, on this replica or any other
   * sharing the store. Notices may be lost or merged: readers must re-read the
   * durable log from their cursor. Returns the unsubscribe function.
   */
  subscribe(sessionId: string, listener: NoticeListener): () => void;
  /**
   * Resolves once the changes other replicas make reach this replica's
   * listeners (subscribe); a stream waits for it after subscribing, before
   * its first read. Optional: stores that hear every change from the start
   * leave it out (one Redis node subscribes while it has listeners).
   */
  noticesFlowing?(): Promise<void>;

  /** Resolves when the backend answers; rejects UNAVAILABLE otherwise. */
  ping(call?: StoreCall): Promise<void>;
  /**
   * What an acknowledged append survives with the backend's current settings
   * (e.g. Redis appendonly/appendfsync, PostgreSQL synchronous_commit), logged
   * at start-up.
   */
  describeDurability(): Promise<StoreDurability>;
  /** Releases connections and timers. */
  close(): Promise<void>;
}
