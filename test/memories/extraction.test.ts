/**
 * Background fact extraction (MEMORY_EXTRACTION_URL) against a real Engram
 * server and a local OpenAI-compatible chat endpoint whose answers are
 * SCRIPTED by this file (test/support/scripted-chat-server.ts): no model
 * runs, so these tests prove the plumbing (appends → requests → memories,
 * supersession, idempotency, faults), not the quality of any extraction.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Memory } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { extractedMemoryId } from "../../src/service/memories/extraction.js";
import { connectClient, type MemoryClient } from "../support/clients.js";
import { spawnServer, startTestServer, type TestServer } from "../support/engram.js";
import { freePort } from "../support/host.js";
import {
  startScriptedChatServer,
  type ScriptedAnswer,
  type ScriptedChatServer,
} from "../support/scripted-chat-server.js";

const text = (s: string) => ({ kind: { case: "stringValue" as const, value: s } });
const facts = (...triples: Array<[string, string, string]>): ScriptedAnswer => ({
  content: JSON.stringify({ facts: triples.map(([subject, predicate, object]) => ({ subject, predicate, object })) }),
});

/** Answers the request held by the "held back" script entry, once it arrived. */
let releaseHeld: ((answer: ScriptedAnswer) => void) | undefined;

/** The scripted answers: keyed by words of the transcript. */
function script(transcript: string): ScriptedAnswer | Promise<ScriptedAnswer> {
  if (transcript.includes("held back")) return new Promise((resolve) => (releaseHeld = resolve));
  if (transcript.includes("Porto"))
    return facts(["maria", "lives in", "porto"], ["maria", "owns", "a beagle named rex"]);
  if (transcript.includes("Lisbon")) return facts(["maria", "lives in", "lisbon"]);
  if (transcript.includes("not json")) return { content: "Sure! Maria lives somewhere." };
  if (transcript.includes("wrong shape")) return { content: JSON.stringify({ facts: "maria lives in porto" }) };
  if (transcript.includes("mixed"))
    return {
      content: JSON.stringify({
        facts: [
          { subject: 1, predicate: "likes", object: "tea" },
          { subject: "maria", predicate: "", object: "x" },
          { subject: "maria", predicate: "drinks", object: "green tea" },
        ],
      }),
    };
  if (transcript.includes("hang")) return "hang";
  if (transcript.includes("fail")) return { status: 500 };
  return facts();
}

function extractionConfig(url: string, extra: Record<string, unknown> = {}) {
  return {
    extractionUrl: url,
    extractionModel: "scripted",
    extractionTimeoutMs: 5000,
    extractionMaxEvents: 20,
    extractionQueueSize: 100,
    extractionConcurrency: 2,
    extractionEventTypes: ["user_message", "agent_response"],
    ...extra,
  };
}

/** Polls ListMemories (at most 50 times, 100 ms apart) until `done` holds; returns the last listing either way. */
async function pollMemories(
  client: MemoryClient,
  req: { appName: string; userId?: string; includeInvalid?: boolean },
  done: (m: Memory[]) => boolean,
): Promise<Memory[]> {
  let memories: Memory[] = [];
  for (let attempt = 0; attempt < 50; attempt++) {
    memories = (await client.listMemories({ ...req, pageSize: 100 })).memories;
    if (done(memories)) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return memories;
}

describe("fact extraction from appended events (scripted chat endpoint)", () => {
  let chat: ScriptedChatServer;
  let server: TestServer;
  let client: MemoryClient;

  beforeAll(async () => {
    chat = await startScriptedChatServer(script);
    server = await startTestServer({ config: extractionConfig(chat.url) });
    client = connectClient(server.baseUrl);
  });

  afterAll(async () => {
    await server?.stop();
    await chat?.stop();
  });

  it("writes the facts of appended user messages as memories of the session's app and user, with their source range", async () => {
    await client.createSession({ appName: "extract", userId: "maria", sessionId: "ex-1" });
    await client.addEvents({
      sessionId: "ex-1",
      events: [
        { eventType: "user_message", content: text("Hi! I just moved to Porto.") },
        { eventType: "user_message", content: text("My beagle Rex loves the beach.") },
        { eventType: "tool_result", content: text("weather in Porto: 31 degrees") },
      ],
    });
    const memories = await pollMemories(client, { appName: "extract", userId: "maria" }, (m) => m.length >= 2);
    expect(memories.map((m) => m.fact && [m.fact.subject, m.fact.predicate, m.fact.object]).sort()).toEqual([
      ["maria", "lives in", "porto"],
      ["maria", "owns", "a beagle named rex"],
    ]);
    for (const m of memories) {
      expect(m).toMatchObject({
        appName: "extract",
        userId: "maria",
        source: { sessionId: "ex-1", fromSeq: 1n, toSeq: 2n },
      });
      // Long-term: the user's, across sessions, not the session's.
      expect(m.sessionId).toBeUndefined();
    }
    expect(memories.map((m) => m.memoryId).sort()).toEqual(
      [0, 1].map((i) => extractedMemoryId("ex-1", 1, 2, i)).sort(),
    );
    // The endpoint was asked for JSON, with the model configured.
    expect(chat.bodies.at(-1)).toMatchObject({ model: "scripted", response_format: { type: "json_object" } });
    expect(chat.transcripts.at(-1)).toContain("[user_message] Hi! I just moved to Porto.");
    // Only the MEMORY_EXTRACTION_EVENT_TYPES are sent; the range ends at the last of them.
    expect(chat.transcripts.at(-1)).not.toContain("weather");
    // No key configured: no authorization header at all (OPENAI_API_KEY is never read).
    expect(chat.authorizations.at(-1)).toBeUndefined();
  });

  it("supersedes an earlier fact through a later one with the same subject and predicate", async () => {
    // Its own user, so that it needs no earlier test: first Porto, then Lisbon.
    await client.createSession({ appName: "extract-move", userId: "maria", sessionId: "ex-2a" });
    await client.addEvent({
      sessionId: "ex-2a",
      event: { eventType: "user_message", content: text("Hi! I just moved to Porto.") },
    });
    await pollMemories(client, { appName: "extract-move", userId: "maria" }, (m) =>
      m.some((x) => x.fact?.object === "porto"),
    );
    await client.createSession({ appName: "extract-move", userId: "maria", sessionId: "ex-2" });
    await client.addEvent({
      sessionId: "ex-2",
      event: { eventType: "user_message", content: text("We left for Lisbon last month.") },
    });
    const valid = await pollMemories(client, { appName: "extract-move", userId: "maria" }, (m) =>
      m.some((x) => x.fact?.object === "lisbon"),
    );
    const lives = valid.filter((m) => m.fact?.predicate === "lives in");
    expect(lives.map((m) => m.fact?.object)).toEqual(["lisbon"]);
    const all = (
      await client.listMemories({
        appName: "extract-move",
        userId: "maria",
        includeInvalid: true,
        predicate: "lives in",
      })
    ).memories;
    const porto = all.find((m) => m.fact?.object === "porto")!;
    expect(porto.invalidAt).toBeDefined();
    expect(porto.supersededBy).toBe(extractedMemoryId("ex-2", 1, 1, 0));
    expect(lives[0].source).toMatchObject({ sessionId: "ex-2", fromSeq: 1n, toSeq: 1n });
  });

  it("stores one memory per fact when the same range is processed twice (a retried append)", async () => {
    await client.createSession({ appName: "extract", userId: "rui", sessionId: "ex-3" });
    const append = {
      sessionId: "ex-3",
      events: [{ eventId: "e-1", eventType: "user_message", content: text("I live in Porto now") }],
    };
    const requestsBefore = chat.transcripts.length;
    await client.addEvents(append);
    await server.service.extractor!.idle();
    await client.addEvents(append); // the same event_id: a replay of seq 1, extracted again
    await server.service.extractor!.idle();
    expect(chat.transcripts.length - requestsBefore).toBe(2);
    const memories = (await client.listMemories({ appName: "extract", userId: "rui", includeInvalid: true })).memories;
    expect(memories.map((m) => m.memoryId).sort()).toEqual(
      [0, 1].map((i) => extractedMemoryId("ex-3", 1, 1, i)).sort(),
    );
  });

  it("takes back facts whose user was erased while the endpoint was answering", async () => {
    await client.createSession({ appName: "extract", userId: "erased", sessionId: "ex-5" });
    await client.addEvent({
      sessionId: "ex-5",
      event: { eventType: "user_message", content: text("this is held back: I live in Porto") },
    });
    for (let attempt = 0; attempt < 50 && !releaseHeld; attempt++) await new Promise((r) => setTimeout(r, 100));
    expect(releaseHeld).toBeDefined();
    await client.deleteUserData({ appName: "extract", userId: "erased" });
    releaseHeld!(facts(["erased", "lives in", "porto"]));
    await server.service.extractor!.idle();
    expect(
      (await client.listMemories({ appName: "extract", userId: "erased", includeInvalid: true })).memories,
    ).toEqual([]);
  });

  it("skips answers that are not JSON or not facts, and keeps the good facts of a mixed answer", async () => {
    const before = { ...server.service.extractor!.counts };
    await client.createSession({ appName: "extract", userId: "ana", sessionId: "ex-4" });
    for (const words of ["this is not json", "a wrong shape", "a mixed answer", "fail please"]) {
      await client.addEvent({ sessionId: "ex-4", event: { eventType: "user_message", content: text(words) } });
    }
    await server.service.extractor!.idle();
    const counts = server.service.extractor!.counts;
    expect(counts.failedRequests - before.failedRequests).toBe(3); // not json, wrong shape, HTTP 500
    expect(counts.skippedFacts - before.skippedFacts).toBe(2);
    const memories = (await client.listMemories({ appName: "extract", userId: "ana" })).memories;
    expect(memories.map((m) => [m.fact?.subject, m.fact?.predicate, m.fact?.object])).toEqual([
      ["maria", "drinks", "green tea"],
    ]);
    // Still serving.
    expect((await client.getSession({ sessionId: "ex-4" })).session?.headSeq).toBe(4n);
  });
});

describe("extraction never holds up an append", () => {
  it("answers appends while the endpoint hangs, and drops (and counts) ranges past the queue", async () => {
    const chat = await startScriptedChatServer(() => "hang");
    const server = await startTestServer({
      config: extractionConfig(chat.url, {
        extractionConcurrency: 1,
        extractionQueueSize: 2,
        extractionTimeoutMs: 60_000,
      }),
    });
    try {
      const client = connectClient(server.baseUrl);
      await client.createSession({ appName: "extract", userId: "u", sessionId: "hang-1" });
      for (let i = 0; i < 5; i++)
        await client.addEvent({
          sessionId: "hang-1",
          event: { eventType: "user_message", content: text(`hang ${i}`) },
        });
      // Every append answered although the first request is still open: nothing waited on the endpoint.
      let idle = false;
      void server.service.extractor!.idle().then(() => (idle = true));
      // Still busy 50 ms on: the absence of idleness while the endpoint hangs is what is checked.
      await new Promise((r) => setTimeout(r, 50));
      expect(idle).toBe(false);
      // One in flight, two queued, two dropped.
      expect(server.service.extractor!.counts.droppedRanges).toBe(2);
    } finally {
      await server.stop();
      await chat.stop();
    }
  });

  it("answers appends when the endpoint is down, and counts the failed requests", async () => {
    const port = await freePort();
    const server = await startTestServer({ config: extractionConfig(`http://127.0.0.1:${port}/v1`) });
    try {
      const client = connectClient(server.baseUrl);
      await client.createSession({ appName: "extract", userId: "u", sessionId: "down-1" });
      for (let i = 0; i < 3; i++)
        await client.addEvent({
          sessionId: "down-1",
          event: { eventType: "user_message", content: text(`I live in Porto ${i}`) },
        });
      await server.service.extractor!.idle();
      expect(server.service.extractor!.counts.failedRequests).toBe(3);
      expect((await client.listMemories({ appName: "extract" })).memories).toEqual([]);
      expect((await client.getSession({ sessionId: "down-1" })).session?.headSeq).toBe(3n);
    } finally {
      await server.stop();
    }
  });
});

describe("the server process (src/main.ts)", () => {
  it("extracts when MEMORY_EXTRACTION_URL is set and counts facts and failures in /metrics", async () => {
    const chat = await startScriptedChatServer(script);
    const proc = await spawnServer({
      MEMORY_EXTRACTION_URL: chat.url,
      MEMORY_EXTRACTION_MODEL: "scripted",
      MEMORY_EXTRACTION_API_KEY: "sk-test-secret",
    });
    try {
      const client = connectClient(proc.baseUrl);
      await client.createSession({ appName: "extract", userId: "maria", sessionId: "proc-1" });
      await client.addEvent({
        sessionId: "proc-1",
        event: { eventType: "user_message", content: text("I moved to Porto") },
      });
      await client.addEvent({
        sessionId: "proc-1",
        event: { eventType: "user_message", content: text("fail please") },
      });
      const memories = await pollMemories(client, { appName: "extract", userId: "maria" }, (m) => m.length >= 2);
      expect(memories).toHaveLength(2);
      // The key went to the endpoint only, and is masked in the logged configuration.
      expect(proc.lines.join("\n")).not.toContain("sk-test-secret");
      expect(chat.authorizations).toContain("Bearer sk-test-secret");
      let metrics = "";
      for (let attempt = 0; attempt < 50; attempt++) {
        metrics = await (await fetch(`${proc.baseUrl}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
        if (/^engram_extraction_failed_requests_total 1$/m.test(metrics)) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(metrics).toMatch(/^engram_extraction_facts_total 2$/m);
      expect(metrics).toMatch(/^engram_extraction_failed_requests_total 1$/m);
      expect(metrics).toMatch(/^engram_extraction_dropped_ranges_total 0$/m);
    } finally {
      await proc.kill();
      await chat.stop();
    }
  }, 60_000);
});

describe("extraction settings", () => {
  it("is off by default", () => {
    expect(loadConfig([], {}).extractionUrl).toBeUndefined();
  });

  it("refuses a model without a URL, and a URL without a model", () => {
    expect(() => loadConfig([], { MEMORY_EXTRACTION_MODEL: "m" })).toThrow(ConfigError);
    expect(() => loadConfig([], { MEMORY_EXTRACTION_URL: "http://127.0.0.1:1/v1" })).toThrow(/MEMORY_EXTRACTION_MODEL/);
    expect(() => loadConfig([], { MEMORY_EXTRACTION_URL: "ftp://x", MEMORY_EXTRACTION_MODEL: "m" })).toThrow(
      /http\(s\)/,
    );
  });
});
