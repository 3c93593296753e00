/**
 * Connect JSON decoding of the append requests (AddEventRequest,
 * AddEventsRequest) and of the flat requests (only strings, unsigned
 * integers and lists of strings: the reads) without reflection.
 * protobuf-es' fromJsonString (its scan for duplicate keys, then the
 * reflective walk) was ~7% of a Connect JSON AddEvent's server CPU under
 * load (bench/README.md, issue 23).
 *
 * It builds what fromJsonString builds with JSON_READ_OPTIONS for the bodies
 * JSON.stringify-style encoders send (connect-es, the bench, most JS
 * clients): compact, each key once. A body that is not exactly
 * JSON.stringify of what it parses to (whitespace, escapes other than
 * JSON.stringify's, and so every body with a key given twice) is declined,
 * and so is anything else this does not decode exactly as protobuf-es: a
 * field under both its names, null for a field, an unknown key, a timestamp,
 * a "__proto__" key, a \u escape (a lone surrogate, which protobuf-es
 * refuses), deep nesting. Declined bodies (undefined) take the reflective
 * path, so odd input is answered exactly as before.
 * test/server/json-request-decoding.test.ts compares the two over generated
 * requests, in both field-name styles.
 */
import { create, ScalarType, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import type { AddEventRequest, AddEventsRequest, EventInput } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { jsonToValue } from "../../service/convert.js";
import { perMessageType } from "./request-decoding.js";

/** Nesting this deep (inside content, metadata, state_delta) leaves the fast path; the reflective one enforces the limit. */
const MAX_FAST_DEPTH = 32;

/** Thrown inside the fast path when the body needs the reflective one; never escapes this module. */
const NOT_FAST = new Error("not on the fast path");

/** Largest uint64. */
const MAX_UINT64 = 2n ** 64n - 1n;

function isObject(json: JsonValue | undefined): json is JsonObject {
  return typeof json === "object" && json !== null && !Array.isArray(json);
}

function text(json: JsonValue | undefined): string {
  if (typeof json !== "string") throw NOT_FAST;
  return json;
}

/** A field's value under its proto name or its JSON name; both given (protobuf-es: "set multiple times") leaves the fast path. */
function field(object: JsonObject, protoName: string, jsonName: string): JsonValue | undefined {
  const byProto = object[protoName];
  if (protoName === jsonName) return byProto;
  const byJson = object[jsonName];
  if (byProto !== undefined && byJson !== undefined) throw NOT_FAST;
  return byProto ?? byJson;
}

/** Whether every key of `object` is one of `known` (the fields' proto and JSON names). */
function onlyKnownKeys(object: JsonObject, known: ReadonlySet<string>): void {
  for (const key in object) if (!known.has(key)) throw NOT_FAST;
}

/**
 * A Struct field's JSON object as protobuf-es keeps it (plain JSON): the
 * parsed object itself, once checked for what protobuf-es would treat
 * otherwise (checkPlain).
 */
function struct(json: JsonValue | undefined): JsonObject {
  if (!isObject(json)) throw NOT_FAST;
  checkPlain(json, 1);
  return json;
}

/** Leaves the fast path for a "__proto__" key (an assignment quirk in protobuf-es) or deep nesting, anywhere in `json`. */
function checkPlain(json: JsonValue, depth: number): void {
  if (typeof json !== "object" || json === null) return;
  if (depth > MAX_FAST_DEPTH) throw NOT_FAST;
  if (Array.isArray(json)) {
    for (const item of json) checkPlain(item, depth + 1);
    return;
  }
  for (const key in json) {
    if (key === "__proto__") throw NOT_FAST;
    checkPlain(json[key], depth + 1);
  }
}

const EVENT_INPUT_KEYS = new Set([
  "event_id",
  "eventId",
  "event_type",
  "eventType",
  "content",
  "metadata",
  "state_delta",
  "stateDelta",
  "state_removals",
  "stateRemovals",
  "state_nulls_are_values",
  "stateNullsAreValues",
]);

function eventInput(json: JsonValue): EventInput {
  if (!isObject(json)) throw NOT_FAST;
  onlyKnownKeys(json, EVENT_INPUT_KEYS);
  const event: EventInput = {
    $typeName: "engram.v1.EventInput",
    eventId: "",
    eventType: "",
    stateRemovals: [],
    stateNullsAreValues: false,
  };
  const eventId = field(json, "event_id", "eventId");
  if (eventId !== undefined) event.eventId = text(eventId);
  const eventType = field(json, "event_type", "eventType");
  if (eventType !== undefined) event.eventType = text(eventType);
  const content = json.content;
  if (content !== undefined) {
    checkPlain(content, 1);
    event.content = jsonToValue(content);
  }
  const metadata = json.metadata;
  if (metadata !== undefined) event.metadata = struct(metadata);
  const stateDelta = field(json, "state_delta", "stateDelta");
  if (stateDelta !== undefined) event.stateDelta = struct(stateDelta);
  const stateRemovals = field(json, "state_removals", "stateRemovals");
  if (stateRemovals !== undefined) {
    if (!Array.isArray(stateRemovals)) throw NOT_FAST;
    event.stateRemovals = stateRemovals.map(text);
  }
  const nullsAreValues = field(json, "state_nulls_are_values", "stateNullsAreValues");
  if (nullsAreValues !== undefined) {
    if (typeof nullsAreValues !== "boolean") throw NOT_FAST;
    event.stateNullsAreValues = nullsAreValues;
  }
  return event;
}

/** A uint64 field (a JSON number or a decimal string), as protobuf-es reads it. */
function uint64(json: JsonValue): bigint {
  if (typeof json === "number") {
    if (!Number.isSafeInteger(json) || json < 0 || Object.is(json, -0)) throw NOT_FAST;
    return BigInt(json);
  }
  if (typeof json !== "string" || !/^(0|[1-9][0-9]{0,19})$/.test(json)) throw NOT_FAST;
  const seq = BigInt(json);
  if (seq > MAX_UINT64) throw NOT_FAST;
  return seq;
}

/** The body parsed, when it is exactly what JSON.stringify writes for it; else NOT_FAST. */
function canonicalObject(body: string): JsonObject {
  // A \u escape: a lone surrogate (refused by protobuf-es) or a control character; rare enough to leave.
  // A space after a colon or before a key: JSON as Python's json.dumps or a pretty printer writes it,
  // declined before it is parsed, so such a body is not parsed twice (here, then by fromJsonString).
  if (body.includes("\\u") || body.includes('": ') || body.includes(', "')) throw NOT_FAST;
  const json = JSON.parse(body) as JsonValue;
  // Equal to its own JSON.stringify, the body has no key twice (JSON.parse keeps the last; protobuf-es refuses it).
  if (!isObject(json) || JSON.stringify(json) !== body) throw NOT_FAST;
  return json;
}

const APPEND_KEYS = {
  single: new Set(["session_id", "sessionId", "event", "expected_seq", "expectedSeq"]),
  batch: new Set(["session_id", "sessionId", "events", "expected_seq", "expectedSeq"]),
};

/** Runs a fast decoder; undefined when the body needs the reflective path. */
function fast<T>(body: string, decode: (json: JsonObject) => T): T | undefined {
  try {
    return decode(canonicalObject(body));
  } catch {
    // NOT_FAST, or JSON.parse refusing the body: fromJsonString says precisely what.
    return undefined;
  }
}

/** The two append requests share session_id and expected_seq. */
function appendFields(json: JsonObject, request: { sessionId: string; expectedSeq?: bigint }): void {
  const sessionId = field(json, "session_id", "sessionId");
  if (sessionId !== undefined) request.sessionId = text(sessionId);
  const seq = field(json, "expected_seq", "expectedSeq");
  if (seq !== undefined) request.expectedSeq = uint64(seq);
}

/** AddEventRequest as fromJsonString decodes it with JSON_READ_OPTIONS, or undefined when only the reflective path may decode it. */
export function decodeAddEventRequestJson(body: string): AddEventRequest | undefined {
  return fast(body, (json) => {
    onlyKnownKeys(json, APPEND_KEYS.single);
    const request: AddEventRequest = { $typeName: "engram.v1.AddEventRequest", sessionId: "" };
    appendFields(json, request);
    if (json.event !== undefined) request.event = eventInput(json.event);
    return request;
  });
}

/** AddEventsRequest as fromJsonString decodes it with JSON_READ_OPTIONS, or undefined when only the reflective path may decode it. */
export function decodeAddEventsRequestJson(body: string): AddEventsRequest | undefined {
  return fast(body, (json) => {
    onlyKnownKeys(json, APPEND_KEYS.batch);
    const request: AddEventsRequest = { $typeName: "engram.v1.AddEventsRequest", sessionId: "", events: [] };
    appendFields(json, request);
    const events = json.events;
    if (events !== undefined) {
      if (!Array.isArray(events)) throw NOT_FAST;
      for (const event of events) request.events.push(eventInput(event));
    }
    return request;
  });
}

/** Fast JSON decoders by request type name. */
export const FAST_JSON_REQUEST_DECODERS: Readonly<Record<string, (body: string) => unknown>> = {
  "engram.v1.AddEventRequest": decodeAddEventRequestJson,
  "engram.v1.AddEventsRequest": decodeAddEventsRequestJson,
};

/**
 * A scalar field's reader: the JSON value as protobuf-es reads it, or
 * NOT_FAST. The scalar types MemoryService's flat requests use (strings,
 * uint32 and uint64 numbers); any other type makes a message not flat.
 */
function scalarReader(scalar: ScalarType): ((json: JsonValue) => unknown) | undefined {
  switch (scalar) {
    case ScalarType.STRING:
      return text;
    case ScalarType.UINT32:
      // A JSON number only (protobuf-es also takes a numeric string: left to it).
      return (json) => {
        if (typeof json !== "number" || !Number.isInteger(json) || json < 0 || json > 0xffff_ffff) throw NOT_FAST;
        return json;
      };
    case ScalarType.UINT64:
      return uint64;
    default:
      return undefined;
  }
}

/**
 * A decoder for a request whose fields are all plain scalars (strings,
 * unsigned integers) or lists of strings: the read requests
 * (GetSessionEvents, ListEvents, GetSession...). Made from the message's
 * descriptor, so it follows the proto; undefined for any other message.
 */
function flatRequestDecoder(desc: DescMessage): ((body: string) => unknown) | undefined {
  if (desc.oneofs.length > 0) return undefined;
  const readers = new Map<string, { localName: string; read: (json: JsonValue) => unknown }>();
  for (const f of desc.fields) {
    let read: ((json: JsonValue) => unknown) | undefined;
    if (f.fieldKind === "scalar") read = scalarReader(f.scalar);
    else if (f.fieldKind === "list" && f.listKind === "scalar" && f.scalar === ScalarType.STRING) {
      read = (json) => {
        if (!Array.isArray(json)) throw NOT_FAST;
        return json.map(text);
      };
    }
    if (!read) return undefined;
    const entry = { localName: f.localName, read };
    readers.set(f.name, entry);
    if (f.jsonName !== f.name) readers.set(f.jsonName, entry);
  }
  return (body) =>
    fast(body, (json) => {
      const message = create(desc) as Record<string, unknown>;
      const seen = new Set<string>();
      for (const key in json) {
        const entry = readers.get(key);
        if (!entry || seen.has(entry.localName)) throw NOT_FAST;
        seen.add(entry.localName);
        message[entry.localName] = entry.read(json[key]);
      }
      return message;
    });
}

/** The fast JSON decoder of a request type, if it has one (the appends', or a flat request's). */
export const fastJsonDecoder = perMessageType(
  (desc) => FAST_JSON_REQUEST_DECODERS[desc.typeName] ?? flatRequestDecoder(desc),
);
