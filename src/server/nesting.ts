/**
 * Names the field of a binary message that nests deeper than the decoder's
 * limit, which protobuf-es refuses without saying where ("request: …
 * recursion limit"). Walks the wire format along the descriptor, as far as
 * the limit; the path stops at the first field that holds free-form JSON
 * (google.protobuf.Value, Struct, ListValue): that is the client's field,
 * below it are JSON's own levels.
 */
import type { DescField, DescMessage } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

const FREE_FORM = new Set(["google.protobuf.Value", "google.protobuf.Struct", "google.protobuf.ListValue"]);

/** The path of the field nested past `limit` levels in `bytes` (a `desc`), or undefined if none is or the bytes do not parse. */
export function tooDeepField(desc: DescMessage, bytes: Uint8Array, limit: number): string | undefined {
  try {
    return walk(desc, bytes, limit, [], false);
  } catch {
    return undefined;
  }
}

function walk(
  desc: DescMessage,
  bytes: Uint8Array,
  levelsLeft: number,
  path: string[],
  pathDone: boolean,
): string | undefined {
  if (levelsLeft < 0) return path.join(".") || undefined;
  const reader = new BinaryReader(bytes);
  const seen = new Map<number, number>();
  while (reader.pos < reader.len) {
    const [number, wireType] = reader.tag();
    if (wireType !== WireType.LengthDelimited) {
      reader.skip(wireType, number);
      continue;
    }
    const payload = reader.bytes();
    const field = desc.fields.find((f) => f.number === number);
    const child = field && messageOf(field);
    if (!field || !child) continue;
    const index = seen.get(number) ?? 0;
    seen.set(number, index + 1);
    const segment = field.fieldKind === "list" ? `${field.name}[${index}]` : field.name;
    const nextPath = pathDone ? path : [...path, segment];
    const found = walk(
      child,
      payload,
      levelsLeft - 1,
      nextPath,
      pathDone || FREE_FORM.has(child.typeName) || field.fieldKind === "map",
    );
    if (found) return found;
  }
  return undefined;
}

function messageOf(field: DescField): DescMessage | undefined {
  if (field.fieldKind === "message") return field.message;
  if (field.fieldKind === "list" && field.listKind === "message") return field.message;
  if (field.fieldKind === "map" && field.mapKind === "message") return field.message;
  return undefined;
}
