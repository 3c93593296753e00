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
 *   connection.ts  the command and notice connections: open (one node or a cluster), errors, close
 *   notices.ts     pub/sub notices to this replica's listeners
 *
 * On a Redis Cluster (keys.ts: sessions in buckets, one slot each) every
 * script still touches one slot; listings, stats, cleanup, eviction and
 * erasure read every bucket and merge. Session state's app: and user: keys
 * live in the app's slot, so a write that changes them is two steps there:
 * the write script checks nothing about them but files them in its bucket's
 * outbox (after statecheck-2.lua checked the caps), then shared-3.lua applies
 * the entry in the app's slot, once (an applied id is remembered), and the
 * entry is removed. An entry left by a replica that died between the two
 * steps is applied by any replica's outbox sweep (OUTBOX_SWEEP_MS). The
 * guarantee is weaker than one node's single atomic script: the shared
 * states change just after the events are stored, not with them (a
 * sharedState read in between sees the old value); a re-driven entry may
 * land after a later change of the same key; two writes racing under a cap
 * may together exceed it. Events, seqs, idempotency and session state keep
 * the one-node guarantees.
 *
 * Long-term memories (src/store/memories/redis.ts) live under
 * <prefix>:mem:<hex app>:*, with their own change channel <prefix>:memories;
 * on a cluster under <prefix>:mem:{<hex app>}:* (one slot per app), with a
 * sharded channel per app, <prefix>:memories:{<hex app>}.
 */
import { randomUUID } from "node:crypto";
import { LRUCache } from "lru-cache";
import { seqConflict, sessionNotFound, versionConflict } from "../errors.js";
import { stateTooLarge } from "./state.js";
import { RedisMemories } from "./memories/redis.js";
import { NoticeListeners } from "./notices.js";
import {
  appSessionCap,
  checkCursor,
  checkIncarnation,
  duplicateEventId,
  evictionCount,
  isExpectedIncarnation,
  newIncarnation,
  newSessionRecord,
  recentScopes,
  resumeEach,
  sessionExists,
  type RecentScope,
} from "./rules.js";
import type {
  AppendResult,
  CleanupScope,
  ErasureResult,
  EventPage,
  EventQuery,
  MemoryStore,
  NewEvent,
  NewSession,
  NoticeListener,
  RecentEventsFilter,
  ResumedErasures,
  SessionQuery,
  SessionRecord,
  SessionUpdate,
  SharedState,
  StoreCall,
  StoreDurability,
  StoreLimits,
  StoreStats,
  StoredEvent,
} from "./types.js";
import { MemoryError } from "../errors.js";
import { decodeEvent, decodeSession, DecodedEvents, encodeStateChanges, stateOf } from "./redis/codec.js";
import { DEFAULT_COMMAND_TIMEOUT_MS, RedisConnection, storeError, type RedisClient } from "./redis/connection.js";
import {
  CLUSTER_BUCKETS,
  erasureField,
  erasureTenancy,
  recentMemberRef,
  RedisKeys,
  type Bucket,
  type Tenancy,
} from "./redis/keys.js";
import { RedisNotices } from "./redis/notices.js";
import { checkScripts } from "./redis/script-check.js";
import {
  appendScript,
  applySharedScript,
  createScript,
  deleteScript,
  erasedScript,
  readScript,
  RedisScripts,
  stateCheckScript,
  updateScript,
  type AppendOutcome,
  type DeleteConditions,
  type DeleteOutcome,
  type OutboxEntry,
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
/** Cluster: how often each replica applies outbox entries left behind, and how old an entry must be to count as left. */
const OUTBOX_SWEEP_MS = 10_000;

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
  /** Cluster: the last ingest position this replica handed out (nextIngestBase). */
  private lastIngest = 0;
  /** Cluster: the outbox sweep's timer. */
  private outboxSweep?: NodeJS.Timeout;

  private constructor(
    private readonly connection: RedisConnection,
    keyPrefix: string,
    private readonly limits: StoreLimits,
    wait: WaitForReplicas,
    buckets: number,
  ) {
    this.keys = new RedisKeys(keyPrefix, buckets);
    this.scripts = new RedisScripts(connection.commands, { keys: this.keys, limits }, wait);
    this.notices = new RedisNotices(connection, this.keys, this.listeners, this.decoded);
    this.memories = new RedisMemories(connection.commands, keyPrefix, (run) => this.call(run), wait);
  }

  /**
   * Connects both connections (commands, notices), loads every script
   * (StoreScriptRefusedError when Redis refuses one) and subscribes;
   * UNAVAILABLE when Redis cannot be reached.
   */
  static async open(options: RedisStoreOptions): Promise<RedisStore> {
    const connection = new RedisConnection(options);
    // WAIT gets half the command timeout: a shortfall then answers with its count before the command itself times out.
    const wait = {
      replicas: options.waitReplicas ?? 0,
      timeoutMs: Math.max(1, Math.floor((options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS) / 2)),
    };
    await connection.connect();
    try {
      await checkScripts(connection.commands);
    } catch (err) {
      await connection.close();
      throw err;
    }
    let store: RedisStore;
    try {
      const buckets = connection.cluster ? await recordedBuckets(connection, options.keyPrefix) : 0;
      store = new RedisStore(connection, options.keyPrefix, options.limits, wait, buckets);
    } catch (err) {
      await connection.close();
      throw storeError(err);
    }
    await connection.subscribe(store.keys.channels(), store.notices);
    try {
      await store.memories.listen();
    } catch (err) {
      await connection.close();
      throw storeError(err);
    }
    if (store.keys.clustered) store.startOutboxSweep();
    return store;
  }

  async createSession(input: NewSession): Promise<SessionRecord> {
    const incarnation = newIncarnation();
    const created = await this.call(() =>
      this.scripts.run(createScript, { session: input, incarnation, mode: "create" }),
    );
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

  async getSession(sessionId: string, call?: StoreCall): Promise<SessionRecord | undefined> {
    const fields = await this.call((redis) => redis.hgetall(this.keys.session(sessionId)));
    const session = decodeSession(sessionId, fields);
    return session && isExpectedIncarnation(session.incarnation, call) ? session : undefined;
  }

  async listSessions(query: SessionQuery): Promise<SessionRecord[]> {
    const out: SessionRecord[] = [];
    let after = query.afterSessionId;
    // A session deleted between the index read and the fetch is skipped; read on to fill the page.
    for (let rounds = 0; rounds < 10 && out.length < query.limit; rounds++) {
      const want = query.limit - out.length;
      // Each bucket's first `want` after the cursor, merged: the first `want` of all (keys.ts: ids in byte order).
      const perBucket = await Promise.all(
        this.keys.buckets.map((bucket) =>
          this.call((redis) =>
            redis.zrangebylex(
              this.keys.index(query, bucket),
              after === undefined ? "-" : `(${after}`,
              "+",
              "LIMIT",
              0,
              want,
            ),
          ),
        ),
      );
      const ids = perBucket.flat().sort(byteOrder).slice(0, want);
      if (ids.length === 0) break;
      const sessions = await Promise.all(ids.map((id) => this.call((redis) => redis.hgetall(this.keys.session(id)))));
      for (const [i, id] of ids.entries()) {
        const record = decodeSession(id, sessions[i]);
        if (record) out.push(record);
      }
      if (ids.length < want) break;
      after = ids[ids.length - 1];
    }
    return out;
  }

  async updateSession(sessionId: string, update: SessionUpdate, call?: StoreCall): Promise<SessionRecord> {
    let updated: UpdateOutcome = { outcome: "NOT_FOUND" };
    for (let attempt = 0; attempt < MOVED_TRIES; attempt++) {
      const tenancy = await this.tenancyOf(sessionId, attempt > 0);
      if (!tenancy) break;
      await this.checkSharedState(tenancy, [update.stateDelta]);
      updated = await this.call(() =>
        this.scripts.run(updateScript, { sessionId, tenancy, update, incarnation: call?.expectedIncarnation }),
      );
      if (updated.outcome !== "MOVED") break;
    }
    switch (updated.outcome) {
      case "MOVED":
      case "NOT_FOUND":
      case "REPLACED":
        this.tenancies.delete(sessionId);
        throw sessionNotFound(sessionId);
      case "CONFLICT":
        throw versionConflict(update.expectedVersion!, updated.version);
      case "TOO_LARGE":
        throw stateTooLarge("state_delta", updated.scope, updated.entries, updated.bytes);
    }
    if (updated.outbox) await this.applyOutboxEntry(this.keys.bucketOf(sessionId), updated.outbox);
    return decodeSession(sessionId, updated.fields)!;
  }

  async sharedState(appName: string, userId: string): Promise<SharedState> {
    // One MULTI: both states as of one moment.
    const results = await this.call((redis) =>
      redis.multi().hgetall(this.keys.appState(appName)).hgetall(this.keys.userState({ appName, userId })).exec(),
    );
    const [app, user] = results!.map(([err, fields]) => {
      if (err) throw storeError(err);
      return stateOf(fields as Record<string, string>);
    });
    return { app, user };
  }

  async deleteSession(sessionId: string, call?: StoreCall): Promise<boolean> {
    const incarnation = call?.expectedIncarnation;
    const deleted = (await this.deleteOne(sessionId, { incarnation })).outcome === "DELETED";
    if (!deleted && incarnation !== undefined) throw sessionNotFound(sessionId);
    return deleted;
  }

  async appendEvents(
    sessionId: string,
    events: readonly NewEvent[],
    expectedSeq?: number,
    call?: StoreCall,
  ): Promise<AppendResult> {
    const now = Date.now();
    let appended: AppendOutcome = { outcome: "NOT_FOUND" };
    // A cached tenancy is wrong only when the id was deleted and taken by another tenancy: re-read it then.
    for (let attempt = 0; attempt < MOVED_TRIES; attempt++) {
      const tenancy = await this.tenancyOf(sessionId, attempt > 0);
      if (!tenancy) break;
      await this.checkSharedState(
        tenancy,
        events.map((e) => e.stateDelta),
      );
      const ingestBase = this.keys.clustered ? this.nextIngestBase(events.length) : undefined;
      appended = await this.call(() =>
        this.scripts.run(appendScript, {
          sessionId,
          tenancy,
          events,
          expectedSeq,
          now,
          ingestBase,
          incarnation: call?.expectedIncarnation,
        }),
      );
      if (appended.outcome !== "MOVED") break;
    }
    switch (appended.outcome) {
      case "MOVED":
      case "NOT_FOUND":
      case "REPLACED":
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
    if (appended.outbox) await this.applyOutboxEntry(this.keys.bucketOf(sessionId), appended.outbox);
    const stored: StoredEvent[] = events.map((e, i) => {
      const { seq, original } = appended.events[i];
      if (original) return decodeEvent(sessionId, seq, original);
      // A new event, or the retry of one trimmed inside the dedupe window: as submitted.
      const event: StoredEvent = {
        sessionId,
        seq,
        eventId: e.eventId,
        eventType: e.eventType,
        content: e.content,
        metadata: e.metadata,
        timestamp: e.timestamp,
      };
      if (e.stateDelta) event.stateDelta = e.stateDelta;
      return event;
    });
    return { events: stored, replayed: appended.replayed };
  }

  async readEvents(sessionId: string, query: EventQuery, call?: StoreCall): Promise<EventPage> {
    const types = query.eventTypes ?? [];
    const events: StoredEvent[] = [];
    let cursor = query.afterSeq;
    for (;;) {
      const page = await this.readRun(sessionId, "asc", cursor, query.limit - events.length, types, call);
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

  async readTail(
    sessionId: string,
    limit: number,
    eventTypes?: readonly string[],
    call?: StoreCall,
  ): Promise<EventPage> {
    const types = eventTypes ?? [];
    const events: StoredEvent[] = [];
    let before: number | undefined;
    let bounds = { headSeq: 0, firstSeq: 1, incarnation: "" };
    for (;;) {
      const page = await this.readRun(sessionId, "desc", before, limit - events.length, types, call);
      if (before === undefined)
        bounds = { headSeq: page.headSeq, firstSeq: page.firstSeq, incarnation: page.incarnation };
      events.push(...page.events);
      // Older events trimmed meanwhile were evicted anyway: the tail just ends there.
      if (events.length >= limit || page.lastSeq <= page.firstSeq || (before !== undefined && page.lastSeq >= before))
        break;
      before = page.lastSeq;
    }
    events.reverse();
    return { events, ...bounds };
  }

  async listRecentEvents(limit: number, filter: RecentEventsFilter = {}, call?: StoreCall): Promise<StoredEvent[]> {
    if (filter.sessionId !== undefined) return (await this.readTail(filter.sessionId, limit, undefined, call)).events;
    const scopes = recentScopes(filter);
    if (scopes.length === 0) return [];
    // The newest `limit` of each index read (of each bucket), merged by ingest position.
    const reads = scopes.flatMap((scope) => this.keys.buckets.map((bucket) => this.keys.recent(scope, bucket)));
    const pages = await Promise.all(
      reads.map((index) => this.call((redis) => redis.zrevrange(index, 0, limit - 1, "WITHSCORES"))),
    );
    const entries: Array<{ member: string; ingest: number }> = [];
    for (const flat of pages) {
      for (let i = 0; i < flat.length; i += 2) entries.push({ member: flat[i], ingest: Number(flat[i + 1]) });
    }
    entries.sort((a, b) => b.ingest - a.ingest);
    const refs = entries.slice(0, limit).map(({ member }) => recentMemberRef(member));
    if (refs.length === 0) return [];
    const values = Promise.all(
      refs.map((ref) => this.call((redis) => redis.hget(this.keys.events(ref.sessionId), String(ref.seq)))),
    );
    // Entries are removed with their events; checking each session's tenancy
    // anyway means an entry left behind (a replica of an older release) can
    // never show a later session of the same id to the wrong tenant.
    const scoped = filter.appNames !== undefined || filter.userId !== undefined;
    const owners = scoped ? [...new Set(refs.map((ref) => ref.sessionId))] : [];
    const tenancies = await Promise.all(
      owners.map((id) => this.call((redis) => redis.hmget(this.keys.session(id), "app", "user"))),
    );
    const allowed = new Set<string>();
    for (const [i, id] of owners.entries()) {
      const [appName, userId] = tenancies[i];
      if (appName !== null && userId !== null && scopes.some((scope) => inRecentScope(scope, appName, userId)))
        allowed.add(id);
    }
    const out: StoredEvent[] = [];
    for (const [i, value] of (await values).entries()) {
      const ref = refs[i];
      // Gone between the two reads (trimmed or deleted): skip it.
      if (typeof value === "string" && (!scoped || allowed.has(ref.sessionId)))
        out.push(decodeEvent(ref.sessionId, ref.seq, value));
    }
    return out.reverse();
  }

  async stats(): Promise<StoreStats> {
    const counts = await Promise.all(
      this.keys.buckets.map((bucket) =>
        this.call((redis) => redis.hmget(this.keys.stats(bucket), "sessions", "events")),
      ),
    );
    let totalSessions = 0;
    let totalEvents = 0;
    for (const [sessions, events] of counts) {
      totalSessions += Number(sessions ?? 0);
      totalEvents += Number(events ?? 0);
    }
    return { totalSessions, totalEvents };
  }

  async cleanup(cutoff: number, scope: CleanupScope = {}): Promise<number> {
    let removed = 0;
    if (scope.userId !== undefined) {
      // Only one user's sessions: walk their index instead of every stale session of every tenant.
      await this.forEachIndexed(scope, async (id) => {
        if ((await this.deleteOne(id, { updatedBelow: cutoff, scope })).outcome === "DELETED") removed++;
      });
      return removed;
    }
    for (const bucket of this.keys.buckets) {
      // Sessions left in place (out of scope, or updated meanwhile) are stepped over, so every batch makes progress.
      let skipped = 0;
      for (;;) {
        const ids = await this.call((redis) =>
          redis.zrangebyscore(this.keys.updated(bucket), "-inf", `(${cutoff}`, "LIMIT", skipped, CLEANUP_BATCH),
        );
        for (const id of ids) {
          if ((await this.deleteOne(id, { updatedBelow: cutoff, scope })).outcome === "DELETED") removed++;
          else skipped++;
        }
        if (ids.length < CLEANUP_BATCH) break;
      }
    }
    return removed;
  }

  async deleteUserData(appName: string, userId: string): Promise<ErasureResult> {
    // Recorded first, cleared last: a replica finds an erasure this one could not finish (resumeErasures).
    const tenancy = { appName, userId };
    const token = randomUUID();
    await this.call((redis) => redis.hset(this.keys.erasures, erasureField(tenancy), token));
    const erased: ErasureResult = { sessions: 0, events: 0, memories: 0 };
    // Each session goes through the same script as DeleteSession: counters, indexes and notices stay right.
    await this.forEachIndexed(tenancy, async (id) => {
      const { outcome, events } = await this.deleteOne(id, { scope: tenancy });
      if (outcome !== "DELETED") return;
      erased.sessions++;
      erased.events += events;
    });
    erased.memories = await this.memories.eraseUser(appName, userId);
    // Cluster: user state changes still in an outbox would bring the state back once applied.
    if (this.keys.clustered) await this.dropOutboxEntries(tenancy);
    await this.call((redis) => redis.del(this.keys.userState(tenancy)));
    await this.call(() => this.scripts.run(erasedScript, { tenancy, token }));
    return erased;
  }

  async resumeErasures(): Promise<ResumedErasures> {
    const fields = await this.call((redis) => redis.hkeys(this.keys.erasures));
    return resumeEach(fields.map(erasureTenancy), (appName, userId) => this.deleteUserData(appName, userId));
  }

  subscribe(sessionId: string, listener: NoticeListener): () => void {
    const unsubscribe = this.listeners.subscribe(sessionId, listener);
    this.connection.followNotices(true);
    return () => {
      unsubscribe();
      if (this.listeners.size === 0) this.connection.followNotices(false);
    };
  }

  noticesFlowing(): Promise<void> {
    return this.connection.noticesFlowing();
  }

  async ping(): Promise<void> {
    await this.connection.ping();
  }

  async describeDurability(): Promise<StoreDurability> {
    return this.connection.describeDurability();
  }

  async close(): Promise<void> {
    clearInterval(this.outboxSweep);
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
    if (maxSessions === 0) return;
    // A cluster's create script counts its bucket only: the store's count is the sum.
    const total = this.keys.clustered ? (await this.stats()).totalSessions : totalSessions;
    if (total <= maxSessions) return;
    const count = evictionCount(maxSessions);
    const perBucket = await Promise.all(
      this.keys.buckets.map((bucket) =>
        this.call((redis) => redis.zrange(this.keys.updated(bucket), 0, count - 1, "WITHSCORES")),
      ),
    );
    const oldest = perBucket
      .flatMap((flat) => pairsOf(flat))
      .sort((a, b) => a.score - b.score)
      .slice(0, count);
    for (const { member, score } of oldest) {
      // Re-checked in the script: a session updated since is kept, and
      // concurrent evictions (other replicas) stop at the same floor (one node; keys.ts).
      const { outcome } = await this.deleteOne(member, {
        updatedBelow: score + 1,
        keepAtLeast: maxSessions + 1 - count,
      });
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
    const appIndex = (bucket: Bucket) => this.keys.index({ appName }, bucket);
    const sizes = await Promise.all(
      this.keys.buckets.map((bucket) => this.call((redis) => redis.zcard(appIndex(bucket)))),
    );
    if (sizes.reduce((a, b) => a + b, 0) <= cap) return;
    const perBucket = await Promise.all(
      this.keys.buckets.map(async (bucket) => {
        const ids = await this.call((redis) => redis.zrange(appIndex(bucket), 0, -1));
        if (ids.length === 0) return [];
        const scores = await this.call((redis) => redis.zmscore(this.keys.updated(bucket), ...ids));
        return ids.map((id, i) => ({ id, updated: scores[i] === null ? Number.NaN : Number(scores[i]) }));
      }),
    );
    const oldest = perBucket
      .flat()
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
   * id for someone else, is "KEPT". With `incarnation`, a session of another
   * one is "REPLACED". `events`: what a "DELETED" session held.
   */
  private async deleteOne(sessionId: string, cond: DeleteConditions): Promise<DeleteOutcome> {
    const { scope, updatedBelow, keepAtLeast, incarnation } = cond;
    for (let attempt = 0; attempt < MOVED_TRIES; attempt++) {
      const [appName, userId, updated, current] = await this.call((redis) =>
        redis.hmget(this.keys.session(sessionId), "app", "user", "updated", "inc"),
      );
      if (appName === null || userId === null) return { outcome: "GONE", events: 0 };
      if (incarnation !== undefined && incarnation !== (current ?? "")) return { outcome: "REPLACED", events: 0 };
      // The script checks the tenancy it is given, so a session moved to another app or user meanwhile is MOVED, never removed out of scope.
      if (scope?.appName !== undefined && appName !== scope.appName) return { outcome: "KEPT", events: 0 };
      if (scope?.userId !== undefined && userId !== scope.userId) return { outcome: "KEPT", events: 0 };
      if (scope?.exceptAppNames?.includes(appName)) return { outcome: "KEPT", events: 0 };
      // Not stale now: no script call (the script re-checks anyway, atomically).
      if (updatedBelow !== undefined && Number(updated) >= updatedBelow) return { outcome: "KEPT", events: 0 };
      const deleted = await this.call(() =>
        this.scripts.run(deleteScript, {
          sessionId,
          tenancy: { appName, userId },
          updatedBelow,
          keepAtLeast,
          incarnation,
        }),
      );
      if (deleted.outcome === "DELETED" || deleted.outcome === "GONE") this.tenancies.delete(sessionId);
      if (deleted.outcome !== "MOVED") return deleted;
    }
    return { outcome: "GONE", events: 0 };
  }

  /**
   * Runs `remove` on every session id of a tenancy's index, bucket by
   * bucket, a page at a time (the page's sessions concurrently), in id order
   * from the start: ids already passed are never revisited, so a stale entry
   * cannot loop it.
   */
  private async forEachIndexed(scope: RecentScope, remove: (sessionId: string) => Promise<void>): Promise<void> {
    for (const bucket of this.keys.buckets) {
      const index = this.keys.index(scope, bucket);
      let after: string | undefined;
      for (;;) {
        const ids = await this.call((redis) =>
          redis.zrangebylex(index, after === undefined ? "-" : `(${after}`, "+", "LIMIT", 0, INDEX_BATCH),
        );
        await Promise.all(ids.map(remove));
        if (ids.length < INDEX_BATCH) break;
        after = ids[ids.length - 1];
      }
    }
  }

  /**
   * Cluster: refuses (INVALID_ARGUMENT, as one node's script would) user and
   * app state changes past a cap before the write that carries them runs
   * (statecheck-2.lua). On one node the write script checks them itself.
   */
  private async checkSharedState(tenancy: Tenancy, deltas: ReadonlyArray<NewEvent["stateDelta"]>): Promise<void> {
    if (!this.keys.clustered) return;
    const changes = sharedChangesOf(deltas);
    if (changes.length === 0) return;
    const refused = await this.call(() => this.scripts.run(stateCheckScript, { tenancy, changes }));
    if (refused) throw stateTooLarge("state_delta", refused.scope, refused.entries, refused.bytes);
  }

  /** Cluster: applies one outbox entry in the app's slot (once: shared-3.lua), then removes it from its bucket's outbox. */
  private async applyOutboxEntry(bucket: Bucket, entry: OutboxEntry): Promise<void> {
    const { app, user, changes } = JSON.parse(entry.value) as {
      app: string;
      user: string;
      changes: Array<[string, string, string]>;
    };
    await this.call(() =>
      this.scripts.run(applySharedScript, {
        tenancy: { appName: app, userId: user },
        changes,
        field: entry.field,
        now: Date.now(),
      }),
    );
    await this.call((redis) => redis.hdel(this.keys.outbox(bucket), entry.field));
  }

  /** Cluster: every OUTBOX_SWEEP_MS, applies the entries a replica left behind (it died, or Redis failed, between the two steps). */
  private startOutboxSweep(): void {
    const sweep = () => {
      this.applyLeftOutboxEntries(Date.now() - OUTBOX_SWEEP_MS).catch(() => {
        // Redis unreachable: the next sweep tries again.
      });
    };
    this.outboxSweep = setInterval(sweep, OUTBOX_SWEEP_MS);
    this.outboxSweep.unref();
    sweep();
  }

  /** Cluster: applies every outbox entry written before `before` (epoch ms); how many it applied or found applied. */
  async applyLeftOutboxEntries(before = Number.POSITIVE_INFINITY): Promise<number> {
    let applied = 0;
    for (const bucket of this.keys.buckets) {
      const entries = await this.call((redis) => redis.hgetall(this.keys.outbox(bucket)));
      for (const [field, value] of Object.entries(entries)) {
        if ((JSON.parse(value) as { at: number }).at >= before) continue;
        await this.applyOutboxEntry(bucket, { field, value });
        applied++;
      }
    }
    return applied;
  }

  /** Cluster: drops every outbox entry of one user (DeleteUserData). */
  private async dropOutboxEntries(tenancy: Tenancy): Promise<void> {
    for (const bucket of this.keys.buckets) {
      const entries = await this.call((redis) => redis.hgetall(this.keys.outbox(bucket)));
      const fields = Object.entries(entries)
        .filter(([, value]) => {
          const { app, user } = JSON.parse(value) as { app: string; user: string };
          return app === tenancy.appName && user === tenancy.userId;
        })
        .map(([field]) => field);
      if (fields.length > 0) await this.call((redis) => redis.hdel(this.keys.outbox(bucket), ...fields));
    }
  }

  /**
   * Cluster: the first ingest position of an append of `count` events: this
   * replica's clock in µs, never below a position it handed out before, so
   * one replica's appends merge across buckets in the order they were made.
   */
  private nextIngestBase(count: number): number {
    const base = Math.max(Date.now() * 1000, this.lastIngest);
    this.lastIngest = base + count;
    return base;
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

  /** One read-2.lua call: a run of seqs with the session's bounds (and its incarnation, read with them: checked against the call's). */
  private async readRun(
    sessionId: string,
    direction: "asc" | "desc",
    cursor: number | undefined,
    limit: number,
    types: readonly string[],
    call: StoreCall | undefined,
  ): Promise<EventPage & { lastSeq: number }> {
    const run = await this.call(() => this.scripts.run(readScript, { sessionId, direction, cursor, limit, types }));
    if (!run) throw sessionNotFound(sessionId);
    checkIncarnation(sessionId, run.incarnation, call);
    const events = this.decoded.decodeRun(sessionId, run.events);
    return { headSeq: run.headSeq, firstSeq: run.firstSeq, lastSeq: run.lastSeq, incarnation: run.incarnation, events };
  }

  /** Runs one call on the command connection, failures as MemoryErrors. */
  private call<T>(run: (redis: RedisClient) => Promise<T>): Promise<T> {
    return this.connection.call(run);
  }
}

/**
 * Cluster: the bucket count recorded under `<prefix>:buckets`, written
 * (CLUSTER_BUCKETS) by the first store to open: every later one, of any
 * release, reads the same count, so a session's bucket never changes.
 */
async function recordedBuckets(connection: RedisConnection, keyPrefix: string): Promise<number> {
  const key = new RedisKeys(keyPrefix, CLUSTER_BUCKETS).bucketCount;
  await connection.call((redis) => redis.set(key, CLUSTER_BUCKETS, "NX"));
  const recorded = Number(await connection.call((redis) => redis.get(key)));
  if (!Number.isInteger(recorded) || recorded < 1)
    throw new MemoryError(
      "FAILED_PRECONDITION",
      `${key} holds ${recorded}, not a bucket count: this key prefix holds something else`,
    );
  return recorded;
}

/** Byte order of UTF-8 strings: how a zset with equal scores sorts its members. */
function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

/** A flat [member, score, ...] reply as pairs. */
function pairsOf(flat: readonly string[]): Array<{ member: string; score: number }> {
  const pairs: Array<{ member: string; score: number }> = [];
  for (let i = 0; i < flat.length; i += 2) pairs.push({ member: flat[i], score: Number(flat[i + 1]) });
  return pairs;
}

/** The user ("u") and app ("a") state changes of some deltas, in order, as [scope, key, value] (encodeStateChanges). */
function sharedChangesOf(deltas: ReadonlyArray<NewEvent["stateDelta"]>): Array<[string, string, string]> {
  const out: Array<[string, string, string]> = [];
  for (const delta of deltas) {
    const flat = encodeStateChanges(delta);
    for (let i = 1; i < flat.length; i += 3) {
      if (flat[i] === "u" || flat[i] === "a") out.push([String(flat[i]), String(flat[i + 1]), String(flat[i + 2])]);
    }
  }
  return out;
}

/** True when a session of (appName, userId) belongs in the recent scope. */
function inRecentScope(scope: RecentScope, appName: string, userId: string): boolean {
  return (
    (scope.appName === undefined || scope.appName === appName) &&
    (scope.userId === undefined || scope.userId === userId)
  );
}
