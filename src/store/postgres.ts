/**
 * The PostgreSQL store: several replicas share one database, each deployment
 * in its own schema (MEMORY_KEY_PREFIX). Numbered migrations
 * (postgres/migrations/NNNN_*.sql) run at start under an advisory lock
 * (graphile-worker style). An append locks its session row, so commit order is
 * seq order, and touches only the rows it adds or trims: O(1) in session
 * length. Live notices travel by NOTIFY inside the writing transaction and
 * reach every replica through one LISTEN connection per store.
 */
import { createHash, randomInt, randomUUID } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { asMemoryError, MemoryError, seqConflict, sessionNotFound, versionConflict } from "../errors.js";
import { addChanges, applyChanges, checkStateCaps, noChanges, splitStateDelta, type ScopedChanges } from "./state.js";
import { eventFingerprint } from "./fingerprint.js";
import { GroupCommit, type Pending } from "./postgres/group-commit.js";
import {
  appEventCaps,
  appSessionCap,
  checkCursor,
  checkIncarnation,
  dedupeWindow,
  duplicateEventId,
  evictionCount,
  isExpectedIncarnation,
  newIncarnation,
  resumeEach,
  sessionExists,
} from "./rules.js";
import type {
  AppendResult,
  CleanupScope,
  ErasureResult,
  EventPage,
  EventQuery,
  JsonObject,
  JsonValue,
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
import { NoticeListeners } from "./notices.js";
import { PostgresMemories, type StatementShape } from "./memories/postgres.js";
import { StoreIncompatibleError } from "./incompatible.js";

const { Client, Pool, escapeIdentifier } = pg;

/** Where the numbered migrations live, next to this file. */
export const MIGRATIONS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "postgres", "migrations");

/** How to reach PostgreSQL and what to keep there. */
export interface PostgresStoreOptions {
  /** Connection URL (MEMORY_POSTGRES_URL). */
  url: string;
  /** Schema holding every table (MEMORY_KEY_PREFIX). */
  schema: string;
  limits: StoreLimits;
  /** Bound on opening a connection (or waiting for a pooled one); default 5 s. */
  connectTimeoutMs?: number;
  /** Bound on one statement, client- and server-side; default 15 s. */
  queryTimeoutMs?: number;
  /** Pooled connections; default 10. */
  poolSize?: number;
}

/**
 * Append batches written at once; appends arriving meanwhile queue and go
 * as the next batch. With append_many_retained a batch's cost is mostly per
 * statement, so bigger batches are cheaper per append. Seven interleaved
 * pairs at 16 concurrent appenders: one in flight made batches of 6-8
 * instead of 3-6, took 20-30% less server and PostgreSQL CPU per append,
 * and more appends/s in six pairs of seven (no change at 64). A batch never
 * waits for a session lock (SKIP LOCKED; held sessions are written alone,
 * outside this bound), so the one slot is only held up by PostgreSQL itself,
 * which would hold up a second slot too.
 */
const APPEND_BATCHES_IN_FLIGHT = 1;
/**
 * Bytes of event JSON in one append batch (a single larger append still goes,
 * alone): events may be up to MEMORY_MAX_EVENT_BYTES each, and a batch is one
 * statement whose parameters the driver and PostgreSQL hold in memory.
 */
const APPEND_BATCH_BYTES = 4 * 1024 * 1024;
/** What an event costs a batch beyond its JSON: ids, type, timestamp, fingerprint. */
const APPEND_EVENT_OVERHEAD_BYTES = 256;

/** Slots of the counters table (see 0001_init.sql). */
const COUNTER_SLOTS = 16;
/** Sessions deleted per cleanup statement, so no transaction grows unbounded. */
const CLEANUP_BATCH = 500;
/** Sessions one erasure statement removes at most… */
const ERASE_BATCH_SESSIONS = 500;
/** …and events (unless one session alone holds more): one bounded transaction each. */
const ERASE_BATCH_EVENTS = 10_000;
/** NOTIFY payloads must stay under 8000 bytes. */
const MAX_NOTIFY_BYTES = 7900;
const LISTEN_BACKOFF_MIN_MS = 100;
const LISTEN_BACKOFF_MAX_MS = 5000;

/** Epoch milliseconds of a timestamptz column, exact (extract returns numeric). */
const ms = (column: string) => `(extract(epoch from ${column}) * 1000)::bigint`;
const SESSION_COLUMNS = `session_id, app_name, user_id, metadata, ${ms("created_at")} AS created_ms, ${ms("updated_at")} AS updated_ms, head_seq, first_seq, incarnation, state, version`;
const EVENT_COLUMNS = `seq, event_id, event_type, content, metadata, ${ms('"timestamp"')} AS ts_ms, state_delta`;

/** ISO 8601 in UTC: PostgreSQL parses it exactly, whatever the session's TimeZone. */
const iso = (epochMs: number) => new Date(epochMs).toISOString();

interface SessionRow {
  session_id: string;
  app_name: string;
  user_id: string;
  metadata: JsonObject;
  created_ms: string;
  updated_ms: string;
  head_seq: string;
  first_seq: string;
  incarnation: string;
  state: JsonObject;
  version: string;
}

interface EventRow {
  seq: string;
  event_id: string;
  event_type: string;
  content: JsonValue;
  metadata: JsonObject;
  ts_ms: string;
  fingerprint?: string;
  /** Absent from append_many_retained's rows (the retry's own delta stands in: same fingerprint, same delta). */
  state_delta?: JsonObject | null;
}

function toSession(row: SessionRow): SessionRecord {
  return {
    sessionId: row.session_id,
    appName: row.app_name,
    userId: row.user_id,
    metadata: row.metadata,
    createdAt: Number(row.created_ms),
    updatedAt: Number(row.updated_ms),
    headSeq: Number(row.head_seq),
    firstSeq: Number(row.first_seq),
    incarnation: row.incarnation,
    state: row.state,
    version: Number(row.version),
  };
}

function toEvent(sessionId: string, row: EventRow): StoredEvent {
  const event: StoredEvent = {
    sessionId,
    seq: Number(row.seq),
    eventId: row.event_id,
    eventType: row.event_type,
    content: row.content,
    metadata: row.metadata,
    timestamp: Number(row.ts_ms),
  };
  if (row.state_delta) event.stateDelta = row.state_delta;
  return event;
}

/**
 * The answer to a retried event: its stored original, or for an event trimmed
 * inside the dedupe window (no content left: event_type is NULL) its seq with
 * the event as submitted.
 */
function retried(sessionId: string, submitted: NewEvent, original: EventRow): StoredEvent {
  let event: StoredEvent;
  if (original.event_type !== null) {
    event = toEvent(sessionId, original);
  } else {
    const { eventId, eventType, content, metadata, timestamp } = submitted;
    event = { sessionId, seq: Number(original.seq), eventId, eventType, content, metadata, timestamp };
  }
  if (submitted.stateDelta) event.stateDelta = submitted.stateDelta;
  return event;
}

/** Payload identity of a submitted event; generated ids carry none, so compute it. */
const fingerprintOf = (e: NewEvent) =>
  e.fingerprint || eventFingerprint(e.eventType, e.content, e.metadata, e.stateDelta);

const CONNECTION_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "ECONNABORTED",
]);
/** SQLSTATEs meaning the server went away or cannot serve now (class 08, 57P0x, too many connections, statement or lock timeout). */
const UNAVAILABLE_STATES = /^(08...|57P0[1-4]|53300|57014|55P03)$/;
const CONNECTION_MESSAGES =
  /timeout|connection terminated|terminated unexpectedly|connection error|client was closed|not queryable|Cannot use a pool after calling end/i;

function errorCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** True when the error says the backend is unreachable or went away, not that the query was wrong. */
function isUnavailable(err: unknown): boolean {
  if (err instanceof MemoryError) return err.code === "UNAVAILABLE";
  const code = errorCode(err);
  if (code && (CONNECTION_CODES.has(code) || UNAVAILABLE_STATES.test(code))) return true;
  if (err instanceof AggregateError && err.errors.some(isUnavailable)) return true;
  return err instanceof Error && CONNECTION_MESSAGES.test(err.message);
}

/**
 * True when an established connection broke, so a statement may or may not
 * have run: the one case worth a retry on a fresh connection (a refused or
 * timed-out connect would only fail again and double the wait).
 */
function isConnectionLost(err: unknown): boolean {
  const code = errorCode(err);
  if (
    code === "ECONNRESET" ||
    code === "EPIPE" ||
    code === "57P01" ||
    code === "57P02" ||
    (code?.startsWith("08") && code !== "08001" && code !== "08004")
  )
    return true;
  return (
    err instanceof Error &&
    /connection terminated unexpectedly|connection error/i.test(err.message) &&
    !/timeout/i.test(err.message)
  );
}

/** Every driver error as a MemoryError: connection trouble is UNAVAILABLE, the rest INTERNAL. */
function toMemoryError(err: unknown): MemoryError | StoreIncompatibleError {
  if (err instanceof MemoryError || err instanceof StoreIncompatibleError) return err;
  if (isUnavailable(err)) {
    const detail = (err instanceof Error && err.message) || errorCode(err) || String(err);
    return new MemoryError("UNAVAILABLE", `PostgreSQL is unavailable: ${detail}`, {}, { cause: err });
  }
  return asMemoryError(err);
}

/** The version of a migration file: its four leading digits. */
function migrationVersion(file: string): number {
  return Number(file.slice(0, 4));
}

/** A migration version as the files name it (7 -> "0007"). */
function migrationName(version: number): string {
  return String(version).padStart(4, "0");
}

/**
 * Why this release must not use a schema, or undefined when it may: the
 * schema holds a migration newer than every file here (a newer release
 * migrated it, and an older replica writing into it could corrupt what the
 * newer one relies on, as graphile-worker refuses too), or lacks a migration
 * below its newest one (applying it now would run it out of order).
 */
export function schemaVersionProblem(
  schema: string,
  applied: readonly number[],
  known: readonly number[],
): string | undefined {
  if (applied.length === 0) return undefined;
  const newestApplied = Math.max(...applied);
  const newestKnown = Math.max(0, ...known);
  if (newestApplied > newestKnown) {
    return (
      `schema ${JSON.stringify(schema)} is at migration ${migrationName(newestApplied)} but this Engram knows migrations up to ${migrationName(newestKnown)}: ` +
      "a newer release migrated it; upgrade this replica (an older replica must not write into a newer schema)"
    );
  }
  const has = new Set(applied);
  const missing = known.filter((v) => v < newestApplied && !has.has(v));
  if (missing.length > 0) {
    return (
      `schema ${JSON.stringify(schema)} is at migration ${migrationName(newestApplied)} but lacks migration ${missing.map(migrationName).join(", ")} ` +
      "that this Engram would have to apply out of order: the schema was altered by hand or by another program; restore it or use a fresh MEMORY_KEY_PREFIX"
    );
  }
  return undefined;
}

/**
 * Milliseconds left before a call's deadline (epoch ms), rounded up;
 * undefined without a deadline; DEADLINE_EXCEEDED once it has passed, before
 * any statement is sent.
 */
function timeLeft(deadline: number | undefined): number | undefined {
  if (deadline === undefined) return undefined;
  const left = Math.ceil(deadline - Date.now());
  if (left <= 0) throw new MemoryError("DEADLINE_EXCEEDED", "deadline exceeded before the store was called");
  return left;
}

/** The LISTEN/NOTIFY channel of a schema: readable when it fits in an identifier, hashed when not. */
function channelName(schema: string): string {
  const plain = `${schema}_events`;
  if (Buffer.byteLength(plain) <= 63) return plain;
  return `engram_events_${createHash("sha256").update(schema).digest("hex").slice(0, 32)}`;
}

/** One caller's append, as queued for group commit, its events' JSON already made. */
interface AppendRequest {
  sessionId: string;
  events: readonly NewEvent[];
  contents: string[];
  metadata: string[];
  expectedSeq?: number;
  /** The session's incarnation the caller expects (StoreCall.expectedIncarnation); undefined: any. */
  incarnation?: string;
}

/** A row of append_many_checked(): per append (`idx`, from 1), one row per retried event, then its outcome row. */
interface AppendRow {
  idx: number;
  status: "not_found" | "busy" | "duplicate" | "conflict" | "replayed" | "appended" | null;
  head_seq: string | null;
  first_seq: string | null;
  seq: string | null;
  event_id: string | null;
  event_type: string | null;
  content: JsonValue;
  metadata: JsonObject;
  ts_ms: string | null;
  /** On an 'appended' row: events the append trimmed. */
  trimmed: string | null;
}

/**
 * The statement listing the newest `limit` events of a scope, newest first
 * (undefined when the filter names no app). Each scope has its own index on
 * (scope columns, ingest_seq) (migration 0007): one index scan per app named,
 * newest first, merged, so the read costs O(limit) per app whatever else the
 * table holds. One SQL text per shape, so each prepared plan keeps its index.
 * `schema` is the quoted schema name.
 */
export function recentEventsQuery(
  schema: string,
  limit: number,
  filter: Omit<RecentEventsFilter, "sessionId">,
): { sql: string; params: unknown[] } | undefined {
  const { appNames, userId } = filter;
  const newest = (where: string) =>
    `SELECT session_id, ingest_seq, ${EVENT_COLUMNS} FROM ${schema}.events e WHERE ${where} ORDER BY e.ingest_seq DESC LIMIT $1`;
  if (appNames === undefined) {
    // "ingest_seq > 0" holds for every row: it is what lets this query (and only it) use the partial store-wide index.
    return userId === undefined
      ? { sql: newest("e.ingest_seq > 0"), params: [limit] }
      : { sql: newest("e.user_id = $2"), params: [limit, userId] };
  }
  if (appNames.length === 0) return undefined;
  const apps = [...new Set(appNames)];
  const scoped = newest(
    userId === undefined ? "e.app_name = a.app_name" : "e.app_name = a.app_name AND e.user_id = $3",
  );
  return {
    sql: `SELECT r.* FROM unnest($2::text[]) AS a(app_name) CROSS JOIN LATERAL (${scoped}) r ORDER BY r.ingest_seq DESC LIMIT $1`,
    params: userId === undefined ? [limit, apps] : [limit, apps, userId],
  };
}

/** The PostgreSQL MemoryStore. Create it with PostgresStore.open(). */
export class PostgresStore implements MemoryStore {
  /** Sessions this process evicted past maxSessions. */
  sessionsEvicted = 0;
  /** Events this process trimmed past maxSessionEvents. */
  eventsTrimmed = 0;
  readonly backend = "postgres";
  readonly capabilities = { persistent: true, shared: true, retains: true };
  /** Long-term memories (src/store/memories/postgres.ts), in the same schema, pool and notice channel. */
  readonly memories: PostgresMemories;

  private readonly pool: pg.Pool;
  private readonly limits: StoreLimits;
  private readonly dedupe: { windowMs: number; maxIds: number };
  /** Apps whose events cap differs from the global one, passed to every append. */
  private readonly appEventCaps: Array<[string, number]>;
  /** The quoted schema, prefixed to every table name. */
  private readonly s: string;
  private readonly channel: string;
  private readonly listeners = new NoticeListeners();
  /** Prepared-statement name of each SQL text sent through the pool. */
  private readonly statementNames = new Map<string, string>();
  private readonly appends = new GroupCommit<AppendRequest, AppendResult>({
    maxInFlight: APPEND_BATCHES_IN_FLIGHT,
    maxBatchSize: APPEND_BATCH_BYTES,
    write: (batch) => this.writeAppends(batch),
  });
  private listenClient?: pg.Client;
  private reconnectTimer?: NodeJS.Timeout;
  private reconnectAttempt = 0;
  private closed = false;

  /** Opens the pool, applies pending migrations and starts listening; rejects UNAVAILABLE when unreachable, StoreIncompatibleError on a schema this release must not use. */
  static async open(options: PostgresStoreOptions): Promise<PostgresStore> {
    const store = new PostgresStore(options);
    try {
      await store.migrate();
      await store.memories.start();
      await store.listen();
    } catch (err) {
      await store.close();
      throw toMemoryError(err);
    }
    return store;
  }

  /** Creates the store without touching the database; open() is the usual way in. */
  constructor(private readonly options: PostgresStoreOptions) {
    this.limits = options.limits;
    this.dedupe = dedupeWindow(options.limits);
    this.appEventCaps = appEventCaps(options.limits);
    this.s = escapeIdentifier(options.schema);
    this.channel = channelName(options.schema);
    const queryTimeout = options.queryTimeoutMs ?? 15_000;
    this.pool = new Pool({
      connectionString: options.url,
      max: options.poolSize ?? 10,
      connectionTimeoutMillis: options.connectTimeoutMs ?? 5000,
      // The server gives up first (and releases locks); the client bound catches a silent network.
      statement_timeout: queryTimeout,
      query_timeout: queryTimeout + 1000,
      idle_in_transaction_session_timeout: queryTimeout * 2,
      keepAlive: true,
      application_name: `engram:${options.schema}`.slice(0, 63),
    });
    // An idle pooled connection that dies (restart, pg_terminate_backend) is
    // dropped by the pool; without a listener the event would crash the process.
    this.pool.on("error", () => {});
    this.memories = new PostgresMemories({
      schema: this.s,
      schemaName: options.schema,
      channel: this.channel,
      query: (sql, params, call, shape) => this.query(sql, params, call, shape),
      transaction: (fn, call) => this.attempt(() => this.transaction(fn, call)),
    });
  }

  async createSession(input: NewSession, call?: StoreCall): Promise<SessionRecord> {
    return this.attempt(async (retried) => {
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
    return this.attempt(async () => {
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
    const session = await this.attempt(() => this.selectSession(sessionId, call));
    return session && isExpectedIncarnation(session.incarnation, call) ? session : undefined;
  }

  async listSessions(query: SessionQuery, call?: StoreCall): Promise<SessionRecord[]> {
    // Equality only, never LIKE: app and user names are data, not patterns.
    const where: string[] = [];
    const params: unknown[] = [];
    const add = (sql: string, value: unknown) => {
      params.push(value);
      where.push(sql.replace("?", `$${params.length}`));
    };
    if (query.appName !== undefined) add("app_name = ?", query.appName);
    if (query.userId !== undefined) add("user_id = ?", query.userId);
    if (query.afterSessionId !== undefined) add("session_id > ?", query.afterSessionId);
    params.push(query.limit);
    const sql =
      `SELECT ${SESSION_COLUMNS} FROM ${this.s}.sessions` +
      (where.length > 0 ? ` WHERE ${where.join(" AND ")}` : "") +
      ` ORDER BY session_id LIMIT $${params.length}`;
    const { rows } = await this.query<SessionRow>(sql, params, call);
    return rows.map(toSession);
  }

  async updateSession(sessionId: string, update: SessionUpdate, call?: StoreCall): Promise<SessionRecord> {
    return this.attempt(() =>
      this.transaction(async (client) => {
        const { rows } = await client.query<SessionRow>(
          `SELECT ${SESSION_COLUMNS} FROM ${this.s}.sessions WHERE session_id = $1 FOR UPDATE`,
          [sessionId],
        );
        if (rows.length === 0) throw sessionNotFound(sessionId);
        const session = toSession(rows[0]);
        // Under the row lock: the session cannot be replaced before this transaction ends.
        checkIncarnation(sessionId, session.incarnation, call);
        if (update.expectedVersion !== undefined && update.expectedVersion !== session.version)
          throw versionConflict(update.expectedVersion, session.version);
        await this.writeState(client, session, splitStateDelta(update.stateDelta));
        const updated = await client.query<SessionRow>(
          `UPDATE ${this.s}.sessions SET metadata = COALESCE($2::jsonb, metadata), updated_at = $3
           WHERE session_id = $1 RETURNING ${SESSION_COLUMNS}`,
          [sessionId, update.metadata ? JSON.stringify(update.metadata) : null, iso(update.now)],
        );
        return toSession(updated.rows[0]);
      }, call),
    );
  }

  async sharedState(appName: string, userId: string, call?: StoreCall): Promise<SharedState> {
    const { rows } = await this.query<{ app: JsonObject | null; user: JsonObject | null }>(
      `SELECT (SELECT state FROM ${this.s}.app_state WHERE app_name = $1) AS app,
              (SELECT state FROM ${this.s}.user_state WHERE app_name = $1 AND user_id = $2) AS user`,
      [appName, userId],
      call,
    );
    return { app: rows[0].app ?? {}, user: rows[0].user ?? {} };
  }

  async deleteSession(sessionId: string, call?: StoreCall): Promise<boolean> {
    const incarnation = call?.expectedIncarnation;
    if (incarnation === undefined) {
      const { rows } = await this.query(
        this.deleteSessionsSql("session_id = $3", ""),
        [this.channel, this.slot(), sessionId],
        call,
      );
      return rows.length > 0;
    }
    const { rows } = await this.query(
      this.deleteSessionsSql("session_id = $3 AND incarnation = $4", ""),
      [this.channel, this.slot(), sessionId, incarnation],
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
    // Every event carries a unique id (clients' or a generated UUID) and goes
    // through the id lookup, so re-running after an unknown commit outcome
    // returns what the first try stored instead of appending twice.
    timeLeft(call?.deadline); // a call already past its deadline is refused before it queues
    const contents = events.map((e) => JSON.stringify(e.content));
    const metadata = events.map((e) => JSON.stringify(e.metadata));
    let bytes = 0;
    for (let i = 0; i < events.length; i++)
      bytes += contents[i].length + metadata[i].length + APPEND_EVENT_OVERHEAD_BYTES;
    // An append that changes state runs in a transaction of its own (appendWithState); the rest are group-committed.
    const request: AppendRequest = {
      sessionId,
      events,
      contents,
      metadata,
      expectedSeq,
      incarnation: call?.expectedIncarnation,
    };
    if (events.some((e) => e.stateDelta)) return this.appendWithState(request, call);
    // Keyed by session: append_many_checked takes each session at most once per batch.
    return this.appends.submit(request, bytes, call?.deadline, sessionId);
  }

  async readEvents(sessionId: string, query: EventQuery, call?: StoreCall): Promise<EventPage> {
    const types = query.eventTypes && query.eventTypes.length > 0 ? [...query.eventTypes] : null;
    const page = await this.readRange(sessionId, "ASC", query.afterSeq ?? -1, types, query.limit, call);
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
    const page = await this.readRange(sessionId, "DESC", -1, types, limit, call);
    page.events.reverse();
    return page;
  }

  async listRecentEvents(limit: number, filter: RecentEventsFilter = {}, call?: StoreCall): Promise<StoredEvent[]> {
    if (filter.sessionId !== undefined) return (await this.readTail(filter.sessionId, limit, undefined, call)).events;
    const query = recentEventsQuery(this.s, limit, filter);
    if (!query) return [];
    const { rows } = await this.query<EventRow & { session_id: string }>(query.sql, query.params, call);
    return rows.reverse().map((row) => toEvent(row.session_id, row));
  }

  async stats(call?: StoreCall): Promise<StoreStats> {
    const { rows } = await this.query<{ sessions: string; events: string }>(
      `SELECT coalesce(sum(sessions), 0) AS sessions, coalesce(sum(events), 0) AS events FROM ${this.s}.counters`,
      [],
      call,
    );
    return { totalSessions: Number(rows[0].sessions), totalEvents: Number(rows[0].events) };
  }

  async cleanup(cutoff: number, scope: CleanupScope = {}, call?: StoreCall): Promise<number> {
    let total = 0;
    // NULL parameters leave their filter out; one statement text, prepared once. Equality only, never
    // LIKE: app and user names are data, not patterns.
    const filter =
      "updated_at < $3 AND ($4::text IS NULL OR app_name = $4) AND ($5::text IS NULL OR user_id = $5) AND ($6::text[] IS NULL OR app_name <> ALL($6::text[]))";
    for (;;) {
      // SKIP LOCKED: a session locked by an append is being updated right now, so it is not stale.
      const { rows } = await this.query(
        this.deleteSessionsSql(filter, `ORDER BY updated_at, session_id LIMIT ${CLEANUP_BATCH} FOR UPDATE SKIP LOCKED`),
        [
          this.channel,
          this.slot(),
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
    await this.query(
      `INSERT INTO ${this.s}.erasures (app_name, user_id, token) VALUES ($1, $2, $3)
       ON CONFLICT (app_name, user_id) DO UPDATE SET token = excluded.token, started_at = now()`,
      [appName, userId, token],
      call,
    );
    const erased: ErasureResult = { sessions: 0, events: 0, memories: 0 };
    // The user's sessions in id order, as many as hold ERASE_BATCH_EVENTS events together (at least one):
    // each statement is one bounded transaction, and each session goes whole or not at all. No SKIP
    // LOCKED: a session an append holds is waited for, not left behind.
    const victims = `session_id IN (
        SELECT session_id FROM (
          SELECT session_id, head_seq - first_seq + 1 AS n, sum(head_seq - first_seq + 1) OVER (ORDER BY session_id) AS running
          FROM ${this.s}.sessions WHERE app_name = $3 AND user_id = $4 ORDER BY session_id LIMIT ${ERASE_BATCH_SESSIONS}
        ) page WHERE running - n < $5
      )`;
    for (;;) {
      const { rows } = await this.query<{ events: string }>(
        this.deleteSessionsSql(victims, ""),
        [this.channel, this.slot(), appName, userId, ERASE_BATCH_EVENTS],
        call,
      );
      if (rows.length === 0) break;
      erased.sessions += rows.length;
      for (const row of rows) erased.events += Number(row.events);
    }
    erased.memories = await this.memories.eraseUser(appName, userId);
    await this.query(`DELETE FROM ${this.s}.user_state WHERE app_name = $1 AND user_id = $2`, [appName, userId], call);
    await this.query(
      `DELETE FROM ${this.s}.erasures WHERE app_name = $1 AND user_id = $2 AND token = $3`,
      [appName, userId, token],
      call,
    );
    return erased;
  }

  async resumeErasures(): Promise<ResumedErasures> {
    const { rows } = await this.query<{ app_name: string; user_id: string }>(
      `SELECT app_name, user_id FROM ${this.s}.erasures ORDER BY started_at`,
    );
    return resumeEach(
      rows.map((row) => ({ appName: row.app_name, userId: row.user_id })),
      (appName, userId) => this.deleteUserData(appName, userId),
    );
  }

  subscribe(sessionId: string, listener: NoticeListener): () => void {
    return this.listeners.subscribe(sessionId, listener);
  }

  async ping(call?: StoreCall): Promise<void> {
    await this.query("SELECT 1", [], call);
  }

  async describeDurability(): Promise<StoreDurability> {
    const { rows } = await this.query<Record<string, string>>(
      `SELECT current_setting('synchronous_commit') AS synchronous_commit, current_setting('fsync') AS fsync,
              current_setting('wal_level') AS wal_level, current_setting('synchronous_standby_names') AS synchronous_standby_names`,
    );
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
    clearTimeout(this.reconnectTimer);
    this.listeners.clear();
    this.memories.close();
    const client = this.listenClient;
    this.listenClient = undefined;
    await Promise.allSettled([client?.end(), this.pool.end()]);
  }

  /** Applies pending migrations in one transaction under the schema's advisory lock. */
  async migrate(): Promise<void> {
    const files = readdirSync(MIGRATIONS_DIR)
      .filter((f) => /^\d{4}_.*\.sql$/.test(f))
      .sort();
    await this.transaction(async (client) => {
      // Replicas starting together queue here; the first applies, the rest find nothing pending.
      await client.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [
        `engram:migrate:${this.options.schema}`,
      ]);
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${this.s}`);
      await client.query(`SET LOCAL search_path TO ${this.s}`);
      await client.query(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
      );
      const { rows } = await client.query<{ version: number }>("SELECT version FROM schema_migrations");
      const applied = new Set(rows.map((r) => r.version));
      // Refused before anything is applied (and the throw rolls the transaction back).
      const problem = schemaVersionProblem(this.options.schema, [...applied], files.map(migrationVersion));
      if (problem) throw new StoreIncompatibleError(problem);
      for (const file of files) {
        const version = migrationVersion(file);
        if (applied.has(version)) continue;
        await client.query(readFileSync(path.join(MIGRATIONS_DIR, file), "utf8"));
        await client.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [version, file]);
      }
    });
  }

  /**
   * Writes a batch of appends with one append_many_checked statement
   * (migrations 0006 and 0015: the sessions' row locks, each append's
   * expected incarnation checked as its lock is taken, then the retry
   * lookups, writes, trims, heads and counters for the whole batch, and the
   * notices; one
   * transaction, each append answered on its own). A
   * broken connection retries the whole batch: every append in it is
   * idempotent by event id. A session another transaction holds is skipped
   * ('busy') and written alone, outside the batch slots, so a held session
   * never stalls other sessions' appends; and if the statement fails for
   * another reason, each append is written alone, so the failure lands only
   * on the append that caused it.
   */
  private async writeAppends(batch: Pending<AppendRequest, AppendResult>[]): Promise<void> {
    // The batch waits as long as its most patient caller; one without a deadline, up to the statement timeout.
    const deadline = batch.some((p) => p.deadline === undefined)
      ? undefined
      : Math.max(...batch.map((p) => p.deadline!));
    let rows: AppendRow[];
    try {
      rows = await this.attempt(() =>
        this.appendBatchQuery(
          batch.map((p) => p.request),
          true,
          deadline,
        ),
      );
    } catch (err) {
      if (batch.length === 1 || isUnavailable(err)) {
        for (const p of batch) p.reject(err);
      } else {
        for (const p of batch) this.writeAlone(p);
      }
      return;
    }
    const byAppend: AppendRow[][] = batch.map(() => []);
    for (const row of rows) byAppend[row.idx - 1].push(row);
    batch.forEach((p, i) => {
      if (byAppend[i].at(-1)?.status === "busy") this.writeAlone(p);
      else this.settleAppend(p, byAppend[i]);
    });
  }

  /**
   * An append whose events carry state deltas: append_many_checked and the
   * state changes of the events it appended (never of retries) in one
   * transaction, so a refused append changes no state and a state past a cap
   * appends nothing. Its notice (sent at commit) carries the head only;
   * readers read the events back, deltas included.
   */
  private async appendWithState(request: AppendRequest, call: StoreCall | undefined): Promise<AppendResult> {
    return this.attempt(() =>
      this.transaction(async (client) => {
        const sql = this.appendBatchSql();
        const rows = (await client.query<AppendRow>(sql, this.appendBatchParams([request], false, undefined))).rows;
        const result = this.appendOutcome(request, rows, false);
        if (result.replayed) return result;
        const changes = splitStateDelta(undefined);
        const seqs: number[] = [];
        const deltas: string[] = [];
        request.events.forEach((e, i) => {
          const stored = result.events[i];
          // A retry in the batch answers its original, whose id is the same but which was stored before.
          if (!e.stateDelta || rows.some((row) => row.status === null && row.event_id === e.eventId)) return;
          addChanges(changes, splitStateDelta(e.stateDelta));
          seqs.push(stored.seq);
          deltas.push(JSON.stringify(e.stateDelta));
        });
        if (!noChanges(changes)) {
          const { rows: sessions } = await client.query<SessionRow>(
            `SELECT ${SESSION_COLUMNS} FROM ${this.s}.sessions WHERE session_id = $1`,
            [request.sessionId],
          );
          await this.writeState(client, toSession(sessions[0]), changes);
        }
        if (seqs.length > 0) {
          await client.query(
            `UPDATE ${this.s}.events e SET state_delta = d.delta::jsonb
             FROM unnest($2::bigint[], $3::text[]) AS d(seq, delta) WHERE e.session_id = $1 AND e.seq = d.seq`,
            [request.sessionId, seqs, deltas],
          );
        }
        // Counted here, not in appendOutcome: a state refused above rolls the trim back with the append.
        this.eventsTrimmed += Number(rows[rows.length - 1].trimmed ?? 0);
        return result;
      }, call),
    );
  }

  /**
   * Applies state changes to a session locked by this transaction, its
   * user's and its app's state (locked in that order), all or none: each is
   * checked against the caps of src/store/state.ts before anything is
   * written. Bumps the session's version.
   */
  private async writeState(client: pg.PoolClient, session: SessionRecord, changes: ScopedChanges): Promise<void> {
    const { appName, userId } = session;
    let user: JsonObject | undefined;
    let app: JsonObject | undefined;
    if (changes.user.size > 0) {
      await client.query(
        `INSERT INTO ${this.s}.user_state (app_name, user_id, state) VALUES ($1, $2, '{}') ON CONFLICT DO NOTHING`,
        [appName, userId],
      );
      const { rows } = await client.query<{ state: JsonObject }>(
        `SELECT state FROM ${this.s}.user_state WHERE app_name = $1 AND user_id = $2 FOR UPDATE`,
        [appName, userId],
      );
      user = applyChanges(rows[0].state, changes.user);
      checkStateCaps("state_delta", "user", user);
    }
    if (changes.app.size > 0) {
      await client.query(`INSERT INTO ${this.s}.app_state (app_name, state) VALUES ($1, '{}') ON CONFLICT DO NOTHING`, [
        appName,
      ]);
      const { rows } = await client.query<{ state: JsonObject }>(
        `SELECT state FROM ${this.s}.app_state WHERE app_name = $1 FOR UPDATE`,
        [appName],
      );
      app = applyChanges(rows[0].state, changes.app);
      checkStateCaps("state_delta", "app", app);
    }
    const own = applyChanges(session.state, changes.session);
    checkStateCaps("state_delta", "session", own);
    if (user)
      await client.query(`UPDATE ${this.s}.user_state SET state = $3 WHERE app_name = $1 AND user_id = $2`, [
        appName,
        userId,
        JSON.stringify(user),
      ]);
    if (app)
      await client.query(`UPDATE ${this.s}.app_state SET state = $2 WHERE app_name = $1`, [
        appName,
        JSON.stringify(app),
      ]);
    await client.query(`UPDATE ${this.s}.sessions SET state = $2, version = version + 1 WHERE session_id = $1`, [
      session.sessionId,
      JSON.stringify(own),
    ]);
  }

  /** One append in its own statement, waiting for its session's row lock (up to its deadline); not counted in the batch slots. */
  private writeAlone(p: Pending<AppendRequest, AppendResult>): void {
    this.attempt(() => this.appendBatchQuery([p.request], false, p.deadline)).then(
      (rows) => this.settleAppend(p, rows),
      (err: unknown) => p.reject(err),
    );
  }

  private settleAppend(p: Pending<AppendRequest, AppendResult>, rows: AppendRow[]): void {
    try {
      p.resolve(this.appendOutcome(p.request, rows));
    } catch (err) {
      p.reject(err);
    }
  }

  private async appendBatchQuery(
    requests: AppendRequest[],
    skipLocked: boolean,
    deadline: number | undefined,
  ): Promise<AppendRow[]> {
    const left = timeLeft(deadline);
    const params = this.appendBatchParams(requests, skipLocked, left);
    return (await this.pool.query<AppendRow>(this.statement(this.appendBatchSql(), params, left))).rows;
  }

  /** The append_many_checked statement (migration 0015: append_many_retained with each append's expected incarnation). */
  private appendBatchSql(): string {
    return `SELECT * FROM ${this.s}.append_many_checked($1::text[], $2::bigint[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], $10, $11::text[], $12::bigint[], $13, $14, $15, $16, $17, $18, $19, $20::timestamptz, $21::text[])`;
  }

  /** append_many_checked's arguments for a batch; `left`: the lock timeout in ms, or undefined for none. */
  private appendBatchParams(requests: AppendRequest[], skipLocked: boolean, left: number | undefined): unknown[] {
    const events = requests.flatMap((r) => r.events);
    return [
      requests.map((r) => r.sessionId),
      requests.map((r) => r.expectedSeq ?? null),
      requests.flatMap((r, i) => r.events.map(() => i + 1)),
      events.map((e) => e.eventId),
      events.map((e) => e.eventType),
      requests.flatMap((r) => r.contents),
      requests.flatMap((r) => r.metadata),
      events.map((e) => iso(e.timestamp)),
      events.map(fingerprintOf),
      this.limits.maxSessionEvents,
      this.appEventCaps.map(([app]) => app),
      this.appEventCaps.map(([, cap]) => cap),
      this.dedupe.windowMs,
      this.dedupe.maxIds,
      skipLocked,
      this.slot(),
      this.channel,
      MAX_NOTIFY_BYTES,
      left ?? null,
      iso(Date.now()),
      requests.map((r) => r.incarnation ?? null),
    ];
  }

  /** One append's answer from its rows of append_many_checked: the retried events' rows, then its outcome row. */
  private appendOutcome(
    { sessionId, events, expectedSeq }: AppendRequest,
    rows: AppendRow[],
    countTrimmed = true,
  ): AppendResult {
    const outcome = rows[rows.length - 1];
    const headSeq = Number(outcome.head_seq);
    switch (outcome.status) {
      case "not_found":
        throw sessionNotFound(sessionId);
      case "duplicate":
        throw duplicateEventId(outcome.event_id!);
      case "conflict":
        throw seqConflict(expectedSeq!, headSeq);
    }
    const originals = new Map(rows.slice(0, -1).map((row) => [row.event_id!, row as EventRow]));
    if (outcome.status === "replayed")
      return { events: events.map((e) => retried(sessionId, e, originals.get(e.eventId)!)), replayed: true };
    if (countTrimmed) this.eventsTrimmed += Number(outcome.trimmed ?? 0);
    return { events: this.planAppend(sessionId, events, originals, headSeq), replayed: false };
  }

  /** The appended batch as stored: retries as first stored, new events numbered from headSeq in order (as append_many_checked does). */
  private planAppend(
    sessionId: string,
    events: readonly NewEvent[],
    originals: Map<string, EventRow>,
    headSeq: number,
  ): StoredEvent[] {
    let head = headSeq;
    return events.map((e) => {
      const original = originals.get(e.eventId);
      if (original) return retried(sessionId, e, original);
      const event: StoredEvent = {
        sessionId,
        seq: ++head,
        eventId: e.eventId,
        eventType: e.eventType,
        content: e.content,
        metadata: e.metadata,
        timestamp: e.timestamp,
      };
      if (e.stateDelta) event.stateDelta = e.stateDelta;
      return event;
    });
  }

  /** One statement, so the session's bounds and its events come from the same snapshot. */
  private async readRange(
    sessionId: string,
    order: "ASC" | "DESC",
    afterSeq: number,
    types: string[] | null,
    limit: number,
    call: StoreCall | undefined,
  ): Promise<EventPage> {
    const { rows } = await this.query<{ head_seq: string; first_seq: string; incarnation: string } & Partial<EventRow>>(
      `SELECT s.head_seq, s.first_seq, s.incarnation, e.* FROM ${this.s}.sessions s
       LEFT JOIN LATERAL (
         SELECT ${EVENT_COLUMNS} FROM ${this.s}.events
         WHERE session_id = s.session_id AND seq > $2 AND ($3::text[] IS NULL OR event_type = ANY($3::text[]))
         ORDER BY seq ${order} LIMIT $4
       ) e ON true
       WHERE s.session_id = $1`,
      [sessionId, afterSeq, types, limit],
      call,
    );
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
    const { rows } = await this.poolQuery<SessionRow>(
      `SELECT ${SESSION_COLUMNS} FROM ${this.s}.sessions WHERE session_id = $1`,
      [sessionId],
      call,
    );
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
    const { rows } = await this.poolQuery<SessionRow & { total_sessions: string }>(
      `WITH created AS (
         INSERT INTO ${this.s}.sessions (session_id, app_name, user_id, metadata, created_at, updated_at, incarnation)
         VALUES ($1, $2, $3, $4::jsonb, $5::timestamptz, $5::timestamptz, $7)
         ON CONFLICT (session_id) DO NOTHING
         RETURNING ${SESSION_COLUMNS}
       ), counted AS (
         UPDATE ${this.s}.counters SET sessions = sessions + 1 WHERE slot = $6 AND EXISTS (SELECT 1 FROM created)
       )
       -- The snapshot predates this statement's own count: add it back.
       SELECT created.*, (SELECT coalesce(sum(sessions), 0) FROM ${this.s}.counters) + 1 AS total_sessions FROM created`,
      [
        input.sessionId,
        input.appName,
        input.userId,
        JSON.stringify(input.metadata),
        iso(input.now),
        this.slot(),
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
    await this.transaction(async (client) => {
      // One evictor at a time, re-counting under the lock: concurrent creators must not each evict 10%.
      await client.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [
        `engram:evict:${this.options.schema}`,
      ]);
      const { rows } = await client.query<{ n: string }>(
        `SELECT coalesce(sum(sessions), 0) AS n FROM ${this.s}.counters`,
      );
      if (Number(rows[0].n) <= this.limits.maxSessions) return;
      const count = evictionCount(this.limits.maxSessions);
      const { rows: gone } = await client.query(
        this.deleteSessionsSql("true", `ORDER BY updated_at, session_id LIMIT ${count} FOR UPDATE SKIP LOCKED`),
        [this.channel, this.slot()],
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
    const countSql = `SELECT count(*) AS n FROM ${this.s}.sessions WHERE app_name = $1`;
    const { rows } = await this.query<{ n: string }>(countSql, [appName], call);
    if (Number(rows[0].n) <= cap) return;
    await this.transaction(async (client) => {
      await client.query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", [
        `engram:evict:${this.options.schema}:${appName}`,
      ]);
      const { rows: again } = await client.query<{ n: string }>(countSql, [appName]);
      if (Number(again[0].n) <= cap) return;
      const { rows: gone } = await client.query(
        this.deleteSessionsSql(
          "app_name = $3",
          `ORDER BY updated_at, session_id LIMIT ${evictionCount(cap)} FOR UPDATE SKIP LOCKED`,
        ),
        [this.channel, this.slot(), appName],
      );
      this.sessionsEvicted += gone.length;
    }, call);
  }

  /**
   * One statement deleting the chosen sessions (events go by cascade),
   * uncounting them and sending each a deleted notice at commit. Parameters:
   * $1 channel, $2 counter slot, then whatever `filter` uses.
   */
  private deleteSessionsSql(filter: string, pick: string): string {
    return `WITH victims AS (
        SELECT session_id FROM ${this.s}.sessions WHERE ${filter} ${pick}
      ), gone AS (
        DELETE FROM ${this.s}.sessions s USING victims v WHERE s.session_id = v.session_id
        RETURNING s.session_id, s.incarnation, s.head_seq - s.first_seq + 1 AS events
      ), counted AS (
        UPDATE ${this.s}.counters
        SET sessions = sessions - (SELECT count(*) FROM gone), events = events - (SELECT coalesce(sum(events), 0) FROM gone)
        WHERE slot = $2 AND EXISTS (SELECT 1 FROM gone)
      )
      SELECT session_id, events,
             CASE WHEN octet_length(session_id) < ${MAX_NOTIFY_BYTES - 20}
                  THEN pg_notify($1, json_build_object('s', session_id, 'd', 1, 'i', incarnation)::text) END AS notified
      FROM gone`;
  }

  /** A random counters slot: spreads concurrent writers over rows, and any slot keeps the sum exact. */
  private slot(): number {
    return randomInt(COUNTER_SLOTS);
  }

  /** One pooled statement, retried once if its connection broke, errors as MemoryError. */
  private async query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params: unknown[] = [],
    call?: StoreCall,
    shape: StatementShape = {},
  ): Promise<pg.QueryResult<R>> {
    return this.attempt(() => this.poolQuery<R>(sql, params, call, shape));
  }

  /**
   * One statement on a pooled connection, bounded by the call's deadline when
   * it has one: the client stops waiting then, and the pool discards that
   * connection (its state is unknown), so a dead backend cannot hold
   * connections longer than the callers wait.
   */
  private async poolQuery<R extends pg.QueryResultRow = pg.QueryResultRow>(
    sql: string,
    params: unknown[],
    call: StoreCall | undefined,
    shape: StatementShape = {},
  ): Promise<pg.QueryResult<R>> {
    return this.pool.query<R>(this.statement(sql, params, timeLeft(call?.deadline), shape));
  }

  /**
   * A pooled statement as a named prepared statement: each connection parses
   * and plans it once, then sends only Bind/Execute, where an unnamed one is
   * parsed and planned by PostgreSQL at every call. Every text is one of a
   * few fixed per store (the schema is part of it), so the names stay few.
   * A "custom" statement stays unnamed (see StatementShape).
   */
  private statement(
    sql: string,
    values: unknown[],
    queryTimeout: number | undefined,
    shape: StatementShape = {},
  ): pg.QueryConfig {
    // Bounded client-side too: past it the pool discards the connection, whose state is then unknown.
    const config =
      queryTimeout === undefined ? { text: sql, values } : { text: sql, values, query_timeout: queryTimeout };
    if (shape.plan === "custom") return config as pg.QueryConfig;
    let name = this.statementNames.get(sql);
    if (name === undefined) {
      name = `engram_${createHash("sha256").update(sql).digest("hex").slice(0, 24)}`;
      this.statementNames.set(sql, name);
    }
    return { ...config, name } as pg.QueryConfig;
  }

  /**
   * Runs `fn`, again when an established connection broke under it (the
   * outcome of a commit is then unknown; every operation here is safe to
   * repeat), and maps the final error to a MemoryError. A backend restart or
   * pg_terminate_backend kills every idle pooled connection at once, and the
   * pool learns of each death only when its socket is read, so one retry could
   * land on another dead connection: retry at most once per pooled connection
   * (each dead one fails at once), yielding first so pending socket errors
   * evict the dead ones. A refused or timed-out connect is not retried.
   */
  private async attempt<T>(fn: (retried: boolean) => Promise<T>): Promise<T> {
    const maxRetries = this.pool.options.max ?? 10;
    for (let retries = 0; ; retries++) {
      try {
        return await fn(retries > 0);
      } catch (err) {
        if (this.closed || retries >= maxRetries || !isConnectionLost(err)) throw toMemoryError(err);
      }
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /** BEGIN … COMMIT on one pooled connection, bounded by the call's deadline when it has one; ROLLBACK on error; a broken connection is discarded. */
  private async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>, call?: StoreCall): Promise<T> {
    const client = await this.pool.connect();
    // While checked out the pool does not listen: an error between statements must not crash the process.
    let broken: unknown;
    const onError = (err: unknown) => (broken ??= err);
    client.on("error", onError);
    try {
      // The server aborts the transaction (and frees its locks) at the call's deadline.
      const deadline = call?.deadline;
      await client.query(
        deadline === undefined
          ? "BEGIN"
          : `BEGIN; SET LOCAL statement_timeout = ${Math.max(1, Math.ceil(deadline - Date.now()))}`,
      );
      const result = await fn(client);
      await client.query("COMMIT");
      return result;
    } catch (err) {
      if (!broken && !isUnavailable(err)) {
        await client.query("ROLLBACK").catch((rollbackErr: unknown) => (broken = rollbackErr));
      } else {
        broken ??= err;
      }
      throw err;
    } finally {
      client.removeListener("error", onError);
      client.release(broken instanceof Error ? broken : broken ? true : undefined);
    }
  }

  /** Opens the LISTEN connection; notices from every replica arrive on it. */
  private async listen(): Promise<void> {
    const client = new Client({
      connectionString: this.options.url,
      connectionTimeoutMillis: this.options.connectTimeoutMs ?? 5000,
      keepAlive: true,
      application_name: `engram:${this.options.schema}:listen`.slice(0, 63),
    });
    client.on("error", () => this.listenerLost(client));
    client.on("end", () => this.listenerLost(client));
    client.on("notification", (msg) => this.onNotification(msg.payload));
    try {
      await client.connect();
      await client.query(`LISTEN ${escapeIdentifier(this.channel)}`);
    } catch (err) {
      void client.end().catch(() => {});
      throw toMemoryError(err);
    }
    if (this.closed) {
      void client.end().catch(() => {});
      return;
    }
    this.listenClient = client;
  }

  private listenerLost(client: pg.Client): void {
    if (this.closed || client !== this.listenClient) return;
    this.listenClient = undefined;
    void client.end().catch(() => {});
    this.scheduleListen();
  }

  /** Reconnects with capped exponential backoff and jitter, forever, until close(). */
  private scheduleListen(): void {
    if (this.closed || this.reconnectTimer) return;
    const delay =
      Math.min(LISTEN_BACKOFF_MAX_MS, LISTEN_BACKOFF_MIN_MS * 2 ** this.reconnectAttempt++) * (0.5 + Math.random() / 2);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.listen().then(
        () => {
          this.reconnectAttempt = 0;
          return this.resync();
        },
        () => this.scheduleListen(),
      );
    }, delay);
    this.reconnectTimer.unref();
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
      rows = (
        await this.query<{ session_id: string; head_seq: string }>(
          `SELECT session_id, head_seq FROM ${this.s}.sessions WHERE session_id = ANY($1::text[])`,
          [ids],
        )
      ).rows;
    } catch {
      return; // readers' heartbeat re-read still catches up
    }
    const heads = new Map(rows.map((r) => [r.session_id, Number(r.head_seq)]));
    for (const sessionId of ids) {
      const headSeq = heads.get(sessionId);
      this.listeners.notify(headSeq === undefined ? { sessionId, deleted: true } : { sessionId, headSeq });
    }
  }

  private onNotification(payload: string | undefined): void {
    let parsed: { s?: unknown; h?: unknown; d?: unknown; i?: unknown; m?: unknown };
    try {
      parsed = JSON.parse(payload ?? "");
    } catch {
      return;
    }
    if (parsed.m !== undefined) return this.memories.onNotice(parsed);
    if (typeof parsed.s !== "string") return;
    if (parsed.d)
      this.listeners.notify({
        sessionId: parsed.s,
        deleted: true,
        incarnation: typeof parsed.i === "string" ? parsed.i : undefined,
      });
    else if (typeof parsed.h === "number") this.listeners.notify({ sessionId: parsed.s, headSeq: parsed.h });
  }
}
