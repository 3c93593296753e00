/**
 * The PostgreSQL store: several replicas share one database, each deployment
 * in its own schema (MEMORY_KEY_PREFIX). Migrations (postgres/migrations.ts)
 * run at start under an advisory lock (graphile-worker style). An append
 * locks its session row, so commit order is seq order, and touches only the
 * rows it adds or trims: O(1) in session length (postgres/appends.ts). Live
 * notices travel by NOTIFY inside the writing transaction and reach every
 * replica through one LISTEN connection per store (postgres/listen.ts).
 * Every statement is in postgres/statements.ts.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import { sessionNotFound, versionConflict } from "../errors.js";
import { PostgresMemories } from "./memories/postgres.js";
import { NoticeListeners } from "./notices.js";
import { Appends } from "./postgres/appends.js";
import { type PostgresConnectionOptions, PostgresDatabase } from "./postgres/database.js";
import { toMemoryError } from "./postgres/error-mapping.js";
import { channelName, NoticeChannel } from "./postgres/listen.js";
import { applyMigrations } from "./postgres/migrations.js";
import { type EventRow, iso, type SessionRow, toEvent, toSession } from "./postgres/rows.js";
import { writeState } from "./postgres/state-writes.js";
import {
  ADVISORY_LOCK,
  counterSlot,
  deleteSessionsSql,
  evictionPick,
  listSessionsQuery,
  recentEventsQuery,
  type SessionStatements,
  sessionStatements,
} from "./postgres/statements.js";
import {
  appSessionCap,
  checkCursor,
  checkIncarnation,
  evictionCount,
  isExpectedIncarnation,
  newIncarnation,
  resumeEach,
  sessionExists,
} from "./rules.js";
import { splitStateChange } from "./state.js";
import type {
  AppendResult,
  CleanupScope,
  ErasureResult,
  EventPage,
  EventQuery,
  JsonObject,
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

/** How to reach PostgreSQL and what to keep there. */
export interface PostgresStoreOptions extends PostgresConnectionOptions {
  limits: StoreLimits;
}

/** Sessions deleted per cleanup statement, so no transaction grows unbounded. */
const CLEANUP_BATCH = 500;
/** Sessions one erasure statement removes at most… */
const ERASE_BATCH_SESSIONS = 500;
/** …and events (unless one session alone holds more): one bounded transaction each. */
const ERASE_BATCH_EVENTS = 10_000;

/** The PostgreSQL MemoryStore. Create it with PostgresStore.open(). */
export class PostgresStore implements MemoryStore {
  /** Sessions this process evicted past maxSessions. */
  sessionsEvicted = 0;
  readonly backend = "postgres";
  readonly capabilities = { persistent: true, shared: true, retains: true };
  /** Long-term memories (src/store/memories/postgres.ts), in the same schema, pool and notice channel. */
  readonly memories: PostgresMemories;

  private readonly db: PostgresDatabase;
  private readonly limits: StoreLimits;
  /** The quoted schema, prefixed to every table name. */
  private readonly s: string;
  private readonly sql: SessionStatements;
  private readonly channel: string;
  private readonly listeners = new NoticeListeners();
  private readonly notices: NoticeChannel;
  private readonly appends: Appends;
  private closed = false;

  /** Opens the pool, applies pending migrations and starts listening; rejects UNAVAILABLE when unreachable, StoreIncompatibleError on a schema this release must not use. */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const store = new PostgresStore(options);
    try {
      await store.migrate();
      await store.memories.start();
      await store.notices.listen();
    } catch (err) {
      await store.close();
      throw toMemoryError(err);
    }
    return store;
  }

  /** Creates the store without touching the database; open() is the usual way in. */
  constructor(private readonly options: PostgresStoreOptions) {
    this.limits = options.limits;
    this.s = pg.escapeIdentifier(options.schema);
    this.sql = sessionStatements(this.s, { cleanup: CLEANUP_BATCH, eraseSessions: ERASE_BATCH_SESSIONS });
    this.channel = channelName(options.schema);
    this.db = new PostgresDatabase(options);
    this.appends = new Appends(this.db, this.sql, options.limits, this.channel);
    this.memories = new PostgresMemories(this.db, {
      schema: this.s,
      schemaName: options.schema,
      channel: this.channel,
    });
    this.notices = new NoticeChannel(options, this.channel, {
      session: (notice) => this.listeners.notify(notice),
      memories: (payload) => this.memories.onNotice(payload),
      resync: () => this.resync(),
    });
  }

  /** Events this process trimmed past maxSessionEvents. */
  get eventsTrimmed(): number {
    return this.appends.eventsTrimmed;
  }

  async createSession(input: NewSession, call?: StoreCall): Promise<SessionRecord> {
    return this.db.attempt(async (retried) => {
      const row = await this.insertSession(input, call);
      if (row) {
        await this.evictSessionsOverLimit(Number(row.total_sessions), input.appName, call);
        return toSession(row);
      }
      const existing = await this.selectSession(input.sessionId, call);
      // The first try may have committed before its connection broke: our own row is success.
      if (
        retried &&
        existing &&
        existing.createdAt === input.now &&
        existing.appName === input.appName &&
        existing.userId === input.userId
      ) {
        return existing;
      }
      throw sessionExists(input.sessionId);
    });
  }

  async getOrCreateSession(input: NewSession, call?: StoreCall): Promise<{ session: SessionRecord; created: boolean }> {
    return this.db.attempt(async () => {
      // A concurrent delete can remove the row between the two statements; try again then.
      for (;;) {
        const row = await this.insertSession(input, call);
        if (row) {
          await this.evictSessionsOverLimit(Number(row.total_sessions), input.appName, call);
          return { session: toSession(row), created: true };
        }
        const existing = await this.selectSession(input.sessionId, call);
        if (existing) return { session: existing, created: false };
      }
    });
  }

  async getSession(sessionId: string, call?: StoreCall): Promise<SessionRecord | undefined> {
    const session = await this.db.attempt(() => this.selectSession(sessionId, call));
    return session && isExpectedIncarnation(session.incarnation, call) ? session : undefined;
  }

  async listSessions(query: SessionQuery, call?: StoreCall): Promise<SessionRecord[]> {
    const { sql, params } = listSessionsQuery(this.s, query);
    const { rows } = await this.db.query<SessionRow>(sql, params, call);
    return rows.map(toSession);
  }

  async updateSession(sessionId: string, update: SessionUpdate, call?: StoreCall): Promise<SessionRecord> {
    return this.db.retriedTransaction(async (client) => {
      const { rows } = await client.query<SessionRow>(this.sql.lockSession, [sessionId]);
      if (rows.length === 0) throw sessionNotFound(sessionId);
      const session = toSession(rows[0]);
      // Under the row lock: the session cannot be replaced before this transaction ends.
      checkIncarnation(sessionId, session.incarnation, call);
      if (update.expectedVersion !== undefined && update.expectedVersion !== session.version)
        throw versionConflict(update.expectedVersion, session.version);
      await writeState(client, this.sql, session, splitStateChange(update));
      const updated = await client.query<SessionRow>(this.sql.updateSession, [
        sessionId,
        update.metadata ? JSON.stringify(update.metadata) : null,
        iso(update.now),
      ]);
      return toSession(updated.rows[0]);
    }, call);
  }

  async sharedState(appName: string, userId: string, call?: StoreCall): Promise<SharedState> {
    const { rows } = await this.db.query<{ app: JsonObject | null; user: JsonObject | null }>(
      this.sql.sharedState,
      [appName, userId],
      call,
    );
    return { app: rows[0].app ?? {}, user: rows[0].user ?? {} };
  }

  async deleteSession(sessionId: string, call?: StoreCall): Promise<boolean> {
    const incarnation = call?.expectedIncarnation;
    if (incarnation === undefined) {
      const { rows } = await this.db.query(this.sql.deleteSession, [this.channel, counterSlot(), sessionId], call);
      return rows.length > 0;
    }
    const { rows } = await this.db.query(
      this.sql.deleteSessionOfIncarnation,
      [this.channel, counterSlot(), sessionId, incarnation],
      call,
    );
    if (rows.length === 0) throw sessionNotFound(sessionId);
    return true;
  }

  async appendEvents(
    sessionId: string,
    events: readonly NewEvent[],
    expectedSeq?: number,
    call?: StoreCall,
  ): Promise<AppendResult> {
    return this.appends.append(sessionId, events, expectedSeq, call);
  }

  async readEvents(sessionId: string, query: EventQuery, call?: StoreCall): Promise<EventPage> {
    const types = query.eventTypes && query.eventTypes.length > 0 ? [...query.eventTypes] : null;
    const page = await this.readRange(sessionId, this.sql.readForward, query.afterSeq ?? -1, types, query.limit, call);
    checkCursor(query.afterSeq ?? page.firstSeq - 1, page.firstSeq, page.headSeq);
    return page;
  }

  async readTail(
    sessionId: string,
    limit: number,
    eventTypes?: readonly string[],
    call?: StoreCall,
  ): Promise<EventPage> {
    const types = eventTypes && eventTypes.length > 0 ? [...eventTypes] : null;
    const page = await this.readRange(sessionId, this.sql.readBackward, -1, types, limit, call);
    page.events.reverse();
    return page;
  }

  async listRecentEvents(limit: number, filter: RecentEventsFilter = {}, call?: StoreCall): Promise<StoredEvent[]> {
    if (filter.sessionId !== undefined) return (await this.readTail(filter.sessionId, limit, undefined, call)).events;
    const query = recentEventsQuery(this.s, limit, filter);
    if (!query) return [];
    const { rows } = await this.db.query<EventRow & { session_id: string }>(query.sql, query.params, call);
    return rows.reverse().map((row) => toEvent(row.session_id, row));
  }

  async stats(call?: StoreCall): Promise<StoreStats> {
    const { rows } = await this.db.query<{ sessions: string; events: string }>(this.sql.stats, [], call);
    return { totalSessions: Number(rows[0].sessions), totalEvents: Number(rows[0].events) };
  }

  async cleanup(cutoff: number, scope: CleanupScope = {}, call?: StoreCall): Promise<number> {
    let total = 0;
    for (;;) {
      const { rows } = await this.db.query(
        this.sql.cleanup,
        [
          this.channel,
          counterSlot(),
          iso(cutoff),
          scope.appName ?? null,
          scope.userId ?? null,
          scope.exceptAppNames && scope.exceptAppNames.length > 0 ? [...scope.exceptAppNames] : null,
        ],
        call,
      );
      total += rows.length;
      if (rows.length < CLEANUP_BATCH) return total;
    }
  }

  async deleteUserData(appName: string, userId: string, call?: StoreCall): Promise<ErasureResult> {
    // Recorded first, cleared last: a replica finds an erasure this one could not finish (resumeErasures).
    const token = randomUUID();
    await this.db.query(this.sql.startErasure, [appName, userId, token], call);
    const erased: ErasureResult = { sessions: 0, events: 0, memories: 0 };
    for (;;) {
      const { rows } = await this.db.query<{ events: string }>(
        this.sql.eraseSessions,
        [this.channel, counterSlot(), appName, userId, ERASE_BATCH_EVENTS],
        call,
      );
      if (rows.length === 0) break;
      erased.sessions += rows.length;
      for (const row of rows) erased.events += Number(row.events);
    }
    erased.memories = await this.memories.eraseUser(appName, userId);
    await this.db.query(this.sql.deleteUserState, [appName, userId], call);
    await this.db.query(this.sql.endErasure, [appName, userId, token], call);
    return erased;
  }

  async resumeErasures(): Promise<ResumedErasures> {
    const { rows } = await this.db.query<{ app_name: string; user_id: string }>(this.sql.pendingErasures);
    return resumeEach(
      rows.map((row) => ({ appName: row.app_name, userId: row.user_id })),
      (appName, userId) => this.deleteUserData(appName, userId),
    );
  }

  subscribe(sessionId: string, listener: NoticeListener): () => void {
    return this.listeners.subscribe(sessionId, listener);
  }

  async ping(call?: StoreCall): Promise<void> {
    await this.db.query(this.sql.ping, [], call);
  }

  async describeDurability(): Promise<StoreDurability> {
    const { rows } = await this.db.query<Record<string, string>>(this.sql.durability);
    const settings = rows[0];
    const sc = settings.synchronous_commit;
    const fsync = settings.fsync;
    const head = `synchronous_commit=${sc}, fsync=${fsync}`;
    let summary: string;
    if (fsync !== "on") {
      summary = `${head}: an acknowledged append survives a crash of PostgreSQL but may be lost (or the database corrupted) if the host crashes`;
    } else if (sc === "off") {
      summary = `${head}: the last acknowledged appends (up to about 3 x wal_writer_delay) may be lost if PostgreSQL or the host crashes`;
    } else {
      const standby =
        settings.synchronous_standby_names && sc !== "local"
          ? `, and is on a synchronous standby (${settings.synchronous_standby_names})`
          : "";
      summary = `${head}: an acknowledged append survives a crash of PostgreSQL or the host${standby}`;
    }
    return { summary, settings };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.listeners.clear();
    this.memories.close();
    await Promise.allSettled([this.notices.close(), this.db.close()]);
  }

  /** Applies pending migrations and the live functions in one transaction under the schema's advisory lock. */
  async migrate(): Promise<void> {
    await this.db.transaction((client) => applyMigrations(client, this.options.schema));
  }

  /** One statement, so the session's bounds and its events come from the same snapshot. */
  private async readRange(
    sessionId: string,
    sql: string,
    afterSeq: number,
    types: string[] | null,
    limit: number,
    call: StoreCall | undefined,
  ): Promise<EventPage> {
    const { rows } = await this.db.query<
      { head_seq: string; first_seq: string; incarnation: string } & Partial<EventRow>
    >(sql, [sessionId, afterSeq, types, limit], call);
    if (rows.length === 0) throw sessionNotFound(sessionId);
    // Read in the same statement as the events: they are that incarnation's.
    checkIncarnation(sessionId, rows[0].incarnation, call);
    const events = rows.filter((row) => row.seq != null).map((row) => toEvent(sessionId, row as EventRow));
    return {
      events,
      headSeq: Number(rows[0].head_seq),
      firstSeq: Number(rows[0].first_seq),
      incarnation: rows[0].incarnation,
    };
  }

  private async selectSession(sessionId: string, call: StoreCall | undefined): Promise<SessionRecord | undefined> {
    const { rows } = await this.db.poolQuery<SessionRow>(this.sql.selectSession, [sessionId], call);
    return rows[0] && toSession(rows[0]);
  }

  /**
   * Inserts the session and counts it in one statement; undefined when the id
   * is taken. Not retried on its own: the caller's attempt() decides what a
   * conflict after a broken connection means.
   */
  private async insertSession(
    input: NewSession,
    call: StoreCall | undefined,
  ): Promise<(SessionRow & { total_sessions: string }) | undefined> {
    const { rows } = await this.db.poolQuery<SessionRow & { total_sessions: string }>(
      this.sql.insertSession,
      [
        input.sessionId,
        input.appName,
        input.userId,
        JSON.stringify(input.metadata),
        iso(input.now),
        counterSlot(),
        newIncarnation(),
      ],
      call,
    );
    return rows[0];
  }

  /**
   * Past the app's session cap, deletes the app's least recently updated 10%
   * (at least one); past the global cap, the store's, like the local store.
   * 0: no cap.
   */
  private async evictSessionsOverLimit(
    totalSessions: number,
    appName: string,
    call: StoreCall | undefined,
  ): Promise<void> {
    const appCap = appSessionCap(this.limits, appName);
    if (appCap > 0) await this.evictAppOverLimit(appName, appCap, call);
    // The common case costs nothing: the insert statement already read the counters.
    if (this.limits.maxSessions === 0 || totalSessions <= this.limits.maxSessions) return;
    await this.db.transaction(async (client) => {
      // One evictor at a time, re-counting under the lock: concurrent creators must not each evict 10%.
      await client.query(ADVISORY_LOCK, [`engram:evict:${this.options.schema}`]);
      const { rows } = await client.query<{ n: string }>(this.sql.countSessions);
      if (Number(rows[0].n) <= this.limits.maxSessions) return;
      const { rows: gone } = await client.query(
        deleteSessionsSql(this.s, "true", evictionPick(evictionCount(this.limits.maxSessions))),
        [this.channel, counterSlot()],
      );
      this.sessionsEvicted += gone.length;
    }, call);
  }

  /**
   * One app's eviction: counts its sessions (an index-only range of
   * sessions_by_app_updated, O(sessions of the app), only for apps with a
   * cap) and past the cap deletes its oldest tenth, one evictor per app.
   */
  private async evictAppOverLimit(appName: string, cap: number, call: StoreCall | undefined): Promise<void> {
    const { rows } = await this.db.query<{ n: string }>(this.sql.countAppSessions, [appName], call);
    if (Number(rows[0].n) <= cap) return;
    await this.db.transaction(async (client) => {
      await client.query(ADVISORY_LOCK, [`engram:evict:${this.options.schema}:${appName}`]);
      const { rows: again } = await client.query<{ n: string }>(this.sql.countAppSessions, [appName]);
      if (Number(again[0].n) <= cap) return;
      const { rows: gone } = await client.query(
        deleteSessionsSql(this.s, "app_name = $3", evictionPick(evictionCount(cap))),
        [this.channel, counterSlot(), appName],
      );
      this.sessionsEvicted += gone.length;
    }, call);
  }

  /**
   * After a LISTEN gap, tells every subscribed session where its head is now
   * (or that it is gone): notices sent during the gap were lost.
   */
  private async resync(): Promise<void> {
    const ids = this.listeners.sessionIds();
    if (ids.length === 0) return;
    let rows: { session_id: string; head_seq: string }[];
    try {
      rows = (await this.db.query<{ session_id: string; head_seq: string }>(this.sql.sessionHeads, [ids])).rows;
    } catch {
      return; // readers' heartbeat re-read still catches up
    }
    const heads = new Map(rows.map((r) => [r.session_id, Number(r.head_seq)]));
    for (const sessionId of ids) {
      const headSeq = heads.get(sessionId);
      this.listeners.notify(headSeq === undefined ? { sessionId, deleted: true } : { sessionId, headSeq });
    }
  }
}
