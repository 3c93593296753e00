/**
 * Conversions between the wire types (protobuf-es messages) and the stores'
 * plain records. google.protobuf.Value is converted by hand, depth-checked
 * on the way in, so hostile nesting is refused before anything recurses deep.
 */
import { create } from "@bufbuild/protobuf";
import { NullValue, timestampFromMs, type Timestamp, type Value } from "@bufbuild/protobuf/wkt";
import { SessionSchema, type Event, type Session } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { invalidArgument } from "../errors.js";
import type { JsonObject, JsonValue, SessionRecord, StoredEvent } from "../store/types.js";
import { checkText } from "./validation.js";

/** google.protobuf.Value -> JSON, refusing depth > maxDepth, NUL, lone surrogates and non-finite numbers. */
export function valueToJson(field: string, value: Value | undefined, maxDepth: number, depth = 1): JsonValue {
  if (value === undefined) return null;
  const kind = value.kind;
  switch (kind.case) {
    case "stringValue":
      checkText(field, kind.value);
      return kind.value;
    case "numberValue":
      if (!Number.isFinite(kind.value)) throw invalidArgument(field, "numbers must be finite");
      return kind.value;
    case "boolValue":
      return kind.value;
    case "structValue": {
      if (depth > maxDepth) throw invalidArgument(field, `is nested deeper than ${maxDepth} levels`);
      const out: JsonObject = {};
      for (const [key, v] of Object.entries(kind.value.fields)) {
        checkText(field, key);
        out[key] = valueToJson(field, v, maxDepth, depth + 1);
      }
      return out;
    }
    case "listValue": {
      if (depth > maxDepth) throw invalidArgument(field, `is nested deeper than ${maxDepth} levels`);
      return kind.value.values.map((v) => valueToJson(field, v, maxDepth, depth + 1));
    }
    default:
      return null;
  }
}

/**
 * JSON -> google.protobuf.Value. protobuf-es messages are plain objects
 * tagged with $typeName, so these are built as literals: create() fills them
 * by reflection, and every stored event read or appended goes through here.
 * test/server/event-encoding.test.ts checks the result equals protobuf-es' own
 * fromJson(ValueSchema, json).
 */
export function jsonToValue(json: JsonValue): Value {
  if (json === null)
    return { $typeName: "google.protobuf.Value", kind: { case: "nullValue", value: NullValue.NULL_VALUE } };
  switch (typeof json) {
    case "string":
      return { $typeName: "google.protobuf.Value", kind: { case: "stringValue", value: json } };
    case "number":
      return { $typeName: "google.protobuf.Value", kind: { case: "numberValue", value: json } };
    case "boolean":
      return { $typeName: "google.protobuf.Value", kind: { case: "boolValue", value: json } };
  }
  if (Array.isArray(json)) {
    return {
      $typeName: "google.protobuf.Value",
      kind: { case: "listValue", value: { $typeName: "google.protobuf.ListValue", values: json.map(jsonToValue) } },
    };
  }
  const fields: Record<string, Value> = {};
  for (const [k, v] of Object.entries(json)) fields[k] = jsonToValue(v);
  return {
    $typeName: "google.protobuf.Value",
    kind: { case: "structValue", value: { $typeName: "google.protobuf.Struct", fields } },
  };
}

/** Smallest and largest valid google.protobuf.Timestamp seconds (years 1..9999). */
const MIN_SECONDS = -62135596800n;
const MAX_SECONDS = 253402300799n;

/** Timestamp -> epoch ms, refusing values outside the valid range. */
export function timestampToMs(field: string, ts: Timestamp): number {
  if (ts.seconds < MIN_SECONDS || ts.seconds > MAX_SECONDS || ts.nanos < 0 || ts.nanos > 999_999_999) {
    throw invalidArgument(field, "is not a valid timestamp");
  }
  return Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1_000_000);
}

/** Store record -> wire Session; `state`: its merged state (src/store/state.ts mergeState), the session's own when absent. */
export function toWireSession(r: SessionRecord, state: JsonObject = r.state): Session {
  return create(SessionSchema, {
    sessionId: r.sessionId,
    appName: r.appName,
    userId: r.userId,
    metadata: r.metadata,
    createdAt: timestampFromMs(r.createdAt),
    updatedAt: timestampFromMs(r.updatedAt),
    headSeq: BigInt(r.headSeq),
    firstSeq: BigInt(r.firstSeq),
    eventCount: BigInt(r.headSeq - r.firstSeq + 1),
    state,
    version: BigInt(r.version),
  });
}

/** Stored event -> wire Event (a literal, like jsonToValue). */
export function toWireEvent(e: StoredEvent): Event {
  const seconds = Math.floor(e.timestamp / 1000);
  return {
    $typeName: "engram.v1.Event",
    eventId: e.eventId,
    eventType: e.eventType,
    content: jsonToValue(e.content),
    metadata: e.metadata,
    timestamp: {
      $typeName: "google.protobuf.Timestamp",
      seconds: BigInt(seconds),
      nanos: (e.timestamp - seconds * 1000) * 1_000_000,
    },
    seq: BigInt(e.seq),
    sessionId: e.sessionId,
    stateDelta: e.stateDelta,
    stateRemovals: e.stateRemovals ?? [],
    stateNullsAreValues: e.stateNullsAreValues ?? false,
  };
}
