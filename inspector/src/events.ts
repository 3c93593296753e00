/**
 * How one event looks: a row with its seq, a type badge coloured by type, its
 * time and id, and its content — text as text, JSON collapsed behind a
 * summary that expands. Tool calls are paired with their results the way the
 * server pairs them for BuildConversationContext: by tool_call_id (in content
 * or metadata), else by tool name in order.
 */
import { toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampDate } from "@bufbuild/protobuf/wkt";
import type { Event as MemoryEvent } from "@engram/gen";
import { adkEventOf, adkEventView, adkSummary } from "./adk";
import { formatClock, formatTime, h, type Child } from "./dom";
import { preview } from "./preview";

/** Event types with a colour of their own; any other type gets one derived from its name. */
const KNOWN_TYPES = new Set([
  "user_message",
  "agent_response",
  "tool_call",
  "tool_result",
  "delegation_request",
  "delegation_response",
  "task_delegation_received",
  "error",
  "system",
]);

/** An event's content as plain JSON. */
export function contentOf(event: MemoryEvent): JsonValue {
  return event.content ? toJson(ValueSchema, event.content) : null;
}

function field(value: JsonValue, name: string): string | undefined {
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const v = (value as JsonObject)[name];
    if (typeof v === "string" && v !== "") return v;
  }
  return undefined;
}

/** A stable hue for a type name, so unknown types keep their colour across reloads. */
function hueOf(name: string): number {
  let hash = 0;
  for (const ch of name) hash = (hash * 31 + ch.charCodeAt(0)) >>> 0;
  return hash % 360;
}

/** An event in one line, at most `max` characters: an ADK event as its author and what it says, other content as JSON. */
export function eventPreview(event: MemoryEvent, max = 120): string {
  const content = contentOf(event);
  const adk = adkEventOf(content);
  return adk ? adkSummary(adk, max) : preview(content, max);
}

/** A JSON value, collapsed to a one-line summary that expands to the pretty-printed whole. */
export function jsonView(value: JsonValue, label?: string, open = false): HTMLElement {
  if (value === null || typeof value !== "object") {
    return h(
      "pre",
      { class: "json scalar" },
      label ? `${label}: ` : "",
      typeof value === "string" ? value : JSON.stringify(value),
    );
  }
  return h(
    "details",
    { class: "json", open },
    h("summary", {}, label ? h("span", { class: "json-label" }, label) : null, preview(value)),
    h("pre", {}, JSON.stringify(value, null, 2)),
  );
}

/** Where a tool call or result points to its partner. */
interface PairSlot {
  seq: bigint;
  slot: HTMLElement;
}

/** Pairs tool calls with their results as events arrive (in seq order). */
export class ToolPairing {
  private readonly byId = new Map<string, PairSlot>();
  private readonly byName = new Map<string, PairSlot[]>();

  /** Records `event` and fills the pair slots of it and its partner when it completes a pair. */
  add(event: MemoryEvent, content: JsonValue, slot: HTMLElement): void {
    const id = field(content, "tool_call_id") ?? (event.metadata?.tool_call_id as string | undefined);
    const name = field(content, "tool") ?? field(content, "name") ?? (event.metadata?.tool as string | undefined);
    const mine: PairSlot = { seq: event.seq, slot };
    if (event.eventType === "tool_call") {
      if (id) this.byId.set(id, mine);
      if (name) this.byName.set(name, [...(this.byName.get(name) ?? []), mine]);
      fill(slot, "pair pending", "awaiting result");
      return;
    }
    if (event.eventType !== "tool_result") return;
    let call = id ? this.byId.get(id) : undefined;
    if (!call && name) call = this.byName.get(name)?.[0];
    if (!call) {
      fill(slot, "pair orphan", "no matching call");
      return;
    }
    for (const [key, value] of this.byId) if (value === call) this.byId.delete(key);
    for (const [key, queue] of this.byName)
      this.byName.set(
        key,
        queue.filter((c) => c !== call),
      );
    fill(call.slot, "pair done", "result ", seqLink(event.seq));
    fill(slot, "pair done", "answers ", seqLink(call.seq));
  }
}

function fill(slot: HTMLElement, className: string, ...children: Child[]): void {
  slot.className = className;
  slot.replaceChildren();
  for (const child of children)
    if (child !== null && child !== undefined && child !== false)
      slot.append(typeof child === "number" ? String(child) : child);
}

function seqLink(seq: bigint): HTMLElement {
  return h(
    "a",
    {
      href: `#ev-${seq}`,
      onclick: (ev: Event) => {
        ev.preventDefault();
        const target = document.getElementById(`ev-${seq}`);
        target?.scrollIntoView({ block: "center", behavior: "smooth" });
        target?.classList.add("flash");
        setTimeout(() => target?.classList.remove("flash"), 1200);
      },
    },
    `#${seq}`,
  );
}

/** An event's time in epoch milliseconds (0 when it has none). */
export function millisOf(event: MemoryEvent): number {
  return event.timestamp ? timestampDate(event.timestamp).getTime() : 0;
}

/** The agent an event names (content.agent / target_agent / from_agent, or metadata.agent), as the server's context does. */
export function agentOf(event: MemoryEvent): string | undefined {
  const content = contentOf(event);
  const metadataAgent = event.metadata?.agent;
  return (
    field(content, "agent") ??
    field(content, "target_agent") ??
    field(content, "from_agent") ??
    (typeof metadataAgent === "string" && metadataAgent ? metadataAgent : undefined)
  );
}

/** A gap between two events for a person: "+850 ms", "+2.4 s", "+3 min". */
function gap(ms: number): string {
  if (ms < 1000) return `+${Math.max(0, Math.round(ms))} ms`;
  if (ms < 60_000) return `+${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `+${Math.round(ms / 60_000)} min`;
  return `+${(ms / 3_600_000).toFixed(1)} h`;
}

/** Image URLs an event's content holds in the shapes the server's context reads (OpenAI parts, image_url, url), data: URLs only. */
export function imagesOf(content: JsonValue): string[] {
  const found: string[] = [];
  const visit = (v: JsonValue, depth: number) => {
    if (depth > 6 || found.length >= 8) return;
    if (typeof v === "string") {
      // Only inline images: the page's policy loads nothing from elsewhere, and an agent's link is not fetched by a viewer.
      if (/^data:image\/(png|jpe?g|gif|webp);base64,/i.test(v)) found.push(v);
      return;
    }
    if (v && typeof v === "object") for (const x of Array.isArray(v) ? v : Object.values(v)) visit(x, depth + 1);
  };
  visit(content, 0);
  return found;
}

/** The stack trace or traceback an error event carries, if any. */
function stackOf(content: JsonValue): string | undefined {
  for (const name of ["stack", "stack_trace", "stacktrace", "traceback"]) {
    const v = field(content, name);
    if (v) return v;
  }
  return undefined;
}

/** Content shown for a person: a string as text, images as images, a stack trace as lines, other JSON collapsed. */
function contentView(event: MemoryEvent, content: JsonValue): HTMLElement {
  const adk = adkEventOf(content);
  if (adk) return h("div", {}, adkEventView(adk), jsonView(content, "ADK event"));
  if (typeof content === "string") {
    return content.startsWith("data:image/") && imagesOf(content).length
      ? h("div", { class: "images" }, h("img", { src: content, alt: `image of event #${event.seq}`, loading: "lazy" }))
      : h("div", { class: "text" }, content);
  }
  const images = imagesOf(content);
  const stack = stackOf(content);
  const messageText = field(content, "message") ?? field(content, "error");
  return h(
    "div",
    {},
    messageText && (stack || event.eventType === "error") ? h("div", { class: "error-message" }, messageText) : null,
    stack ? h("pre", { class: "stack" }, stack) : null,
    images.length
      ? h(
          "div",
          { class: "images" },
          ...images.map((src, i) => h("img", { src, alt: `image ${i + 1} of event #${event.seq}`, loading: "lazy" })),
        )
      : null,
    // The raw JSON with each image's base64 elided: the image is above, and kilobytes of base64 help nobody.
    jsonView(images.length ? elideImages(content) : content),
  );
}

function elideImages(v: JsonValue): JsonValue {
  if (typeof v === "string")
    return /^data:image\//.test(v) ? `${v.slice(0, v.indexOf(",") + 1)}…(${v.length} characters)` : v;
  if (Array.isArray(v)) return v.map(elideImages);
  if (v && typeof v === "object") return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, elideImages(x)]));
  return v;
}

/** Stands for a null stored as a value, apart from the null that deletes a key. */
const NULL_VALUE = Symbol("null value");

/**
 * The state changes an event carried (its state_delta and state_removals), key
 * by key: a set key with its new value, a deleted one (removed, or null unless
 * the event stored nulls as values) marked as deleted. Absent when the event
 * changed no state.
 */
export function stateDeltaView(event: MemoryEvent): HTMLElement | null {
  const delta: Record<string, unknown> = {};
  // A removal is shown as a legacy null is: deleted. A stored null is a value, shown as "= null".
  for (const key of event.stateRemovals ?? []) delta[key] = null;
  for (const [key, value] of Object.entries(event.stateDelta ?? {}))
    delta[key] = value === null && event.stateNullsAreValues ? NULL_VALUE : value;
  const keys = Object.keys(delta).sort();
  if (keys.length === 0) return null;
  return h(
    "div",
    { class: "state-delta", "aria-label": `state changes of event ${event.seq}` },
    h("span", { class: "state-delta-label" }, "state"),
    h(
      "ul",
      {},
      ...keys.map((key) => {
        const value = delta[key];
        return value === null
          ? h(
              "li",
              { class: "deleted", "data-key": key },
              h("code", { class: "state-key" }, key),
              " ",
              h("span", { class: "deleted-mark" }, "deleted"),
            )
          : h(
              "li",
              { class: "set", "data-key": key },
              h("code", { class: "state-key" }, key),
              " = ",
              h("span", { class: "state-value" }, value === NULL_VALUE ? "null" : preview(value as JsonValue, 80)),
            );
      }),
    ),
  );
}

/** The row of one event; `previous` is the event shown before it, for the time between them. */
export function eventRow(event: MemoryEvent, pairing: ToolPairing, previous?: MemoryEvent): HTMLElement {
  const content = contentOf(event);
  const known = KNOWN_TYPES.has(event.eventType);
  const badge = h("span", { class: `badge ${known ? `type-${event.eventType}` : "type-other"}` }, event.eventType);
  if (!known) badge.style.setProperty("--hue", String(hueOf(event.eventType)));
  const pairSlot = h("span", { class: "pair" });
  const metadata = event.metadata ?? {};
  const date = event.timestamp ? timestampDate(event.timestamp) : undefined;
  const since = previous && date && previous.timestamp ? millisOf(event) - millisOf(previous) : undefined;
  const row = h(
    "article",
    {
      class: `event ${known ? `row-${event.eventType}` : "row-other"}`,
      id: `ev-${event.seq}`,
      "data-seq": String(event.seq),
      "data-type": event.eventType,
      tabindex: 0,
      "aria-label": `event ${event.seq}, ${event.eventType}`,
    },
    h(
      "div",
      { class: "event-meta" },
      h("span", { class: "seq" }, `#${event.seq}`),
      badge,
      h("time", { datetime: date?.toISOString() ?? "", title: formatTime(date) }, date ? formatClock(date) : ""),
      since !== undefined
        ? h("span", { class: "since", title: "time since the previous event shown" }, gap(since))
        : null,
      h("span", { class: "tokens", title: "tokens this event takes in a context (CountEventTokens)" }),
      h("span", { class: "event-id", title: "event_id" }, event.eventId),
      pairSlot,
    ),
    h("div", { class: "event-content" }, contentView(event, content)),
    stateDeltaView(event),
    Object.keys(metadata).length > 0 ? jsonView(metadata, "metadata") : null,
  );
  if (!known) row.style.setProperty("--hue", String(hueOf(event.eventType)));
  pairing.add(event, content, pairSlot);
  return row;
}
