/**
 * Connect JSON of engram.v1.Event, and of the responses that carry events,
 * without reflection: the text protobuf-es' toJsonString writes with the
 * server's JSON_WRITE_OPTIONS (proto field names, zero values shown), byte
 * for byte (test/server/event-json.test.ts compares them over generated
 * events; test/server/hand-written-codec.test.ts fails when a field of
 * these messages is not written). toJsonString walks every field by
 * reflection and builds a JSON tree before stringifying it; it was ~6% of
 * the server's busy time under Connect JSON calls (bench/README.md).
 *
 * Like the binary encoder (event-encoding.ts), an event's JSON is written and
 * encoded to UTF-8 once and its bytes shared: the service hands every reader
 * the same wire Event object for a recent event. Anything toJson would
 * refuse or treat specially (a Value without a kind, a non-finite number, a
 * timestamp out of range) is left to toJsonString, which says what is wrong.
 */
import {
  ScalarType,
  toJsonString,
  type DescField,
  type DescMessage,
  type JsonValue,
  type Registry,
} from "@bufbuild/protobuf";
import { FeatureSet_FieldPresence, type Timestamp, type Value } from "@bufbuild/protobuf/wkt";
import { EventSchema, type Event } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { JSON_WRITE_OPTIONS } from "../status.js";
import { joinUtf8, type Utf8Piece } from "./body-buffer.js";

/** Thrown inside the writer for a value it leaves to toJsonString. */
class Declined extends Error {}

/** Earliest and latest instants toJson writes for a Timestamp. */
const MIN_TIMESTAMP_MS = Date.parse("0001-01-01T00:00:00Z");
const MAX_TIMESTAMP_MS = Date.parse("9999-12-31T23:59:59Z");

const quote = JSON.stringify as (s: string) => string;

function numberJson(n: unknown): string {
  if (typeof n !== "number" || !Number.isFinite(n)) throw new Declined();
  return String(n);
}

/** A google.protobuf.Value message's JSON (protobuf-es' valueToJson). */
function valueJson(v: Value): string {
  const kind = v.kind;
  switch (kind.case) {
    case "nullValue":
      return "null";
    case "numberValue":
      return numberJson(kind.value);
    case "boolValue":
      return kind.value ? "true" : "false";
    case "stringValue":
      return quote(kind.value);
    case "structValue": {
      let out = "{";
      const fields = kind.value.fields;
      for (const key of Object.keys(fields)) {
        // toJson builds the object by assignment: an own "__proto__" key never shows.
        if (key === "__proto__") continue;
        out += (out.length === 1 ? "" : ",") + quote(key) + ":" + valueJson(fields[key]);
      }
      return out + "}";
    }
    case "listValue": {
      let out = "[";
      for (const item of kind.value.values) out += (out.length === 1 ? "" : ",") + valueJson(item);
      return out + "]";
    }
    default:
      throw new Declined();
  }
}

/** A Struct field held as plain JSON (protobuf-es' local form), as toJson writes it after converting it to a Struct. */
function plainJson(v: JsonValue): string {
  if (v === null) return "null";
  switch (typeof v) {
    case "number":
      return numberJson(v);
    case "string":
      return quote(v);
    case "boolean":
      return v ? "true" : "false";
    case "object": {
      if (Array.isArray(v)) {
        let out = "[";
        for (const item of v) out += (out.length === 1 ? "" : ",") + plainJson(item);
        return out + "]";
      }
      let out = "{";
      for (const key of Object.keys(v)) {
        if (key === "__proto__") continue; // as in valueJson
        out += (out.length === 1 ? "" : ",") + quote(key) + ":" + plainJson(v[key]);
      }
      return out + "}";
    }
    default:
      throw new Declined();
  }
}

/**
 * The last whole second written and its "YYYY-MM-DDTHH:MM:SS": events come
 * in time order, most of them in the second before, and toISOString was
 * ~1.7% of a Connect JSON append's busy time (bench/README.md).
 */
let lastSeconds = Number.NaN;
let lastSecondText = "";

/** RFC 3339, as protobuf-es' timestampToJson writes it (0, 3, 6 or 9 fractional digits). */
function timestampJson(t: Timestamp): string {
  const seconds = Number(t.seconds);
  const ms = seconds * 1000;
  if (!(ms >= MIN_TIMESTAMP_MS && ms <= MAX_TIMESTAMP_MS) || t.nanos < 0 || t.nanos > 999_999_999) throw new Declined();
  if (seconds !== lastSeconds) {
    // A whole second: toISOString's ".000Z" is cut off, and the fraction is written below.
    lastSecondText = new Date(ms).toISOString().substring(0, 19);
    lastSeconds = seconds;
  }
  let z = "Z";
  if (t.nanos > 0) {
    const nanos = (t.nanos + 1_000_000_000).toString().substring(1);
    z = nanos.endsWith("000000")
      ? `.${nanos.substring(0, 3)}Z`
      : nanos.endsWith("000")
        ? `.${nanos.substring(0, 6)}Z`
        : `.${nanos}Z`;
  }
  return `"${lastSecondText}${z}"`;
}

function eventJsonUncached(e: Event): string {
  let out = `{"event_id":${quote(e.eventId)},"event_type":${quote(e.eventType)}`;
  if (e.content !== undefined) out += `,"content":${valueJson(e.content)}`;
  if (e.metadata !== undefined) out += `,"metadata":${plainJson(e.metadata)}`;
  if (e.timestamp !== undefined) out += `,"timestamp":${timestampJson(e.timestamp)}`;
  out += `,"seq":"${e.seq}","session_id":${quote(e.sessionId)}`;
  if (e.stateDelta !== undefined) out += `,"state_delta":${plainJson(e.stateDelta)}`;
  out += `,"state_removals":[${e.stateRemovals.map((key) => quote(key)).join(",")}],"state_nulls_are_values":${e.stateNullsAreValues}`;
  return out + "}";
}

/** The JSON of `event`, exactly what toJsonString(EventSchema, event, JSON_WRITE_OPTIONS) writes. */
export function eventJson(event: Event): string {
  try {
    return eventJsonUncached(event);
  } catch (err) {
    if (!(err instanceof Declined)) throw err;
    return toJsonString(EventSchema, event, JSON_WRITE_OPTIONS);
  }
}

/** UTF-8 of recent events' JSON: each shared wire Event is written and encoded once (see the module's doc). */
const eventBytes = new WeakMap<object, Uint8Array>();

/** eventJson(event) as UTF-8, made once per wire Event. */
export function eventJsonBytes(event: Event): Uint8Array {
  let bytes = eventBytes.get(event);
  if (bytes === undefined) eventBytes.set(event, (bytes = Buffer.from(eventJson(event))));
  return bytes;
}

/**
 * Writes one field of a response as `"name":value` onto `out`, pieces of
 * text and of events' cached bytes; nothing when toJson leaves it out.
 * Returns whether it wrote.
 */
type FieldWriter = (message: Record<string, unknown>, out: Utf8Piece[]) => boolean;

/** A field's writer when it is an Event, a list of them, or a plain scalar; undefined for anything else. */
function fieldWriter(field: DescField): FieldWriter | undefined {
  // A oneof member's value sits under the oneof's name: left to reflection.
  if (field.oneof) return undefined;
  const name = quote(field.name);
  const key = field.localName;
  if (field.fieldKind === "message" && field.message.typeName === EventSchema.typeName) {
    const head = `${name}:`;
    return (m, out) => {
      if (m[key] === undefined) return false;
      out.push(head, eventJsonBytes(m[key] as Event));
      return true;
    };
  }
  if (field.fieldKind === "list" && field.listKind === "message" && field.message.typeName === EventSchema.typeName) {
    const head = `${name}:[`;
    return (m, out) => {
      const events = m[key] as Event[];
      out.push(head);
      for (let i = 0; i < events.length; i++) {
        if (i > 0) out.push(",");
        out.push(eventJsonBytes(events[i]));
      }
      out.push("]");
      return true;
    };
  }
  if (field.fieldKind !== "scalar") return undefined;
  // Implicit presence: always written (alwaysEmitImplicit); explicit (`optional`): written when set.
  const explicit = field.presence !== FeatureSet_FieldPresence.IMPLICIT;
  let scalar: ((v: unknown) => string) | undefined;
  switch (field.scalar) {
    case ScalarType.STRING:
      scalar = (v) => quote(v as string);
      break;
    case ScalarType.BOOL:
      scalar = (v) => (v ? "true" : "false");
      break;
    case ScalarType.INT32:
    case ScalarType.UINT32:
    case ScalarType.SINT32:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      scalar = (v) => String(v);
      break;
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      scalar = (v) => `"${v as bigint}"`;
      break;
    default:
      return undefined;
  }
  const write = scalar;
  return (m, out) => {
    if (explicit && m[key] === undefined) return false;
    out.push(`${name}:${write(m[key])}`);
    return true;
  };
}

/**
 * A response type's JSON encoder, as UTF-8: by hand when it carries events
 * and its other fields are plain scalars (AddEvent, AddEvents,
 * GetSessionEvents, ListEvents), else toJsonString. Either way the text
 * toJsonString writes with JSON_WRITE_OPTIONS. `registry`: the types
 * google.protobuf.Any fields may hold (none in MemoryService; events hold
 * no Any).
 */
export function jsonResponseEncoder(desc: DescMessage, registry?: Registry): (message: unknown) => Uint8Array {
  const options = registry ? { ...JSON_WRITE_OPTIONS, registry } : JSON_WRITE_OPTIONS;
  const reflective = (message: unknown) => Buffer.from(toJsonString(desc, message as never, options));
  const carriesEvents = desc.fields.some((f) => f.message?.typeName === EventSchema.typeName);
  const writers = desc.fields.map(fieldWriter);
  if (!carriesEvents || writers.some((w) => w === undefined)) return reflective;
  const fields = writers as FieldWriter[];
  return (message) => {
    const out: Utf8Piece[] = ["{"];
    let written = false;
    for (const write of fields) {
      // A field's separator goes in before it writes; taken back when it writes nothing.
      const at = out.length;
      if (written) out.push(",");
      if (write(message as Record<string, unknown>, out)) written = true;
      else out.length = at;
    }
    out.push("}");
    return joinUtf8(out);
  };
}
