/**
 * Recall's packing within the budget, under a tokenizer whose count of a
 * whole section is more than the sum of its lines' counts (a BPE may
 * tokenize across a line break differently from the lines alone): the
 * section's own count decides, so the text never exceeds the budget. And
 * with the real BPE tokenizers, which Recall counts section by section: the
 * tokens it reports are the whole text's.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { TokenizerRegistry, type TokenCounter } from "../../src/service/context/index.js";
import { assembleRecall, RECALL_HEADINGS } from "../../src/service/memories/recall.js";
import type { MemoryRecord } from "../../src/store/types.js";

/** One token per character, and 3 more for every line break between two lines: joined text costs more than its parts. */
const joinCosts: TokenCounter = {
  name: "chars4",
  count: (text) => text.length + 3 * Math.max(0, text.split("\n").length - 2),
};

const VALID_FROM = Date.UTC(2026, 0, 2, 9, 30);
const pinned = (text: string) => ({ memoryId: text, appName: "app", text, validFrom: VALID_FROM }) as MemoryRecord;

describe("Recall packing", () => {
  it("drops the last lines until the section's own count fits, when the lines counted alone fit", async () => {
    const memories = ["aaaa", "bbbb", "cccc"].map(pinned);
    const heading = RECALL_HEADINGS.pinned;
    // Alone: the heading plus three lines of "\n- 2026-01-02: xxxx" (19 each) fit exactly; joined they cost 6 more.
    const budget = heading.length + 3 * 19;
    const recall = await assembleRecall({
      pinned: memories,
      relevant: [],
      budget,
      counter: joinCosts,
      buildContext: async () => ({ text: "" }) as never,
    });
    expect(recall.tokensUsed).toBeLessThanOrEqual(budget);
    expect(recall.pinnedTokens).toBe(joinCosts.count(recall.text));
    expect(recall.pinned.map((m) => m.text)).toEqual(["aaaa", "bbbb"]);
  });

  it("keeps every line when the section fits", async () => {
    const memories = ["aaaa", "bbbb", "cccc"].map(pinned);
    const recall = await assembleRecall({
      pinned: memories,
      relevant: [],
      budget: 1000,
      counter: joinCosts,
      buildContext: async () => ({ text: "" }) as never,
    });
    expect(recall.text).toBe(`${RECALL_HEADINGS.pinned}\n- 2026-01-02: aaaa\n- 2026-01-02: bbbb\n- 2026-01-02: cccc`);
    expect(recall.pinnedTokens).toBe(joinCosts.count(recall.text));
  });

  it("reports the tokens of its whole text as each BPE tokenizer counts them, whatever the memories and conversation hold", async () => {
    const registry = new TokenizerRegistry();
    // Words, punctuation, line breaks, headings and spaces at the edges: where a BPE's pieces could join across sections.
    const piece = fc.constantFrom(
      "word",
      "Ünïcode",
      "日本語",
      "🙂",
      "42",
      "3.14",
      ".",
      "!?",
      "#",
      "##",
      " ",
      "  ",
      "\n",
      "\n\n",
      "\t",
      "'s",
      "/",
      "-",
    );
    const text = fc.array(piece, { minLength: 1, maxLength: 12 }).map((parts) => parts.join(""));
    for (const name of ["o200k_base", "cl100k_base"] as const) {
      const counter = await registry.get(name);
      expect(counter.name).toBe(name);
      await fc.assert(
        fc.asyncProperty(
          fc.array(text, { maxLength: 4 }),
          fc.array(text, { maxLength: 4 }),
          text,
          async (pinnedTexts, relevantTexts, conversation) => {
            const recall = await assembleRecall({
              pinned: pinnedTexts.map(pinned),
              relevant: relevantTexts.map((t) => ({ memory: pinned(t), score: 1, lexicalScore: 1, vectorScore: 0 })),
              budget: 1000,
              counter,
              buildContext: async () => ({ text: conversation }) as never,
            });
            expect(recall.tokensUsed).toBe(counter.count(recall.text));
          },
        ),
        { numRuns: 300 },
      );
    }
  });
});

/** One token per character. */
const chars: TokenCounter = { name: "chars4", count: (text) => text.length };
const relevant = (n: number, extra: Partial<MemoryRecord> = {}) =>
  Array.from({ length: n }, (_, i) => ({
    memory: { ...pinned(`memory number ${i}`), ...extra },
    score: 1,
    lexicalScore: 1,
    vectorScore: 0,
  }));
/** A conversation that takes every token it is offered. */
const fillsItsBudget = async (budget: number) => ({ text: "x".repeat(Math.max(0, budget)) }) as never;

describe("Recall's budget", () => {
  it("gives relevant memories what an empty conversation leaves: over 90% of the budget used", async () => {
    const recall = await assembleRecall({
      pinned: [pinned("core")],
      relevant: relevant(500),
      budget: 2000,
      counter: chars,
      buildContext: async () => ({ text: "" }) as never,
    });
    expect(recall.tokensUsed).toBeLessThanOrEqual(2000);
    expect(recall.tokensUsed).toBeGreaterThanOrEqual(1800);
    expect(recall.memoryTokens).toBeGreaterThan(1500);
  });

  it("keeps half of what pinned memories leave for relevant ones against a conversation that would take it all", async () => {
    const recall = await assembleRecall({
      pinned: [pinned("core")],
      relevant: relevant(500),
      budget: 2000,
      counter: chars,
      buildContext: fillsItsBudget,
    });
    const left = 2000 - recall.pinnedTokens;
    expect(recall.tokensUsed).toBeLessThanOrEqual(2000);
    expect(recall.memoryTokens).toBeGreaterThanOrEqual(Math.floor(left / 2) - 40);
    expect(recall.contextTokens).toBeGreaterThanOrEqual(Math.floor(left / 2) - 40);
  });

  it("gives the conversation what few relevant memories leave of their half", async () => {
    const recall = await assembleRecall({
      pinned: [],
      relevant: relevant(2),
      budget: 2000,
      counter: chars,
      buildContext: fillsItsBudget,
    });
    expect(recall.memories).toHaveLength(2);
    expect(recall.contextTokens).toBeGreaterThan(1900);
    expect(recall.tokensUsed).toBeLessThanOrEqual(2000);
    expect(recall.tokensUsed).toBeGreaterThanOrEqual(1990);
  });

  it("dates each memory line (valid_from) and names its source session when known", async () => {
    const recall = await assembleRecall({
      pinned: [{ ...pinned("core"), source: { sessionId: "s-7", fromSeq: 1, toSeq: 2 } }],
      relevant: relevant(1),
      budget: 1000,
      counter: chars,
      buildContext: async () => ({ text: "" }) as never,
    });
    expect(recall.text).toBe(
      `${RECALL_HEADINGS.pinned}\n- 2026-01-02 (session s-7): core\n\n${RECALL_HEADINGS.memories}\n- 2026-01-02: memory number 0`,
    );
  });
});
