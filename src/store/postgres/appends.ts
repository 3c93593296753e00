/**
 * Appends of the PostgreSQL driver: group-committed (group-commit.ts) into
 * one append_many_checked statement per batch (functions.sql: the sessions'
 * row locks, each append's expected incarnation checked as its lock is
 * taken, then the retry lookups, writes, trims, heads and counters for the
 * whole batch, and the notices; one transaction, each append answered on its
 * own). An append carrying state deltas runs in a transaction of its own.
 */
import { seqConflict, sessionNotFound } from "../../errors.js";
import { appEventCaps, dedupeWindow, duplicateEventId } from "../rules.js";
import { addChanges, hasStateChange, noChanges, splitStateChange } from "../state.js";
import type { AppendResult, JsonObject, JsonValue, NewEvent, StoreCall, StoredEvent, StoreLimits } from "../types.js";
import { type PostgresDatabase, timeLeft } from "./database.js";
import { isUnavailable } from "./error-mapping.js";
import { GroupCommit, type Pending } from "./group-commit.js";
import { type EventRow, fingerprintOf, iso, retried, type SessionRow, storedAs, toSession } from "./rows.js";
import { writeState } from "./state-writes.js";
import { counterSlot, MAX_NOTIFY_BYTES, type SessionStatements } from "./statements.js";

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

/** The PostgreSQL driver's appends. */
export class Appends {
  /** Events this process trimmed past maxSessionEvents. */
  eventsTrimmed = 0;
  private readonly batches = new GroupCommit<AppendRequest, AppendResult>({
    maxInFlight: APPEND_BATCHES_IN_FLIGHT,
    maxBatchSize: APPEND_BATCH_BYTES,
    write: (batch) => this.writeAppends(batch),
  });

  /** Apps whose events cap differs from the global one, passed to every append. */
  private readonly appEventCaps: Array<[string, number]>;
  private readonly dedupe: { windowMs: number; maxIds: number };

  /** `channel`: where each append's notice goes. */
  constructor(
    private readonly db: PostgresDatabase,
    private readonly sql: SessionStatements,
    private readonly limits: StoreLimits,
    private readonly channel: string,
  ) {
    this.appEventCaps = appEventCaps(limits);
    this.dedupe = dedupeWindow(limits);
  }

  /** MemoryStore.appendEvents. */
  async append(
    sessionId: string,
    events: readonly NewEvent[],
    expectedSeq: number | undefined,
    call: StoreCall | undefined,
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
    if (events.some(hasStateChange)) return this.appendWithState(request, call);
    // Keyed by session: append_many_checked takes each session at most once per batch.
    return this.batches.submit(request, bytes, call?.deadline, sessionId);
  }

  /**
   * Writes a batch of appends with one append_many_checked statement. A
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
      rows = await this.db.attempt(() =>
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
    const { sql } = this;
    return this.db.retriedTransaction(async (client) => {
      const rows = (await client.query<AppendRow>(sql.appendBatch, this.appendBatchParams([request], false, undefined)))
        .rows;
      const result = this.appendOutcome(request, rows, false);
      if (result.replayed) return result;
      const changes = splitStateChange(undefined);
      const seqs: number[] = [];
      const deltas: Array<string | null> = [];
      const removals: Array<string | null> = [];
      const nullsAreValues: boolean[] = [];
      request.events.forEach((e, i) => {
        const stored = result.events[i];
        // A retry in the batch answers its original, whose id is the same but which was stored before.
        if (!hasStateChange(e) || rows.some((row) => row.status === null && row.event_id === e.eventId)) return;
        addChanges(changes, splitStateChange(e));
        seqs.push(stored.seq);
        deltas.push(e.stateDelta ? JSON.stringify(e.stateDelta) : null);
        removals.push(e.stateRemovals ? JSON.stringify(e.stateRemovals) : null);
        nullsAreValues.push(!!e.stateNullsAreValues);
      });
      if (!noChanges(changes)) {
        const { rows: sessions } = await client.query<SessionRow>(sql.selectSession, [request.sessionId]);
        await writeState(client, sql, toSession(sessions[0]), changes);
      }
      if (seqs.length > 0)
        await client.query(sql.setStateDeltas, [request.sessionId, seqs, deltas, removals, nullsAreValues]);
      // Counted here, not in appendOutcome: a state refused above rolls the trim back with the append.
      this.eventsTrimmed += Number(rows[rows.length - 1].trimmed ?? 0);
      return result;
    }, call);
  }

  /** One append in its own statement, waiting for its session's row lock (up to its deadline); not counted in the batch slots. */
  private writeAlone(p: Pending<AppendRequest, AppendResult>): void {
    this.db
      .attempt(() => this.appendBatchQuery([p.request], false, p.deadline))
      .then(
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
    return (await this.db.pool.query<AppendRow>(this.db.statement(this.sql.appendBatch, params, left))).rows;
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
      counterSlot(),
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
    return { events: planAppend(sessionId, events, originals, headSeq), replayed: false };
  }
}

/** The appended batch as stored: retries as first stored, new events numbered from headSeq in order (as append_many_checked does). */
function planAppend(
  sessionId: string,
  events: readonly NewEvent[],
  originals: Map<string, EventRow>,
  headSeq: number,
): StoredEvent[] {
  let head = headSeq;
  return events.map((e) => {
    const original = originals.get(e.eventId);
    return original ? retried(sessionId, e, original) : storedAs(sessionId, ++head, e);
  });
}
