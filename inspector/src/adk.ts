/**
 * Events in Google ADK's shape, as the Python client's ADK adapter
 * (engram_memory/adk.py) writes them: the content is ADK's Event as JSON
 * (author, invocation_id, content.parts[] holding text, function_call,
 * function_response…). Read for a person: who wrote it and what it says, a
 * call as name(args), a response as name → result; the JSON stays one click
 * away. Python's field names are snake_case; ADK's own JSON (by alias) is
 * camelCase, so both are read.
 */
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { h } from "./dom";
import { preview } from "./preview";

/** One part of an ADK event's content, as a person reads it. */
export type AdkPart =
  | { kind: "text"; text: string; thought: boolean }
  | { kind: "call"; name: string; args: JsonValue }
  | { kind: "response"; name: string; response: JsonValue }
  /** Inline data, a file, code and its result: named, not shown. */
  | { kind: "other"; label: string };

/** An ADK event: its author, its parts in order and its error, if any. */
export interface AdkEvent {
  author: string;
  parts: AdkPart[];
  error: string | undefined;
}

function objectOf(value: JsonValue | undefined): JsonObject | undefined {
  return value && typeof value === "object" && !Array.isArray(value) ? value : undefined;
}

/** A field by its Python (snake_case) name or its JSON alias (camelCase). */
function get(obj: JsonObject, name: string): JsonValue | undefined {
  return obj[name] ?? obj[name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase())];
}

function text(obj: JsonObject, name: string): string | undefined {
  const v = get(obj, name);
  return typeof v === "string" && v !== "" ? v : undefined;
}

function partOf(part: JsonObject): AdkPart | undefined {
  const said = text(part, "text");
  if (said !== undefined) return { kind: "text", text: said, thought: get(part, "thought") === true };
  const call = objectOf(get(part, "function_call"));
  if (call) return { kind: "call", name: text(call, "name") ?? "function", args: get(call, "args") ?? null };
  const response = objectOf(get(part, "function_response"));
  if (response)
    return {
      kind: "response",
      name: text(response, "name") ?? "function",
      response: get(response, "response") ?? null,
    };
  const inline = objectOf(get(part, "inline_data"));
  if (inline) return { kind: "other", label: `[${text(inline, "mime_type") ?? "inline data"}]` };
  const file = objectOf(get(part, "file_data"));
  if (file) return { kind: "other", label: `[file ${text(file, "file_uri") ?? ""}]`.replace(" ]", "]") };
  const code = objectOf(get(part, "executable_code"));
  if (code) return { kind: "other", label: `code: ${text(code, "code") ?? ""}` };
  const result = objectOf(get(part, "code_execution_result"));
  if (result)
    return { kind: "other", label: `code result: ${text(result, "output") ?? text(result, "outcome") ?? ""}` };
  return undefined; // a thought signature alone, or a part kind this page does not know: the JSON shows it
}

/**
 * The ADK event `content` holds, or undefined when it is not one: an object
 * with a string author and either content parts or an invocation id.
 */
export function adkEventOf(content: JsonValue): AdkEvent | undefined {
  const event = objectOf(content);
  if (!event) return undefined;
  const author = text(event, "author");
  const parts = get(objectOf(get(event, "content")) ?? {}, "parts");
  if (author === undefined || (!Array.isArray(parts) && text(event, "invocation_id") === undefined)) return undefined;
  const errorCode = text(event, "error_code");
  const errorMessage = text(event, "error_message");
  return {
    author,
    parts: (Array.isArray(parts) ? parts : []).flatMap((p) => {
      const part = objectOf(p);
      const read = part ? partOf(part) : undefined;
      return read ? [read] : [];
    }),
    error: errorMessage || errorCode ? [errorCode, errorMessage].filter(Boolean).join(": ") : undefined,
  };
}

/** A call as a person writes it: get_weather(city: "Paris", days: 2). */
export function callText(name: string, args: JsonValue): string {
  const obj = objectOf(args);
  if (obj)
    return `${name}(${Object.entries(obj)
      .map(([k, v]) => `${k}: ${preview(v, 60)}`)
      .join(", ")})`;
  return args === null ? `${name}()` : `${name}(${preview(args, 60)})`;
}

/** A function's response in short: ADK wraps a plain return value as {result: …}, shown as that value. */
export function responseText(name: string, response: JsonValue): string {
  const obj = objectOf(response);
  const keys = obj ? Object.keys(obj) : [];
  const value = obj && keys.length === 1 && keys[0] === "result" ? obj.result! : response;
  return `${name} → ${typeof value === "string" ? value : preview(value, 100)}`;
}

function partText(part: AdkPart): string {
  switch (part.kind) {
    case "text":
      return part.thought ? `(thought) ${part.text}` : part.text;
    case "call":
      return callText(part.name, part.args);
    case "response":
      return responseText(part.name, part.response);
    case "other":
      return part.label;
  }
}

/** One line for a list: "author: text · get_weather(city: "Paris")", at most `max` characters. */
export function adkSummary(event: AdkEvent, max = 120): string {
  const said = [...event.parts.map(partText), ...(event.error ? [`error ${event.error}`] : [])]
    .join(" · ")
    .replace(/\s+/g, " ")
    .trim();
  const line = `${event.author}: ${said || "(no content)"}`;
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** The event for a person: the author, then each part (text as text, calls and responses as lines). */
export function adkEventView(event: AdkEvent): HTMLElement {
  return h(
    "div",
    { class: "adk" },
    h("div", { class: "adk-author" }, event.author),
    ...event.parts.map((part) => {
      switch (part.kind) {
        case "text":
          return part.thought
            ? h("div", { class: "text adk-thought" }, h("span", { class: "adk-label" }, "thought "), part.text)
            : h("div", { class: "text" }, part.text);
        case "call":
          return h(
            "div",
            { class: "adk-call" },
            h("span", { class: "adk-label" }, "call "),
            h("code", {}, callText(part.name, part.args)),
          );
        case "response":
          return h(
            "div",
            { class: "adk-response" },
            h("span", { class: "adk-label" }, "response "),
            h("code", {}, responseText(part.name, part.response)),
          );
        case "other":
          return h("div", { class: "muted" }, part.label);
      }
    }),
    event.error ? h("div", { class: "error-message" }, event.error) : null,
  );
}
