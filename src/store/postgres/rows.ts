/** The sessions driver's rows as PostgreSQL returns them, and as records. */
import { eventFingerprint } from "../fingerprint.js";
import { copyStateChange } from "../state.js";
import type { JsonObject, JsonValue, NewEvent, SessionRecord, StoredEvent } from "../types.js";

/** ISO 8601 in UTC: PostgreSQL parses it exactly, whatever the session's TimeZone. */
export const iso = (epochMs: number) => new Date(epochMs).toISOString();

/** Payload identity of a submitted event; generated ids carry none, so compute it. */
export const fingerprintOf = (e: NewEvent) => e.fingerprint || eventFingerprint(e.eventType, e.content, e.metadata, e);

export interface SessionRow {
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

export interface EventRow {
  seq: string;
  event_id: string;
  event_type: string;
  content: JsonValue;
  metadata: JsonObject;
  ts_ms: string;
  fingerprint?: string;
  /** Absent from append_many_retained's rows (the retry's own delta stands in: same fingerprint, same delta). */
  state_delta?: JsonObject | null;
  /** As state_delta: absent from append_many_retained's rows. */
  state_removals?: string[] | null;
  state_nulls_are_values?: boolean | null;
}

export function toSession(row: SessionRow): SessionRecord {
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

export function toEvent(sessionId: string, row: EventRow): StoredEvent {
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
  if (row.state_removals) event.stateRemovals = row.state_removals;
  if (row.state_nulls_are_values) event.stateNullsAreValues = true;
  return event;
}

/** A submitted event as stored at `seq`. */
export function storedAs(sessionId: string, seq: number, submitted: NewEvent): StoredEvent {
  const { eventId, eventType, content, metadata, timestamp } = submitted;
  return copyStateChange<StoredEvent>({ sessionId, seq, eventId, eventType, content, metadata, timestamp }, submitted);
}

/**
 * The answer to a retried event: its stored original, or for an event trimmed
 * inside the dedupe window (no content left: event_type is NULL) its seq with
 * the event as submitted.
 */
export function retried(sessionId: string, submitted: NewEvent, original: EventRow): StoredEvent {
  if (original.event_type === null) return storedAs(sessionId, Number(original.seq), submitted);
  return copyStateChange(toEvent(sessionId, original), submitted);
}
