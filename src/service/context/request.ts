/**
 * Validation of BuildConversationContextRequest: every field is checked and a
 * bad one answers INVALID_ARGUMENT naming it. Section names in
 * section_priority or section_budgets that no event uses are accepted (which
 * sections a session holds changes over time; they simply match nothing).
 */
import type { BuildConversationContextRequest } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { invalidArgument } from "../../errors.js";
import { EVENT_TYPE_PATTERN, type ServiceLimits } from "../limits.js";
import { checkText } from "../validation.js";
import type { ContextOptions } from "./assemble.js";
import { DEFAULT_TOKENIZER, isTokenizerName, TOKENIZER_NAMES, type TokenizerName } from "./tokenizer.js";

/** Largest token_budget and section budget (today's largest context windows are 1-2M tokens). */
export const MAX_TOKEN_BUDGET = 2_000_000;
/** Longest query, in characters. */
export const MAX_QUERY_LENGTH = 4096;
/** Default retrieval_threshold: sections with more items than this are ranked by relevance. */
export const DEFAULT_RETRIEVAL_THRESHOLD = 20;
/** Most sections a request may name. */
export const MAX_SECTIONS = 64;

/** A validated request. */
export interface ContextRequest extends ContextOptions {
  /** How many of the newest events to read. */
  window: number;
  tokenizer: TokenizerName;
}

/** The tokenizer of BuildConversationContext, Recall and CountEventTokens: the default when empty, else a known one. */
export function tokenizerName(value: string): TokenizerName {
  const name = value === "" ? DEFAULT_TOKENIZER : value;
  if (!isTokenizerName(name))
    throw invalidArgument(
      "tokenizer",
      `must be one of ${TOKENIZER_NAMES.join(", ")} (got ${JSON.stringify(value.slice(0, 64))})`,
    );
  return name;
}

function sectionName(field: string, name: string): string {
  if (!EVENT_TYPE_PATTERN.test(name))
    throw invalidArgument(field, "must be a section name matching ^[A-Za-z][A-Za-z0-9_.:/-]{0,63}$");
  return name;
}

/** Validates a request; `contextLimit` is MEMORY_CONTEXT_LIMIT. */
export function parseContextRequest(
  req: BuildConversationContextRequest,
  limits: ServiceLimits,
  contextLimit: number,
): ContextRequest {
  if (req.maxEvents > limits.maxPageSize) throw invalidArgument("max_events", `must be at most ${limits.maxPageSize}`);
  if (req.tokenBudget > MAX_TOKEN_BUDGET) throw invalidArgument("token_budget", `must be at most ${MAX_TOKEN_BUDGET}`);
  if (req.query.length > MAX_QUERY_LENGTH)
    throw invalidArgument("query", `must be at most ${MAX_QUERY_LENGTH} characters`);
  checkText("query", req.query);
  const tokenizer = tokenizerName(req.tokenizer);

  const budgetEntries = Object.entries(req.sectionBudgets);
  if (budgetEntries.length > MAX_SECTIONS)
    throw invalidArgument("section_budgets", `must name at most ${MAX_SECTIONS} sections`);
  const sectionBudgets = new Map<string, number>();
  for (const [name, budget] of budgetEntries) {
    const field = `section_budgets[${JSON.stringify(name.slice(0, 64))}]`;
    sectionName(field, name);
    if (budget > MAX_TOKEN_BUDGET) throw invalidArgument(field, `must be at most ${MAX_TOKEN_BUDGET}`);
    sectionBudgets.set(name, budget);
  }
  if (req.sectionPriority.length > MAX_SECTIONS)
    throw invalidArgument("section_priority", `must name at most ${MAX_SECTIONS} sections`);
  req.sectionPriority.forEach((name, i) => {
    sectionName(`section_priority[${i}]`, name);
    if (req.sectionPriority.indexOf(name) !== i)
      throw invalidArgument(`section_priority[${i}]`, `repeats ${JSON.stringify(name)}`);
  });
  const threshold = req.retrievalThreshold ?? DEFAULT_RETRIEVAL_THRESHOLD;
  if (threshold > limits.maxPageSize)
    throw invalidArgument("retrieval_threshold", `must be at most ${limits.maxPageSize}`);

  // A budget or a query asks the server to choose, so it needs the whole (capped) session to choose from.
  const choosing = req.tokenBudget > 0 || sectionBudgets.size > 0 || req.query !== "";
  return {
    window: req.maxEvents || (choosing ? limits.maxPageSize : contextLimit),
    tokenBudget: req.tokenBudget > 0 ? req.tokenBudget : Infinity,
    query: req.query,
    tokenizer,
    preserveSystem: req.preserveSystem ?? true,
    sectionBudgets,
    sectionPriority: req.sectionPriority,
    retrievalThreshold: threshold,
  };
}
