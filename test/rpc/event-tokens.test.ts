/**
 * CountEventTokens against a real server on 127.0.0.1: each event's tokens,
 * counted as BuildConversationContext charges them, so that the counts of a
 * session whose events all fit add up to the context's tokens_used; a bad
 * tokenizer or id names its field, an unknown tokenizer in the same words as
 * BuildConversationContext and Recall.
 */
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectClient, errorOf, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

describe("CountEventTokens", () => {
  let server: TestServer;
  let client: MemoryClient;

  beforeAll(async () => {
    server = await startTestServer();
    client = connectClient(server.baseUrl);
    await client.createSession({ appName: "tok", userId: "u", sessionId: "tok-1" });
    const text = (value: string) => ({ kind: { case: "stringValue" as const, value } });
    await client.addEvents({
      sessionId: "tok-1",
      events: [
        { eventType: "system", content: text("You are terse.") },
        { eventType: "user_message", content: text("What is the capital of France, and why is it famous?") },
        { eventType: "agent_response", content: text("Paris: art, food and the Eiffel Tower.") },
      ],
    });
  });
  afterAll(async () => {
    client?.close();
    await server?.stop();
  });

  it("counts each event as the context charges it: the counts of a session that fits add up to tokens_used", async () => {
    for (const tokenizer of ["o200k_base", "cl100k_base", "chars4"]) {
      const counts = await client.countEventTokens({ sessionId: "tok-1", tokenizer });
      expect(counts.tokenizer).toBe(tokenizer);
      expect(counts.events.map((e) => e.seq)).toEqual([1n, 2n, 3n]);
      expect(counts.events.every((e) => e.tokens > 0)).toBe(true);
      const context = await client.buildConversationContext({ sessionId: "tok-1", tokenBudget: 100_000, tokenizer });
      expect(context.eventsIncluded).toBe(3);
      expect(counts.events.reduce((sum, e) => sum + e.tokens, 0)).toBe(context.tokensUsed);
    }
    const tail = await client.countEventTokens({ sessionId: "tok-1", afterSeq: 1n, limit: 1 });
    expect(tail.events.map((e) => e.seq)).toEqual([2n]);
  });

  it("answers INVALID_ARGUMENT naming the field for an unknown tokenizer or a bad id, NOT_FOUND for an absent session", async () => {
    const badTokenizer = await errorOf(client.countEventTokens({ sessionId: "tok-1", tokenizer: "gpt2" }));
    expect([badTokenizer.code, badTokenizer.rawMessage.split(":")[0]]).toEqual([Code.InvalidArgument, "tokenizer"]);
    const badId = await errorOf(client.countEventTokens({ sessionId: "has space" }));
    expect([badId.code, badId.rawMessage.split(":")[0]]).toEqual([Code.InvalidArgument, "session_id"]);
    const absent = await errorOf(client.countEventTokens({ sessionId: "no-such-session" }));
    expect(absent.code).toBe(Code.NotFound);
  });

  it("words an unknown tokenizer alike in CountEventTokens, BuildConversationContext and Recall, naming the value", async () => {
    const answers = await Promise.all([
      errorOf(client.countEventTokens({ sessionId: "tok-1", tokenizer: "gpt2" })),
      errorOf(client.buildConversationContext({ sessionId: "tok-1", tokenizer: "gpt2" })),
      errorOf(client.recall({ sessionId: "tok-1", tokenizer: "gpt2" })),
    ]);
    const expected = [Code.InvalidArgument, 'tokenizer: must be one of o200k_base, cl100k_base, chars4 (got "gpt2")'];
    expect(answers.map((err) => [err.code, err.rawMessage])).toEqual([expected, expected, expected]);
  });
});
