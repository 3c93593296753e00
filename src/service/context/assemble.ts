/**
 * Context assembly: chooses what of a window of events fits the budgets and
 * renders it as KAOS text and OpenAI-shape chat messages.
 *
 * Order of choice: the role section (system events) first when
 * preserve_system; then each section in priority order, newest first (or by
 * BM25 relevance once a section holds more than retrieval_threshold items and
 * a query is given) until the section's budget or the total budget is spent,
 * so the lowest-priority sections are the ones trimmed. A tool call and its
 * result are one item: both or neither. A summary stands in for the events it
 * covers. The chosen items are then rendered in seq order.
 */
import type { StoredEvent } from "../../store/types.js";
import { EventType } from "../event-types.js";
import { prepareEvent, type ContextMessage, type PreparedEvent, type ToolCallPart } from "./render.js";
import { bm25Scores } from "./retrieval.js";
import { resolveSummaries } from "./summaries.js";
import type { TokenCounter } from "./tokenizer.js";

/** Sections in their default priority, highest first. */
export const DEFAULT_SECTION_ORDER = ["role", "messages", "actions", "findings", "documents"] as const;
/** The section of system events (kept first when preserve_system). */
export const ROLE_SECTION = "role";
/** The section of every other event that names none. */
export const DEFAULT_SECTION = "messages";
/** Tokens charged per message on top of its text (OpenAI's chat format spends 3-4). */
export const MESSAGE_OVERHEAD_TOKENS = 4;
/** Tokens charged per image part (OpenAI's low-detail cost; the server never sees the pixels). */
export const IMAGE_TOKENS = 85;

/** What a request asks of assembly (validated; see request.ts). */
export interface ContextOptions {
  /** Most tokens in total; Infinity when unbounded. */
  tokenBudget: number;
  /** "" for none. */
  query: string;
  preserveSystem: boolean;
  /** Most tokens per section. */
  sectionBudgets: ReadonlyMap<string, number>;
  /** Highest priority first. */
  sectionPriority: readonly string[];
  retrievalThreshold: number;
}

/** What one section contributed. */
export interface SectionUsage {
  name: string;
  tokensUsed: number;
  eventsIncluded: number;
  eventsDropped: number;
  retrievalUsed: boolean;
}

/** The assembled context. */
export interface ConversationContext {
  text: string;
  messages: ContextMessage[];
  eventsIncluded: number;
  eventsDropped: number;
  eventsSummarized: number;
  tokensUsed: number;
  retrievalUsed: boolean;
  tokenizer: string;
  sections: SectionUsage[];
}

/** A choosable item: one event, a tool call with its result, or a summary. */
interface Unit {
  events: StoredEvent[];
  section: string;
  cost: number;
  /** Where it reads in seq order (a summary at its first covered seq). */
  pos: number;
  searchText: string;
}

/** Assembles contexts; keeps per-event renderings and token counts across calls. */
export class ContextAssembler {
  /** Keyed by stored object: the local store hands out the same objects on every read. */
  private readonly prepared = new WeakMap<StoredEvent, PreparedEvent>();

  /** The request-independent rendering of an event, computed once per stored object. */
  prepare(e: StoredEvent): PreparedEvent {
    let p = this.prepared.get(e);
    if (!p) this.prepared.set(e, (p = prepareEvent(e)));
    return p;
  }

  private cost(p: PreparedEvent, counter: TokenCounter): number {
    let n = p.tokens.get(counter.name);
    if (n === undefined) {
      n = MESSAGE_OVERHEAD_TOKENS + counter.count(p.tokenText) + IMAGE_TOKENS * p.images;
      p.tokens.set(counter.name, n);
    }
    return n;
  }

  /** Builds the context of a window (events in seq order). */
  assemble(window: readonly StoredEvent[], options: ContextOptions, counter: TokenCounter): ConversationContext {
    const prep = window.map((e) => this.prepare(e));
    const prepOf = new Map<StoredEvent, PreparedEvent>();
    window.forEach((e, i) => prepOf.set(e, prep[i]));
    const sectionOf = (p: PreparedEvent, e: StoredEvent) =>
      p.explicitSection ?? (e.eventType === EventType.SYSTEM && options.preserveSystem ? ROLE_SECTION : DEFAULT_SECTION);

    const { active, hidden } = resolveSummaries(window, (e) => {
      const p = prepOf.get(e)!;
      return p.kind === "summary" ? p.covers : undefined;
    });
    const summaryStart = new Map(active.map((s) => [s.event, s.range.fromSeq]));
    const visible = hidden.size === 0 ? window : window.filter((e) => !hidden.has(e));
    const pairs = pairTools(visible, prepOf);

    // Items, and the events that can never be included.
    const units: Unit[] = [];
    const droppedBySection = new Map<string, number>();
    const drop = (section: string) => droppedBySection.set(section, (droppedBySection.get(section) ?? 0) + 1);
    for (const e of visible) {
      const p = prepOf.get(e)!;
      const section = sectionOf(p, e);
      if (p.kind === "unrenderable") {
        drop(section);
      } else if (p.kind === "toolCall" || p.kind === "toolResult") {
        const pair = pairs.get(e);
        if (!pair) drop(section);
        else if (p.kind === "toolCall") {
          const r = prepOf.get(pair.result)!;
          units.push({ events: [e, pair.result], section, cost: this.cost(p, counter) + this.cost(r, counter), pos: e.seq, searchText: `${p.searchText}\n${r.searchText}` });
        }
      } else {
        const start = summaryStart.get(e);
        units.push({ events: [e], section, cost: this.cost(p, counter), pos: start === undefined ? e.seq : start - 0.5, searchText: p.searchText });
      }
    }

    // Sections in fill order.
    const present = new Set<string>([...units.map((u) => u.section), ...droppedBySection.keys()]);
    const order: string[] = [];
    const add = (s: string) => {
      if (present.has(s) && !order.includes(s)) order.push(s);
    };
    if (options.preserveSystem) add(ROLE_SECTION);
    options.sectionPriority.forEach(add);
    DEFAULT_SECTION_ORDER.forEach(add);
    [...present].sort().forEach(add);

    const bySection = new Map<string, Unit[]>();
    for (const u of units) {
      let list = bySection.get(u.section);
      if (!list) bySection.set(u.section, (list = []));
      list.push(u);
    }
    // A summary reads at its first covered seq, before its own.
    if (summaryStart.size > 0) for (const list of bySection.values()) list.sort((a, b) => a.pos - b.pos);

    let remaining = options.tokenBudget;
    const chosen = new Set<Unit>();
    const sections: SectionUsage[] = [];
    let retrievalUsed = false;
    for (const name of order) {
      const candidates = bySection.get(name) ?? [];
      let left = Math.min(remaining, options.sectionBudgets.get(name) ?? Infinity);
      const usage: SectionUsage = { name, tokensUsed: 0, eventsIncluded: 0, eventsDropped: droppedBySection.get(name) ?? 0, retrievalUsed: false };
      const take = (u: Unit): boolean => {
        if (u.cost > left) return false;
        left -= u.cost;
        remaining -= u.cost;
        usage.tokensUsed += u.cost;
        usage.eventsIncluded += u.events.length;
        chosen.add(u);
        return true;
      };
      if (name === ROLE_SECTION && options.preserveSystem) {
        // Oldest first: the first system prompt is the one that defines the agent.
        for (const u of candidates) take(u);
      } else if (options.query !== "" && candidates.length > options.retrievalThreshold) {
        usage.retrievalUsed = retrievalUsed = true;
        const scores = bm25Scores(candidates.map((u) => u.searchText), options.query);
        const ranked = candidates.map((u, i) => ({ u, score: scores[i] }));
        // Most relevant first; equal scores (and non-matching items) newest first.
        ranked.sort((a, b) => b.score - a.score || b.u.pos - a.u.pos);
        for (const { u } of ranked) take(u);
      } else {
        // Newest first, stopping at the first item that does not fit: no holes in the recent history.
        for (let i = candidates.length - 1; i >= 0; i--) if (!take(candidates[i])) break;
      }
      for (const u of candidates) if (!chosen.has(u)) usage.eventsDropped += u.events.length;
      sections.push(usage);
    }

    return this.render([...chosen], prepOf, pairs, {
      eventsSummarized: hidden.size,
      windowSize: window.length,
      retrievalUsed,
      tokenizer: counter.name,
      sections,
    });
  }

  private render(
    chosen: Unit[],
    prepOf: Map<StoredEvent, PreparedEvent>,
    pairs: Map<StoredEvent, ToolPair>,
    info: { eventsSummarized: number; windowSize: number; retrievalUsed: boolean; tokenizer: string; sections: SectionUsage[] },
  ): ConversationContext {
    const items: { pos: number; event: StoredEvent }[] = [];
    let tokensUsed = 0;
    for (const u of chosen) {
      tokensUsed += u.cost;
      for (const e of u.events) items.push({ pos: e === u.events[0] ? u.pos : e.seq, event: e });
    }
    items.sort((a, b) => a.pos - b.pos);
    const lines: string[] = [];
    const messages: ContextMessage[] = [];
    for (const { event } of items) {
      const p = prepOf.get(event)!;
      if (p.textLine) lines.push(p.textLine);
      if (p.kind === "toolCall") {
        const id = pairs.get(event)!.id;
        const call: ToolCallPart = { ...p.message.toolCalls[0], id };
        // Consecutive calls form one assistant turn (parallel tool calls).
        const last = messages[messages.length - 1];
        if (last && last.role === "assistant" && last.toolCalls.length > 0 && last.content === "") last.toolCalls.push(call);
        else messages.push({ ...p.message, toolCalls: [call] });
      } else if (p.kind === "toolResult") {
        messages.push({ ...p.message, toolCallId: pairs.get(event)!.id });
      } else {
        // Shared, never mutated: the edge may cache its wire form.
        messages.push(p.message);
      }
    }
    return {
      text: lines.join("\n"),
      messages,
      eventsIncluded: items.length,
      eventsDropped: info.windowSize - items.length - info.eventsSummarized,
      eventsSummarized: info.eventsSummarized,
      tokensUsed,
      retrievalUsed: info.retrievalUsed,
      tokenizer: info.tokenizer,
      sections: info.sections,
    };
  }
}

/** A tool call and its result, with the id both carry in the context. */
interface ToolPair {
  id: string;
  call: StoredEvent;
  result: StoredEvent;
}

/**
 * Pairs tool calls with results: by id when the result names one, otherwise
 * with the oldest open call of the same tool. Returns the pair of every paired
 * call and result; unpaired ones are absent (LLM APIs reject an unanswered call).
 */
function pairTools(events: readonly StoredEvent[], prepOf: Map<StoredEvent, PreparedEvent>): Map<StoredEvent, ToolPair> {
  const open: { event: StoredEvent; id: string; name: string }[] = [];
  const paired = new Map<StoredEvent, ToolPair>();
  for (const e of events) {
    const p = prepOf.get(e)!;
    if (p.kind === "toolCall") {
      open.push({ event: e, id: p.toolCallId ?? `call_${e.seq}`, name: p.toolName });
    } else if (p.kind === "toolResult") {
      const id = p.toolCallId;
      const name = p.toolName;
      const i = id !== undefined ? open.findIndex((c) => c.id === id) : open.findIndex((c) => c.name === name || name === "tool");
      if (i < 0) continue;
      const [call] = open.splice(i, 1);
      const pair = { id: call.id, call: call.event, result: e };
      paired.set(call.event, pair);
      paired.set(e, pair);
    }
  }
  return paired;
}
