/**
 * buildConversationContext's options and answer fields, against a real
 * in-process Engram server on 127.0.0.1, over gRPC and Connect.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../test/support/engram.js";
import { Code, ConnectError, createMemoryClient, type MemoryClient, type Protocol } from "../src/index.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.stop();
});

describe.each<[Protocol]>([["grpc"], ["connect"]])("buildConversationContext over %s", (protocol) => {
  let client: MemoryClient;
  beforeAll(() => {
    client = createMemoryClient({ baseUrl: server.baseUrl, protocol, timeoutMs: 10_000 });
  });
  afterAll(() => client?.close());

  it("takes a token budget, a tokenizer and preserve_system, and reports tokens, tokenizer and sections", async () => {
    const sid = await client.createSession("app", "u", `${protocol}-budget`);
    await client.addEvent(sid, "system", "You are terse.");
    for (let i = 0; i < 10; i++) await client.addEvent(sid, "user_message", `message ${i} padded with a few more words`);
    const all = await client.buildConversationContext(sid, { tokenBudget: 100_000 });
    expect(all).toMatchObject({ eventsIncluded: 11, eventsDropped: 0, eventsSummarized: 0, tokenizer: "o200k_base", retrievalUsed: false });
    expect(all.tokensUsed).toBeGreaterThan(0);
    const tight = await client.buildConversationContext(sid, { tokenBudget: 40, tokenizer: "chars4" });
    expect(tight.tokenizer).toBe("chars4");
    expect(tight.tokensUsed).toBeLessThanOrEqual(40);
    expect(tight.messages[0]).toEqual({ role: "system", content: "You are terse." });
    expect(tight.sections.map((s) => s.name)).toEqual(["role", "messages"]);
    expect(tight.sections[1].eventsDropped).toBeGreaterThan(0);
    const noSystem = await client.buildConversationContext(sid, { tokenBudget: 40, tokenizer: "chars4", preserveSystem: false });
    expect(noSystem.messages.every((m) => m.role === "user")).toBe(true);
    // The KAOS signature still works: a number is max_events.
    expect((await client.buildConversationContext(sid, 2)).messages).toHaveLength(2);
  });

  it("takes a query, retrieval threshold, section budgets and priorities", async () => {
    const sid = await client.createSession("app", "u", `${protocol}-sections`);
    const docs = ["Paris has the Louvre.", "Bees dance.", "Rust has a borrow checker.", "The Louvre is in Paris, France."];
    for (const d of docs) await client.addEvent(sid, "document", d, { section: "documents" });
    await client.addEvent(sid, "user_message", "Which museum is in Paris?");
    const ranked = await client.buildConversationContext(sid, { query: "Louvre Paris", retrievalThreshold: 1, sectionBudgets: { documents: 30 }, tokenizer: "chars4" });
    expect(ranked.retrievalUsed).toBe(true);
    const docSection = ranked.sections.find((s) => s.name === "documents")!;
    expect(docSection).toMatchObject({ retrievalUsed: true, eventsIncluded: 2, eventsDropped: 2 });
    expect(ranked.messages.filter((m) => m.content.startsWith("[document]")).map((m) => m.content)).toEqual([
      "[document] Paris has the Louvre.",
      "[document] The Louvre is in Paris, France.",
    ]);
    const ordered = await client.buildConversationContext(sid, { tokenBudget: 10, tokenizer: "chars4", sectionPriority: ["documents", "messages"] });
    expect(ordered.sections.map((s) => s.name)).toEqual(["documents", "messages"]);
  });

  it("exposes summaries and image content parts", async () => {
    const sid = await client.createSession("app", "u", `${protocol}-parts`);
    await client.addEvent(sid, "user_message", "hi");
    await client.addEvent(sid, "agent_response", "hello");
    await client.addEvent(sid, "summary", "Greetings were exchanged.", { covers: { from_seq: 1, to_seq: 2 } });
    await client.addEvent(sid, "user_message", [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "https://example.test/a.png", detail: "high" } }]);
    const ctx = await client.buildConversationContext(sid, { tokenBudget: 10_000 });
    expect(ctx.eventsSummarized).toBe(2);
    expect(ctx.messages[0]).toEqual({ role: "system", content: "[Summary of events 1-2] Greetings were exchanged." });
    expect(ctx.messages[1]).toEqual({
      role: "user",
      content: "What is this?",
      content_parts: [
        { type: "text", text: "What is this?" },
        { type: "image_url", image_url: { url: "https://example.test/a.png", detail: "high" } },
      ],
    });
  });

  it("surfaces INVALID_ARGUMENT naming the field", async () => {
    const sid = await client.createSession("app", "u", `${protocol}-bad`);
    try {
      await client.buildConversationContext(sid, { tokenizer: "nope" });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.InvalidArgument);
      expect((err as ConnectError).rawMessage).toMatch(/^tokenizer/);
    }
  });
});
