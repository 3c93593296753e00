/**
 * Every statement of the sessions driver. Each text is built once per store
 * (sessionStatements), with the quoted schema in it, so a call sends a ready
 * string whose prepared-statement name is already known (database.ts); the
 * few whose shape follows the call (listSessionsQuery, recentEventsQuery,
 * deleteSessionsSql) are built from the same column lists. A module rather
 * than .sql files: the texts share those lists and the schema, which files
 * would need a substitution step for, and start-up reads no file for them.
 */
import { randomInt } from "node:crypto";
import type { RecentEventsFilter, SessionQuery } from "../types.js";

/** Slots of the counters table (see 0001_init.sql). */
const COUNTER_SLOTS = 16;
/** A random counters slot for a statement's counts: spreads concurrent writers over rows, and any slot keeps the sum exact. */
export const counterSlot = () => randomInt(COUNTER_SLOTS);
/** NOTIFY payloads must stay under 8000 bytes. */
export const MAX_NOTIFY_BYTES = 7900;
/** The statement taking a transaction-scoped advisory lock named by $1. */
export const ADVISORY_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";

/** Epoch milliseconds of a timestamptz column, exact (extract returns numeric). */
const ms = (column: string) => `(extract(epoch from ${column}) * 1000)::bigint`;
const SESSION_COLUMNS = `session_id, app_name, user_id, metadata, ${ms("created_at")} AS created_ms, ${ms("updated_at")} AS updated_ms, head_seq, first_seq, incarnation, state, version`;
const EVENT_COLUMNS = `seq, event_id, event_type, content, metadata, ${ms('"timestamp"')} AS ts_ms, state_delta, state_removals, state_nulls_are_values`;

/**
 * One statement deleting the chosen sessions (events go by cascade),
 * uncounting them and sending each a deleted notice at commit. Parameters:
 * $1 channel, $2 counter slot, then whatever `filter` uses. `s` is the quoted
 * schema name.
 */
export function deleteSessionsSql(s: string, filter: string, pick: string): string {
  return `WITH victims AS (
      SELECT session_id FROM ${s}.sessions WHERE ${filter} ${pick}
    ), gone AS (
      DELETE FROM ${s}.sessions s USING victims v WHERE s.session_id = v.session_id
      RETURNING s.session_id, s.incarnation, s.head_seq - s.first_seq + 1 AS events
    ), counted AS (
      UPDATE ${s}.counters
      SET sessions = sessions - (SELECT count(*) FROM gone), events = events - (SELECT coalesce(sum(events), 0) FROM gone)
      WHERE slot = $2 AND EXISTS (SELECT 1 FROM gone)
    )
    SELECT session_id, events,
           CASE WHEN octet_length(session_id) < ${MAX_NOTIFY_BYTES - 20}
                THEN pg_notify($1, json_build_object('s', session_id, 'd', 1, 'i', incarnation)::text) END AS notified
    FROM gone`;
}

/** The oldest sessions `filter` selects, `count` at most, skipping those an append holds: eviction's pick. */
export const evictionPick = (count: number) => `ORDER BY updated_at, session_id LIMIT ${count} FOR UPDATE SKIP LOCKED`;

/** A page of sessions by id, filtered by equality only, never LIKE: app and user names are data, not patterns. */
export function listSessionsQuery(s: string, query: SessionQuery): { sql: string; params: unknown[] } {
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
    `SELECT ${SESSION_COLUMNS} FROM ${s}.sessions` +
    (where.length > 0 ? ` WHERE ${where.join(" AND ")}` : "") +
    ` ORDER BY session_id LIMIT $${params.length}`;
  return { sql, params };
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

/** The range read: the session's bounds and a page of its events in `order`, one snapshot. */
const readRange = (s: string, order: "ASC" | "DESC") =>
  `SELECT s.head_seq, s.first_seq, s.incarnation, e.* FROM ${s}.sessions s
   LEFT JOIN LATERAL (
     SELECT ${EVENT_COLUMNS} FROM ${s}.events
     WHERE session_id = s.session_id AND seq > $2 AND ($3::text[] IS NULL OR event_type = ANY($3::text[]))
     ORDER BY seq ${order} LIMIT $4
   ) e ON true
   WHERE s.session_id = $1`;

/** The cleanup filter: NULL parameters leave theirs out, so it is one text, prepared once. */
const CLEANUP_FILTER =
  "updated_at < $3 AND ($4::text IS NULL OR app_name = $4) AND ($5::text IS NULL OR user_id = $5) AND ($6::text[] IS NULL OR app_name <> ALL($6::text[]))";

/**
 * A user's sessions in id order, as many as hold $5 events together (at
 * least one), `sessions` at most: each erasure statement is one bounded
 * transaction, and each session goes whole or not at all.
 */
const erasurePage = (s: string, sessions: number) => `session_id IN (
    SELECT session_id FROM (
      SELECT session_id, head_seq - first_seq + 1 AS n, sum(head_seq - first_seq + 1) OVER (ORDER BY session_id) AS running
      FROM ${s}.sessions WHERE app_name = $3 AND user_id = $4 ORDER BY session_id LIMIT ${sessions}
    ) page WHERE running - n < $5
  )`;

/** The fixed statements of one store; `s` is the quoted schema name. */
export function sessionStatements(s: string, batches: { cleanup: number; eraseSessions: number }) {
  return {
    selectSession: `SELECT ${SESSION_COLUMNS} FROM ${s}.sessions WHERE session_id = $1`,
    lockSession: `SELECT ${SESSION_COLUMNS} FROM ${s}.sessions WHERE session_id = $1 FOR UPDATE`,
    // The snapshot predates this statement's own count: add it back.
    insertSession: `WITH created AS (
        INSERT INTO ${s}.sessions (session_id, app_name, user_id, metadata, created_at, updated_at, incarnation)
        VALUES ($1, $2, $3, $4::jsonb, $5::timestamptz, $5::timestamptz, $7)
        ON CONFLICT (session_id) DO NOTHING
        RETURNING ${SESSION_COLUMNS}
      ), counted AS (
        UPDATE ${s}.counters SET sessions = sessions + 1 WHERE slot = $6 AND EXISTS (SELECT 1 FROM created)
      )
      SELECT created.*, (SELECT coalesce(sum(sessions), 0) FROM ${s}.counters) + 1 AS total_sessions FROM created`,
    updateSession: `UPDATE ${s}.sessions SET metadata = COALESCE($2::jsonb, metadata), updated_at = $3
      WHERE session_id = $1 RETURNING ${SESSION_COLUMNS}`,
    sessionHeads: `SELECT session_id, head_seq FROM ${s}.sessions WHERE session_id = ANY($1::text[])`,
    countSessions: `SELECT coalesce(sum(sessions), 0) AS n FROM ${s}.counters`,
    countAppSessions: `SELECT count(*) AS n FROM ${s}.sessions WHERE app_name = $1`,
    deleteSession: deleteSessionsSql(s, "session_id = $3", ""),
    deleteSessionOfIncarnation: deleteSessionsSql(s, "session_id = $3 AND incarnation = $4", ""),
    // SKIP LOCKED: a session locked by an append is being updated right now, so it is not stale.
    cleanup: deleteSessionsSql(s, CLEANUP_FILTER, evictionPick(batches.cleanup)),
    // No SKIP LOCKED: a session an append holds is waited for, not left behind.
    eraseSessions: deleteSessionsSql(s, erasurePage(s, batches.eraseSessions), ""),
    readForward: readRange(s, "ASC"),
    readBackward: readRange(s, "DESC"),
    stats: `SELECT coalesce(sum(sessions), 0) AS sessions, coalesce(sum(events), 0) AS events FROM ${s}.counters`,
    sharedState: `SELECT (SELECT state FROM ${s}.app_state WHERE app_name = $1) AS app,
      (SELECT state FROM ${s}.user_state WHERE app_name = $1 AND user_id = $2) AS user`,
    createUserState: `INSERT INTO ${s}.user_state (app_name, user_id, state) VALUES ($1, $2, '{}') ON CONFLICT DO NOTHING`,
    lockUserState: `SELECT state FROM ${s}.user_state WHERE app_name = $1 AND user_id = $2 FOR UPDATE`,
    updateUserState: `UPDATE ${s}.user_state SET state = $3 WHERE app_name = $1 AND user_id = $2`,
    deleteUserState: `DELETE FROM ${s}.user_state WHERE app_name = $1 AND user_id = $2`,
    createAppState: `INSERT INTO ${s}.app_state (app_name, state) VALUES ($1, '{}') ON CONFLICT DO NOTHING`,
    lockAppState: `SELECT state FROM ${s}.app_state WHERE app_name = $1 FOR UPDATE`,
    updateAppState: `UPDATE ${s}.app_state SET state = $2 WHERE app_name = $1`,
    updateSessionState: `UPDATE ${s}.sessions SET state = $2, version = version + 1 WHERE session_id = $1`,
    setStateDeltas: `UPDATE ${s}.events e SET state_delta = d.delta::jsonb, state_removals = d.removals::jsonb,
      state_nulls_are_values = d.nulls_are_values
      FROM unnest($2::bigint[], $3::text[], $4::text[], $5::boolean[]) AS d(seq, delta, removals, nulls_are_values)
      WHERE e.session_id = $1 AND e.seq = d.seq`,
    /** append_many_checked (functions.sql). */
    appendBatch: `SELECT * FROM ${s}.append_many_checked($1::text[], $2::bigint[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[], $10, $11::text[], $12::bigint[], $13, $14, $15, $16, $17, $18, $19, $20::timestamptz, $21::text[])`,
    startErasure: `INSERT INTO ${s}.erasures (app_name, user_id, token) VALUES ($1, $2, $3)
      ON CONFLICT (app_name, user_id) DO UPDATE SET token = excluded.token, started_at = now()`,
    endErasure: `DELETE FROM ${s}.erasures WHERE app_name = $1 AND user_id = $2 AND token = $3`,
    pendingErasures: `SELECT app_name, user_id FROM ${s}.erasures ORDER BY started_at`,
    ping: "SELECT 1",
    durability: `SELECT current_setting('synchronous_commit') AS synchronous_commit, current_setting('fsync') AS fsync,
      current_setting('wal_level') AS wal_level, current_setting('synchronous_standby_names') AS synchronous_standby_names`,
  } as const;
}

/** The statements of one store, as sessionStatements builds them. */
export type SessionStatements = ReturnType<typeof sessionStatements>;
