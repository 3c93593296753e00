/**
 * How one stored event reads in a context: its chat message (OpenAI shape),
 * its KAOS text line, the text its tokens are counted on and the text BM25
 * searches. Computed once per stored object (a WeakMap, so the local store's
 * events are prepared once in their life) and independent of the request.
 */
import { canonicalJson, contentText } from "../../store/event-text.js";
import type { JsonObject, JsonValue, StoredEvent } from "../../store/types.js";
import { EventType } from "../event-types.js";
import { parseCovers, type SeqRange } from "./summaries.js";

/** One part of a multi-part message. */
export interface ContentPart {
  type: "text" | "image_url";
  text: string;
  imageUrl?: { url: string; detail: string };
}

/** A tool call of an assistant message. */
export interface ToolCallPart {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** A chat message in the OpenAI shape. */
export interface ContextMessage {
  role: "system" | "user" | "assistant" | "tool";
  content: string;
  name: string;
  toolCalls: ToolCallPart[];
  toolCallId: string;
  /** Set only when the message carries images: text part first, then the images. */
  contentParts: ContentPart[];
}

/** What an event is to context assembly. */
export type PreparedKind = "message" | "toolCall" | "toolResult" | "summary" | "unrenderable";

/** An event rendered for context assembly (request-independent). */
export interface PreparedEvent {
  kind: PreparedKind;
  /** The message; for a tool call or result, without its paired id (set per context). */
  message: ContextMessage;
  /** The KAOS text line ("User: ...") or "" when the event has none. */
  textLine: string;
  /** metadata.section when the event names one. */
  explicitSection: string | undefined;
  /** What the tokenizer counts: content, names and tool-call arguments. */
  tokenText: string;
  /** Images the message carries (counted at a fixed cost each). */
  images: number;
  /** What BM25 searches. */
  searchText: string;
  /** Tool calls and results: the id named in the event, if any, and the tool name. */
  toolCallId: string | undefined;
  toolName: string;
  /** Summaries: the seq range they replace. */
  covers: SeqRange | undefined;
  /** Token counts by tokenizer name, filled lazily. */
  tokens: Map<string, number>;
  /** The context item last built from this event (owned by assemble.ts). */
  unit?: unknown;
}

function asObject(v: JsonValue | undefined): JsonObject | undefined {
  return v !== null && v !== undefined && typeof v === "object" && !Array.isArray(v) ? v : undefined;
}

function str(v: JsonValue | undefined): string | undefined {
  return typeof v === "string" && v.length > 0 ? v : undefined;
}

export { canonicalJson, contentText };

function imagePart(v: JsonValue | undefined): ContentPart | undefined {
  if (typeof v === "string" && v.length > 0) return { type: "image_url", text: "", imageUrl: { url: v, detail: "" } };
  const obj = asObject(v);
  if (!obj) return undefined;
  // {type:"image_url", image_url:{url, detail}} | {image_url: "..."} | {url, detail}
  const nested = obj.image_url !== undefined ? obj.image_url : obj;
  if (typeof nested === "string")
    return nested
      ? { type: "image_url", text: "", imageUrl: { url: nested, detail: str(obj.detail) ?? "" } }
      : undefined;
  const inner = asObject(nested);
  const url = str(inner?.url);
  return url
    ? { type: "image_url", text: "", imageUrl: { url, detail: str(inner?.detail) ?? str(obj.detail) ?? "" } }
    : undefined;
}

/**
 * Text and images of a message's content. Recognised: OpenAI part lists
 * ([{type:"text",text},{type:"image_url",image_url:{url}}]), a single image part,
 * and objects with `images` (URLs or {url, detail}) next to their text.
 */
export function messageContent(content: JsonValue): { text: string; images: ContentPart[] } {
  if (
    Array.isArray(content) &&
    content.length > 0 &&
    content.every((p) => asObject(p)?.type === "text" || asObject(p)?.type === "image_url")
  ) {
    const texts: string[] = [];
    const images: ContentPart[] = [];
    for (const p of content) {
      const obj = asObject(p)!;
      if (obj.type === "text") texts.push(typeof obj.text === "string" ? obj.text : "");
      else {
        const img = imagePart(obj);
        if (img) images.push(img);
      }
    }
    return { text: texts.join("\n"), images };
  }
  const obj = asObject(content);
  if (obj?.type === "image_url") {
    const img = imagePart(obj);
    if (img) return { text: str(obj.text) ?? "", images: [img] };
  }
  if (obj && Array.isArray(obj.images)) {
    const images = obj.images.map(imagePart).filter((p): p is ContentPart => p !== undefined);
    if (images.length > 0) return { text: str(obj.text) ?? str(obj.content) ?? str(obj.message) ?? "", images };
  }
  return { text: contentText(content), images: [] };
}

function message(role: ContextMessage["role"], content: string, extra: Partial<ContextMessage> = {}): ContextMessage {
  return { role, content, name: "", toolCalls: [], toolCallId: "", contentParts: [], ...extra };
}

function withImages(role: ContextMessage["role"], text: string, images: ContentPart[]): ContextMessage {
  if (images.length === 0) return message(role, text);
  const parts: ContentPart[] = text ? [{ type: "text", text }, ...images] : images;
  return message(role, text, { contentParts: parts });
}

/** The id a tool call or result names (content.tool_call_id | content.id | metadata.tool_call_id). */
function toolCallIdOf(e: StoredEvent): string | undefined {
  const c = asObject(e.content);
  return str(c?.tool_call_id) ?? str(c?.id) ?? str(e.metadata.tool_call_id);
}

function toolNameOf(e: StoredEvent): string {
  const c = asObject(e.content);
  return str(c?.tool) ?? str(c?.tool_name) ?? str(c?.name) ?? str(c?.function) ?? str(e.metadata.tool) ?? "tool";
}

function agentName(e: StoredEvent): string | undefined {
  const c = asObject(e.content);
  return str(c?.agent) ?? str(c?.target_agent) ?? str(c?.from_agent) ?? str(e.metadata.agent);
}

/** Labelled message of a delegation event: who delegated to whom is explicit in the text. */
function delegation(e: StoredEvent, text: string): ContextMessage {
  const agent = agentName(e);
  switch (e.eventType) {
    case EventType.DELEGATION_REQUEST:
      return message("assistant", `[Delegation request${agent ? ` to ${agent}` : ""}] ${text}`);
    case EventType.DELEGATION_RESPONSE:
      return message("user", `[Delegation response${agent ? ` from ${agent}` : ""}] ${text}`);
    default:
      return message("user", `[Task delegated${agent ? ` by ${agent}` : ""}] ${text}`);
  }
}

/** Every PreparedEvent has one shape (same keys, same order), so the hot loops stay monomorphic. */
function prepared(
  e: StoredEvent,
  kind: PreparedKind,
  message: ContextMessage,
  fields: Partial<
    Pick<PreparedEvent, "textLine" | "tokenText" | "images" | "searchText" | "toolCallId" | "toolName" | "covers">
  > = {},
): PreparedEvent {
  return {
    kind,
    message,
    textLine: fields.textLine ?? "",
    explicitSection: str(e.metadata.section),
    tokenText: fields.tokenText ?? message.content,
    images: fields.images ?? 0,
    searchText: fields.searchText ?? "",
    toolCallId: fields.toolCallId,
    toolName: fields.toolName ?? "",
    covers: fields.covers,
    tokens: new Map<string, number>(),
    unit: undefined,
  };
}

/** Renders one event, ignoring pairing and budgets. */
export function prepareEvent(e: StoredEvent): PreparedEvent {
  switch (e.eventType) {
    case EventType.TOOL_CALL: {
      const c = asObject(e.content);
      const args = c?.arguments ?? c?.args ?? c?.input ?? {};
      const name = toolNameOf(e);
      const argText = typeof args === "string" ? args : canonicalJson(args);
      // The id is filled per context (it may be generated from the seq).
      const msg = message("assistant", "", {
        toolCalls: [{ id: "", type: "function", function: { name, arguments: argText } }],
      });
      return prepared(e, "toolCall", msg, {
        tokenText: `${name} ${argText}`,
        searchText: `${name} ${argText}`,
        toolCallId: toolCallIdOf(e),
        toolName: name,
      });
    }
    case EventType.TOOL_RESULT: {
      const c = asObject(e.content);
      const result = c && "result" in c ? c.result : c && "output" in c ? c.output : e.content;
      const text = typeof result === "string" ? result : canonicalJson(result);
      const name = toolNameOf(e);
      return prepared(e, "toolResult", message("tool", text, { name }), {
        tokenText: `${name} ${text}`,
        searchText: text,
        toolCallId: toolCallIdOf(e),
        toolName: name,
      });
    }
    case EventType.SUMMARY: {
      const text = contentText(e.content);
      const covers = parseCovers(e.metadata.covers);
      const label = covers ? `[Summary of events ${covers.fromSeq}-${covers.toSeq}]` : "[Summary]";
      return prepared(e, "summary", message("system", `${label} ${text}`), {
        textLine: `Summary: ${text}`,
        searchText: text,
        covers,
      });
    }
    default:
      break;
  }
  const { text, images } = messageContent(e.content);
  let msg: ContextMessage;
  let textLine = "";
  switch (e.eventType) {
    case EventType.SYSTEM:
      msg = withImages("system", text, images);
      break;
    case EventType.USER_MESSAGE:
      msg = withImages("user", text, images);
      textLine = `User: ${text}`;
      break;
    case EventType.AGENT_RESPONSE:
      msg = withImages("assistant", text, images);
      textLine = `Assistant: ${text}`;
      break;
    case EventType.DELEGATION_REQUEST:
    case EventType.DELEGATION_RESPONSE:
    case EventType.TASK_DELEGATION_RECEIVED:
      msg = delegation(e, text);
      break;
    case EventType.ERROR:
      msg = message("system", `[Error] ${text}`);
      break;
    default:
      // Other types enter a context only when placed in a section (documents, findings, ...).
      if (str(e.metadata.section) === undefined) return prepared(e, "unrenderable", message("system", ""));
      msg = withImages("system", `[${e.eventType}] ${text}`, images);
  }
  return prepared(e, "message", msg, { textLine, searchText: text, images: images.length });
}
