/** Context assembly for BuildConversationContext: budgets, sections, retrieval, summaries, tokenizers. */
export {
  ContextAssembler,
  DEFAULT_SECTION_ORDER,
  IMAGE_TOKENS,
  MESSAGE_OVERHEAD_TOKENS,
  type ContextOptions,
  type ConversationContext,
  type SectionUsage,
} from "./assemble.js";
export { contentText, type ContentPart, type ContextMessage } from "./render.js";
export {
  DEFAULT_RETRIEVAL_THRESHOLD,
  MAX_QUERY_LENGTH,
  MAX_TOKEN_BUDGET,
  parseContextRequest,
  type ContextRequest,
} from "./request.js";
export { checkSummaryCovers, parseCovers, type SeqRange } from "./summaries.js";
export {
  countCharsDiv4,
  DEFAULT_TOKENIZER,
  TOKENIZER_NAMES,
  TokenizerRegistry,
  type TokenCounter,
  type TokenizerName,
} from "./tokenizer.js";
