/**
 * Request validation. Every failure is INVALID_ARGUMENT with a message that
 * starts with the offending field's path, so clients can point at it.
 */
import { invalidArgument } from "../errors.js";
import { isEmptyObject } from "../store/rules.js";
import type { JsonObject, JsonValue } from "../store/types.js";
import { EVENT_TYPE_PATTERN, ID_PATTERN, MAX_NAME_BYTES, type ServiceLimits } from "./limits.js";

/** session_id / event_id: required, ^[!-~]{1,128}$. */
export function requireId(field: string, value: string): string {
  if (value.length === 0) throw invalidArgument(field, "is required");
  if (!ID_PATTERN.test(value)) {
    throw invalidArgument(field, "must be 1-128 printable ASCII characters without spaces (pattern ^[!-~]{1,128}$)");
  }
  return value;
}

/** app_name / user_id: required, 1..256 UTF-8 bytes, no NUL, well-formed Unicode. */
export function requireName(field: string, value: string): string {
  if (value.length === 0) throw invalidArgument(field, "is required");
  checkText(field, value);
  if (Buffer.byteLength(value, "utf8") > MAX_NAME_BYTES) {
    throw invalidArgument(field, `must be at most ${MAX_NAME_BYTES} bytes of UTF-8`);
  }
  return value;
}

/** event_type: required, ^[A-Za-z][A-Za-z0-9_.:/-]{0,63}$. */
export function requireEventType(field: string, value: string): string {
  if (value.length === 0) throw invalidArgument(field, "is required");
  if (!EVENT_TYPE_PATTERN.test(value)) {
    throw invalidArgument(field, "must match ^[A-Za-z][A-Za-z0-9_.:/-]{0,63}$");
  }
  return value;
}

/** A page size or limit: 0 means the default; above the maximum is refused. */
export function pageSize(field: string, value: number, limits: ServiceLimits): number {
  if (!Number.isInteger(value) || value < 0) throw invalidArgument(field, "must be a non-negative integer");
  if (value > limits.maxPageSize) throw invalidArgument(field, `must be at most ${limits.maxPageSize}`);
  return value === 0 ? limits.defaultPageSize : value;
}

/** A seq from the wire (uint64) as a safe JS number. */
export function seqNumber(field: string, value: bigint): number {
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw invalidArgument(field, "is out of range");
  return Number(value);
}

/** Strings must be storable everywhere: no NUL (PostgreSQL refuses it), no lone surrogates. */
export function checkText(field: string, value: string): void {
  if (value.includes("\u0000")) throw invalidArgument(field, "must not contain NUL characters");
  if (!value.isWellFormed()) throw invalidArgument(field, "must be well-formed Unicode (lone surrogate found)");
}

/**
 * Checks a JSON value's strings, keys and nesting depth. Iterative, so a
 * hostile depth cannot overflow the stack.
 */
export function checkJson(field: string, value: JsonValue, maxDepth: number): void {
  const stack: Array<[JsonValue, number]> = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v === "string") {
      checkText(field, v);
    } else if (typeof v === "number") {
      if (!Number.isFinite(v)) throw invalidArgument(field, "numbers must be finite");
    } else if (v !== null && typeof v === "object") {
      if (depth > maxDepth) throw invalidArgument(field, `is nested deeper than ${maxDepth} levels`);
      if (Array.isArray(v)) {
        for (const item of v) stack.push([item, depth + 1]);
      } else {
        for (const key of Object.keys(v)) {
          checkText(field, key);
          stack.push([v[key], depth + 1]);
        }
      }
    }
  }
}

/** Serialized size of an event's content and metadata, checked against the limit. */
export function checkEventSize(field: string, content: JsonValue, metadata: JsonObject, limits: ServiceLimits): void {
  // A text event with no metadata (most appends) is far under the limit without serializing it:
  // JSON writes a UTF-16 unit as at most 6 bytes (\u001f), plus 2 quotes, and "{}" for the metadata.
  if (typeof content === "string" && 6 * content.length + 4 <= limits.maxEventBytes && isEmptyObject(metadata)) return;
  const bytes =
    Buffer.byteLength(JSON.stringify(content) ?? "null", "utf8") + Buffer.byteLength(JSON.stringify(metadata), "utf8");
  if (bytes > limits.maxEventBytes) {
    throw invalidArgument(
      field,
      `content and metadata take ${bytes} bytes of JSON, over the limit of ${limits.maxEventBytes}`,
    );
  }
}
