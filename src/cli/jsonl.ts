/**
 * The export format: JSON Lines, one session per line, each line the KAOS
 * `SessionMemory.to_dict()` shape — session_id, user_id, app_name, events
 * (each `MemoryEvent.to_dict()`: event_id, timestamp, event_type, content,
 * metadata), created_at, updated_at — plus the session's `metadata` and each
 * event's `seq` at export time. A KAOS LocalMemory reads it as is; Engram
 * re-imports it idempotently because every event keeps its event_id.
 */
import type { EventInput, JsonObject, JsonValue, MemoryEvent, Session } from "@engram-memory/client";
import { eventJson, iso } from "./output.js";

/** One exported event: KAOS MemoryEvent.to_dict() plus seq. */
export interface EventLine {
  event_id: string;
  timestamp: string;
  event_type: string;
  content: JsonValue;
  metadata: JsonObject;
  seq?: number;
}

/** One line of an export. */
export interface SessionLine {
  session_id: string;
  user_id: string;
  app_name: string;
  events: EventLine[];
  created_at: string;
  updated_at: string;
  metadata: JsonObject;
}

/** A line that is not a valid session record; the message names the line and field. */
export class LineError extends Error {
  override readonly name = "LineError";
}

/** The export line of a session and its events. */
export function toSessionLine(session: Session, events: MemoryEvent[]): SessionLine {
  return {
    session_id: session.sessionId,
    user_id: session.userId,
    app_name: session.appName,
    events: events.map((e) => {
      const { session_id: _omitted, ...rest } = eventJson(e);
      return rest;
    }),
    created_at: iso(session.createdAt),
    updated_at: iso(session.updatedAt),
    metadata: session.metadata,
  };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Parses and checks one line; throws LineError naming the line and the offending field. */
export function parseSessionLine(text: string, lineNo: number): SessionLine {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new LineError(`line ${lineNo}: not JSON (${(err as Error).message})`);
  }
  const fail = (field: string, why: string): never => {
    throw new LineError(`line ${lineNo}: ${field}: ${why}`);
  };
  if (!isObject(value)) return fail("(line)", "expected a JSON object (one session per line)");
  for (const field of ["session_id", "app_name", "user_id"]) {
    if (typeof value[field] !== "string" || value[field] === "") fail(field, "expected a non-empty string");
  }
  if (value.metadata !== undefined && value.metadata !== null && !isObject(value.metadata))
    fail("metadata", "expected an object");
  if (!Array.isArray(value.events)) fail("events", "expected an array");
  const events = (value.events as unknown[]).map((e, i): EventLine => {
    const at = `events[${i}]`;
    if (!isObject(e)) return fail(at, "expected an object");
    if (typeof e.event_id !== "string" || e.event_id === "")
      fail(`${at}.event_id`, "expected a non-empty string (it keeps re-imports idempotent)");
    if (typeof e.event_type !== "string" || e.event_type === "")
      fail(`${at}.event_type`, "expected a non-empty string");
    if (e.metadata !== undefined && e.metadata !== null && !isObject(e.metadata))
      fail(`${at}.metadata`, "expected an object");
    if (e.timestamp !== undefined && e.timestamp !== null && e.timestamp !== "") {
      if (typeof e.timestamp !== "string" || Number.isNaN(Date.parse(e.timestamp)))
        fail(`${at}.timestamp`, "expected an ISO 8601 date-time");
    }
    return {
      event_id: e.event_id as string,
      event_type: e.event_type as string,
      content: (e.content ?? null) as JsonValue,
      metadata: (e.metadata ?? {}) as JsonObject,
      timestamp: (e.timestamp as string | undefined) ?? "",
    };
  });
  return {
    session_id: value.session_id as string,
    app_name: value.app_name as string,
    user_id: value.user_id as string,
    metadata: (value.metadata ?? {}) as JsonObject,
    created_at: String(value.created_at ?? ""),
    updated_at: String(value.updated_at ?? ""),
    events,
  };
}

/** An exported event as the client's EventInput (same id, type, content, metadata and time). */
export function toEventInput(e: EventLine): EventInput {
  return {
    eventId: e.event_id,
    eventType: e.event_type,
    content: e.content,
    metadata: e.metadata,
    timestamp: e.timestamp ? new Date(e.timestamp) : undefined,
  };
}
