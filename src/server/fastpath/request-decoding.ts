/**
 * Binary decoding of the append requests (AddEventRequest, AddEventsRequest)
 * and of the flat requests (only strings, unsigned integers and lists of
 * strings: the reads) without reflection. Every append is parsed once, and protobuf-es'
 * reflective fromBinary spent ~2.9 µs on the benchmark's 100-byte text event
 * out of ~15.5 µs for the whole in-process AddEvent path (bench/README.md).
 *
 * It builds what fromBinary builds (plain objects tagged with $typeName,
 * Struct fields outside a Value as JSON) for the messages well-behaved
 * clients send: each field at most once, with its own wire type, no unknown
 * fields. Anything else (a repeated singular field, which protobuf merges;
 * an unknown field, which protobuf-es keeps; a "__proto__" key, which
 * protobuf-es' assignment turns into a prototype; deep nesting; malformed
 * bytes) returns undefined and takes the reflective path, so odd input is
 * answered exactly as before. test/server/request-decoding.test.ts compares
 * the two over generated requests.
 */
import { create, ScalarType, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import type { ListValue, Timestamp, Value } from "@bufbuild/protobuf/wkt";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import type { AddEventRequest, AddEventsRequest, EventInput } from "@engram-memory/client/gen/engram/v1/memory_pb.js";

/** Nesting this deep (Values inside Structs and lists) leaves the fast path; the reflective one enforces the limit. */
const MAX_FAST_DEPTH = 32;

/** Thrown inside the fast path when the input needs the reflective one; never escapes this module. */
const NOT_FAST = new Error("not on the fast path");

function expect(wireType: number, wanted: WireType): void {
  if (wireType !== wanted) throw NOT_FAST;
}

/** Marks field `no` as seen in `seen`; a second occurrence (or a number past the bit set) leaves the fast path. */
function once(seen: number, no: number): number {
  if (no > 30) throw NOT_FAST;
  const bit = 1 << no;
  if (seen & bit) throw NOT_FAST;
  return seen | bit;
}

/** The tag of Struct.fields and ListValue.values: field 1, length-delimited. */
const REPEATED_FIELD_1 = (1 << 3) | WireType.LengthDelimited;

/**
 * A field's tag, packed as number << 3 | wire type, without the [number, type]
 * array BinaryReader.tag() allocates. Every field read here has a one-byte
 * tag; a longer one (a high field number, or a padded varint, which
 * protobuf-es accepts or rejects by its own rules) takes the reflective path.
 */
function tag(reader: BinaryReader): number {
  const start = reader.pos;
  const t = reader.uint32();
  if (reader.pos - start !== 1) throw NOT_FAST;
  return t;
}

/** A strict UTF-8 string field (proto3 strings are validated), as protobuf-es reads it. */
function text(reader: BinaryReader, wireType: number): string {
  expect(wireType, WireType.LengthDelimited);
  return reader.string(true);
}

function timestamp(reader: BinaryReader): Timestamp {
  const end = reader.uint32() + reader.pos;
  const ts: Timestamp = { $typeName: "google.protobuf.Timestamp", seconds: 0n, nanos: 0 };
  let seen = 0;
  while (reader.pos < end) {
    const t = tag(reader);
    const no = t >>> 3;
    const wireType = t & 7;
    seen = once(seen, no);
    expect(wireType, WireType.Varint);
    if (no === 1) ts.seconds = reader.int64() as bigint;
    else if (no === 2) ts.nanos = reader.int32();
    else throw NOT_FAST;
  }
  if (reader.pos !== end) throw NOT_FAST;
  return ts;
}

/** google.protobuf.Value, as the message protobuf-es makes of it. */
function value(reader: BinaryReader, depth: number): Value {
  if (depth > MAX_FAST_DEPTH) throw NOT_FAST;
  const end = reader.uint32() + reader.pos;
  const v: Value = { $typeName: "google.protobuf.Value", kind: { case: undefined } };
  let seen = 0;
  while (reader.pos < end) {
    const t = tag(reader);
    const no = t >>> 3;
    const wireType = t & 7;
    // One kind per Value: a second one would replace (or merge into) the first.
    seen = once(seen, 1);
    switch (no) {
      case 1:
        expect(wireType, WireType.Varint);
        v.kind = { case: "nullValue", value: reader.int32() };
        break;
      case 2:
        expect(wireType, WireType.Bit64);
        v.kind = { case: "numberValue", value: reader.double() };
        break;
      case 3:
        v.kind = { case: "stringValue", value: text(reader, wireType) };
        break;
      case 4:
        expect(wireType, WireType.Varint);
        v.kind = { case: "boolValue", value: reader.bool() };
        break;
      case 5:
        expect(wireType, WireType.LengthDelimited);
        v.kind = {
          case: "structValue",
          value: { $typeName: "google.protobuf.Struct", fields: structFields(reader, depth + 1, value) },
        };
        break;
      case 6: {
        expect(wireType, WireType.LengthDelimited);
        const list: ListValue = { $typeName: "google.protobuf.ListValue", values: [] };
        const listEnd = reader.uint32() + reader.pos;
        while (reader.pos < listEnd) {
          // ListValue.values: field 1.
          if (tag(reader) !== REPEATED_FIELD_1) throw NOT_FAST;
          list.values.push(value(reader, depth + 1));
        }
        if (reader.pos !== listEnd) throw NOT_FAST;
        v.kind = { case: "listValue", value: list };
        break;
      }
      default:
        throw NOT_FAST;
    }
  }
  if (reader.pos !== end) throw NOT_FAST;
  return v;
}

/** A Struct's entries, each value read by `read` (wire Values, or JSON for a Struct field). */
function structFields<T>(
  reader: BinaryReader,
  depth: number,
  read: (reader: BinaryReader, depth: number) => T,
): Record<string, T> {
  if (depth > MAX_FAST_DEPTH) throw NOT_FAST;
  const end = reader.uint32() + reader.pos;
  const fields: Record<string, T> = {};
  while (reader.pos < end) {
    // Struct.fields: map entries in field 1.
    if (tag(reader) !== REPEATED_FIELD_1) throw NOT_FAST;
    const entryEnd = reader.uint32() + reader.pos;
    let key: string | undefined;
    let item: T | undefined;
    while (reader.pos < entryEnd) {
      const t = tag(reader);
      const entryNo = t >>> 3;
      const entryWire = t & 7;
      if (entryNo === 1 && key === undefined) key = text(reader, entryWire);
      else if (entryNo === 2 && item === undefined) {
        expect(entryWire, WireType.LengthDelimited);
        item = read(reader, depth + 1);
      } else throw NOT_FAST;
    }
    // An entry without a key or value gets protobuf-es' defaults; "__proto__" its assignment quirk: both reflective.
    if (reader.pos !== entryEnd || key === undefined || item === undefined || key === "__proto__") throw NOT_FAST;
    fields[key] = item;
  }
  if (reader.pos !== end) throw NOT_FAST;
  return fields;
}

/** A Value as JSON, the way protobuf-es turns a Struct field's values into JsonObject (an unset kind is null). */
function jsonValue(reader: BinaryReader, depth: number): JsonValue {
  return valueToLocal(value(reader, depth));
}

function valueToLocal(v: Value): JsonValue {
  const kind = v.kind;
  switch (kind.case) {
    case "structValue": {
      const out: JsonObject = {};
      for (const key of Object.keys(kind.value.fields)) out[key] = valueToLocal(kind.value.fields[key]);
      return out;
    }
    case "listValue":
      return kind.value.values.map(valueToLocal);
    case "nullValue":
    case undefined:
      return null;
    default:
      return kind.value;
  }
}

function eventInput(reader: BinaryReader): EventInput {
  const end = reader.uint32() + reader.pos;
  const event: EventInput = {
    $typeName: "engram.v1.EventInput",
    eventId: "",
    eventType: "",
    stateRemovals: [],
    stateNullsAreValues: false,
  };
  let seen = 0;
  while (reader.pos < end) {
    const t = tag(reader);
    const no = t >>> 3;
    const wireType = t & 7;
    // state_removals (7) is repeated: each key comes as a field of its own.
    if (no !== 7) seen = once(seen, no);
    switch (no) {
      case 1:
        event.eventId = text(reader, wireType);
        break;
      case 2:
        event.eventType = text(reader, wireType);
        break;
      case 3:
        expect(wireType, WireType.LengthDelimited);
        event.content = value(reader, 1);
        break;
      case 4:
        expect(wireType, WireType.LengthDelimited);
        event.metadata = structFields(reader, 1, jsonValue) as JsonObject;
        break;
      case 5:
        expect(wireType, WireType.LengthDelimited);
        event.timestamp = timestamp(reader);
        break;
      case 6:
        expect(wireType, WireType.LengthDelimited);
        event.stateDelta = structFields(reader, 1, jsonValue) as JsonObject;
        break;
      case 7:
        event.stateRemovals.push(text(reader, wireType));
        break;
      case 8:
        expect(wireType, WireType.Varint);
        event.stateNullsAreValues = reader.bool();
        break;
      default:
        throw NOT_FAST;
    }
  }
  if (reader.pos !== end) throw NOT_FAST;
  return event;
}

/** Runs a fast decoder; undefined when the input needs the reflective path. */
function fast<T>(bytes: Uint8Array, decode: (reader: BinaryReader) => T): T | undefined {
  try {
    return decode(new BinaryReader(bytes));
  } catch {
    // NOT_FAST, or malformed bytes (a truncated varint, invalid UTF-8...): fromBinary says precisely what.
    return undefined;
  }
}

/**
 * The two append requests share their layout: session_id (1), the event(s)
 * (2: one for AddEventRequest, repeated for AddEventsRequest) and
 * expected_seq (3).
 */
function appendRequest<R extends { sessionId: string; expectedSeq?: bigint }>(
  bytes: Uint8Array,
  request: R,
  addEvent: (req: R, event: EventInput) => void,
): R | undefined {
  return fast(bytes, (reader) => {
    let seen = 0;
    while (reader.pos < reader.len) {
      const t = tag(reader);
      const no = t >>> 3;
      const wireType = t & 7;
      if (no === 1) {
        seen = once(seen, no);
        request.sessionId = text(reader, wireType);
      } else if (no === 2) {
        expect(wireType, WireType.LengthDelimited);
        addEvent(request, eventInput(reader));
      } else if (no === 3) {
        seen = once(seen, no);
        expect(wireType, WireType.Varint);
        request.expectedSeq = reader.uint64() as bigint;
      } else throw NOT_FAST;
    }
    if (reader.pos !== reader.len) throw NOT_FAST;
    return request;
  });
}

/** AddEventRequest as fromBinary decodes it, or undefined when only the reflective path may decode it. */
export function decodeAddEventRequest(bytes: Uint8Array): AddEventRequest | undefined {
  return appendRequest<AddEventRequest>(
    bytes,
    { $typeName: "engram.v1.AddEventRequest", sessionId: "" },
    (req, event) => {
      // A second event would be merged into the first by protobuf: the reflective path does that.
      if (req.event) throw NOT_FAST;
      req.event = event;
    },
  );
}

/** AddEventsRequest as fromBinary decodes it, or undefined when only the reflective path may decode it. */
export function decodeAddEventsRequest(bytes: Uint8Array): AddEventsRequest | undefined {
  return appendRequest<AddEventsRequest>(
    bytes,
    { $typeName: "engram.v1.AddEventsRequest", sessionId: "", events: [] },
    (req, event) => {
      req.events.push(event);
    },
  );
}

/** Fast decoders by request type name. */
export const FAST_REQUEST_DECODERS: Readonly<Record<string, (bytes: Uint8Array) => unknown>> = {
  "engram.v1.AddEventRequest": decodeAddEventRequest,
  "engram.v1.AddEventsRequest": decodeAddEventsRequest,
};

/** How a flat request's field is read: its wire type, and whether it repeats. */
interface FlatField {
  localName: string;
  wireType: WireType;
  repeated: boolean;
  read: (reader: BinaryReader) => unknown;
}

/**
 * A flat field's reader, as protobuf-es' fromBinary reads it, for the types
 * MemoryService's flat requests use (strings, uint32, uint64 as bigint);
 * undefined for any other, which makes a message not flat.
 */
function flatField(scalar: ScalarType, longAsString: boolean): Omit<FlatField, "localName" | "repeated"> | undefined {
  switch (scalar) {
    case ScalarType.STRING:
      return { wireType: WireType.LengthDelimited, read: (reader) => reader.string(true) };
    case ScalarType.UINT32:
      return { wireType: WireType.Varint, read: (reader) => reader.uint32() };
    case ScalarType.UINT64:
      return longAsString ? undefined : { wireType: WireType.Varint, read: (reader) => reader.uint64() };
    default:
      return undefined;
  }
}

/**
 * A decoder for a request whose fields are all strings, unsigned integers or
 * lists of strings: the read requests (GetSessionEvents, GetSession...).
 * Made from the message's descriptor, so it follows the proto; undefined for
 * any other message.
 */
function flatRequestDecoder(desc: DescMessage): ((bytes: Uint8Array) => unknown) | undefined {
  if (desc.oneofs.length > 0) return undefined;
  const byNumber: (FlatField | undefined)[] = [];
  for (const f of desc.fields) {
    const repeated = f.fieldKind === "list" && f.listKind === "scalar" && f.scalar === ScalarType.STRING;
    const field =
      f.fieldKind === "scalar"
        ? flatField(f.scalar, f.longAsString)
        : repeated
          ? flatField(ScalarType.STRING, false)
          : undefined;
    // One-byte tags only (see tag()), so a field's number indexes the array.
    if (!field || f.number > 15) return undefined;
    byNumber[f.number] = { ...field, localName: f.localName, repeated };
  }
  // A copy of the empty message (its lists made anew) costs less than create(), which walks the descriptor.
  const empty = create(desc) as Record<string, unknown>;
  const lists = desc.fields.filter((f) => f.fieldKind === "list").map((f) => f.localName);
  return (bytes) =>
    fast(bytes, (reader) => {
      const message = { ...empty };
      for (let i = 0; i < lists.length; i++) message[lists[i]] = [];
      let seen = 0;
      while (reader.pos < reader.len) {
        const t = tag(reader);
        const no = t >>> 3;
        const field = byNumber[no];
        if (!field) throw NOT_FAST;
        expect(t & 7, field.wireType);
        if (field.repeated) (message[field.localName] as unknown[]).push(field.read(reader));
        else {
          // A second occurrence of a singular field: protobuf's last-wins is the reflective path's.
          seen = once(seen, no);
          message[field.localName] = field.read(reader);
        }
      }
      if (reader.pos !== reader.len) throw NOT_FAST;
      return message;
    });
}

/** `make` memoised per message type, its undefined included (made once). */
export function perMessageType<T>(make: (desc: DescMessage) => T | undefined): (desc: DescMessage) => T | undefined {
  const made = new WeakMap<DescMessage, T | null>();
  return (desc) => {
    let value = made.get(desc);
    if (value === undefined) {
      value = make(desc) ?? null;
      made.set(desc, value);
    }
    return value ?? undefined;
  };
}

/** The fast binary decoder of a request type, if it has one (the appends', or a flat request's). */
export const fastBinaryDecoder = perMessageType(
  (desc) => FAST_REQUEST_DECODERS[desc.typeName] ?? flatRequestDecoder(desc),
);
