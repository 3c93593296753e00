/**
 * JSON in one line for a person: the summary of a collapsed value, the last
 * event of a session in the list, the arguments of a tool call.
 */
import type { JsonValue } from "@bufbuild/protobuf";

/** One-line preview of a JSON value ("{ tool: "weather", arguments: {…} }"), at most `max` characters. */
export function preview(value: JsonValue, max = 120): string {
  const inner = (v: JsonValue, depth: number): string => {
    if (v === null || typeof v !== "object") return JSON.stringify(v);
    if (depth > 0) return Array.isArray(v) ? `[…${v.length}]` : "{…}";
    if (Array.isArray(v)) return `[${v.map((x) => inner(x, depth + 1)).join(", ")}]`;
    return `{ ${Object.entries(v)
      .map(([k, x]) => `${k}: ${inner(x, depth + 1)}`)
      .join(", ")} }`;
  };
  const text = inner(value, 0);
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
