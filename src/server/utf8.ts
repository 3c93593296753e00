/**
 * Refusing request text that is not UTF-8, saying where. A JSON body decoded
 * leniently (connect-es' default TextDecoder, URLSearchParams) stores U+FFFD
 * in place of each bad byte; protobuf-es' fromBinary refuses a bad string
 * field but does not say which. These name the part of the request (the
 * body, a query parameter, a field path) and the first bad byte's offset.
 */
import { isUtf8 } from "node:buffer";
import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { invalidArgument, type MemoryError } from "../errors.js";

const strictDecoder = new TextDecoder("utf-8", { fatal: true });

/** Whether a streaming strict decoder refuses the first `length` bytes (an unfinished last character is not refused). */
function refusedPrefix(bytes: Uint8Array, length: number): boolean {
  try {
    new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(0, length), { stream: true });
    return false;
  } catch {
    return true;
  }
}

/**
 * The offset where the first malformed byte sequence starts, or undefined
 * when the bytes are UTF-8. Only called on a refusal, so its O(n log n)
 * search costs nothing on the normal path.
 */
export function invalidUtf8Offset(bytes: Uint8Array): number | undefined {
  if (isUtf8(bytes)) return undefined;
  // The shortest prefix a streaming decoder refuses ends at the byte that broke the sequence
  // (refusal only grows with length); if none is refused, the bytes end inside a character.
  let broken = bytes.length;
  if (refusedPrefix(bytes, bytes.length)) {
    let low = 1;
    let high = bytes.length;
    while (low < high) {
      const mid = (low + high) >>> 1;
      if (refusedPrefix(bytes, mid)) high = mid;
      else low = mid + 1;
    }
    broken = low - 1;
  }
  // The sequence began at the last character boundary before it: a character has at most 4 bytes.
  for (let start = broken; start > broken - 4 && start > 0; start--) {
    if (isUtf8(bytes.subarray(0, start))) return start;
  }
  return 0;
}

/** INVALID_ARGUMENT for text that is not UTF-8, naming the request part and the offset. */
export function notUtf8(part: string, offset: number): MemoryError {
  return invalidArgument(part, `is not valid UTF-8 (malformed byte sequence at byte ${offset})`);
}

/** Decodes a request part as UTF-8, refusing (INVALID_ARGUMENT, naming `part`) any malformed byte. */
export function decodeUtf8(part: string, bytes: Uint8Array): string {
  try {
    return strictDecoder.decode(bytes);
  } catch {
    throw notUtf8(part, invalidUtf8Offset(bytes) ?? 0);
  }
}

/** Percent-decodes one query name or value to bytes, as URLSearchParams reads it: "+" is a space, "%" without two hex digits is itself. */
function percentDecode(text: string): Buffer {
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "%" && /^[0-9A-Fa-f]{2}$/.test(text.slice(i + 1, i + 3))) {
      bytes.push(parseInt(text.slice(i + 1, i + 3), 16));
      i += 2;
    } else if (c === "+") bytes.push(0x20);
    else bytes.push(...Buffer.from(c, "utf8"));
  }
  return Buffer.from(bytes);
}

/** The raw (percent-decoded, not yet UTF-8-decoded) value of each query parameter, in order. */
export function rawQueryParams(search: string): Array<{ name: Buffer; value: Buffer }> {
  const query = search.startsWith("?") ? search.slice(1) : search;
  if (query === "") return [];
  return query.split("&").map((pair) => {
    const eq = pair.indexOf("=");
    const name = eq < 0 ? pair : pair.slice(0, eq);
    const value = eq < 0 ? "" : pair.slice(eq + 1);
    return { name: percentDecode(name), value: percentDecode(value) };
  });
}

/** Refuses a query string whose parameter names or values are not UTF-8 once percent-decoded. */
export function requireUtf8Query(search: string): void {
  // Without a "%" every byte is a character's own UTF-8 (or "+" as a space): nothing to refuse, and nothing to decode on each REST call.
  if (!search.includes("%")) return;
  for (const { name, value } of rawQueryParams(search)) {
    const key = decodeUtf8("query parameter name", name);
    decodeUtf8(`query parameter ${key}`, value);
  }
}

/** Values of these types are JSON: validation names them by the field that holds them, so does this. */
const JSON_TYPES = new Set(["google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"]);

/** Where a binary message holds a string field that is not UTF-8: the field's path and the offset in it. */
export function invalidUtf8Field(desc: DescMessage, bytes: Uint8Array): { field: string; offset: number } | undefined {
  try {
    const reader = new BinaryReader(bytes);
    return findInField(desc, reader, bytes, bytes.length, "", 0);
  } catch {
    // Bytes malformed in another way before any bad string: the caller's generic message covers them.
    return undefined;
  }
}

/** Deeper than any message protobuf-es accepts (parse-request.ts' recursion limit is far below). */
const MAX_WALK_DEPTH = 512;

function findInField(
  desc: DescMessage,
  reader: BinaryReader,
  bytes: Uint8Array,
  end: number,
  path: string,
  depth: number,
): { field: string; offset: number } | undefined {
  if (depth > MAX_WALK_DEPTH) return undefined;
  const insideJson = JSON_TYPES.has(desc.typeName);
  const occurrences = new Map<number, number>();
  while (reader.pos < end) {
    const [no, wireType] = reader.tag();
    const field = desc.fields.find((f) => f.number === no);
    if (!field || wireType !== WireType.LengthDelimited) {
      reader.skip(wireType, no);
      continue;
    }
    const index = occurrences.get(no) ?? 0;
    occurrences.set(no, index + 1);
    const name = insideJson ? path : fieldPath(path, field, index);
    const length = reader.uint32();
    const start = reader.pos;
    const stop = start + length;
    const found = findInValue(field, reader, bytes, start, stop, name, depth);
    if (found) return found;
    reader.pos = stop;
  }
  return undefined;
}

function fieldPath(parent: string, field: DescField, index: number): string {
  const name = parent === "" ? field.name : `${parent}.${field.name}`;
  return field.fieldKind === "list" ? `${name}[${index}]` : name;
}

/** Checks one length-delimited field's value: a string, a message, or a map entry. */
function findInValue(
  field: DescField,
  reader: BinaryReader,
  bytes: Uint8Array,
  start: number,
  stop: number,
  name: string,
  depth: number,
): { field: string; offset: number } | undefined {
  const string = (text: Uint8Array) => {
    const offset = invalidUtf8Offset(text);
    return offset === undefined ? undefined : { field: name, offset };
  };
  switch (field.fieldKind) {
    case "scalar":
      return field.scalar === ScalarType.STRING ? string(bytes.subarray(start, stop)) : undefined;
    case "list":
      if (field.listKind === "scalar")
        return field.scalar === ScalarType.STRING ? string(bytes.subarray(start, stop)) : undefined;
      if (field.listKind === "message") return findInField(field.message, reader, bytes, stop, name, depth + 1);
      return undefined;
    case "message":
      return findInField(field.message, reader, bytes, stop, name, depth + 1);
    case "map":
      // A map entry: key (1), value (2). The key may be the bad string, so the path stops at the map.
      while (reader.pos < stop) {
        const [no, wireType] = reader.tag();
        if (wireType !== WireType.LengthDelimited) {
          reader.skip(wireType, no);
          continue;
        }
        const length = reader.uint32();
        const at = reader.pos;
        let found;
        if (no === 1 && field.mapKey === ScalarType.STRING) found = string(bytes.subarray(at, at + length));
        else if (no === 2 && field.mapKind === "scalar" && field.scalar === ScalarType.STRING)
          found = string(bytes.subarray(at, at + length));
        else if (no === 2 && field.mapKind === "message")
          found = findInField(field.message, reader, bytes, at + length, name, depth + 1);
        if (found) return found;
        reader.pos = at + length;
      }
      return undefined;
    default:
      return undefined;
  }
}
