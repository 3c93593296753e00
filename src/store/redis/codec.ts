/**
 * The values the Redis store writes, in TypeScript: length-prefixed frames,
 * encoded events and session hashes. The Lua side of frames is
 * scripts/includes/frames.lua; both must agree byte for byte, since replicas
 * of different releases read each other's writes.
 *
 *   frame           "<byte length>:<bytes>"
 *   encoded event   frame(event type) frame(event id) JSON [timestamp, content, metadata]
 *                   or [timestamp, content, metadata, state delta] for an event carrying one
 *                   (a release before session state reads the first three and ignores it)
 *   state entry     hash field "st:<key>" -> value JSON (scripts/includes/state.lua)
 */
import { LRUCache } from "lru-cache";
import { splitStateDelta } from "../state.js";
import type { JsonObject, JsonValue, NewEvent, SessionRecord, StoredEvent } from "../types.js";

/** "<byte length>:<text>", so Lua can cut fields out of a value without a JSON decoder. */
export function frame(text: string): string {
  return `${Buffer.byteLength(text, "utf8")}:${text}`;
}

/** The frame starting at `pos`: its text and where the next value starts; undefined when malformed or cut short. */
export function readFrame(bytes: Buffer, pos: number): { text: string; end: number } | undefined {
  const colon = bytes.indexOf(0x3a, pos);
  const length = Number(bytes.toString("latin1", pos, colon));
  if (colon < 0 || !Number.isSafeInteger(length) || colon + 1 + length > bytes.length) return undefined;
  const end = colon + 1 + length;
  return { text: bytes.toString("utf8", colon + 1, end), end };
}

/** Encodes an event for the events hash: type and id framed, then JSON of the rest. */
export function encodeEvent(e: NewEvent): string {
  const fields: JsonValue[] = [e.timestamp, e.content, e.metadata];
  if (e.stateDelta) fields.push(e.stateDelta);
  return frame(e.eventType) + frame(e.eventId) + JSON.stringify(fields);
}

/** The stored event behind an encoding of encodeEvent (or of an older release: the format is the same). */
export function decodeEvent(sessionId: string, seq: number, encoded: string): StoredEvent {
  const bytes = Buffer.from(encoded, "utf8");
  const type = readFrame(bytes, 0);
  const id = type && readFrame(bytes, type.end);
  if (!id) throw new SyntaxError(`malformed stored event ${seq} of session ${JSON.stringify(sessionId)}`);
  const [timestamp, content, metadata, stateDelta] = JSON.parse(bytes.toString("utf8", id.end)) as [number, JsonValue, JsonObject, JsonObject?];
  const event: StoredEvent = { sessionId, seq, eventId: id.text, eventType: type.text, content, metadata, timestamp };
  if (stateDelta) event.stateDelta = stateDelta;
  return event;
}

/**
 * Events decoded recently, by session and seq: a tail read again and again
 * (context windows, polling readers) yields the same objects, so the
 * service's caches of their wire forms and encoded bytes hit instead of
 * redoing JSON.parse, protobuf conversion and encoding for every call. Reads
 * and notices go through the one cache, so both hand out one object per
 * event. An entry keeps the stored text it was decoded from and stands only
 * for exactly that text: a session recreated under its id replaces it.
 * (Keyed by the whole text instead, every lookup built and hashed a string
 * of the event's size: 0.7 µs a lookup against 0.2 µs now, in-process, for
 * events of ~300 bytes; ~9 µs of every read of 20 events.)
 */
export class DecodedEvents {
  private readonly cache = new LRUCache<string, { encoded: string; event: StoredEvent }>({
    max: 4096,
    maxSize: 16 * 1024 * 1024,
    sizeCalculation: (entry, key) => 200 + 2 * (key.length + entry.encoded.length),
  });

  /** The event, from the cache when this exact encoding was decoded before. */
  decode(sessionId: string, seq: number, encoded: string): StoredEvent {
    const key = `${seq}:${sessionId}`;
    const entry = this.cache.get(key);
    if (entry?.encoded === encoded) return entry.event;
    const event = decodeEvent(sessionId, seq, encoded);
    this.cache.set(key, { encoded, event });
    return event;
  }

  /** The cache keys, newest first ("<seq>:<session id>"). */
  keys(): IterableIterator<string> {
    return this.cache.keys();
  }
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

/** A state delta as the scripts take it (includes/state.lua): a count, then scope, key and value JSON ("" deletes) per change. */
export function encodeStateChanges(delta: JsonObject | undefined): Array<string | number> {
  const out: Array<string | number> = [0];
  if (!delta) return out;
  for (const [scope, changes] of Object.entries(splitStateDelta(delta))) {
    for (const [key, value] of changes) out.push(scope[0], key, value === null ? "" : JSON.stringify(value));
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
