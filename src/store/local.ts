/**
 * The in-process store: the embedded default. Each session keeps its events in
 * a ring buffer (denque) capped at maxSessionEvents, so append and eviction
 * are O(1); sessions sit in a Map by id, in a B+tree in id order (cursor
 * paging) and in a doubly linked list kept in update order (least recently
 * updated first) for eviction and cleanup.
 * Nothing survives a restart.
 */
import Denque from "denque";
import { createRequire } from "node:module";
import type SortedBTree from "sorted-btree";
import { seqConflict, sessionNotFound } from "../errors.js";
import { eventFingerprint } from "./fingerprint.js";
import { checkCursor, compareRecent, duplicateEventId, isEmptyObject, newIncarnation, sessionExists } from "./rules.js";
import type {
  AppendResult,
  CleanupFilter,
  ErasureResult,
  JsonObject,
  EventPage,
  EventQuery,
  MemoryStore,
  NewEvent,
  NewSession,
  NoticeListener,
  SessionNotice,
  SessionQuery,
  SessionRecord,
  StoreLimits,
  StoreStats,
  StoredEvent,
  StoreDurability,
} from "./types.js";

// sorted-btree is CommonJS with `exports.default`; loaders disagree on what an ESM
// default import of it yields, so take the class from require() explicitly.
const BTree: typeof SortedBTree.default = createRequire(import.meta.url)("sorted-btree").default;

interface LocalSession {
  record: SessionRecord;
  events: Denque<StoredEvent>;
  /** Retained events by event_id, for idempotent retries. */
  byEventId: Map<string, StoredEvent>;
  /** Neighbours in update order (the recency list): the previous one was updated earlier. */
  older?: LocalSession;
  newer?: LocalSession;
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

/** True when the session passes a cleanup filter. */
function matches(record: SessionRecord, filter: CleanupFilter): boolean {
  return (filter.appName === undefined || record.appName === filter.appName) && (filter.userId === undefined || record.userId === filter.userId);
}

/** The in-process MemoryStore. */
export class LocalStore implements MemoryStore {
  /** Sessions this process evicted past maxSessions. */
  sessionsEvicted = 0;
  readonly backend = "local";
  readonly capabilities = { persistent: false, shared: false, retains: true };

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
  private readonly listeners = new Map<string, Set<NoticeListener>>();
  private totalEvents = 0;

  constructor(private readonly limits: StoreLimits) {}

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

  async getSession(sessionId: string): Promise<SessionRecord | undefined> {
    const s = this.byId.get(sessionId);
    return s && { ...s.record };
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

  async deleteSession(sessionId: string): Promise<boolean> {
    const s = this.byId.get(sessionId);
    if (!s) return false;
    this.remove(s);
    return true;
  }

  async appendEvents(sessionId: string, events: readonly NewEvent[], expectedSeq?: number): Promise<AppendResult> {
    const s = this.byId.get(sessionId);
    if (!s) throw sessionNotFound(sessionId);
    const { originals, freshCount } = this.findRetries(s, events);
    if (freshCount === 0) return { events: originals as StoredEvent[], replayed: true };
    if (expectedSeq !== undefined && expectedSeq !== s.record.headSeq) {
      throw seqConflict(expectedSeq, s.record.headSeq);
    }
    const stored: StoredEvent[] = [];
    const record = s.record;
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
      s.events.push(event);
      s.byEventId.set(event.eventId, event);
      stored.push(event);
      this.totalEvents++;
    }
    while (s.events.length > this.limits.maxSessionEvents) {
      const evicted = s.events.shift()!;
      s.byEventId.delete(evicted.eventId);
      this.totalEvents--;
    }
    record.firstSeq = s.events.length > 0 ? s.events.peekAt(0)!.seq : record.headSeq + 1;
    record.updatedAt = Date.now();
    this.touch(s);
    this.notify({ sessionId, headSeq: record.headSeq, incarnation: record.incarnation });
    return { events: stored, replayed: false };
  }

  async readEvents(sessionId: string, query: EventQuery): Promise<EventPage> {
    const s = this.byId.get(sessionId);
    if (!s) throw sessionNotFound(sessionId);
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

  async readTail(sessionId: string, limit: number, eventTypes?: readonly string[]): Promise<EventPage> {
    const s = this.byId.get(sessionId);
    if (!s) throw sessionNotFound(sessionId);
    const types = eventTypes && eventTypes.length > 0 ? new Set(eventTypes) : undefined;
    const events: StoredEvent[] = [];
    for (let i = s.events.length - 1; i >= 0 && events.length < limit; i--) {
      const e = s.events.peekAt(i)!;
      if (!types || types.has(e.eventType)) events.push(e);
    }
    events.reverse();
    return { events, headSeq: s.record.headSeq, firstSeq: s.record.firstSeq, incarnation: s.record.incarnation };
  }

  async listRecentEvents(limit: number, sessionId?: string): Promise<StoredEvent[]> {
    if (sessionId !== undefined) {
      const s = this.byId.get(sessionId);
      if (!s) throw sessionNotFound(sessionId);
      return (await this.readTail(sessionId, limit)).events;
    }
    // Each session's newest `limit` events are the only candidates.
    const candidates: StoredEvent[] = [];
    for (const s of this.byRecency()) {
      for (let i = Math.max(0, s.events.length - limit); i < s.events.length; i++) candidates.push(s.events.peekAt(i)!);
    }
    candidates.sort(compareRecent);
    return candidates.slice(-limit);
  }

  async stats(): Promise<StoreStats> {
    return { totalSessions: this.byId.size, totalEvents: this.totalEvents };
  }

  async cleanup(cutoff: number, filter: CleanupFilter = {}): Promise<number> {
    const stale: LocalSession[] = [];
    for (const s of this.byRecency()) if (s.record.updatedAt < cutoff && matches(s.record, filter)) stale.push(s);
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
    return erased;
  }

  subscribe(sessionId: string, listener: NoticeListener): () => void {
    let set = this.listeners.get(sessionId);
    if (!set) this.listeners.set(sessionId, (set = new Set()));
    set.add(listener);
    return () => {
      set!.delete(listener);
      if (set!.size === 0 && this.listeners.get(sessionId) === set) this.listeners.delete(sessionId);
    };
  }

  async ping(): Promise<void> {}

  async describeDurability(): Promise<StoreDurability> {
    return { summary: "in process memory only: an acknowledged append is lost when the process exits", settings: {} };
  }

  async close(): Promise<void> {
    this.listeners.clear();
  }

  private insert(input: NewSession): LocalSession {
    const s: LocalSession = {
      record: {
        sessionId: input.sessionId,
        appName: input.appName,
        userId: input.userId,
        metadata: input.metadata,
        createdAt: input.now,
        updatedAt: input.now,
        headSeq: 0,
        firstSeq: 1,
        incarnation: newIncarnation(),
      },
      events: new Denque<StoredEvent>(),
      byEventId: new Map(),
    };
    this.byId.set(input.sessionId, s);
    this.idOrder.set(input.sessionId, s);
    this.link(s);
    this.evictSessionsOverLimit();
    return s;
  }

  /** Past maxSessions, evict the least recently updated 10% (at least one). */
  private evictSessionsOverLimit(): void {
    if (this.byId.size <= this.limits.maxSessions) return;
    let toEvict = Math.max(1, Math.ceil(this.limits.maxSessions * 0.1));
    for (const s of this.byRecency()) {
      if (toEvict-- <= 0) break;
      this.remove(s);
      this.sessionsEvicted++;
    }
  }

  private remove(s: LocalSession): void {
    const id = s.record.sessionId;
    this.byId.delete(id);
    this.idOrder.delete(id);
    this.unlink(s);
    this.totalEvents -= s.events.length;
    this.notify({ sessionId: id, deleted: true, incarnation: s.record.incarnation });
  }

  /** Sessions from the least to the most recently updated; removing the current one while iterating is safe. */
  private *byRecency(): Generator<LocalSession> {
    for (let s = this.leastRecent, next; s; s = next) {
      next = s.newer;
      yield s;
    }
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
   * is new by construction: no lookup.
   */
  private findRetries(s: LocalSession, events: readonly NewEvent[]) {
    const originals: Array<StoredEvent | undefined> = [];
    let freshCount = 0;
    for (const e of events) {
      const original = e.fingerprint === "" ? undefined : s.byEventId.get(e.eventId);
      if (original && eventFingerprint(original.eventType, original.content, original.metadata) !== e.fingerprint) {
        throw duplicateEventId(e.eventId);
      }
      if (!original) freshCount++;
      originals.push(original);
    }
    return { originals, freshCount };
  }

  private notify(notice: SessionNotice): void {
    const set = this.listeners.get(notice.sessionId);
    if (!set) return;
    for (const listener of [...set]) listener(notice);
  }
}
