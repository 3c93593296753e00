/**
 * Token counts are computed once per event: per stored object (the local
 * store hands out the same objects), and per text (Redis and PostgreSQL read
 * fresh objects each call). And a BPE tokenizer that cannot be loaded falls
 * back to characters / 4, which the response then names.
 */
import { describe, expect, it } from "vitest";
import {
  ContextAssembler,
  TokenizerRegistry,
  type ContextOptions,
  type TokenCounter,
} from "../../src/service/context/index.js";
import type { StoredEvent } from "../../src/store/types.js";

const OPTIONS: ContextOptions = {
  tokenBudget: Infinity,
  query: "",
  preserveSystem: true,
  sectionBudgets: new Map(),
  sectionPriority: [],
  retrievalThreshold: 20,
};

function events(n: number): StoredEvent[] {
  return Array.from({ length: n }, (_, i) => ({
    sessionId: "s",
    seq: i + 1,
    eventId: `e${i + 1}`,
    eventType: i % 2 ? "agent_response" : "user_message",
    content: `message number ${i + 1} of the session`,
    metadata: {},
    timestamp: 0,
  }));
}

describe("token count caching", () => {
  it("tokenizes each stored event once, however many contexts are built over it", () => {
    let counted = 0;
    const counter: TokenCounter = { name: "chars4", count: (t) => (counted++, Math.ceil(t.length / 4)) };
    const assembler = new ContextAssembler();
    const window = events(500);
    const first = assembler.assemble(window, OPTIONS, counter);
    expect(counted).toBe(500);
    for (let i = 0; i < 5; i++)
      expect(assembler.assemble(window, { ...OPTIONS, tokenBudget: 100 + i }, counter).tokensUsed).toBeLessThanOrEqual(
        104,
      );
    expect(assembler.assemble(window, OPTIONS, counter)).toEqual(first);
    expect(counted).toBe(500);
  });

  it("runs the BPE once per distinct text, even over fresh copies of the events (as Redis and PostgreSQL return them)", async () => {
    let bpeCalls = 0;
    const real = await import("gpt-tokenizer/encoding/o200k_base");
    const registry = new TokenizerRegistry(
      async () => (text, options) => (bpeCalls++, real.countTokens(text, options)),
    );
    const counter = await registry.get("o200k_base");
    const assembler = new ContextAssembler();
    const window = events(300);
    const first = assembler.assemble(structuredClone(window), OPTIONS, counter);
    expect(bpeCalls).toBe(300);
    const again = assembler.assemble(structuredClone(window), OPTIONS, counter);
    expect(bpeCalls).toBe(300);
    expect(again).toEqual(first);
    expect(first.tokensUsed).toBe(window.reduce((n, e) => n + 4 + real.countTokens(e.content as string), 0));
  });
});

describe("tokenizer fallback", () => {
  it("counts characters / 4 and reports chars4 when a BPE encoding cannot be loaded", async () => {
    const failures: string[] = [];
    const registry = new TokenizerRegistry(
      async () => {
        throw new Error("module not found");
      },
      (name, err) => failures.push(`${name}: ${(err as Error).message}`),
    );
    const counter = await registry.get("cl100k_base");
    expect(counter.name).toBe("chars4");
    expect(counter.count("abcdefghi")).toBe(3);
    expect(failures).toEqual(["cl100k_base: module not found"]);
    const ctx = new ContextAssembler().assemble(events(2), OPTIONS, counter);
    expect(ctx.tokenizer).toBe("chars4");
  });

  it("loads each encoding once and shares it between concurrent first calls", async () => {
    let loads = 0;
    const registry = new TokenizerRegistry(async () => (loads++, (t: string) => t.length));
    const [a, b] = await Promise.all([registry.get("o200k_base"), registry.get("o200k_base")]);
    expect(a).toBe(b);
    expect(loads).toBe(1);
  });
});
