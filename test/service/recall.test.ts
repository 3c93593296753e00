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

const pinned = (text: string) => ({ memoryId: text, appName: "app", text }) as MemoryRecord;

describe("Recall packing", () => {
  it("drops the last lines until the section's own count fits, when the lines counted alone fit", async () => {
    const memories = ["aaaa", "bbbb", "cccc"].map(pinned);
    const heading = RECALL_HEADINGS.pinned;
    // Alone: the heading plus three lines of "\n- xxxx" (7 each) fit exactly; joined they cost 6 more.
    const budget = heading.length + 3 * 7;
    const recall = await assembleRecall({ pinned: memories, relevant: [], budget, counter: joinCosts, buildContext: async () => ({ text: "" }) as never });
    expect(recall.tokensUsed).toBeLessThanOrEqual(budget);
    expect(recall.pinnedTokens).toBe(joinCosts.count(recall.text));
    expect(recall.pinned.map((m) => m.text)).toEqual(["aaaa", "bbbb"]);
  });

  it("keeps every line when the section fits", async () => {
    const memories = ["aaaa", "bbbb", "cccc"].map(pinned);
    const recall = await assembleRecall({ pinned: memories, relevant: [], budget: 1000, counter: joinCosts, buildContext: async () => ({ text: "" }) as never });
    expect(recall.text).toBe(`${RECALL_HEADINGS.pinned}\n- aaaa\n- bbbb\n- cccc`);
    expect(recall.pinnedTokens).toBe(joinCosts.count(recall.text));
  });

  it("reports the tokens of its whole text as each BPE tokenizer counts them, whatever the memories and conversation hold", async () => {
    const registry = new TokenizerRegistry();
    // Words, punctuation, line breaks, headings and spaces at the edges: where a BPE's pieces could join across sections.
    const piece = fc.constantFrom("word", "Ünïcode", "日本語", "🙂", "42", "3.14", ".", "!?", "#", "##", " ", "  ", "\n", "\n\n", "\t", "'s", "/", "-");
    const text = fc.array(piece, { minLength: 1, maxLength: 12 }).map((parts) => parts.join(""));
    for (const name of ["o200k_base", "cl100k_base"] as const) {
      const counter = await registry.get(name);
      expect(counter.name).toBe(name);
      await fc.assert(
        fc.asyncProperty(fc.array(text, { maxLength: 4 }), fc.array(text, { maxLength: 4 }), text, async (pinnedTexts, relevantTexts, conversation) => {
          const recall = await assembleRecall({
            pinned: pinnedTexts.map(pinned),
            relevant: relevantTexts.map((t) => ({ memory: pinned(t), score: 1, lexicalScore: 1, vectorScore: 0 })),
            budget: 1000,
            counter,
            buildContext: async () => ({ text: conversation }) as never,
          });
          expect(recall.tokensUsed).toBe(counter.count(recall.text));
        }),
        { numRuns: 300 },
      );
    }
  });
});
