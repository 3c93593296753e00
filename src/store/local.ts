/**
 * The in-process store: the embedded default. Each session keeps its events in
 * a ring buffer (denque) capped at maxSessionEvents, so append and eviction
 * are O(1); sessions sit in a Map by id, in a B+tree in id order (cursor
 * paging) and in a doubly linked list kept in update order (least recently
 * updated first) for eviction and cleanup. Ids of trimmed events stay in a
 * small per-session queue for the dedupe window (StoreLimits.dedupeWindowMs).
 * Recent events are listed in ingest order from per-scope lists of sessions
 * by last append (local-recent.ts).
 * Nothing survives a restart.
 */
import Denque from "denque";
import { createRequire } from "node:module";
import type SortedBTree from "sorted-btree";
import { seqConflict, sessionNotFound, versionConflict } from "../errors.js";
import { eventFingerprint } from "./fingerprint.js";
import {
  appSessionCap,
  checkCursor,
  checkIncarnation,
  dedupeWindow,
  duplicateEventId,
  evictionCount,
  isEmptyObject,
  isExpectedIncarnation,
  newIncarnation,
  newSessionRecord,
  sessionEventCap,
  sessionExists,
} from "./rules.js";
import type {
  AppendResult,
  CleanupScope,
  ErasureResult,
  JsonObject,
  EventPage,
  EventQuery,
  EventTextQuery,
  MemoryStore,
  NewEvent,
  NewSession,
  NoticeListener,
  RecentEventsFilter,
  ScoredEvent,
  SessionQuery,
  SessionRecord,
  SessionUpdate,
  SharedState,
  StoreCall,
  StoreLimits,
  StoreStats,
  StoredEvent,
  StoreDurability,
} from "./types.js";
import { LocalEventSearch } from "./event-search.js";
import { RecentEventLists, type RecentSession } from "./local-recent.js";
import { NoticeListeners } from "./notices.js";
import {
  addChanges,
  applyChanges,
  checkStateCaps,
  copyStateChange,
  hasStateChange,
  noChanges,
  splitStateChange,
  type ScopedChanges,
} from "./state.js";
import { LocalMemories } from "./memories/local.js";

// sorted-btree is CommonJS with `exports.default`; loaders disagree on what an ESM
// default import of it yields, so take the class from require() explicitly.
const BTree: typeof SortedBTree.default = createRequire(import.meta.url)("sorted-btree").default;

interface LocalSession extends RecentSession {
  record: SessionRecord;
  events: Denque<StoredEvent>;
  /**
   * Each retained event's fingerprint as submitted, parallel to `events`:
   * "" for a generated id. Kept so a trim can remember a client id without
   * hashing the event again.
   */
  fingerprints: Denque<string>;
  /** Retained events by event_id, for idempotent retries. */
  byEventId: Map<string, StoredEvent>;
  /** Trimmed events still inside the dedupe window, oldest trim first; made on the first trim. */
  trimmed?: Denque<TrimmedId>;
  /** The same, by event_id. */
  trimmedById?: Map<string, TrimmedId>;
  /** Neighbours in update order (the recency list): the previous one was updated earlier. */
  older?: LocalSession;
  newer?: LocalSession;
}

/** What a session remembers of a trimmed event: enough to answer a retry of it. */
interface TrimmedId {
  eventId: string;
  seq: number;
  fingerprint: string;
  trimmedAt: number;
}

/**
 * A flat copy of a string. Ids built by concatenation (crypto.randomUUID()
 * assembles its result from 20 pieces) are V8 cons-string trees of ~480
 * bytes; flat, a UUID takes ~48. Stored ids live as long as their events.
 */
function flatString(s: string): string {
  return s.length <= 128 ? Buffer.from(s, "utf8").toString("utf8") : s;
}

/** The metadata of every event stored without any: one shared (frozen) object instead of one each. */
const EMPTY_METADATA: JsonObject = Object.freeze({}) as JsonObject;

/** Event types seen so far, so each stored event shares one string per type instead of its request's copy. */
const eventTypes = new Map<string, string>();
const MAX_INTERNED_EVENT_TYPES = 1024;

function internEventType(type: string): string {
  const known = eventTypes.get(type);
  if (known !== undefined) return known;
  if (eventTypes.size < MAX_INTERNED_EVENT_TYPES) eventTypes.set(type, type);
  return type;
}

/** Key of a user's state in LocalStore.userStates. */
const userStateKey = (appName: string, userId: string) => JSON.stringify([appName, userId]);

/** The in-process MemoryStore. */
export class LocalStore implements MemoryStore {
  /** Sessions this process evicted past maxSessions. */
  sessionsEvicted = 0;
  /** Events this process trimmed past maxSessionEvents. */
  eventsTrimmed = 0;
  readonly backend = "local";
  readonly capabilities = { persistent: false, shared: false, retains: true };
  /** Long-term memories (src/store/memories/local.ts). */
  readonly memories = new LocalMemories();

  /** Sessions by id, for point lookups: every call names its session, and the B+tree's ~14 string comparisons at 10k sessions showed in every append. */
  private readonly byId = new Map<string, LocalSession>();
  /** The same sessions in id order, for cursor paging (ListSessions). */
  private readonly idOrder = new BTree<string, LocalSession>();
  /**
   * Ends of the recency list. A list, not a Map re-inserted on every append:
   * V8 rehashes a Map's whole table once deleted entries fill it, which at
   * 30k sessions made each append's move to the end cost ~1 µs.
   */
  private leastRecent?: LocalSession;
  private mostRecent?: LocalSession;
  private readonly listeners = new NoticeListeners();
  private totalEvents = 0;
  /** Sessions per app_name, for per-app session caps. */
  private readonly sessionsPerApp = new Map<string, number>();
  private readonly dedupe: { windowMs: number; maxIds: number };
  /** Events stored so far: the next one's ingest position. */
  private ingested = 0;
  /** Each recent scope's sessions by last append (ListRecentEvents). */
  private readonly recent = new RecentEventLists();
  /** App-wide state by app_name. States are replaced on change, never mutated: records handed out keep theirs. */
  private readonly appStates = new Map<string, JsonObject>();
  /** Users' state by JSON [app_name, user_id]. */
  private readonly userStates = new Map<string, JsonObject>();
  /** Event text indexes of the apps searched (searchEvents). */
  private readonly eventSearch = new LocalEventSearch<LocalSession>(
    (s, event) => this.byId.get(s.record.sessionId) === s && event.seq >= s.record.firstSeq,
    (appName) => this.sessionsOfApp(appName),
  );

  constructor(private readonly limits: StoreLimits) {
    this.dedupe = dedupeWindow(limits);
  }

  async createSession(input: NewSession): Promise<SessionRecord> {
    if (this.byId.has(input.sessionId)) {
      throw sessionExists(input.sessionId);
    }
    return { ...this.insert(input).record };
  }

  async getOrCreateSession(input: NewSession): Promise<{ session: SessionRecord; created: boolean }> {
    const existing = this.byId.get(input.sessionId);
    if (existing) return { session: { ...existing.record }, created: false };
    return { session: { ...this.insert(input).record }, created: true };
  }

  async getSession(sessionId: string, call?: StoreCall): Promise<SessionRecord | undefined> {
    const s = this.byId.get(sessionId);
    return s && isExpectedIncarnation(s.record.incarnation, call) ? { ...s.record } : undefined;
  }

  async listSessions(query: SessionQuery): Promise<SessionRecord[]> {
    const out: SessionRecord[] = [];
    for (const [id, s] of this.idOrder.entries(query.afterSessionId)) {
      if (id === query.afterSessionId) continue;
      if (query.appName !== undefined && s.record.appName !== query.appName) continue;
      if (query.userId !== undefined && s.record.userId !== query.userId) continue;
      out.push({ ...s.record });
      if (out.length >= query.limit) break;
    }
    return out;
  }

  async updateSession(sessionId: string, update: SessionUpdate, call?: StoreCall): Promise<SessionRecord> {
    const s = this.session(sessionId, call);
    if (update.expectedVersion !== undefined && update.expectedVersion !== s.record.version) {
      throw versionConflict(update.expectedVersion, s.record.version);
    }
    this.applyState(s.record, splitStateChange(update));
    if (update.metadata) s.record.metadata = update.metadata;
    s.record.updatedAt = update.now;
    this.touch(s);
    return { ...s.record };
  }

  async sharedState(appName: string, userId: string): Promise<SharedState> {
    return { app: this.appStates.get(appName) ?? {}, user: this.userStates.get(userStateKey(appName, userId)) ?? {} };
  }

  async deleteSession(sessionId: string, call?: StoreCall): Promise<boolean> {
    const s = call?.expectedIncarnation === undefined ? this.byId.get(sessionId) : this.session(sessionId, call);
    if (!s) return false;
    this.remove(s);
    return true;
  }

  async appendEvents(
    sessionId: string,
    events: readonly NewEvent[],
    expectedSeq?: number,
    call?: StoreCall,
  ): Promise<AppendResult> {
    const s = this.session(sessionId, call);
    const now = Date.now();
    this.forgetExpiredIds(s, now);
    const { originals, freshCount } = this.findRetries(s, events);
    if (freshCount === 0) return { events: originals as StoredEvent[], replayed: true };
    if (expectedSeq !== undefined && expectedSeq !== s.record.headSeq) {
      throw seqConflict(expectedSeq, s.record.headSeq);
    }
    const record = s.record;
    // Checked and applied before any event is stored: a refused state leaves the log as it was.
    const changes = splitStateChange(undefined);
    events.forEach((e, i) => {
      if (!originals[i] && hasStateChange(e)) addChanges(changes, splitStateChange(e));
    });
    if (!noChanges(changes)) this.applyState(record, changes);
    const stored: StoredEvent[] = [];
    for (let i = 0; i < events.length; i++) {
      const original = originals[i];
      if (original) {
        stored.push(original);
        continue;
      }
      const e = events[i];
      const event: StoredEvent = {
        // The record's id, not the request's copy: one string per session, not per event.
        sessionId: record.sessionId,
        seq: ++record.headSeq,
        // A generated id (fingerprint "") is made flat; a client's may be a slice or a concatenation.
        eventId: e.fingerprint === "" ? e.eventId : flatString(e.eventId),
        eventType: internEventType(e.eventType),
        content: e.content,
        metadata: isEmptyObject(e.metadata) ? EMPTY_METADATA : e.metadata,
        timestamp: e.timestamp,
      };
      copyStateChange(event, e);
      s.events.push(event);
      s.fingerprints.push(e.fingerprint);
      s.ingests.push(++this.ingested);
      s.byEventId.set(event.eventId, event);
      stored.push(event);
      this.totalEvents++;
    }
    const cap = sessionEventCap(this.limits, record.appName);
    while (cap > 0 && s.events.length > cap) {
      const trimmed = s.events.shift()!;
      const fingerprint = s.fingerprints.shift()!;
      s.ingests.shift();
      if (s.byEventId.get(trimmed.eventId) === trimmed) {
        s.byEventId.delete(trimmed.eventId);
        // A generated id is new by construction: no retry can name it.
        if (fingerprint !== "") this.rememberTrimmed(s, trimmed, fingerprint, now);
      }
      this.totalEvents--;
      this.eventsTrimmed++;
      this.eventSearch.dropped(record.appName, trimmed);
    }
    record.firstSeq = s.events.length > 0 ? s.events.peekAt(0)!.seq : record.headSeq + 1;
    this.eventSearch.appended(
      record.appName,
      s,
      record.userId,
      stored.filter((e, i) => !originals[i] && e.seq >= record.firstSeq),
    );
    record.updatedAt = now;
    this.touch(s);
    this.recent.markAppended(s);
    this.listeners.notify({ sessionId, headSeq: record.headSeq, incarnation: record.incarnation });
    return { events: stored, replayed: false };
  }

  async readEvents(sessionId: string, query: EventQuery, call?: StoreCall): Promise<EventPage> {
    const s = this.session(sessionId, call);
    const { headSeq, firstSeq } = s.record;
    const afterSeq = query.afterSeq ?? firstSeq - 1;
    checkCursor(afterSeq, firstSeq, headSeq);
    const types = query.eventTypes && query.eventTypes.length > 0 ? new Set(query.eventTypes) : undefined;
    const events: StoredEvent[] = [];
    for (let i = afterSeq + 1 - firstSeq; i < s.events.length && events.length < query.limit; i++) {
      const e = s.events.peekAt(i)!;
      if (!types || types.has(e.eventType)) events.push(e);
    }
    return { events, headSeq, firstSeq, incarnation: s.record.incarnation };
  }

  async readTail(
    sessionId: string,
    limit: number,
    eventTypes?: readonly string[],
    call?: StoreCall,
  ): Promise<EventPage> {
    const s = this.session(sessionId, call);
    const types = eventTypes && eventTypes.length > 0 ? new Set(eventTypes) : undefined;
    const events: StoredEvent[] = [];
    for (let i = s.events.length - 1; i >= 0 && events.length < limit; i--) {
      const e = s.events.peekAt(i)!;
      if (!types || types.has(e.eventType)) events.push(e);
    }
    events.reverse();
    return { events, headSeq: s.record.headSeq, firstSeq: s.record.firstSeq, incarnation: s.record.incarnation };
  }

  async listRecentEvents(limit: number, filter: RecentEventsFilter = {}, call?: StoreCall): Promise<StoredEvent[]> {
    if (filter.sessionId !== undefined) return (await this.readTail(filter.sessionId, limit, undefined, call)).events;
    return this.recent.newest(limit, filter);
  }

  async searchEvents(query: EventTextQuery): Promise<ScoredEvent[]> {
    return this.eventSearch.search(query);
  }

  async stats(): Promise<StoreStats> {
    return { totalSessions: this.byId.size, totalEvents: this.totalEvents };
  }

  async cleanup(cutoff: number, scope: CleanupScope = {}): Promise<number> {
    const stale: LocalSession[] = [];
    const except = new Set(scope.exceptAppNames ?? []);
    for (const s of this.byRecency()) {
      if (s.record.updatedAt >= cutoff) continue;
      if (scope.appName !== undefined && s.record.appName !== scope.appName) continue;
      if (scope.userId !== undefined && s.record.userId !== scope.userId) continue;
      if (!except.has(s.record.appName)) stale.push(s);
    }
    for (const s of stale) this.remove(s);
    return stale.length;
  }

  async deleteUserData(appName: string, userId: string): Promise<ErasureResult> {
    const erased: ErasureResult = { sessions: 0, events: 0 };
    // One synchronous pass: nothing can interleave, so no session is half-removed or missed.
    for (const s of this.byRecency()) {
      if (s.record.appName !== appName || s.record.userId !== userId) continue;
      erased.sessions++;
      erased.events += s.events.length;
      this.remove(s);
    }
    this.userStates.delete(userStateKey(appName, userId));
    erased.memories = this.memories.eraseUser(appName, userId);
    return erased;
  }

  subscribe(sessionId: string, listener: NoticeListener): () => void {
    return this.listeners.subscribe(sessionId, listener);
  }

  async ping(): Promise<void> {}

  async describeDurability(): Promise<StoreDurability> {
    return { summary: "in process memory only: an acknowledged append is lost when the process exits", settings: {} };
  }

  async close(): Promise<void> {
    this.listeners.clear();
    this.memories.close();
  }

  /** The session an operation names; NOT_FOUND when absent or of another incarnation than the call expects. */
  private session(sessionId: string, call: StoreCall | undefined): LocalSession {
    const s = this.byId.get(sessionId);
    if (!s) throw sessionNotFound(sessionId);
    checkIncarnation(sessionId, s.record.incarnation, call);
    return s;
  }

  private insert(input: NewSession): LocalSession {
    const s: LocalSession = {
      record: newSessionRecord(input, newIncarnation()),
      events: new Denque<StoredEvent>(),
      fingerprints: new Denque<string>(),
      byEventId: new Map(),
      ingests: new Denque<number>(),
      appendLinks: [],
    };
    this.byId.set(input.sessionId, s);
    this.idOrder.set(input.sessionId, s);
    this.link(s);
    this.sessionsPerApp.set(input.appName, (this.sessionsPerApp.get(input.appName) ?? 0) + 1);
    this.evictSessionsOverLimit(input.appName);
    return s;
  }

  /**
   * Past the app's session cap, evicts that app's least recently updated 10%
   * (at least one); past the global cap, the store's. 0: no cap. The app's
   * victims are found by walking the update-order list, past other apps'.
   */
  private evictSessionsOverLimit(appName: string): void {
    const appCap = appSessionCap(this.limits, appName);
    if (appCap > 0 && this.sessionsPerApp.get(appName)! > appCap) this.evictOldest(evictionCount(appCap), appName);
    const cap = this.limits.maxSessions;
    if (cap > 0 && this.byId.size > cap) this.evictOldest(evictionCount(cap));
  }

  private evictOldest(count: number, appName?: string): void {
    for (const s of this.byRecency()) {
      if (count <= 0) break;
      if (appName !== undefined && s.record.appName !== appName) continue;
      this.remove(s);
      this.sessionsEvicted++;
      count--;
    }
  }

  /** Keeps what a retry of a trimmed event needs, while the dedupe window holds it. */
  private rememberTrimmed(s: LocalSession, event: StoredEvent, fingerprint: string, now: number): void {
    if (this.dedupe.maxIds === 0) return;
    const entry: TrimmedId = { eventId: event.eventId, seq: event.seq, fingerprint, trimmedAt: now };
    const queue = (s.trimmed ??= new Denque());
    const byId = (s.trimmedById ??= new Map());
    queue.push(entry);
    byId.set(entry.eventId, entry);
    // The time bound was applied when the append began; here only the count bound can be passed.
    if (queue.length > this.dedupe.maxIds) {
      const gone = queue.shift()!;
      if (byId.get(gone.eventId) === gone) byId.delete(gone.eventId);
    }
  }

  /** Drops trimmed ids older than the window, and the oldest past the per-session bound. */
  private forgetExpiredIds(s: LocalSession, now: number): void {
    const queue = s.trimmed;
    if (!queue) return;
    const horizon = now - this.dedupe.windowMs;
    while (queue.length > 0 && (queue.length > this.dedupe.maxIds || queue.peekFront()!.trimmedAt <= horizon)) {
      const gone = queue.shift()!;
      if (s.trimmedById!.get(gone.eventId) === gone) s.trimmedById!.delete(gone.eventId);
    }
    if (queue.length === 0) s.trimmed = s.trimmedById = undefined;
  }

  private remove(s: LocalSession): void {
    const id = s.record.sessionId;
    this.byId.delete(id);
    this.idOrder.delete(id);
    this.unlink(s);
    const left = this.sessionsPerApp.get(s.record.appName)! - 1;
    if (left === 0) {
      this.sessionsPerApp.delete(s.record.appName);
      this.eventSearch.forgetApp(s.record.appName);
    } else {
      this.sessionsPerApp.set(s.record.appName, left);
      if (this.eventSearch.indexes(s.record.appName))
        for (let i = 0; i < s.events.length; i++) this.eventSearch.dropped(s.record.appName, s.events.peekAt(i)!);
    }
    this.recent.remove(s);
    this.totalEvents -= s.events.length;
    this.listeners.notify({ sessionId: id, deleted: true, incarnation: s.record.incarnation });
  }

  /** The app's sessions with their retained events, for its event index. */
  private *sessionsOfApp(appName: string): Generator<{ session: LocalSession; userId: string; events: StoredEvent[] }> {
    for (const session of this.byId.values()) {
      if (session.record.appName === appName)
        yield { session, userId: session.record.userId, events: session.events.toArray() };
    }
  }

  /** Sessions from the least to the most recently updated; removing the current one while iterating is safe. */
  private *byRecency(): Generator<LocalSession> {
    for (let s = this.leastRecent, next; s; s = next) {
      next = s.newer;
      yield s;
    }
  }

  /**
   * Applies state changes to the session, its user and its app, all or none:
   * every cap is checked before anything changes. Bumps the version.
   */
  private applyState(record: SessionRecord, changes: ScopedChanges): void {
    const userKey = userStateKey(record.appName, record.userId);
    const session = applyChanges(record.state, changes.session);
    const user = applyChanges(this.userStates.get(userKey) ?? {}, changes.user);
    const app = applyChanges(this.appStates.get(record.appName) ?? {}, changes.app);
    checkStateCaps("state_delta", "session", session);
    checkStateCaps("state_delta", "user", user);
    checkStateCaps("state_delta", "app", app);
    record.state = session;
    if (changes.user.size > 0) this.userStates.set(userKey, user);
    if (changes.app.size > 0) this.appStates.set(record.appName, app);
    record.version++;
  }

  /** Appends `s` to the recency list as the most recently updated. */
  private link(s: LocalSession): void {
    s.older = this.mostRecent;
    s.newer = undefined;
    if (this.mostRecent) this.mostRecent.newer = s;
    else this.leastRecent = s;
    this.mostRecent = s;
  }

  private unlink(s: LocalSession): void {
    if (s.older) s.older.newer = s.newer;
    else this.leastRecent = s.newer;
    if (s.newer) s.newer.older = s.older;
    else this.mostRecent = s.older;
    s.older = s.newer = undefined;
  }

  /** Moves `s` to the most recently updated end. */
  private touch(s: LocalSession): void {
    if (this.mostRecent === s) return;
    this.unlink(s);
    this.link(s);
  }

  /**
   * The retained original of each event that retries one (checked by
   * fingerprint), undefined for each new one. A generated id (fingerprint "")
   * is new by construction: no lookup. A retry of a trimmed event still in
   * the dedupe window gets the original's seq and the event as submitted.
   */
  private findRetries(s: LocalSession, events: readonly NewEvent[]) {
    const originals: Array<StoredEvent | undefined> = [];
    let freshCount = 0;
    for (const e of events) {
      let original = e.fingerprint === "" ? undefined : s.byEventId.get(e.eventId);
      if (
        original &&
        eventFingerprint(original.eventType, original.content, original.metadata, original) !== e.fingerprint
      ) {
        throw duplicateEventId(e.eventId);
      }
      const trimmed = original || e.fingerprint === "" ? undefined : s.trimmedById?.get(e.eventId);
      if (trimmed) {
        if (trimmed.fingerprint !== e.fingerprint) throw duplicateEventId(e.eventId);
        const { eventId, eventType, content, metadata, timestamp } = e;
        original = copyStateChange<StoredEvent>(
          { sessionId: s.record.sessionId, seq: trimmed.seq, eventId, eventType, content, metadata, timestamp },
          e,
        );
      }
      if (!original) freshCount++;
      originals.push(original);
    }
    return { originals, freshCount };
  }
}
