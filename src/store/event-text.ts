/**
 * The text of an event's content, as context rendering shows it and as
 * event search indexes it: one function, so what a search finds is what a
 * context shows.
 */
import stableStringify from "safe-stable-stringify";
import type { JsonObject, JsonValue } from "./types.js";

function asObject(v: JsonValue | undefined): JsonObject | undefined {
  return v !== null && v !== undefined && typeof v === "object" && !Array.isArray(v) ? v : undefined;
}

function str(v: JsonValue | undefined): string | undefined {
  return typeof v === "string" && v.length > 0 ? v : undefined;
}

/** JSON with sorted keys: PostgreSQL's jsonb reorders keys, and every store must render the same text. */
export function canonicalJson(v: JsonValue): string {
  return stableStringify(v) ?? "null";
}

/** Readable text of a content value: strings as they are, {text|content|message} unwrapped, else canonical JSON. */
export function contentText(content: JsonValue): string {
  if (typeof content === "string") return content;
  const obj = asObject(content);
  const inner = obj && (str(obj.text) ?? str(obj.content) ?? str(obj.message));
  return inner ?? canonicalJson(content);
}
