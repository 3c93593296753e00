/**
 * The Redis store: several replicas share one Redis (MEMORY_TYPE=redis).
 *
 * Every write is one atomic Lua script (src/store/redis/scripts/<name>-<keys>.lua,
 * bullmq style) that receives all its keys in KEYS, so a session is never
 * read-modified-written as a whole. This file is the driver: what each
 * MemoryStore operation does. Its rooms, under src/store/redis/:
 *
 *   keys.ts        the key layout (the data format every replica shares)
 *   codec.ts       stored values: frames, encoded events, session hashes, the decode cache
 *   scripts.ts     the Lua scripts, typed: args builder + reply decoder each; the loader
 *   scripts/       the scripts, one per file; scripts/includes/ the Lua they share
 *   connection.ts  the command and notice connections: open, errors, close
 *   notices.ts     pub/sub notices to this replica's listeners
 *
 * Long-term memories (src/store/memories/redis.ts) live under
 * <prefix>:mem:<hex app>:*, with their own change channel <prefix>:memories.
 */
import { randomUUID } from "node:crypto";
import type { Redis } from "ioredis";
import { LRUCache } from "lru-cache";
import { seqConflict, sessionNotFound, versionConflict } from "../errors.js";
import { stateTooLarge } from "./state.js";
import { RedisMemories } from "./memories/redis.js";
import { NoticeListeners } from "./notices.js";
import { appSessionCap, checkCursor, duplicateEventId, evictionCount, newIncarnation, newSessionRecord, recentScopes, resumeEach, sessionExists, type RecentScope } from "./rules.js";
import type { AppendResult, CleanupScope, ErasureResult, EventPage, EventQuery, MemoryStore, NewEvent, NewSession, NoticeListener, RecentEventsFilter, ResumedErasures, SessionQuery, SessionRecord, SessionUpdate, SharedState, StoreDurability, StoreLimits, StoreStats, StoredEvent } from "./types.js";
import { decodeEvent, decodeSession, DecodedEvents, stateOf } from "./redis/codec.js";
import { DEFAULT_COMMAND_TIMEOUT_MS, RedisConnection, storeError, type RedisClient } from "./redis/connection.js";
import { erasureField, erasureTenancy, recentMemberRef, RedisKeys, type Tenancy } from "./redis/keys.js";
import { RedisNotices } from "./redis/notices.js";
import {
  appendScript,
  createScript,
  deleteScript,
  erasedScript,
  readScript,
  RedisScripts,
  updateScript,
  type AppendOutcome,
  type DeleteConditions,
  type DeleteOutcome,
  type UpdateOutcome,
  type WaitForReplicas,
} from "./redis/scripts.js";

export { durabilitySummary } from "./redis/connection.js";

/** How to open a RedisStore. */
export interface RedisStoreOptions {
  /** redis:// or rediss:// URL. */
  url: string;
  /** Namespace of every key and the notice channel (MEMORY_KEY_PREFIX). */
  keyPrefix: string;
  limits: StoreLimits;
  /** A command not answered within this many ms fails UNAVAILABLE (default 4000). */
  commandTimeoutMs?: number;
  /** MEMORY_REDIS_WAIT_REPLICAS: replicas that must have each write (WAIT); 0 or unset: none. */
  waitReplicas?: number;
}

/** Sessions whose tenancy (app, user) this replica remembers, to name their recent indexes without a read. */
const TENANCY_CACHE = 10_000;
/** Sessions looked at per cleanup batch. */
const CLEANUP_BATCH = 100;
/** Session ids read from a tenancy index at a time (erasure, filtered cleanup); their removals run concurrently. */
const INDEX_BATCH = 100;
/** Tries of a script that answers MOVED (the session id was re-created for another tenancy meanwhile). */
const MOVED_TRIES = 3;

/** The Redis-backed MemoryStore; open it with RedisStore.open(). */
export class RedisStore implements MemoryStore {
  /** Sessions this process evicted past maxSessions. */
  sessionsEvicted = 0;
  /** Events this process trimmed past maxSessionEvents. */
  eventsTrimmed = 0;
  readonly backend = "redis";
  readonly capabilities = { persistent: true, shared: true, retains: true };

  /** Long-term memories (src/store/memories/redis.ts), on the command connection and key prefix. */
  readonly memories: RedisMemories;
  private readonly listeners = new NoticeListeners();
  private readonly keys: RedisKeys;
  private readonly scripts: RedisScripts;
  private readonly notices: RedisNotices;
  /**
   * Each session's (app, user), which names its recent indexes: an append
   * needs it, and it never changes while the session lives. The append script
   * checks it ({"MOVED"} when the id now belongs to a session of another
   * tenancy), so a stale entry costs a re-read, never a misfiled event.
   */
  private readonly tenancies = new LRUCache<string, Tenancy>({ max: TENANCY_CACHE });
  /** Events of recent reads and notices (codec.ts says why). */
  private readonly decoded = new DecodedEvents();

  private constructor(
    private readonly connection: RedisConnection,
    keyPrefix: string,
    private readonly limits: StoreLimits,
    wait: WaitForReplicas,
  ) {
    this.keys = new RedisKeys(keyPrefix);
    this.scripts = new RedisScripts(connection.commands, { keys: this.keys, limits }, wait);
    this.notices = new RedisNotices(connection, this.keys, this.listeners, this.decoded);
    // RedisMemories still types its connection as one node's (cluster-memories changes that).
    this.memories = new RedisMemories(connection.commands as Redis, keyPrefix, (run) => this.call(run));
  }

  /** Connects both connections (commands, notices) and subscribes; UNAVAILABLE when Redis cannot be reached. */
  static async open(options: RedisStoreOptions): Promise<RedisStore> {
    const connection = new RedisConnection(options);
    // WAIT gets half the command timeout: a shortfall then answers with its count before the command itself times out.
    const wait = { replicas: options.waitReplicas ?? 0, timeoutMs: Math.max(1, Math.floor((options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS) / 2)) };
    const store = new RedisStore(connection, options.keyPrefix, options.limits, wait);
    await connection.connect([store.keys.channel], store.notices);
    try {
      await store.memories.listen();
    } catch (err) {
      await connection.close();
      throw storeError(err);
    }
    return store;
  }

  async createSession(input: NewSession): Promise<SessionRecord> {
    const incarnation = newIncarnation();
    const created = await this.call(() => this.scripts.run(createScript, { session: input, incarnation, mode: "create" }));
    if (created.outcome !== "CREATED") throw sessionExists(input.sessionId);
    this.tenancies.set(input.sessionId, { appName: input.appName, userId: input.userId });
    await this.evictAfterCreate(created.totalSessions, input.appName);
    return newSessionRecord(input, incarnation);
  }

  async getOrCreateSession(input: NewSession): Promise<{ session: SessionRecord; created: boolean }> {
    const incarnation = newIncarnation();
    const found = await this.call(() => this.scripts.run(createScript, { session: input, incarnation, mode: "get" }));
    if (found.outcome === "FOUND") {
      const session = decodeSession(input.sessionId, found.fields)!;
      this.tenancies.set(session.sessionId, { appName: session.appName, userId: session.userId });
      return { session, created: false };
    }
    this.tenancies.set(input.sessionId, { appName: input.appName, userId: input.userId });
    if (found.outcome === "CREATED") await this.evictAfterCreate(found.totalSessions, input.appName);
    return { session: newSessionRecord(input, incarnation), created: true };
  }

  async getSession(sessionId: string): Promise<SessionRecord | undefined> {
    const fields = await this.call((redis) => redis.hgetall(this.keys.session(sessionId)));
    return decodeSession(sessionId, fields);
  }

  async listSessions(query: SessionQuery): Promise<SessionRecord[]> {
    const index = this.keys.index(query);
    const out: SessionRecord[] = [];
    let after = query.afterSessionId;
    // A session deleted between the index read and the fetch is skipped; read on to fill the page.
    for (let rounds = 0; rounds < 10 && out.length < query.limit; rounds++) {
      const want = query.limit - out.length;
      const ids = await this.call((redis) => redis.zrangebylex(index, after === undefined ? "-" : `(${after}`, "+", "LIMIT", 0, want));
      if (ids.length === 0) break;
      const pipeline = this.connection.commands.pipeline();
      for (const id of ids) pipeline.hgetall(this.keys.session(id));
      const results = await this.call(() => pipeline.exec());
      for (const [i, id] of ids.entries()) {
        const [err, fields] = results![i];
        if (err) throw storeError(err);
        const record = decodeSession(id, fields as Record<string, string>);
        if (record) out.push(record);
      }
      if (ids.length < want) break;
      after = ids[ids.length - 1];
    }
    return out;
  }

  async updateSession(sessionId: string, update: SessionUpdate): Promise<SessionRecord> {
    let updated: UpdateOutcome = { outcome: "NOT_FOUND" };
    for (let attempt = 0; attempt < MOVED_TRIES; attempt++) {
      const tenancy = await this.tenancyOf(sessionId, attempt > 0);
      if (!tenancy) break;
      updated = await this.call(() => this.scripts.run(updateScript, { sessionId, tenancy, update }));
      if (updated.outcome !== "MOVED") break;
    }
    switch (updated.outcome) {
      case "MOVED":
      case "NOT_FOUND":
        this.tenancies.delete(sessionId);
        throw sessionNotFound(sessionId);
      case "CONFLICT":
        throw versionConflict(update.expectedVersion!, updated.version);
      case "TOO_LARGE":
        throw stateTooLarge("state_delta", updated.scope, updated.entries, updated.bytes);
    }
    return decodeSession(sessionId, updated.fields)!;
  }

  async sharedState(appName: string, userId: string): Promise<SharedState> {
    // One MULTI: both states as of one moment.
    const results = await this.call((redis) => redis.multi().hgetall(this.keys.appState(appName)).hgetall(this.keys.userState({ appName, userId })).exec());
    const [app, user] = results!.map(([err, fields]) => {
      if (err) throw storeError(err);
      return stateOf(fields as Record<string, string>);
    });
    return { app, user };
  }

  async deleteSession(sessionId: string): Promise<boolean> {
    return (await this.deleteOne(sessionId, {})).outcome === "DELETED";
  }

  async appendEvents(sessionId: string, events: readonly NewEvent[], expectedSeq?: number): Promise<AppendResult> {
    const now = Date.now();
    let appended: AppendOutcome = { outcome: "NOT_FOUND" };
    // A cached tenancy is wrong only when the id was deleted and taken by another tenancy: re-read it then.
    for (let attempt = 0; attempt < MOVED_TRIES; attempt++) {
      const tenancy = await this.tenancyOf(sessionId, attempt > 0);
      if (!tenancy) break;
      appended = await this.call(() => this.scripts.run(appendScript, { sessionId, tenancy, events, expectedSeq, now }));
      if (appended.outcome !== "MOVED") break;
    }
    switch (appended.outcome) {
      case "MOVED":
      case "NOT_FOUND":
        this.tenancies.delete(sessionId);
        throw sessionNotFound(sessionId);
      case "DUPLICATE":
        throw duplicateEventId(appended.eventId);
      case "CONFLICT":
        throw seqConflict(expectedSeq!, appended.headSeq);
      case "TOO_LARGE":
        throw stateTooLarge("state_delta", appended.scope, appended.entries, appended.bytes);
    }
    this.eventsTrimmed += appended.trimmed;
    const stored: StoredEvent[] = events.map((e, i) => {
      const { seq, original } = appended.events[i];
      if (original) return decodeEvent(sessionId, seq, original);
      // A new event, or the retry of one trimmed inside the dedupe window: as submitted.
      const event: StoredEvent = { sessionId, seq, eventId: e.eventId, eventType: e.eventType, content: e.content, metadata: e.metadata, timestamp: e.timestamp };
      if (e.stateDelta) event.stateDelta = e.stateDelta;
      return event;
    });
    return { events: stored, replayed: appended.replayed };
  }

  async readEvents(sessionId: string, query: EventQuery): Promise<EventPage> {
    const types = query.eventTypes ?? [];
    const events: StoredEvent[] = [];
    let cursor = query.afterSeq;
    for (;;) {
      const page = await this.readRun(sessionId, "asc", cursor, query.limit - events.length, types);
      // Continuation reads re-check the cursor too: a trim racing a filtered
      // read surfaces as OUT_OF_RANGE, never as a silent gap.
      checkCursor(cursor ?? page.firstSeq - 1, page.firstSeq, page.headSeq);
      events.push(...page.events);
      if (events.length >= query.limit || page.lastSeq >= page.headSeq) {
        return { events, headSeq: page.headSeq, firstSeq: page.firstSeq, incarnation: page.incarnation };
      }
      cursor = page.lastSeq;
    }
  }

  async readTail(sessionId: string, limit: number, eventTypes?: readonly string[]): Promise<EventPage> {
    const types = eventTypes ?? [];
    const events: StoredEvent[] = [];
    let before: number | undefined;
    let bounds = { headSeq: 0, firstSeq: 1, incarnation: "" };
    for (;;) {
      const page = await this.readRun(sessionId, "desc", before, limit - events.length, types);
      if (before === undefined) bounds = { headSeq: page.headSeq, firstSeq: page.firstSeq, incarnation: page.incarnation };
      events.push(...page.events);
      // Older events trimmed meanwhile were evicted anyway: the tail just ends there.
      if (events.length >= limit || page.lastSeq <= page.firstSeq || (before !== undefined && page.lastSeq >= before)) break;
      before = page.lastSeq;
    }
    events.reverse();
    return { events, ...bounds };
  }

  async listRecentEvents(limit: number, filter: RecentEventsFilter = {}): Promise<StoredEvent[]> {
    if (filter.sessionId !== undefined) return (await this.readTail(filter.sessionId, limit)).events;
    const scopes = recentScopes(filter);
    if (scopes.length === 0) return [];
    // The newest `limit` of each index read, merged by ingest position.
    const reads = this.connection.commands.pipeline();
    for (const scope of scopes) reads.zrevrange(this.keys.recent(scope), 0, limit - 1, "WITHSCORES");
    const pages = await this.call(() => reads.exec());
    const entries: Array<{ member: string; ingest: number }> = [];
    for (const [err, page] of pages!) {
      if (err) throw storeError(err);
      const flat = page as string[];
      for (let i = 0; i < flat.length; i += 2) entries.push({ member: flat[i], ingest: Number(flat[i + 1]) });
    }
    entries.sort((a, b) => b.ingest - a.ingest);
    const refs = entries.slice(0, limit).map(({ member }) => recentMemberRef(member));
    if (refs.length === 0) return [];
    const pipeline = this.connection.commands.pipeline();
    for (const ref of refs) pipeline.hget(this.keys.events(ref.sessionId), String(ref.seq));
    // Entries are removed with their events; checking each session's tenancy
    // anyway means an entry left behind (a replica of an older release) can
    // never show a later session of the same id to the wrong tenant.
    const scoped = filter.appNames !== undefined || filter.userId !== undefined;
    const owners = scoped ? [...new Set(refs.map((ref) => ref.sessionId))] : [];
    for (const id of owners) pipeline.hmget(this.keys.session(id), "app", "user");
    const results = (await this.call(() => pipeline.exec()))!;
    const allowed = new Set<string>();
    for (const [i, id] of owners.entries()) {
      const [err, fields] = results[refs.length + i];
      if (err) throw storeError(err);
      const [appName, userId] = fields as Array<string | null>;
      if (appName !== null && userId !== null && scopes.some((scope) => inRecentScope(scope, appName, userId))) allowed.add(id);
    }
    const out: StoredEvent[] = [];
    for (const [i, ref] of refs.entries()) {
      const [err, value] = results[i];
      if (err) throw storeError(err);
      // Gone between the two reads (trimmed or deleted): skip it.
      if (typeof value === "string" && (!scoped || allowed.has(ref.sessionId))) out.push(decodeEvent(ref.sessionId, ref.seq, value));
    }
    return out.reverse();
  }

  async stats(): Promise<StoreStats> {
    const [sessions, events] = await this.call((redis) => redis.hmget(this.keys.stats, "sessions", "events"));
    return { totalSessions: Number(sessions ?? 0), totalEvents: Number(events ?? 0) };
  }

  async cleanup(cutoff: number, scope: CleanupScope = {}): Promise<number> {
    let removed = 0;
    if (scope.userId !== undefined) {
      // Only one user's sessions: walk their index instead of every stale session of every tenant.
      await this.forEachIndexed(this.keys.index(scope), async (id) => {
        if ((await this.deleteOne(id, { updatedBelow: cutoff, scope })).outcome === "DELETED") removed++;
      });
      return removed;
    }
    // Sessions left in place (out of scope, or updated meanwhile) are stepped over, so every batch makes progress.
    let skipped = 0;
    for (;;) {
      const ids = await this.call((redis) => redis.zrangebyscore(this.keys.updated, "-inf", `(${cutoff}`, "LIMIT", skipped, CLEANUP_BATCH));
      for (const id of ids) {
        if ((await this.deleteOne(id, { updatedBelow: cutoff, scope })).outcome === "DELETED") removed++;
        else skipped++;
      }
      if (ids.length < CLEANUP_BATCH) return removed;
    }
  }

  async deleteUserData(appName: string, userId: string): Promise<ErasureResult> {
    // Recorded first, cleared last: a replica finds an erasure this one could not finish (resumeErasures).
    const tenancy = { appName, userId };
    const token = randomUUID();
    await this.call((redis) => redis.hset(this.keys.erasures, erasureField(tenancy), token));
    const erased: ErasureResult = { sessions: 0, events: 0, memories: 0 };
    // Each session goes through the same script as DeleteSession: counters, indexes and notices stay right.
    await this.forEachIndexed(this.keys.index(tenancy), async (id) => {
      const { outcome, events } = await this.deleteOne(id, { scope: tenancy });
      if (outcome !== "DELETED") return;
      erased.sessions++;
      erased.events += events;
    });
    erased.memories = await this.memories.eraseUser(appName, userId);
    await this.call((redis) => redis.del(this.keys.userState(tenancy)));
    await this.call(() => this.scripts.run(erasedScript, { tenancy, token }));
    return erased;
  }

  async resumeErasures(): Promise<ResumedErasures> {
    const fields = await this.call((redis) => redis.hkeys(this.keys.erasures));
    return resumeEach(fields.map(erasureTenancy), (appName, userId) => this.deleteUserData(appName, userId));
  }

  subscribe(sessionId: string, listener: NoticeListener): () => void {
    return this.listeners.subscribe(sessionId, listener);
  }

  async ping(): Promise<void> {
    await this.connection.ping();
  }

  async describeDurability(): Promise<StoreDurability> {
    return this.connection.describeDurability();
  }

  async close(): Promise<void> {
    this.listeners.clear();
    this.memories.close();
    await this.connection.close();
  }

  /**
   * Past the app's session cap, evicts the app's least recently updated 10%
   * (at least one); past the global cap, the store's, as LocalStore does.
   * 0: no cap.
   */
  private async evictAfterCreate(totalSessions: number, appName: string): Promise<void> {
    const appCap = appSessionCap(this.limits, appName);
    if (appCap > 0) await this.evictAppOverLimit(appName, appCap);
    const { maxSessions } = this.limits;
    if (maxSessions === 0 || totalSessions <= maxSessions) return;
    const count = evictionCount(maxSessions);
    const oldest = await this.call((redis) => redis.zrange(this.keys.updated, 0, count - 1, "WITHSCORES"));
    for (let i = 0; i < oldest.length; i += 2) {
      // Re-checked in the script: a session updated since is kept, and
      // concurrent evictions (other replicas) stop at the same floor.
      const { outcome } = await this.deleteOne(oldest[i], { updatedBelow: Number(oldest[i + 1]) + 1, keepAtLeast: maxSessions + 1 - count });
      if (outcome === "DELETED") this.sessionsEvicted++;
    }
  }

  /**
   * Evicts the oldest 10% of one app's sessions once it holds more than its
   * cap. Its sessions are read from the app's index and ordered by their
   * update times (ZMSCORE): O(sessions of the app), once per tenth of the cap
   * of creations. Replicas creating at once may each evict a tenth.
   */
  private async evictAppOverLimit(appName: string, cap: number): Promise<void> {
    const appIndex = this.keys.index({ appName });
    if ((await this.call((redis) => redis.zcard(appIndex))) <= cap) return;
    const ids = await this.call((redis) => redis.zrange(appIndex, 0, -1));
    const scores = await this.call((redis) => redis.zmscore(this.keys.updated, ...ids));
    const oldest = ids
      .map((id, i) => ({ id, updated: scores[i] === null ? Number.NaN : Number(scores[i]) }))
      .filter((s) => !Number.isNaN(s.updated))
      .sort((a, b) => a.updated - b.updated)
      .slice(0, evictionCount(cap));
    for (const { id, updated } of oldest) {
      if ((await this.deleteOne(id, { updatedBelow: updated + 1 })).outcome === "DELETED") this.sessionsEvicted++;
    }
  }

  /**
   * Runs delete-14.lua for one session, re-reading its tenancy when it moved.
   * With `scope`, only a session of that app and/or user (and of no excepted
   * app) is removed: one out of scope, or re-created meanwhile under the same
   * id for someone else, is "KEPT". `events`: what a "DELETED" session held.
   */
  private async deleteOne(sessionId: string, cond: DeleteConditions): Promise<DeleteOutcome> {
    const { scope, updatedBelow, keepAtLeast } = cond;
    for (let attempt = 0; attempt < MOVED_TRIES; attempt++) {
      const [appName, userId, updated] = await this.call((redis) => redis.hmget(this.keys.session(sessionId), "app", "user", "updated"));
      if (appName === null || userId === null) return { outcome: "GONE", events: 0 };
      // The script checks the tenancy it is given, so a session moved to another app or user meanwhile is MOVED, never removed out of scope.
      if (scope?.appName !== undefined && appName !== scope.appName) return { outcome: "KEPT", events: 0 };
      if (scope?.userId !== undefined && userId !== scope.userId) return { outcome: "KEPT", events: 0 };
      if (scope?.exceptAppNames?.includes(appName)) return { outcome: "KEPT", events: 0 };
      // Not stale now: no script call (the script re-checks anyway, atomically).
      if (updatedBelow !== undefined && Number(updated) >= updatedBelow) return { outcome: "KEPT", events: 0 };
      const deleted = await this.call(() => this.scripts.run(deleteScript, { sessionId, tenancy: { appName, userId }, updatedBelow, keepAtLeast }));
      if (deleted.outcome === "DELETED" || deleted.outcome === "GONE") this.tenancies.delete(sessionId);
      if (deleted.outcome !== "MOVED") return deleted;
    }
    return { outcome: "GONE", events: 0 };
  }

  /**
   * Runs `remove` on every session id of a tenancy index, a page at a time
   * (the page's sessions concurrently), in id order from the start: ids
   * already passed are never revisited, so a stale entry cannot loop it.
   */
  private async forEachIndexed(index: string, remove: (sessionId: string) => Promise<void>): Promise<void> {
    let after: string | undefined;
    for (;;) {
      const ids = await this.call((redis) => redis.zrangebylex(index, after === undefined ? "-" : `(${after}`, "+", "LIMIT", 0, INDEX_BATCH));
      await Promise.all(ids.map(remove));
      if (ids.length < INDEX_BATCH) return;
      after = ids[ids.length - 1];
    }
  }

  /** The session's (app, user), from the cache unless `reread`; undefined when there is no such session. */
  private async tenancyOf(sessionId: string, reread: boolean): Promise<Tenancy | undefined> {
    const cached = reread ? undefined : this.tenancies.get(sessionId);
    if (cached) return cached;
    const [appName, userId] = await this.call((redis) => redis.hmget(this.keys.session(sessionId), "app", "user"));
    if (appName === null || userId === null) {
      this.tenancies.delete(sessionId);
      return undefined;
    }
    const tenancy = { appName, userId };
    this.tenancies.set(sessionId, tenancy);
    return tenancy;
  }

  /** One read-2.lua call: a run of seqs with the session's bounds. */
  private async readRun(
    sessionId: string,
    direction: "asc" | "desc",
    cursor: number | undefined,
    limit: number,
    types: readonly string[],
  ): Promise<EventPage & { lastSeq: number }> {
    const run = await this.call(() => this.scripts.run(readScript, { sessionId, direction, cursor, limit, types }));
    if (!run) throw sessionNotFound(sessionId);
    const events = run.events.map(({ seq, encoded }) => this.decoded.decode(sessionId, seq, encoded));
    return { headSeq: run.headSeq, firstSeq: run.firstSeq, lastSeq: run.lastSeq, incarnation: run.incarnation, events };
  }

  /** Runs one call on the command connection, failures as MemoryErrors. */
  private call<T>(run: (redis: RedisClient) => Promise<T>): Promise<T> {
    return this.connection.call(run);
  }
}

/** True when a session of (appName, userId) belongs in the recent scope. */
function inRecentScope(scope: RecentScope, appName: string, userId: string): boolean {
  return (scope.appName === undefined || scope.appName === appName) && (scope.userId === undefined || scope.userId === userId);
}
