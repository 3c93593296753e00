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
import { LRUCache } from "lru-cache";
import type { StoredEvent } from "../../store/types.js";
import { EventType } from "../event-types.js";
import { prepareEvent, type ContextMessage, type PreparedEvent, type ToolCallPart } from "./render.js";
import { Bm25Ranker } from "./retrieval.js";
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

/** One event of an item, with its rendering and its message in this window. */
interface UnitEvent {
  event: StoredEvent;
  prep: PreparedEvent;
  /** Its message here: shared, never mutated (the edge caches wire forms by identity). */
  message: ContextMessage;
  /** Where it reads in seq order (a summary at its first covered seq). */
  pos: number;
}

/** A choosable item: one event, a tool call with its result, or a summary. */
interface Unit {
  events: UnitEvent[];
  section: string;
  cost: number;
  /** Where it reads in seq order (a summary at its first covered seq). */
  pos: number;
  searchText: string;
  /** The tokenizer its cost was counted with. */
  tokenizer: string;
  /** A tool pair's id ("" otherwise). */
  pairId: string;
}

/** Everything about a window that does not depend on budgets or the query. */
interface Analysis {
  /** Items in reading order. */
  units: Unit[];
  /** Items of each section, in reading order. */
  bySection: Map<string, Unit[]>;
  /** Events of each section that can never be included (unpaired tool events, unrenderable types). */
  droppedBySection: Map<string, number>;
  /** Every section present, including ones with only dropped events. */
  sections: Set<string>;
  eventsSummarized: number;
  windowSize: number;
}

/** The analysis of a window, kept per session (see analysisFor). */
interface CachedAnalysis {
  first: StoredEvent;
  last: StoredEvent;
  length: number;
  preserveSystem: boolean;
  tokenizer: string;
  analysis: Analysis;
}

/** Assembles contexts; keeps per-event renderings, token counts and window analyses across calls. */
export class ContextAssembler {
  /** Keyed by stored object: the local store hands out the same objects on every read. */
  private readonly prepared = new WeakMap<StoredEvent, PreparedEvent>();
  /**
   * The analyses of each session's current window, for sessions whose store
   * hands out the same objects on every read (the local store): a repeated
   * call over an unchanged session skips analysis. Bounded: at most 4 windows
   * of 1024 sessions.
   */
  private readonly analyses = new LRUCache<string, CachedAnalysis[]>({ max: 1024 });
  private readonly ranker = new Bm25Ranker();

  /** The request-independent rendering of an event, computed once per stored object. */
  prepare(e: StoredEvent): PreparedEvent {
    let p = this.prepared.get(e);
    if (!p) this.prepared.set(e, (p = prepareEvent(e)));
    return p;
  }

  /** Tokens `e` takes in a context, as a budget is charged for it (CountEventTokens). */
  eventTokens(e: StoredEvent, counter: TokenCounter): number {
    return this.cost(this.prepare(e), counter);
  }

  private cost(p: PreparedEvent, counter: TokenCounter): number {
    let n = p.tokens.get(counter.name);
    if (n === undefined) {
      n = MESSAGE_OVERHEAD_TOKENS + counter.count(p.tokenText) + IMAGE_TOKENS * p.images;
      p.tokens.set(counter.name, n);
    }
    return n;
  }

  /**
   * The analysis of a window, reused when the same stored objects come back:
   * identical first and last objects and a gapless seq run of the same length
   * mean the very same events (stores return fresh objects, so only the local
   * store hits this).
   */
  private analysisFor(window: readonly StoredEvent[], preserveSystem: boolean, counter: TokenCounter): Analysis {
    if (window.length === 0) return this.analyze(window, preserveSystem, counter);
    const first = window[0];
    const last = window[window.length - 1];
    const sameWindow = (c: CachedAnalysis) =>
      c.first === first &&
      c.last === last &&
      c.length === window.length &&
      c.preserveSystem === preserveSystem &&
      c.tokenizer === counter.name;
    const cached = this.analyses.get(last.sessionId);
    const hit = cached?.find(sameWindow);
    if (hit) return hit.analysis;
    // Only a store that hands out the same objects again (seen before this call) can ever hit.
    const reusedObjects = this.prepared.has(last) && this.prepared.has(first);
    const analysis = this.analyze(window, preserveSystem, counter);
    if (reusedObjects && last.seq - first.seq + 1 === window.length) {
      const entry = { first, last, length: window.length, preserveSystem, tokenizer: counter.name, analysis };
      // Variants of the current window (tokenizer, preserve_system, max_events); older windows go.
      const list = (cached ?? []).filter((c) => c.last === last).slice(-3);
      list.push(entry);
      this.analyses.set(last.sessionId, list);
    }
    return analysis;
  }

  /**
   * The item of a plain event or of a tool pair, reused across analyses while
   * its section, position, partner and tokenizer stay the same (a window that
   * grew by one event reuses all but the new items).
   */
  private unitOf(
    e: StoredEvent,
    p: PreparedEvent,
    section: string,
    pos: number,
    counter: TokenCounter,
    result?: { event: StoredEvent; prep: PreparedEvent; id: string },
  ): Unit {
    const c = p.unit as Unit | undefined;
    if (
      c &&
      c.section === section &&
      c.pos === pos &&
      c.tokenizer === counter.name &&
      (result ? c.events[1]?.event === result.event && c.pairId === result.id : c.events.length === 1)
    )
      return c;
    let unit: Unit;
    if (result) {
      const r = result.prep;
      const call: ToolCallPart = { ...p.message.toolCalls[0], id: result.id };
      unit = {
        events: [
          { event: e, prep: p, message: { ...p.message, toolCalls: [call] }, pos: e.seq },
          { event: result.event, prep: r, message: { ...r.message, toolCallId: result.id }, pos: result.event.seq },
        ],
        section,
        cost: this.cost(p, counter) + this.cost(r, counter),
        pos,
        searchText: `${p.searchText}\n${r.searchText}`,
        tokenizer: counter.name,
        pairId: result.id,
      };
    } else {
      unit = {
        events: [{ event: e, prep: p, message: p.message, pos }],
        section,
        cost: this.cost(p, counter),
        pos,
        searchText: p.searchText,
        tokenizer: counter.name,
        pairId: "",
      };
    }
    p.unit = unit;
    return unit;
  }

  private analyze(window: readonly StoredEvent[], preserveSystem: boolean, counter: TokenCounter): Analysis {
    const n = window.length;
    const prep: PreparedEvent[] = new Array(n);
    let summaries = 0;
    for (let i = 0; i < n; i++) {
      prep[i] = this.prepare(window[i]);
      if (prep[i].covers) summaries++;
    }
    // Summaries: which events they hide, and where they read.
    const hidden = new Uint8Array(n);
    const startOf = new Map<number, number>();
    let eventsSummarized = 0;
    if (summaries > 0) {
      const { active, hidden: covered } = resolveSummaries(
        window.map((event, i) => ({ seq: event.seq, i })),
        ({ i }) => prep[i].covers,
      );
      for (const s of active) startOf.set(s.event.i, s.range.fromSeq);
      for (const { i } of covered) hidden[i] = 1;
      eventsSummarized = covered.size;
    }
    const partner = pairTools(prep, hidden, window);

    const units: Unit[] = [];
    const droppedBySection = new Map<string, number>();
    const sections = new Set<string>();
    const drop = (section: string) => droppedBySection.set(section, (droppedBySection.get(section) ?? 0) + 1);
    for (let i = 0; i < n; i++) {
      if (hidden[i]) continue;
      const e = window[i];
      const p = prep[i];
      const section =
        p.explicitSection ?? (e.eventType === EventType.SYSTEM && preserveSystem ? ROLE_SECTION : DEFAULT_SECTION);
      sections.add(section);
      if (p.kind === "unrenderable") {
        drop(section);
      } else if (p.kind === "toolCall" || p.kind === "toolResult") {
        const pair = partner[i];
        if (!pair) drop(section);
        else if (p.kind === "toolCall")
          units.push(
            this.unitOf(e, p, section, e.seq, counter, {
              event: window[pair.other],
              prep: prep[pair.other],
              id: pair.id,
            }),
          );
      } else {
        const start = startOf.get(i);
        units.push(this.unitOf(e, p, section, start === undefined ? e.seq : start - 0.5, counter));
      }
    }
    // A summary reads at its first covered seq, before its own.
    if (startOf.size > 0) units.sort((a, b) => a.pos - b.pos);
    const bySection = new Map<string, Unit[]>();
    for (const u of units) {
      let list = bySection.get(u.section);
      if (!list) bySection.set(u.section, (list = []));
      list.push(u);
    }
    return { units, bySection, droppedBySection, sections, eventsSummarized, windowSize: n };
  }

  /** Builds the context of a window (events in seq order). */
  assemble(window: readonly StoredEvent[], options: ContextOptions, counter: TokenCounter): ConversationContext {
    const analysis = this.analysisFor(window, options.preserveSystem, counter);

    // Sections in fill order.
    const order: string[] = [];
    const add = (s: string) => {
      if (analysis.sections.has(s) && !order.includes(s)) order.push(s);
    };
    if (options.preserveSystem) add(ROLE_SECTION);
    options.sectionPriority.forEach(add);
    DEFAULT_SECTION_ORDER.forEach(add);
    if (order.length < analysis.sections.size) [...analysis.sections].sort().forEach(add);

    let remaining = options.tokenBudget;
    const chosen = new Set<Unit>();
    const sections: SectionUsage[] = [];
    let retrievalUsed = false;
    let tokensUsed = 0;
    let eventsIncluded = 0;
    for (const name of order) {
      const candidates = analysis.bySection.get(name) ?? [];
      let left = Math.min(remaining, options.sectionBudgets.get(name) ?? Infinity);
      const usage: SectionUsage = {
        name,
        tokensUsed: 0,
        eventsIncluded: 0,
        eventsDropped: analysis.droppedBySection.get(name) ?? 0,
        retrievalUsed: false,
      };
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
        const scores = this.ranker.scores(
          candidates.map((u) => u.searchText),
          options.query,
          candidates,
        );
        const ranked = candidates.map((u, i) => ({ u, score: scores[i] }));
        // Most relevant first; equal scores (and non-matching items) newest first.
        ranked.sort((a, b) => b.score - a.score || b.u.pos - a.u.pos);
        for (const { u } of ranked) take(u);
      } else {
        // Newest first, stopping at the first item that does not fit: no holes in the recent history.
        for (let i = candidates.length - 1; i >= 0; i--) if (!take(candidates[i])) break;
      }
      for (const u of candidates) if (!chosen.has(u)) usage.eventsDropped += u.events.length;
      tokensUsed += usage.tokensUsed;
      eventsIncluded += usage.eventsIncluded;
      sections.push(usage);
    }

    // Render the chosen items in reading order.
    const lines: string[] = [];
    const messages: ContextMessage[] = [];
    const items: UnitEvent[] = [];
    for (const u of analysis.units) if (chosen.has(u)) items.push(...u.events);
    // A pair's result may come after later items: back to seq order (summaries keep their place).
    items.sort((a, b) => a.pos - b.pos);
    for (const item of items) {
      if (item.prep.textLine) lines.push(item.prep.textLine);
      const m = item.message;
      const last = messages[messages.length - 1];
      // Consecutive calls form one assistant turn (parallel tool calls).
      if (
        item.prep.kind === "toolCall" &&
        last &&
        last.role === "assistant" &&
        last.toolCalls.length > 0 &&
        last.content === ""
      ) {
        messages[messages.length - 1] = { ...last, toolCalls: [...last.toolCalls, ...m.toolCalls] };
      } else {
        messages.push(m);
      }
    }
    return {
      text: lines.join("\n"),
      messages,
      eventsIncluded,
      eventsDropped: analysis.windowSize - eventsIncluded - analysis.eventsSummarized,
      eventsSummarized: analysis.eventsSummarized,
      tokensUsed,
      retrievalUsed,
      tokenizer: counter.name,
      sections,
    };
  }
}

/** The other half of a tool pair (an index in the window) and the id both carry. */
interface ToolPartner {
  other: number;
  id: string;
}

/**
 * Pairs tool calls with results among the visible events: by id when the
 * result names one, otherwise with the oldest open call of the same tool.
 * Unpaired calls and results get no partner (LLM APIs reject an unanswered call).
 */
function pairTools(
  prep: readonly PreparedEvent[],
  hidden: Uint8Array,
  window: readonly StoredEvent[],
): (ToolPartner | undefined)[] {
  const partner: (ToolPartner | undefined)[] = new Array(prep.length);
  const open: { i: number; id: string; name: string }[] = [];
  for (let i = 0; i < prep.length; i++) {
    const p = prep[i];
    if (hidden[i]) continue;
    if (p.kind === "toolCall") {
      open.push({ i, id: p.toolCallId ?? `call_${window[i].seq}`, name: p.toolName });
    } else if (p.kind === "toolResult") {
      const id = p.toolCallId;
      const name = p.toolName;
      const k =
        id !== undefined
          ? open.findIndex((c) => c.id === id)
          : open.findIndex((c) => c.name === name || name === "tool");
      if (k < 0) continue;
      const [call] = open.splice(k, 1);
      partner[call.i] = { other: i, id: call.id };
      partner[i] = { other: call.i, id: call.id };
    }
  }
  return partner;
}
