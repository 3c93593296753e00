/**
 * Recall: what an agent should know before its next model call, within one
 * token budget, counted by the tokenizer the context assembly uses. The
 * parts, in order of precedence:
 *   1. pinned (core) memories, most important first, as many as fit;
 *   2. the session's context, as BuildConversationContext builds it, within
 *      what is left less the relevant memories' reserve: as much as the
 *      memories want of half of what is left (so a long conversation never
 *      crowds the memories out, nor they the conversation);
 *   3. the most relevant memories, best first, within everything the first
 *      two left: what the conversation does not use goes to memories.
 * The block renders them in the order pinned, relevant, conversation, with a
 * heading per part that is not empty; each memory line carries its date
 * (valid_from, ISO) and its source session where known. Its token count
 * never exceeds the budget.
 */
import { create } from "@bufbuild/protobuf";
import {
  BuildConversationContextRequestSchema,
  RecallResponseSchema,
  type BuildConversationContextResponse,
  type RecallRequest,
  type RecallResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { invalidArgument, sessionNotFound } from "../../errors.js";
import type { MemoryRecord, MemoryScopeFilter, MemoryStore } from "../../store/types.js";
import type { ConversationContexts } from "../context/conversation.js";
import type { TokenCounter } from "../context/index.js";
import { MAX_TOKEN_BUDGET, tokenizerName } from "../context/request.js";
import { requireId } from "../validation.js";
import { toWireMemory, toWireScored } from "./convert.js";
import type { FusedMemory } from "./ranking.js";
import type { LongTermMemoryService } from "./service.js";
import type { CallContext } from "../call-context.js";
import { checkQuery, optionalName, queryEmbedding, topK } from "./validation.js";

/** Default token_budget of Recall. */
export const DEFAULT_RECALL_BUDGET = 4000;
/** Pinned memories Recall considers (the most important first). */
export const MAX_RECALL_PINNED = 100;
/** Relevant memories Recall ranks when top_k is 0 ("as many as fit"), at most. */
export const MAX_RECALL_MEMORIES = 200;
/** Budget tokens per relevant memory ranked when top_k is 0: a dated line takes ten tokens at the least. */
const TOKENS_PER_MEMORY_LINE = 10;
/** Share of the budget left after the pinned memories reserved for relevant memories when they want it. */
const MEMORY_SHARE = 0.5;
/** Times the context is rebuilt smaller when its text counts more tokens than its messages did. */
const MAX_CONTEXT_ATTEMPTS = 3;
/** Times the relevant memories are packed again into less when the whole block came out over the budget. */
const MAX_MEMORY_ATTEMPTS = 3;

/** The relevant memories Recall ranks for a budget when the caller gave no top_k: as many as could fit. */
export function recallTopK(budget: number): number {
  return Math.max(1, Math.min(MAX_RECALL_MEMORIES, Math.ceil(budget / TOKENS_PER_MEMORY_LINE)));
}

/** The headings of the rendered block. */
export const RECALL_HEADINGS = {
  pinned: "## Core memories",
  memories: "## Relevant memories",
  context: "## Conversation",
} as const;

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

/** One memory as a line of the block: "- 2026-03-14 (session s-9): text", so that "when" questions can be answered. */
export function memoryLine(m: MemoryRecord): string {
  const date = new Date(m.validFrom).toISOString().slice(0, 10);
  const session = m.source?.sessionId || m.sessionId;
  return session ? `- ${date} (session ${session}): ${m.text}` : `- ${date}: ${m.text}`;
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
function pack<T extends { memory?: MemoryRecord } | MemoryRecord>(
  items: readonly T[],
  heading: string,
  budget: number,
  counter: TokenCounter,
  memoryOf: (t: T) => MemoryRecord,
) {
  const chosen: T[] = [];
  const lines: string[] = [];
  let estimate = counter.count(heading);
  for (const item of items) {
    const next = `\n${memoryLine(memoryOf(item))}`;
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
  for (let i = 0; i < sections.length; i++)
    total += counter.count(i < sections.length - 1 ? `${sections[i]}\n\n` : sections[i]);
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
  const pinned = pack(opts.pinned, RECALL_HEADINGS.pinned, budget, counter, (m) => m);
  const pinnedPart = [pinned.section].filter((s) => s !== "");
  // Two newlines join the sections: count them with the section that follows.
  const left = Math.max(0, budget - pinned.tokens - 2);
  const packMemories = (within: number) =>
    pack(opts.relevant, RECALL_HEADINGS.memories, within, counter, (r) => r.memory);
  // The memories' reserve: what they would take of their share, so the conversation may have the rest of that share.
  const reserve = Math.min(packMemories(left).tokens, Math.floor(left * MEMORY_SHARE));
  let context: BuildConversationContextResponse | undefined;
  let contextSection = "";
  // The context's own count (its messages) and its text's may differ a little: rebuild smaller until it fits.
  let contextBudget = left - reserve - counter.count(`${RECALL_HEADINGS.context}\n`) - 2;
  for (let attempt = 0; attempt < MAX_CONTEXT_ATTEMPTS && contextBudget > 0; attempt++) {
    const built = await opts.buildContext(contextBudget);
    if (built.text === "") break;
    const section = `${RECALL_HEADINGS.context}\n${built.text}`;
    const total = countBlock([...pinnedPart, section], counter);
    if (total <= budget - reserve) {
      context = built;
      contextSection = section;
      break;
    }
    contextBudget -= total - (budget - reserve);
  }
  const contextPart = [contextSection].filter((s) => s !== "");
  // The memories take everything else; the joins may count a little differently than estimated: pack into less until the block fits.
  let memoryBudget = budget - countBlock([...pinnedPart, ...contextPart], counter) - 2;
  let memories = { chosen: [] as FusedMemory[], section: "", tokens: 0 };
  for (let attempt = 0; attempt < MAX_MEMORY_ATTEMPTS && memoryBudget > 0; attempt++) {
    const packed = packMemories(memoryBudget);
    if (packed.section === "") break;
    const total = countBlock([...pinnedPart, packed.section, ...contextPart], counter);
    if (total <= budget) {
      memories = packed;
      break;
    }
    memoryBudget -= total - budget;
  }
  const sections = [...pinnedPart, memories.section, ...contextPart].filter((s) => s !== "");
  return {
    pinned: pinned.chosen,
    memories: memories.chosen,
    context,
    text: sections.join("\n\n"),
    pinnedTokens: pinned.tokens,
    memoryTokens: memories.tokens,
    contextTokens: contextSection === "" ? 0 : counter.count(contextSection),
    tokensUsed: countBlock(sections, counter),
  };
}

/** The Recall RPC: the session's scope read once, its memories ranked, and its conversation built within the rest of the budget. */
export class RecallService {
  constructor(
    private readonly store: MemoryStore,
    private readonly longTerm: LongTermMemoryService,
    private readonly conversations: ConversationContexts,
  ) {}

  async recall(req: RecallRequest, call?: CallContext): Promise<RecallResponse> {
    const sessionId = requireId("session_id", req.sessionId);
    if (req.tokenBudget > MAX_TOKEN_BUDGET)
      throw invalidArgument("token_budget", `must be at most ${MAX_TOKEN_BUDGET}`);
    const budget = req.tokenBudget === 0 ? DEFAULT_RECALL_BUDGET : req.tokenBudget;
    const query = checkQuery("query", req.query);
    const agentId = optionalName("agent_id", req.agentId);
    const tokenizer = tokenizerName(req.tokenizer);
    // No top_k: as many memories as the budget could hold; the packing keeps those that fit.
    const k = req.topK === 0 ? recallTopK(budget) : topK("top_k", req.topK);
    const embedding = queryEmbedding("query_embedding", req.queryEmbedding);
    // The session and the tokenizer do not depend on each other: fetch them together.
    const [session, counter] = await Promise.all([
      this.store.getSession(sessionId, call),
      this.conversations.tokenizer(tokenizer),
    ]);
    if (!session) throw sessionNotFound(sessionId);
    // What a caller in this session may recall: its user's, its agent's (when named), the session's and the shared memories.
    const scope: MemoryScopeFilter = { appName: session.appName, userId: session.userId, sessionId, match: "visible" };
    if (agentId !== undefined) scope.agentId = agentId;
    const now = Date.now();
    // Vectors only when asked for: encoding 110 of 384 dimensions took ~21 ms (binary) or ~7 ms (JSON) of a call,
    // and a store that ships them per row (PostgreSQL) need not read them at all.
    const omitEmbeddings = !req.includeEmbeddings;
    // Pinned and relevant memories are independent reads: one store round trip's wait, not two.
    const [pinned, relevant] = await Promise.all([
      this.store.memories.listMemories(
        { scope, asOf: now, pinned: true, omitEmbeddings },
        MAX_RECALL_PINNED,
        undefined,
        call,
      ),
      this.longTerm.rank(
        { filter: { scope, asOf: now, pinned: false, omitEmbeddings }, query, topK: k, embedding },
        call,
      ),
    ]);
    pinned.sort((a, b) => b.importance - a.importance || b.validFrom - a.validFrom);
    const recall = await assembleRecall({
      pinned,
      relevant,
      budget,
      counter,
      buildContext: (tokenBudget) =>
        this.conversations.build(
          create(BuildConversationContextRequestSchema, { sessionId, tokenBudget, query, tokenizer }),
          call,
        ),
    });
    const withEmbeddings = !omitEmbeddings;
    return create(RecallResponseSchema, {
      text: recall.text,
      pinned: recall.pinned.map((m) => toWireMemory(m, withEmbeddings)),
      memories: recall.memories.map((r) => toWireScored(r, withEmbeddings)),
      context: recall.context,
      pinnedTokens: recall.pinnedTokens,
      memoryTokens: recall.memoryTokens,
      contextTokens: recall.contextTokens,
      tokensUsed: recall.tokensUsed,
      tokenizer: counter.name,
    });
  }
}
