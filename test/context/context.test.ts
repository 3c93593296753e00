/**
 * BuildConversationContext's assembly rules, through a real server on
 * 127.0.0.1 (Connect JSON and gRPC): budgets, system preservation, tool-call
 * pairing, sections and their priorities, BM25 retrieval, summaries, images,
 * delegations, tokenizers and validation.
 */
import type { JsonValue } from "@bufbuild/protobuf";
import { countTokens as o200k } from "gpt-tokenizer/encoding/o200k_base";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectClient, errorOf, grpcJsClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import {
  ev,
  recountTokens,
  sessionWith,
  toInput,
  toolPairingErrors,
  type EventSpec,
  type ContextRequestInit,
} from "./helpers.js";

let server: TestServer;
let client: MemoryClient;
let grpc: MemoryClient;
beforeAll(async () => {
  server = await startTestServer();
  client = connectClient(server.baseUrl);
  grpc = grpcJsClient(server.address);
});
afterAll(async () => {
  client?.close();
  grpc?.close();
  await server?.stop();
});

const build = (sessionId: string, req: ContextRequestInit = {}) =>
  client.buildConversationContext({ sessionId, ...req });
const tokens = (text: string) => 4 + o200k(text);

describe("token budget", () => {
  it("keeps the newest turns that fit, stops at the first that does not, and reports what it used", async () => {
    const turns: EventSpec[] = [];
    for (let i = 1; i <= 10; i++)
      turns.push(
        i % 2 ? ev.user(`question number ${i} about the weather`) : ev.assistant(`answer number ${i}: it is sunny`),
      );
    const id = await sessionWith(client, turns);
    const full = await build(id, { tokenBudget: 100_000 });
    expect(full.eventsIncluded).toBe(10);
    expect(full.tokensUsed).toBe(recountTokens(full));
    const lastThree = turns.slice(-3).reduce((n, e) => n + tokens(e.content as string), 0);
    const ctx = await build(id, { tokenBudget: lastThree + 2 });
    expect(ctx.messages.map((m) => m.content)).toEqual(turns.slice(-3).map((e) => e.content));
    expect(ctx).toMatchObject({
      tokensUsed: lastThree,
      eventsIncluded: 3,
      eventsDropped: 7,
      tokenizer: "o200k_base",
      retrievalUsed: false,
    });
    expect(ctx.text).toBe(
      "Assistant: answer number 8: it is sunny\nUser: question number 9 about the weather\nAssistant: answer number 10: it is sunny",
    );
    // Legacy calls (max_events only) still read the newest max_events and report their tokens.
    const legacy = await build(id, { maxEvents: 2 });
    expect(legacy.messages.map((m) => m.content)).toEqual(turns.slice(-2).map((e) => e.content));
    expect(legacy.tokensUsed).toBe(recountTokens(legacy));
  });

  it("treats max_events as the window a budget chooses from", async () => {
    const id = await sessionWith(client, [ev.user("one"), ev.user("two"), ev.user("three"), ev.user("four")]);
    const ctx = await build(id, { tokenBudget: 10_000, maxEvents: 2 });
    expect(ctx.messages.map((m) => m.content)).toEqual(["three", "four"]);
    expect(ctx.eventsDropped).toBe(0);
  });

  it("answers the same on gRPC as on Connect", async () => {
    const id = await sessionWith(client, [
      ev.system("be brief"),
      ev.user("hello"),
      ev.call("calc", "c1", { x: 1 }),
      ev.result("calc", "c1", 2),
      ev.assistant("2"),
    ]);
    const req = { sessionId: id, tokenBudget: 60, query: "calc" };
    expect(await grpc.buildConversationContext(req)).toEqual(await client.buildConversationContext(req));
  });
});

describe("system preservation", () => {
  const events = [
    ev.system("You are a careful travel agent."),
    ...Array.from({ length: 8 }, (_, i) => ev.user(`message ${i} with some words in it`)),
  ];

  it("keeps system events first, then fills the rest newest first", async () => {
    const id = await sessionWith(client, events);
    const budget =
      tokens("You are a careful travel agent.") +
      tokens("message 7 with some words in it") +
      tokens("message 6 with some words in it");
    const ctx = await build(id, { tokenBudget: budget });
    expect(ctx.messages.map((m) => [m.role, m.content])).toEqual([
      ["system", "You are a careful travel agent."],
      ["user", "message 6 with some words in it"],
      ["user", "message 7 with some words in it"],
    ]);
    expect(ctx.sections.map((s) => s.name)).toEqual(["role", "messages"]);
    expect(ctx.sections[0]).toMatchObject({ eventsIncluded: 1, eventsDropped: 0 });
  });

  it("lets system events compete by recency when preserve_system is false", async () => {
    const id = await sessionWith(client, events);
    const budget = tokens("message 7 with some words in it") + tokens("message 6 with some words in it");
    const ctx = await build(id, { tokenBudget: budget, preserveSystem: false });
    expect(ctx.messages.map((m) => m.role)).toEqual(["user", "user"]);
    expect(ctx.sections.map((s) => s.name)).toEqual(["messages"]);
  });

  it("keeps the oldest system prompts that fit when they alone exceed the budget", async () => {
    const id = await sessionWith(client, [
      ev.system("first prompt"),
      ev.system("second prompt that is much longer than the first one"),
      ev.user("hi"),
    ]);
    const ctx = await build(id, { tokenBudget: tokens("first prompt") + 1 });
    expect(ctx.messages.map((m) => m.content)).toEqual(["first prompt"]);
    expect(ctx.tokensUsed).toBeLessThanOrEqual(tokens("first prompt") + 1);
  });
});

describe("tool calls", () => {
  it("keeps a call with its result or drops both, never one of them", async () => {
    const id = await sessionWith(client, [
      ev.user("weather in Paris and Rome?"),
      ev.call("weather", "p", { city: "Paris" }),
      ev.call("weather", "r", { city: "Rome" }),
      ev.result("weather", "p", "18C sunny"),
      ev.result("weather", "r", "25C cloudy and humid with a chance of thunderstorms later in the evening"),
      ev.assistant("Paris 18C, Rome 25C"),
    ]);
    const all = await build(id, { tokenBudget: 10_000 });
    // Parallel calls form one assistant turn, then both results.
    expect(all.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "tool", "assistant"]);
    expect(all.messages[1].toolCalls.map((c) => c.id)).toEqual(["p", "r"]);
    expect(all.messages[1].toolCalls[0].function).toMatchObject({ name: "weather", arguments: '{"city":"Paris"}' });
    // Budgets that cut through the pairs: whatever is kept stays paired.
    for (let budget = 1; budget <= all.tokensUsed; budget += 3) {
      const ctx = await build(id, { tokenBudget: budget });
      expect(toolPairingErrors(ctx)).toEqual([]);
      expect(ctx.tokensUsed).toBeLessThanOrEqual(budget);
      const calls = ctx.messages.flatMap((m) => m.toolCalls.map((c) => c.id));
      const results = ctx.messages.filter((m) => m.role === "tool").map((m) => m.toolCallId);
      expect([...calls].sort()).toEqual([...results].sort());
    }
  });

  it("drops a call whose result is outside the window, and a result whose call is", async () => {
    const id = await sessionWith(client, [
      ev.call("a", "a1"),
      ev.result("a", "a1", "x"),
      ev.call("b", "b1"),
      ev.user("meanwhile"),
    ]);
    const ctx = await build(id, { maxEvents: 3, tokenBudget: 1000 });
    expect(ctx.messages.map((m) => m.role)).toEqual(["user"]);
    expect(ctx).toMatchObject({ eventsIncluded: 1, eventsDropped: 2 });
  });
});

describe("sections", () => {
  const sectioned = [
    ev.user("What did we find about the bridge?"),
    ev.doc("Bridge inspection report: cracks in pier 3."),
    ev.doc("Maintenance manual for the bridge deck."),
    { type: "finding", content: "Pier 3 needs repair within 6 months.", metadata: { section: "findings" } },
    ev.assistant("The inspection found cracks in pier 3."),
  ];

  it("fills sections in priority order, so the lowest-priority ones are trimmed first", async () => {
    const id = await sessionWith(client, sectioned);
    const all = await build(id, { tokenBudget: 10_000 });
    expect(all.sections.map((s) => s.name)).toEqual(["messages", "findings", "documents"]);
    const docs = all.sections.find((s) => s.name === "documents")!.tokensUsed;
    // Short by one document: the default order trims documents first...
    const short = all.tokensUsed - 1;
    const trimmed = await build(id, { tokenBudget: short });
    expect(trimmed.sections.map((s) => [s.name, s.eventsDropped])).toEqual([
      ["messages", 0],
      ["findings", 0],
      ["documents", 1],
    ]);
    // ...and a priority order putting documents first trims the lowest listed section instead.
    const reordered = await build(id, { tokenBudget: short, sectionPriority: ["documents", "findings", "messages"] });
    expect(reordered.sections.map((s) => [s.name, s.eventsDropped])).toEqual([
      ["documents", 0],
      ["findings", 0],
      ["messages", 1],
    ]);
    expect(reordered.messages.some((m) => m.content.includes("Maintenance manual"))).toBe(true);
    expect(docs).toBeGreaterThan(0);
  });

  it("caps a section at its own budget and renders sectioned events of other types as labelled system messages", async () => {
    const id = await sessionWith(client, sectioned);
    const cap = tokens("[document] Maintenance manual for the bridge deck.");
    const ctx = await build(id, { sectionBudgets: { documents: cap } });
    const docs = ctx.sections.find((s) => s.name === "documents")!;
    expect(docs).toMatchObject({ tokensUsed: cap, eventsIncluded: 1, eventsDropped: 1 });
    expect(ctx.messages.filter((m) => m.content.startsWith("[document]")).map((m) => m.role)).toEqual(["system"]);
    expect(ctx.messages.find((m) => m.content.startsWith("[finding]"))!.content).toBe(
      "[finding] Pier 3 needs repair within 6 months.",
    );
    // Section budgets alone make the server choose from the whole session (not MEMORY_CONTEXT_LIMIT).
    expect(ctx.eventsIncluded + ctx.eventsDropped).toBe(sectioned.length);
  });
});

describe("retrieval", () => {
  const corpus = [
    "The Eiffel Tower is in Paris and was completed in 1889.",
    "Photosynthesis converts sunlight, water and carbon dioxide into glucose.",
    "The Great Wall of China stretches for thousands of kilometres.",
    "Python lists are dynamic arrays; appending is amortised constant time.",
    "Mount Everest is the highest mountain above sea level.",
    "The mitochondria is the powerhouse of the cell.",
    "Paris is the capital of France and hosts the Louvre museum.",
    "TCP guarantees ordered delivery; UDP does not.",
    "The Pacific is the largest ocean on Earth.",
    "Rust's borrow checker prevents data races at compile time.",
    "Bees communicate the location of flowers with a waggle dance.",
    "The Louvre in Paris is the most visited museum in the world.",
  ];

  it("chooses the documents most relevant to the query by BM25 once a section holds more than retrieval_threshold items", async () => {
    const id = await sessionWith(
      client,
      corpus.map((t) => ev.doc(t)),
    );
    const budget = 3 * Math.max(...corpus.map((t) => tokens(`[document] ${t}`)));
    const recent = await build(id, { tokenBudget: budget });
    expect(recent.retrievalUsed).toBe(false);
    const ranked = await build(id, { tokenBudget: budget, query: "Paris museum", retrievalThreshold: 5 });
    expect(ranked.retrievalUsed).toBe(true);
    expect(ranked.sections[0]).toMatchObject({ name: "documents", retrievalUsed: true });
    const chosen = ranked.messages.map((m) => m.content.replace("[document] ", ""));
    expect(new Set(chosen)).toEqual(new Set([corpus[6], corpus[11], corpus[0]]));
    // Output stays in seq order.
    expect(chosen).toEqual([corpus[0], corpus[6], corpus[11]]);
    // At or under the threshold, recency rules even with a query.
    const under = await build(id, { tokenBudget: budget, query: "Paris museum", retrievalThreshold: 12 });
    expect(under.retrievalUsed).toBe(false);
    expect(under.messages.map((m) => m.content)).toEqual(recent.messages.map((m) => m.content));
  });

  it("uses the default threshold of 20 items", async () => {
    const filler = Array.from({ length: 25 }, (_, i) => ev.user(`filler message ${i} about nothing in particular`));
    const id = await sessionWith(client, [ev.user("the launch code is tangerine"), ...filler]);
    const budget = tokens("the launch code is tangerine") + tokens("filler message 24 about nothing in particular");
    const ctx = await build(id, { tokenBudget: budget, query: "launch code" });
    expect(ctx.retrievalUsed).toBe(true);
    expect(ctx.messages.map((m) => m.content)).toEqual([
      "the launch code is tangerine",
      "filler message 24 about nothing in particular",
    ]);
  });
});

describe("summaries", () => {
  it("replace the events they cover, at the place of the first one; raw events stay in the log", async () => {
    const id = await sessionWith(client, [
      ev.system("sys"),
      ev.user("u2"),
      ev.assistant("a3"),
      ev.user("u4"),
      ev.assistant("a5"),
      ev.summary("The user greeted twice.", 2, 5),
      ev.user("u7"),
    ]);
    const ctx = await build(id, { tokenBudget: 10_000 });
    expect(ctx.messages.map((m) => m.content)).toEqual([
      "sys",
      "[Summary of events 2-5] The user greeted twice.",
      "u7",
    ]);
    expect(ctx.text).toBe("Summary: The user greeted twice.\nUser: u7");
    expect(ctx).toMatchObject({ eventsSummarized: 4, eventsIncluded: 3, eventsDropped: 0 });
    const log = await client.getSessionEvents({ sessionId: id });
    expect(log.events).toHaveLength(7);
  });

  it("let a newer summary supersede an older one it covers, and hide half a tool pair's partner", async () => {
    const id = await sessionWith(client, [
      ev.user("u1"),
      ev.call("t", "c1"),
      ev.summary("s3 covers 1-2", 1, 2),
      ev.result("t", "c1", "r"),
      ev.user("u5"),
      ev.summary("s6 covers 1-4", 1, 4),
      ev.assistant("a7"),
    ]);
    const ctx = await build(id, { tokenBudget: 10_000 });
    expect(ctx.messages.map((m) => m.content)).toEqual(["[Summary of events 1-4] s6 covers 1-4", "u5", "a7"]);
    expect(ctx.eventsSummarized).toBe(4);
    const older = await build(id, { maxEvents: 4 }); // the window holds s3 but not s6's range start
    expect(older.messages.map((m) => m.content)).toEqual(["[Summary of events 1-4] s6 covers 1-4", "u5", "a7"]);
  });

  it("is trimmed by recency at the place of what it covers", async () => {
    const id = await sessionWith(client, [
      ev.user("old one"),
      ev.user("old two"),
      ev.summary("gist", 1, 2),
      ev.user("newest"),
    ]);
    const ctx = await build(id, { tokenBudget: tokens("newest") + 1 });
    expect(ctx.messages.map((m) => m.content)).toEqual(["newest"]);
    expect(ctx).toMatchObject({ eventsSummarized: 2, eventsDropped: 1, eventsIncluded: 1 });
  });

  it("AddEvent refuses a summary whose covers is malformed, naming the field", async () => {
    const id = await sessionWith(client, []);
    for (const covers of [
      { from_seq: 5, to_seq: 2 },
      { from_seq: 0, to_seq: 2 },
      { from_seq: "x" },
      "1-2",
    ] as JsonValue[]) {
      const err = await errorOf(
        client.addEvent({
          sessionId: id,
          event: toInput({ type: "summary", content: "s", metadata: { covers } }) as never,
        }),
      );
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage.startsWith("event.metadata.covers")).toBe(true);
    }
    await client.addEvent({
      sessionId: id,
      event: toInput({ type: "summary", content: "s", metadata: { covers: { from_seq: "1", to_seq: "1" } } }) as never,
    });
    await client.addEvent({ sessionId: id, event: toInput({ type: "summary", content: "no range" }) as never });
    const err = await errorOf(
      client.addEvents({
        sessionId: id,
        events: [toInput(ev.user("ok")), toInput({ type: "summary", metadata: { covers: {} } })] as never,
      }),
    );
    expect(err.rawMessage.startsWith("events[1].metadata.covers")).toBe(true);
  });
});

describe("rendering", () => {
  it("passes images through as OpenAI content parts and charges each at a fixed cost", async () => {
    const url = "https://example.test/cat.png";
    const id = await sessionWith(client, [
      {
        type: "user_message",
        content: [
          { type: "text", text: "What is this?" },
          { type: "image_url", image_url: { url, detail: "low" } },
        ],
      },
      { type: "user_message", content: { text: "and these?", images: [url, { url: "data:image/png;base64,AAAA" }] } },
      { type: "agent_response", content: { type: "image_url", image_url: { url } } },
      ev.user("plain"),
    ]);
    const ctx = await build(id, { tokenBudget: 10_000 });
    expect(ctx.messages[0].content).toBe("What is this?");
    expect(ctx.messages[0].contentParts.map((p) => [p.type, p.text, p.imageUrl?.url, p.imageUrl?.detail])).toEqual([
      ["text", "What is this?", undefined, undefined],
      ["image_url", "", url, "low"],
    ]);
    expect(ctx.messages[1].contentParts.filter((p) => p.type === "image_url").map((p) => p.imageUrl!.url)).toEqual([
      url,
      "data:image/png;base64,AAAA",
    ]);
    expect(ctx.messages[2]).toMatchObject({ role: "assistant", content: "" });
    expect(ctx.messages[2].contentParts).toHaveLength(1);
    expect(ctx.messages[3].contentParts).toEqual([]);
    expect(ctx.tokensUsed).toBe(recountTokens(ctx));
    expect(ctx.tokensUsed).toBeGreaterThan(4 * 85);
  });

  it("labels delegations and errors", async () => {
    const id = await sessionWith(client, [
      { type: "delegation_request", content: { task: "book a flight", target_agent: "travel" } },
      { type: "delegation_response", content: { text: "booked", from_agent: "travel" } },
      { type: "task_delegation_received", content: "plan the trip", metadata: { agent: "boss" } },
      { type: "error", content: "timeout" },
      { type: "custom_without_section", content: "ignored" },
    ]);
    const ctx = await build(id, { tokenBudget: 10_000 });
    expect(ctx.messages.map((m) => [m.role, m.content])).toEqual([
      ["assistant", '[Delegation request to travel] {"target_agent":"travel","task":"book a flight"}'],
      ["user", "[Delegation response from travel] booked"],
      ["user", "[Task delegated by boss] plan the trip"],
      ["system", "[Error] timeout"],
    ]);
    expect(ctx.eventsDropped).toBe(1);
  });
});

describe("tokenizers", () => {
  const text = "Tokenizers disagree about ünïcödé, emoji 🎉 and <|endoftext|> markers.";

  it("counts with the named tokenizer and reports it; special-token text is plain text", async () => {
    const id = await sessionWith(client, [ev.user(text)]);
    const o = await build(id, { tokenBudget: 1000 });
    const cl = await build(id, { tokenBudget: 1000, tokenizer: "cl100k_base" });
    const chars = await build(id, { tokenBudget: 1000, tokenizer: "chars4" });
    expect([o.tokenizer, cl.tokenizer, chars.tokenizer]).toEqual(["o200k_base", "cl100k_base", "chars4"]);
    expect(o.tokensUsed).toBe(recountTokens(o));
    expect(cl.tokensUsed).toBe(recountTokens(cl));
    expect(chars.tokensUsed).toBe(4 + Math.ceil(text.length / 4));
    expect(o.tokensUsed).not.toBe(chars.tokensUsed);
  });
});

describe("validation", () => {
  let id: string;
  beforeAll(async () => {
    id = await sessionWith(client, [ev.user("x")]);
  });
  const cases: Array<[string, ContextRequestInit, string]> = [
    ["token_budget over 2000000", { tokenBudget: 2_000_001 }, "token_budget"],
    ["unknown tokenizer", { tokenizer: "gpt2-bpe" }, "tokenizer"],
    ["query over 4096 characters", { query: "q".repeat(4097) }, "query"],
    ["NUL in query", { query: "a\u0000" }, "query"],
    ["section budget over 2000000", { sectionBudgets: { documents: 3_000_000 } }, 'section_budgets["documents"]'],
    ["bad section name in budgets", { sectionBudgets: { "no spaces": 5 } }, 'section_budgets["no spaces"]'],
    ["bad section name in priority", { sectionPriority: ["messages", "9lives"] }, "section_priority[1]"],
    ["repeated section in priority", { sectionPriority: ["messages", "documents", "messages"] }, "section_priority[2]"],
    ["retrieval_threshold over 1000", { retrievalThreshold: 1001 }, "retrieval_threshold"],
    ["max_events over 1000", { maxEvents: 1001 }, "max_events"],
  ];
  it.each(cases)("%s answers INVALID_ARGUMENT naming the field", async (_name, req, field) => {
    for (const c of [client, grpc]) {
      const err = await errorOf(c.buildConversationContext({ sessionId: id, ...req }));
      expect(err.code).toBe(Code.InvalidArgument);
      expect(err.rawMessage.startsWith(field)).toBe(true);
    }
  });

  it("accepts section names no event uses, and answers NOT_FOUND for an unknown session", async () => {
    const ctx = await build(id, { sectionPriority: ["nothing-here"], sectionBudgets: { "also-none": 10 } });
    expect(ctx.eventsIncluded).toBe(1);
    expect((await errorOf(build("missing-session", { tokenBudget: 10 }))).code).toBe(Code.NotFound);
  });

  it("answers INVALID_ARGUMENT for a negative budget sent as JSON", async () => {
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/BuildConversationContext`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ session_id: id, token_budget: -5 }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { code: string; message: string };
    expect(body.code).toBe("invalid_argument");
    expect(body.message).toContain("token_budget");
  });
});
