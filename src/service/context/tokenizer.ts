/**
 * Token counting for context budgets. The BPE encodings ship inside the
 * gpt-tokenizer package (no download at run time) and are loaded lazily on
 * first use, since each takes ~150 ms and several MB to parse. When one cannot
 * be loaded the counter falls back to characters / 4 and says so, so a
 * response always names the tokenizer that really counted.
 */
import { LRUCache } from "lru-cache";

/** Tokenizers a request may name. */
export const TOKENIZER_NAMES = ["o200k_base", "cl100k_base", "chars4"] as const;
/** One of TOKENIZER_NAMES. */
export type TokenizerName = (typeof TOKENIZER_NAMES)[number];
/** The tokenizer used when a request names none (GPT-4o, GPT-4.1, o-series, GPT-5). */
export const DEFAULT_TOKENIZER: TokenizerName = "o200k_base";

/** Counts the tokens of a text with one tokenizer. */
export interface TokenCounter {
  /** The tokenizer that actually counts (chars4 after a fallback). */
  readonly name: TokenizerName;
  count(text: string): number;
  /**
   * True when a text cut just before a "#" that follows a line break counts
   * exactly as its two parts: the BPE pre-tokenizers (o200k_base,
   * cl100k_base) never make one piece across that point (every piece holding
   * a line break ends at a line break, and none starts with one and goes on
   * past it), so Recall counts its block of "## " sections from the
   * sections' memoised counts. chars4's ceil(length / 4) does not add up.
   */
  readonly additiveBeforeHeadings?: boolean;
}

/** Tells whether a string names a known tokenizer. */
export function isTokenizerName(value: string): value is TokenizerName {
  return (TOKENIZER_NAMES as readonly string[]).includes(value);
}

/** ceil(UTF-16 length / 4): the usual rough estimate for English text. */
export function countCharsDiv4(text: string): number {
  return Math.ceil(text.length / 4);
}

type BpeCount = (text: string, options: { disallowedSpecial: Set<string> }) => number;

async function loadBpe(name: Exclude<TokenizerName, "chars4">): Promise<BpeCount> {
  // Literal specifiers, so bundlers and tsc see both modules.
  const mod =
    name === "o200k_base"
      ? await import("gpt-tokenizer/encoding/o200k_base")
      : await import("gpt-tokenizer/encoding/cl100k_base");
  return mod.countTokens as BpeCount;
}

// User text may contain strings like "<|endoftext|>": count them as plain text
// instead of throwing (gpt-tokenizer refuses special tokens by default).
const PLAIN_TEXT = { disallowedSpecial: new Set<string>() };

/**
 * Loads tokenizers once per process and memoises counts by text, so a stored
 * event is tokenized once however often contexts are built over it, whichever
 * store it was read from (the objects differ, the text does not).
 */
export class TokenizerRegistry {
  private readonly loading = new Map<TokenizerName, Promise<TokenCounter>>();

  constructor(
    /** Loads a BPE counter; replaceable so the fallback path can be exercised. */
    private readonly load: (name: Exclude<TokenizerName, "chars4">) => Promise<BpeCount> = loadBpe,
    private readonly onFallback: (name: TokenizerName, err: unknown) => void = () => {},
  ) {}

  /** The counter for `name`, loading it on first use; chars4 when loading fails. */
  get(name: TokenizerName): Promise<TokenCounter> {
    let counter = this.loading.get(name);
    if (!counter) {
      counter = this.create(name);
      this.loading.set(name, counter);
    }
    return counter;
  }

  private async create(name: TokenizerName): Promise<TokenCounter> {
    if (name === "chars4") return { name, count: countCharsDiv4 };
    let bpe: BpeCount;
    try {
      bpe = await this.load(name);
    } catch (err) {
      this.onFallback(name, err);
      return { name: "chars4", count: countCharsDiv4 };
    }
    // Bounded by count and by the characters of the texts it keeps as keys (~64 MB at most).
    const cache = new LRUCache<string, number>({
      max: 50_000,
      maxSize: 32 * 1024 * 1024,
      sizeCalculation: (_v, k) => k.length + 1,
    });
    return {
      name,
      additiveBeforeHeadings: true,
      count(text: string): number {
        if (text.length === 0) return 0;
        let n = cache.get(text);
        if (n === undefined) cache.set(text, (n = bpe(text, PLAIN_TEXT)));
        return n;
      },
    };
  }
}
