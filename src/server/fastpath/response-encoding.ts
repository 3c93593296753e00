/**
 * Binary response encoding for both edges (grpc-js and the Connect unary
 * fast path): what toBinary writes, with the events of a response written
 * from a per-event cache (src/server/fastpath/event-encoding.ts) instead of
 * by reflection on every call.
 */
import { ScalarType, toBinary, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import { EventSchema, type Event } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { bodyBuffer } from "./body-buffer.js";
import { encodeEvent } from "./event-encoding.js";

/** A response type's binary encoder: toBinary's bytes, events from their cached encoding (shared by the Connect unary fast path). */
export function binaryResponseSerializer(desc: DescMessage): (msg: unknown) => Buffer {
  const events = desc.fields.find((f) => f.number === 1 && f.message?.typeName === EventSchema.typeName);
  if (events) return eventsFirstSerializer(desc, events.localName, events.fieldKind === "list");
  return (msg: unknown) => Buffer.from(toBinary(desc, msg as never));
}

/**
 * Bytes of recent events: the service shares one wire Event per stored event
 * (a bounded recent cache), so a tail read repeated by many callers encodes
 * each event once instead of once per call (20 events by reflection were
 * most of a GetSessionEvents call's CPU; src/server/fastpath/event-encoding.ts now
 * encodes without it).
 */
const eventBytes = new WeakMap<object, Uint8Array>();

function encodedEvent(event: object): Uint8Array {
  let bytes = eventBytes.get(event);
  if (!bytes) eventBytes.set(event, (bytes = encodeEvent(event as Event)));
  return bytes;
}

/**
 * Serializes a response whose field 1 holds Event(s): the events' cached
 * bytes first (field order is free on the wire; repeated fields keep their
 * order), then the other fields.
 */
function eventsFirstSerializer(desc: DescMessage, field: string, repeated: boolean) {
  // AddEvent's, AddEvents' and ListEvents' responses hold nothing else: no second encoding pass.
  const restOf =
    desc.fields.length === 1
      ? undefined
      : (scalarFieldsWriter(desc.fields.filter((f) => f.localName !== field)) ??
        ((message: Record<string, unknown>) =>
          toBinary(desc, { ...message, [field]: repeated ? [] : undefined } as never)));
  return (msg: unknown) => {
    const message = msg as Record<string, unknown>;
    const value = message[field];
    const list = repeated ? (value as object[]) : value === undefined ? [] : [value as object];
    const encoded = list.map(encodedEvent);
    const rest = restOf?.(message);
    let size = rest?.length ?? 0;
    for (const bytes of encoded) size += 1 + varintSize(bytes.length) + bytes.length;
    // One buffer of the exact size: a BinaryWriter's chunks and its final copy showed in every append's profile.
    const out = bodyBuffer(size);
    let pos = 0;
    for (const bytes of encoded) {
      out[pos++] = EVENTS_TAG;
      for (let n = bytes.length; ; n >>>= 7) {
        if (n < 128) {
          out[pos++] = n;
          break;
        }
        out[pos++] = (n & 127) | 128;
      }
      out.set(bytes, pos);
      pos += bytes.length;
    }
    if (rest) out.set(rest, pos);
    return out;
  };
}

/**
 * Writes `fields` as toBinary does, when they are all strings and unsigned
 * integers (GetSessionEventsResponse's page token and head seq); undefined
 * otherwise. toBinary's reflective pass over the response was ~1.7% of a
 * gRPC read's busy time at c=16.
 */
function scalarFieldsWriter(
  fields: readonly DescField[],
): ((message: Record<string, unknown>) => Uint8Array) | undefined {
  const writers: ((writer: BinaryWriter, message: Record<string, unknown>) => void)[] = [];
  for (const f of [...fields].sort((a, b) => a.number - b.number)) {
    if (f.fieldKind !== "scalar" || f.longAsString || f.oneof) return undefined;
    const { localName, number } = f;
    // Implicit presence: written unless the zero value; explicit (`optional`): written when set.
    const implicit = f.presence === FeatureSet_FieldPresence.IMPLICIT;
    switch (f.scalar) {
      case ScalarType.STRING:
        writers.push((w, m) => {
          const v = m[localName] as string | undefined;
          if (v !== undefined && !(implicit && v === "")) w.tag(number, WireType.LengthDelimited).string(v);
        });
        break;
      case ScalarType.UINT32:
        writers.push((w, m) => {
          const v = m[localName] as number | undefined;
          if (v !== undefined && !(implicit && v === 0)) w.tag(number, WireType.Varint).uint32(v);
        });
        break;
      case ScalarType.UINT64:
        writers.push((w, m) => {
          const v = m[localName] as bigint | undefined;
          if (v !== undefined && !(implicit && v === 0n)) w.tag(number, WireType.Varint).uint64(v);
        });
        break;
      default:
        return undefined;
    }
  }
  return (message) => {
    const writer = new BinaryWriter();
    for (const write of writers) write(writer, message);
    return writer.finish();
  };
}

/** Field 1, length-delimited. */
const EVENTS_TAG = (1 << 3) | WireType.LengthDelimited;

/** Bytes of the varint of a length (below 2^32). */
function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n >>>= 7;
    size++;
  }
  return size;
}
