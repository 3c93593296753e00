/** Request parsing shared by both protocol adapters, so a malformed message is refused the same way. */
import { fromBinary, type DescMessage } from "@bufbuild/protobuf";
import { invalidArgument } from "../errors.js";
import { DEFAULT_SERVICE_LIMITS } from "../service/limits.js";
import { FAST_REQUEST_DECODERS } from "./request-decoding.js";
import { invalidUtf8Field, notUtf8 } from "./utf8.js";

/**
 * Decoder nesting limit. Each level of JSON in a google.protobuf.Value or
 * Struct takes two protobuf levels, so this lets the documented 64 levels of
 * JSON through to validation (which names the field) and stops anything
 * deeper while decoding.
 */
export const PROTO_RECURSION_LIMIT = 2 * DEFAULT_SERVICE_LIMITS.maxJsonDepth + 16;

/** Parses a binary request; INVALID_ARGUMENT (never INTERNAL) when the bytes are not a valid message. */
export function parseRequest(desc: DescMessage, bytes: Uint8Array): unknown {
  // Appends first try a decoder without reflection; it declines anything it does not decode exactly as below.
  const decoded = FAST_REQUEST_DECODERS[desc.typeName]?.(bytes);
  if (decoded !== undefined) return decoded;
  try {
    return fromBinary(desc, bytes, { recursionLimit: PROTO_RECURSION_LIMIT });
  } catch (err) {
    // protobuf-es refuses a string field that is not UTF-8 (as protobuf requires) without naming it.
    if ((err as { code?: unknown }).code === "ERR_ENCODING_INVALID_ENCODED_DATA") {
      const bad = invalidUtf8Field(desc, bytes);
      if (bad) throw notUtf8(bad.field, bad.offset);
    }
    throw invalidArgument("request", `is not a valid ${desc.typeName} message (${err instanceof Error ? err.message : String(err)})`);
  }
}
