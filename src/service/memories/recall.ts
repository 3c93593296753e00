/**
 * Recall: what an agent should know before its next model call, within one
 * token budget, counted by the tokenizer the context assembly uses. The
 * parts, in order of precedence:
 *   1. pinned (core) memories, most important first, as many as fit;
 *   2. the most relevant memories, best first, within half of what is left
 *      (so a long memory list never crowds the conversation out);
 *   3. the session's context, as BuildConversationContext builds it, within
 *      the rest.
 * The rendered text is one block with a heading per part that is not empty;
 * its token count never exceeds the budget.
 */
import type { BuildConversationContextResponse } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { MemoryRecord } from "../../store/types.js";
import type { TokenCounter } from "../context/index.js";
import type { FusedMemory } from "./ranking.js";

/** Default token_budget of Recall. */
export const DEFAULT_RECALL_BUDGET = 4000;
/** Pinned memories Recall considers (the most important first). */
export const MAX_RECALL_PINNED = 100;
/** Share of the budget left after the pinned memories that relevant memories may take. */
const MEMORY_SHARE = 0.5;
/** Times the context is rebuilt smaller when its text counts more tokens than its messages did. */
const MAX_CONTEXT_ATTEMPTS = 3;

/** The headings of the rendered block. */
export const RECALL_HEADINGS = { pinned: "## Core memories", memories: "## Relevant memories", context: "## Conversation" } as const;

/** What Recall assembled. */
export interface RecallAssembly {
  pinned: MemoryRecord[];
  memories: FusedMemory[];
  context?: BuildConversationContextResponse;
  text: string;
  pinnedTokens: number;
  memoryTokens: number;
  contextTokens: number;
  tokensUsed: number;
}

/** One memory as a line of the block. */
function line(m: MemoryRecord): string {
  return `- ${m.text}`;
}

/**
 * The lines of `items` that fit in `budget` tokens under `heading`, in order;
 * a line that does not fit is skipped, later shorter ones may still fit.
 * Lines are counted one by one (the counter memoises each memory's line, and
 * the same memories come back call after call) rather than the whole section
 * again per line, which made packing quadratic: ~5 ms of CPU per Recall of
 * 100 pinned and 50 relevant memories. A BPE may tokenize across a line break
 * a little differently than the lines alone, so the section's own count has
 * the last word: lines are dropped from the end until it fits.
 */
function pack<T extends { memory?: MemoryRecord } | MemoryRecord>(items: readonly T[], heading: string, budget: number, counter: TokenCounter, memoryOf: (t: T) => MemoryRecord) {
  const chosen: T[] = [];
  const lines: string[] = [];
  let estimate = counter.count(heading);
  for (const item of items) {
    const next = `\n${line(memoryOf(item))}`;
    const cost = counter.count(next);
    if (estimate + cost > budget) continue;
    chosen.push(item);
    lines.push(next);
    estimate += cost;
  }
  for (; chosen.length > 0; chosen.pop(), lines.pop()) {
    const section = heading + lines.join("");
    const tokens = counter.count(section);
    if (tokens <= budget) return { chosen, section, tokens };
  }
  return { chosen, section: "", tokens: 0 };
}

/**
 * The tokens of `sections` joined by blank lines, every one after the first
 * opening with its "## " heading. With a counter additive before headings,
 * the sum of each section's count with its blank line (the last's alone):
 * those counts are memoised, and the pinned section comes back call after
 * call, where counting the whole block again tokenized ~4,000 tokens per
 * Recall (a third of its server CPU at 100k memories).
 */
function countBlock(sections: readonly string[], counter: TokenCounter): number {
  if (!counter.additiveBeforeHeadings) return counter.count(sections.join("\n\n"));
  let total = 0;
  for (let i = 0; i < sections.length; i++) total += counter.count(i < sections.length - 1 ? `${sections[i]}\n\n` : sections[i]);
  return total;
}

/** Assembles the recall; `buildContext(budget)` builds the session's context within `budget` tokens. */
export async function assembleRecall(opts: {
  pinned: readonly MemoryRecord[];
  relevant: readonly FusedMemory[];
  budget: number;
  counter: TokenCounter;
  buildContext: (budget: number) => Promise<BuildConversationContextResponse>;
}): Promise<RecallAssembly> {
  const { counter, budget } = opts;
  // Two newlines join the sections: count them with the section that follows.
  const pinned = pack(opts.pinned, RECALL_HEADINGS.pinned, budget, counter, (m) => m);
  let left = budget - pinned.tokens;
  const memories = pack(opts.relevant, RECALL_HEADINGS.memories, Math.floor(Math.max(0, left - 2) * MEMORY_SHARE), counter, (r) => r.memory);
  left -= memories.tokens;
  const head = [pinned.section, memories.section].filter((s) => s !== "");
  let context: BuildConversationContextResponse | undefined;
  let contextSection = "";
  // The context's own count (its messages) and its text's may differ a little: rebuild smaller until the whole fits.
  let contextBudget = left - counter.count(`${RECALL_HEADINGS.context}\n`) - 2;
  for (let attempt = 0; attempt < MAX_CONTEXT_ATTEMPTS && contextBudget > 0; attempt++) {
    const built = await opts.buildContext(contextBudget);
    if (built.text === "") break;
    const section = `${RECALL_HEADINGS.context}\n${built.text}`;
    const total = countBlock([...head, section], counter);
    if (total <= budget) {
      context = built;
      contextSection = section;
      break;
    }
    contextBudget -= total - budget;
  }
  let sections = contextSection === "" ? head : [...head, contextSection];
  let relevant = memories;
  if (contextSection === "" && sections.length > 0 && countBlock(sections, counter) > budget) {
    // The join of the two memory sections tipped it over: the pinned ones alone always fit.
    relevant = { chosen: [], section: "", tokens: 0 };
    sections = [pinned.section].filter((s) => s !== "");
  }
  const text = sections.join("\n\n");
  return {
    pinned: pinned.chosen,
    memories: relevant.chosen,
    context,
    text,
    pinnedTokens: pinned.tokens,
    memoryTokens: relevant.tokens,
    contextTokens: contextSection === "" ? 0 : counter.count(contextSection),
    tokensUsed: countBlock(sections, counter),
  };
}
