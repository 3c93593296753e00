/**
 * Property: over random sessions and random budgets, a context never takes
 * more tokens than its budget (as recounted here with gpt-tokenizer itself),
 * no section exceeds its own budget, tool calls stay paired, and every event
 * of the window is accounted for exactly once. Through a real server.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { ev, recountTokens, sessionWith, toolPairingErrors, type EventSpec } from "./helpers.js";

let server: TestServer;
let client: MemoryClient;
beforeAll(async () => {
  server = await startTestServer();
  client = connectClient(server.baseUrl, { binary: true });
});
afterAll(async () => {
  client?.close();
  await server?.stop();
});

const SECTIONS = ["messages", "documents", "findings", "actions", "role"];
const word = fc.constantFrom(
  "paris",
  "weather",
  "bridge",
  "pier",
  "sunny",
  "report",
  "🎉",
  "ünï",
  "<|endoftext|>",
  "the",
  "a",
  "x".repeat(40),
);
const text = fc.array(word, { minLength: 0, maxLength: 30 }).map((w) => w.join(" "));
const section = fc.option(fc.constantFrom(...SECTIONS), { nil: undefined });

/** One step of a session: 1-2 events (a tool step may leave its call unanswered or answer it late). */
const step: fc.Arbitrary<(seq: number, i: number) => EventSpec[]> = fc.oneof(
  fc.tuple(text, section).map(([t, s]) => () => [ev.user(t, s ? { section: s } : undefined)]),
  fc.tuple(text, section).map(([t, s]) => () => [ev.assistant(t, s ? { section: s } : undefined)]),
  text.map((t) => () => [ev.system(t)]),
  fc.tuple(text, fc.constantFrom("documents", "findings")).map(([t, s]) => () => [ev.doc(t, s)]),
  fc.tuple(text, fc.boolean(), section).map(([t, answered, s]) => (_seq: number, i: number) => {
    const call = ev.call("search", `c${i}`, { q: t }, s ? { section: s } : undefined);
    return answered ? [call, ev.result("search", `c${i}`, t)] : [call];
  }),
  fc.tuple(text, fc.nat(10), fc.nat(10)).map(([t, back, len]) => (seq: number) => {
    const to = Math.max(1, seq - 1 - back);
    return seq > 1 ? [ev.summary(t, Math.max(1, to - len), to)] : [ev.user(t)];
  }),
  text.map((t) => () => [{ type: "user_message", content: { text: t, images: ["https://example.test/i.png"] } }]),
);

const request = fc.record({
  tokenBudget: fc.oneof(fc.integer({ min: 0, max: 60 }), fc.integer({ min: 0, max: 2000 })),
  tokenizer: fc.constantFrom("", "o200k_base", "cl100k_base", "chars4"),
  preserveSystem: fc.option(fc.boolean(), { nil: undefined }),
  query: fc.constantFrom("", "paris weather", "bridge pier report"),
  retrievalThreshold: fc.option(fc.nat(6), { nil: undefined }),
  sectionBudgets: fc.dictionary(fc.constantFrom(...SECTIONS), fc.nat(300), { maxKeys: 3 }),
  sectionPriority: fc.shuffledSubarray(SECTIONS),
  maxEvents: fc.constantFrom(0, 0, 5, 30),
});

describe("BuildConversationContext budgets (property)", () => {
  it("never exceeds the token budget or a section budget, never splits a tool pair, accounts for every event", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 0, maxLength: 30 }), request, async (steps, req) => {
        const events: EventSpec[] = [];
        steps.forEach((make, i) => events.push(...make(events.length + 1, i)));
        const sessionId = await sessionWith(client, events, "prop");
        const ctx = await client.buildConversationContext({ sessionId, ...req });

        const recount = recountTokens(ctx);
        expect(ctx.tokensUsed).toBe(recount);
        if (req.tokenBudget > 0) expect(recount).toBeLessThanOrEqual(req.tokenBudget);
        for (const s of ctx.sections) {
          const cap = req.sectionBudgets[s.name];
          if (cap !== undefined) expect(s.tokensUsed).toBeLessThanOrEqual(cap);
        }
        expect(ctx.sections.reduce((n, s) => n + s.tokensUsed, 0)).toBe(ctx.tokensUsed);
        expect(toolPairingErrors(ctx)).toEqual([]);
        const window =
          req.maxEvents || (req.tokenBudget > 0 || Object.keys(req.sectionBudgets).length > 0 || req.query ? 1000 : 6);
        expect(ctx.eventsIncluded + ctx.eventsDropped + ctx.eventsSummarized).toBe(Math.min(window, events.length));
        expect(ctx.tokenizer).toBe(req.tokenizer || "o200k_base");
        await client.deleteSession({ sessionId });
      }),
      { numRuns: 150, interruptAfterTimeLimit: 60_000 },
    );
  });
});
