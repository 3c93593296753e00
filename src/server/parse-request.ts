/**
 * Request parsing shared by both protocol adapters, so a malformed message is
 * refused the same way, with a message naming the field (or the part of the
 * request) at fault.
 */
import {
  fromBinary,
  fromJson,
  fromJsonString,
  type DescField,
  type DescMessage,
  type JsonReadOptions,
  type JsonValue,
  type Registry,
} from "@bufbuild/protobuf";
import { invalidArgument, type MemoryError } from "../errors.js";
import { DEFAULT_SERVICE_LIMITS } from "../service/limits.js";
import { fastJsonDecoder } from "./fastpath/json-request-decoding.js";
import { tooDeepField } from "./nesting.js";
import { fastBinaryDecoder } from "./fastpath/request-decoding.js";
import { decodeUtf8, invalidUtf8Field, notUtf8 } from "./utf8.js";

/**
 * Decoder nesting limit. Each level of JSON in a google.protobuf.Value or
 * Struct takes two protobuf levels, so this lets the documented 64 levels of
 * JSON through to validation (which names the field) and stops anything
 * deeper while decoding.
 */
export const PROTO_RECURSION_LIMIT = 2 * DEFAULT_SERVICE_LIMITS.maxJsonDepth + 16;

/** Parses a binary request; INVALID_ARGUMENT (never INTERNAL) when the bytes are not a valid message. */
export function parseRequest(desc: DescMessage, bytes: Uint8Array): unknown {
  // Appends and flat requests first try a decoder without reflection; it declines anything it does not decode exactly as below.
  const decoded = fastBinaryDecoder(desc)?.(bytes);
  if (decoded !== undefined) return decoded;
  try {
    return fromBinary(desc, bytes, { recursionLimit: PROTO_RECURSION_LIMIT });
  } catch (err) {
    // protobuf-es refuses a string field that is not UTF-8 (as protobuf requires) without naming it.
    if ((err as { code?: unknown }).code === "ERR_ENCODING_INVALID_ENCODED_DATA") {
      const bad = invalidUtf8Field(desc, bytes);
      if (bad) throw notUtf8(bad.field, bad.offset);
    }
    if (/recursion/i.test(err instanceof Error ? err.message : "")) {
      const field = tooDeepField(desc, bytes, PROTO_RECURSION_LIMIT);
      if (field)
        throw invalidArgument(
          field,
          `nests deeper than ${PROTO_RECURSION_LIMIT} protobuf levels (${DEFAULT_SERVICE_LIMITS.maxJsonDepth} levels of JSON)`,
        );
    }
    throw invalidArgument(
      "request",
      `is not a valid ${desc.typeName} message (${err instanceof Error ? err.message : String(err)})`,
    );
  }
}

/**
 * How JSON requests are read on every path: strictly (a misspelled field such
 * as "contnet" is refused, not dropped to store an empty event; findJsonFieldError
 * names it) and with the nesting limit. Binary requests keep protobuf's rule
 * that unknown fields are skipped, which lets older servers read newer clients.
 */
export const JSON_READ_OPTIONS = { ignoreUnknownFields: false, recursionLimit: PROTO_RECURSION_LIMIT } as const;

/**
 * Parses a JSON request as connect-es does (strict UTF-8, then
 * fromJsonString), but refuses it naming what is wrong: "body" for text that
 * is not UTF-8 or not JSON, else the path of the field that does not decode
 * or is unknown (protobuf-es names only the field's type and name, or the
 * unknown key, not where it sits). `registry`: the types google.protobuf.Any
 * fields may hold (MemoryService has none; the conformance service does).
 */
export function parseJsonRequest(desc: DescMessage, bytes: Uint8Array, registry?: Registry): unknown {
  const text = decodeUtf8("body", bytes);
  // Appends and flat requests first try a decoder without reflection; it declines anything it does not decode exactly as below.
  const decoded = fastJsonDecoder(desc)?.(text);
  if (decoded !== undefined) return decoded;
  const options = registry ? { ...JSON_READ_OPTIONS, registry } : JSON_READ_OPTIONS;
  try {
    return fromJsonString(desc, text, options);
  } catch (err) {
    throw jsonRequestError(desc, text, err, options);
  }
}

function jsonRequestError(
  desc: DescMessage,
  text: string,
  err: unknown,
  options: Partial<JsonReadOptions>,
): MemoryError {
  let json: JsonValue;
  try {
    json = JSON.parse(text) as JsonValue;
  } catch (syntax) {
    return invalidArgument("body", `is not valid JSON (${syntax instanceof Error ? syntax.message : String(syntax)})`);
  }
  const found = findJsonFieldError(desc, json, "", 0, options);
  // Every field decodes alone but not together (a key given twice, a field set under both its names): the body's fault.
  return found ? invalidArgument(found.field, found.problem) : invalidArgument("body", jsonProblem(err));
}

/** protobuf-es' message without its "cannot decode field engram.v1.X.y from JSON:" preamble, which the path replaces. */
function jsonProblem(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const field = /^cannot decode field \S+ from JSON: ([\s\S]*)$/.exec(message);
  if (field) return field[1];
  const type = /^cannot decode (?:message )?(\S+) from JSON:? ([\s\S]*)$/.exec(message);
  return type ? `is not a valid ${type[1]} (${type[2]})` : message;
}

/** Message types whose JSON form is not an object of fields: a path ends at the field holding one. */
const OPAQUE_JSON_TYPES = /^google\.protobuf\./;

/** Our request messages nest a few levels; this bounds the walk whatever the schema becomes. */
const MAX_FIELD_DEPTH = 16;

/**
 * The first field of `json` that does not decode as `desc`, with its path:
 * each field is decoded alone, and a failing message field is searched in
 * turn. Only called once parsing has failed.
 */
function findJsonFieldError(
  desc: DescMessage,
  json: JsonValue,
  path: string,
  depth: number,
  options: Partial<JsonReadOptions>,
): { field: string; problem: string } | undefined {
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    const got = Array.isArray(json) ? "an array" : JSON.stringify(json);
    return { field: path || "body", problem: `must be a JSON object (got ${got})` };
  }
  const keys = new Map<DescField, string>();
  for (const [key, value] of Object.entries(json)) {
    const field = desc.fields.find((f) => f.name === key || f.jsonName === key);
    // protobuf-es names the unknown key but not where it sits.
    if (!field) return { field: path === "" ? shortKey(key) : `${path}.${shortKey(key)}`, problem: "unknown field" };
    const name = path === "" ? field.name : `${path}.${field.name}`;
    const earlier = keys.get(field);
    if (earlier !== undefined) return { field: name, problem: `is set twice (as "${earlier}" and "${key}")` };
    keys.set(field, key);
    let failure: unknown;
    try {
      fromJson(desc, { [key]: value }, options);
      continue;
    } catch (err) {
      failure = err;
    }
    const inner = depth < MAX_FIELD_DEPTH ? findInMessageField(field, value, name, depth, options) : undefined;
    return inner ?? { field: name, problem: jsonProblem(failure) };
  }
  return undefined;
}

/** An unknown key as a path segment: a client's key can be as long as the body, and the message echoes it. */
function shortKey(key: string): string {
  // Well-formed, because the key is echoed twice: in the message (JSON, which
  // can carry a lone surrogate) and in the BadRequest detail (protobuf UTF-8,
  // which turns one into U+FFFD). Both must name the same field.
  const echoed = key.length <= MAX_ECHOED_KEY ? key : `${key.slice(0, MAX_ECHOED_KEY)}…`;
  return echoed.toWellFormed();
}

/** Characters of an unknown key echoed in an error. */
const MAX_ECHOED_KEY = 64;

/** Searches a failing message (or list of messages) field's value for the field within it that fails. */
function findInMessageField(
  field: DescField,
  value: JsonValue,
  name: string,
  depth: number,
  options: Partial<JsonReadOptions>,
): { field: string; problem: string } | undefined {
  if (field.fieldKind === "message" && !OPAQUE_JSON_TYPES.test(field.message.typeName) && value !== null) {
    return findJsonFieldError(field.message, value, name, depth + 1, options);
  }
  if (
    field.fieldKind === "list" &&
    field.listKind === "message" &&
    !OPAQUE_JSON_TYPES.test(field.message.typeName) &&
    Array.isArray(value)
  ) {
    for (const [i, item] of value.entries()) {
      if (item === null) return { field: `${name}[${i}]`, problem: "must not be null" };
      const found = findJsonFieldError(field.message, item, `${name}[${i}]`, depth + 1, options);
      if (found) return found;
    }
  }
  return undefined;
}
