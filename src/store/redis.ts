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
 *   scripts.ts     the Lua scripts, typed: one args builder + reply decoder each
 *   script-args.ts argument writers (array or RESP) and ARGV layouts by name
 *   script-runner.ts  the loader, the runner (RESP fast path on one node), WAIT
 *   scripts/       the scripts, one per file; scripts/includes/ the Lua they share
 *   connection.ts  the command and notice connections (opened by src/backends/redis.ts), errors, close
 *   notices.ts     pub/sub notices to this replica's listeners
 *   removal.ts     removing sessions: delete-14.lua, index walks, eviction past the caps
 *   outbox.ts      cluster: user and app state changes applied in the app's slot
 *
 * On a Redis Cluster (keys.ts: sessions in buckets, one slot each) every
 * script still touches one slot; listings, stats, cleanup, eviction and
 * erasure read every bucket and merge. Session state's app: and user: keys
 * live in the app's slot: a write that changes them applies them there in a
 * second step (redis/outbox.ts).
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
  checkCursor,
  checkIncarnation,
  duplicateEventId,
  isExpectedIncarnation,
  newIncarnation,
  newSessionRecord,
  inRecentScope,
  recentScopes,
  resumeEach,
  sessionExists,
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
import { appendedEvents, decodeEvent, decodeSession, DecodedEvents, stateOf } from "./redis/codec.js";
import type { RedisClient } from "../backends/redis.js";
import { DEFAULT_COMMAND_TIMEOUT_MS, RedisConnection, storeError } from "./redis/connection.js";
import {
  byteOrder,
  erasureField,
  erasureTenancy,
  recentMemberRef,
  recordedBuckets,
  RedisKeys,
  type Tenancy,
} from "./redis/keys.js";
import { RedisNotices } from "./redis/notices.js";
import { SharedStateOutbox } from "./redis/outbox.js";
import { MOVED_TRIES, SessionRemoval } from "./redis/removal.js";
import { checkScripts } from "./redis/script-check.js";
import {
  appendScript,
  createScript,
  erasedScript,
  readScript,
  updateScript,
  type AppendOutcome,
  type UpdateOutcome,
} from "./redis/scripts.js";
import { RedisScripts, type WaitForReplicas } from "./redis/script-runner.js";

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

/** The Redis-backed MemoryStore; open it with RedisStore.open(). */
export class RedisStore implements MemoryStore {
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
  /** Cluster: user and app state changes, applied in the app's slot (outbox.ts). */
  private readonly outbox: SharedStateOutbox;
  private readonly removal: SessionRemoval;

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
    this.outbox = new SharedStateOutbox(connection, this.keys, this.scripts);
    this.removal = new SessionRemoval(
      connection,
      this.keys,
      this.scripts,
      limits,
      this.tenancies,
      async () => (await this.stats()).totalSessions,
    );
  }

  /** Sessions this process evicted past maxSessions. */
  get sessionsEvicted(): number {
    return this.removal.evicted;
  }

  /** Cluster: applies every outbox entry written before `before` (epoch ms) now, as the sweep would; how many. */
  applyLeftOutboxEntries(before?: number): Promise<number> {
    return this.outbox.applyLeft(before);
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
    if (store.keys.clustered) store.outbox.startSweep();
    return store;
  }

  async createSession(input: NewSession): Promise<SessionRecord> {
    const incarnation = newIncarnation();
    const created = await this.call(() =>
      this.scripts.run(createScript, { session: input, incarnation, mode: "create" }),
    );
    if (created.outcome !== "CREATED") throw sessionExists(input.sessionId);
    this.tenancies.set(input.sessionId, { appName: input.appName, userId: input.userId });
    await this.removal.evictAfterCreate(created.totalSessions, input.appName);
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
    if (found.outcome === "CREATED") await this.removal.evictAfterCreate(found.totalSessions, input.appName);
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
      await this.outbox.check(tenancy, [update]);
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
    if (updated.outbox) await this.outbox.apply(this.keys.bucketOf(sessionId), updated.outbox);
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
    const deleted = (await this.removal.deleteOne(sessionId, { incarnation })).outcome === "DELETED";
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
      await this.outbox.check(tenancy, events);
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
    if (appended.outbox) await this.outbox.apply(this.keys.bucketOf(sessionId), appended.outbox);
    return { events: appendedEvents(sessionId, events, appended.events), replayed: appended.replayed };
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
      await this.removal.forEachIndexed(scope, async (id) => {
        if ((await this.removal.deleteOne(id, { updatedBelow: cutoff, scope })).outcome === "DELETED") removed++;
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
          if ((await this.removal.deleteOne(id, { updatedBelow: cutoff, scope })).outcome === "DELETED") removed++;
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
    await this.removal.forEachIndexed(tenancy, async (id) => {
      const { outcome, events } = await this.removal.deleteOne(id, { scope: tenancy });
      if (outcome !== "DELETED") return;
      erased.sessions++;
      erased.events += events;
    });
    erased.memories = await this.memories.eraseUser(appName, userId);
    // Cluster: user state changes still in an outbox would bring the state back once applied.
    await this.outbox.drop(tenancy);
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
    this.outbox.stopSweep();
    this.listeners.clear();
    this.memories.close();
    await this.connection.close();
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
