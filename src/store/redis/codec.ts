/**
 * The values the Redis store writes, in TypeScript: length-prefixed frames,
 * encoded events and session hashes. The Lua side of frames is
 * scripts/includes/frames.lua; both must agree byte for byte, since replicas
 * of different releases read each other's writes.
 *
 *   frame           "<byte length>:<bytes>"
 *   encoded event   frame(event type) frame(event id) JSON [timestamp, content, metadata]
 *                   or [timestamp, content, metadata, state delta] for an event carrying one
 *                   (a release before session state reads the first three and ignores it),
 *                   or [timestamp, content, metadata, state delta or null, removals,
 *                   nulls are values] for an event carrying removals or storing nulls
 *                   (a release before removals reads the first four and ignores them)
 *   state entry     hash field "st:<key>" -> value JSON (scripts/includes/state.lua)
 */
import { LRUCache } from "lru-cache";
import { copyStateChange, splitStateChange } from "../state.js";
import type { JsonObject, JsonValue, NewEvent, SessionRecord, StateChange, StoredEvent } from "../types.js";

/** "<byte length>:<text>", so Lua can cut fields out of a value without a JSON decoder. */
export function frame(text: string): string {
  return `${Buffer.byteLength(text, "utf8")}:${text}`;
}

/** The frame starting at `pos`: where its bytes start and where the next value starts; undefined when malformed or cut short. */
export function frameAt(bytes: Buffer, pos: number): { start: number; end: number } | undefined {
  const colon = bytes.indexOf(0x3a, pos);
  const length = Number(bytes.toString("latin1", pos, colon));
  if (colon < 0 || !Number.isSafeInteger(length) || colon + 1 + length > bytes.length) return undefined;
  return { start: colon + 1, end: colon + 1 + length };
}

/** The frame starting at `pos`: its text and where the next value starts; undefined when malformed or cut short. */
function readFrame(bytes: Buffer, pos: number): { text: string; end: number } | undefined {
  const frame = frameAt(bytes, pos);
  return frame && { text: bytes.toString("utf8", frame.start, frame.end), end: frame.end };
}

/** Encodes an event for the events hash: type and id framed, then JSON of the rest. */
export function encodeEvent(e: NewEvent): string {
  const fields: JsonValue[] = [e.timestamp, e.content, e.metadata];
  if (e.stateRemovals || e.stateNullsAreValues)
    fields.push(e.stateDelta ?? null, e.stateRemovals ?? [], !!e.stateNullsAreValues);
  else if (e.stateDelta) fields.push(e.stateDelta);
  return frame(e.eventType) + frame(e.eventId) + JSON.stringify(fields);
}

/** The stored event behind an encoding of encodeEvent (or of an older release: the format is the same). */
export function decodeEvent(sessionId: string, seq: number, encoded: string | Buffer): StoredEvent {
  const bytes = typeof encoded === "string" ? Buffer.from(encoded, "utf8") : encoded;
  const type = readFrame(bytes, 0);
  const id = type && readFrame(bytes, type.end);
  if (!id) throw new SyntaxError(`malformed stored event ${seq} of session ${JSON.stringify(sessionId)}`);
  const [timestamp, content, metadata, stateDelta, stateRemovals, stateNullsAreValues] = JSON.parse(
    bytes.toString("utf8", id.end),
  ) as [number, JsonValue, JsonObject, (JsonObject | null)?, string[]?, boolean?];
  const event: StoredEvent = { sessionId, seq, eventId: id.text, eventType: type.text, content, metadata, timestamp };
  const state: StateChange = { stateNullsAreValues };
  if (stateDelta) state.stateDelta = stateDelta;
  if (stateRemovals && stateRemovals.length > 0) state.stateRemovals = stateRemovals;
  return copyStateChange(event, state);
}

/** Bytes of decoded events DecodedEvents keeps, in all sessions: each event counted as 200 plus twice its stored bytes (what its text took as a UTF-16 string, when the cache held text). */
const DECODED_BYTES_MAX = 16 * 1024 * 1024;
/** Of those, one session's at most: its oldest-decoded events go first. */
const DECODED_SESSION_BYTES_MAX = DECODED_BYTES_MAX / 4;
/** Decoded events one session keeps at most. */
const DECODED_SESSION_EVENTS_MAX = 4096;
/** A session over either cap drops its oldest-decoded events down to this share of both. */
const EVICTED_DOWN_TO = 7 / 8;

/** An encoded event (its bytes as stored) and its seq: a read's reply, a notice. */
export interface EncodedEvent {
  seq: number;
  encoded: Buffer;
}

/** One session's decoded events by seq, in the order they were decoded. */
interface SessionDecoded {
  bySeq: Map<number, { encoded: Buffer; event: StoredEvent }>;
  /** The size DecodedEvents counts for them; a new holder each time it changes, which is how the LRU re-counts it. */
  bytes: number;
}

/**
 * Events decoded recently, by session and seq: a tail read again and again
 * (context windows, polling readers) yields the same objects, so the
 * service's caches of their wire forms and encoded bytes hit instead of
 * redoing JSON.parse, protobuf conversion and encoding for every call. Reads
 * and notices go through the one cache, so both hand out one object per
 * event. An entry keeps the stored bytes it was decoded from and stands only
 * for exactly those bytes: a session recreated under its id replaces it.
 * Bytes, as the read script's reply and a notice carry them, so a read whose
 * events are cached converts none to text; and one lookup per session, then
 * one per seq, so none builds or hashes a key string per event. (Keyed by
 * "<seq>:<session>" strings over text replies, a read of 20 cached events
 * cost 7.2-7.7 µs in-process; 1.9 µs this way.)
 */
export class DecodedEvents {
  private readonly sessions = new LRUCache<string, SessionDecoded>({
    max: 4096,
    maxSize: DECODED_BYTES_MAX,
    sizeCalculation: (decoded, sessionId) => 200 + 2 * sessionId.length + decoded.bytes,
  });

  /**
   * The run's events, each from the cache when these exact bytes were
   * decoded before. `encoded` may be a view of a larger buffer (a reply, a
   * notice): the cache keeps a copy of its bytes only.
   */
  decodeRun(sessionId: string, run: readonly EncodedEvent[]): StoredEvent[] {
    if (run.length === 0) return [];
    const cached = this.sessions.get(sessionId);
    const bySeq = cached?.bySeq ?? new Map<number, { encoded: Buffer; event: StoredEvent }>();
    let bytes = cached?.bytes ?? 0;
    const events: StoredEvent[] = [];
    for (const { seq, encoded } of run) {
      const entry = bySeq.get(seq);
      if (entry?.encoded.equals(encoded)) {
        events.push(entry.event);
        continue;
      }
      const event = decodeEvent(sessionId, seq, encoded);
      if (entry) bytes -= entrySize(entry.encoded);
      bySeq.delete(seq); // re-inserted last: the newest decoded
      bySeq.set(seq, { encoded: Buffer.from(encoded), event });
      bytes += entrySize(encoded);
      events.push(event);
    }
    if (bytes === cached?.bytes) return events;
    if (bySeq.size > DECODED_SESSION_EVENTS_MAX || bytes > DECODED_SESSION_BYTES_MAX) {
      // Down to 7/8 of each cap at once: a Map walked from its start steps over
      // every entry deleted there since its last rehash, so evicting one event per
      // new one (a session streamed past its cap) cost ~3 µs an event.
      for (const [seq, entry] of bySeq) {
        if (
          bySeq.size <= EVICTED_DOWN_TO * DECODED_SESSION_EVENTS_MAX &&
          bytes <= EVICTED_DOWN_TO * DECODED_SESSION_BYTES_MAX
        )
          break;
        bySeq.delete(seq);
        bytes -= entrySize(entry.encoded);
      }
    }
    this.sessions.set(sessionId, { bySeq, bytes });
    return events;
  }

  /** Whether the session's event `seq` is held decoded. */
  has(sessionId: string, seq: number): boolean {
    return this.sessions.peek(sessionId)?.bySeq.has(seq) ?? false;
  }
}

/** What one decoded event counts for. */
function entrySize(encoded: Buffer): number {
  return 200 + 2 * encoded.length;
}

/** A session record from its hash's fields; undefined when there are none (no such session). */
export function decodeSession(sessionId: string, fields: Record<string, string>): SessionRecord | undefined {
  if (Object.keys(fields).length === 0) return undefined;
  return {
    sessionId,
    appName: fields.app,
    userId: fields.user,
    metadata: JSON.parse(fields.meta) as JsonObject,
    createdAt: Number(fields.created),
    updatedAt: Number(fields.updated),
    headSeq: Number(fields.head),
    firstSeq: Number(fields.first),
    // Sessions stored before incarnations have none.
    incarnation: fields.inc ?? "",
    state: stateOf(fields),
    version: Number(fields.ver ?? 0),
  };
}

/** Prefix of a state entry's hash field. */
const STATE_FIELD = "st:";

/** The state held in a hash's fields (a session's, a user's or an app's): its "st:<key>" entries. */
export function stateOf(fields: Record<string, string>): JsonObject {
  const state: JsonObject = {};
  for (const [field, value] of Object.entries(fields)) {
    if (field.startsWith(STATE_FIELD)) state[field.slice(STATE_FIELD.length)] = JSON.parse(value) as JsonValue;
  }
  return state;
}

/** A state change as the scripts take it (includes/state.lua): a count, then scope, key and value JSON ("" deletes) per change. */
export function encodeStateChanges(change: StateChange): Array<string | number> {
  const out: Array<string | number> = [0];
  for (const [scope, changes] of Object.entries(splitStateChange(change))) {
    for (const [key, value] of changes) out.push(scope[0], key, value === undefined ? "" : JSON.stringify(value));
  }
  out[0] = (out.length - 1) / 3;
  return out;
}

/** The fields of a flat [field, value, ...] reply (HGETALL inside a script). */
export function fieldsOf(flat: readonly string[]): Record<string, string> {
  const fields: Record<string, string> = {};
  for (let i = 0; i < flat.length; i += 2) fields[flat[i]] = flat[i + 1];
  return fields;
}

/**
 * An append's events as stored: each one's stored encoding when the append
 * script answered one (a retry of a retained event), else as submitted with
 * the seq it got (a new event, or the retry of one trimmed inside the dedupe window).
 */
export function appendedEvents(
  sessionId: string,
  events: readonly NewEvent[],
  outcomes: ReadonlyArray<{ seq: number; original?: string }>,
): StoredEvent[] {
  return events.map((e, i) => {
    const { seq, original } = outcomes[i];
    if (original) return decodeEvent(sessionId, seq, original);
    const event: StoredEvent = {
      sessionId,
      seq,
      eventId: e.eventId,
      eventType: e.eventType,
      content: e.content,
      metadata: e.metadata,
      timestamp: e.timestamp,
    };
    return copyStateChange(event, e);
  });
}
