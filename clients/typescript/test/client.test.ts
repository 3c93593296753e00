/**
 * MemoryClient against a real in-process Engram server on 127.0.0.1, over
 * gRPC (HTTP/2) and Connect (HTTP/1.1): every method, the error codes and the
 * idempotent retry of appends.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../test/support/engram.js";
import { Code, createMemoryClient, currentSeqOf, currentVersionOf, type MemoryClient, type Protocol } from "../src/index.js";
import { errorOf } from "./support.js";

let server: TestServer;
let small: TestServer;
beforeAll(async () => {
  [server, small] = await Promise.all([startTestServer(), startTestServer({ config: { maxSessionEvents: 5 } })]);
});
afterAll(async () => {
  await Promise.all([server?.stop(), small?.stop()]);
});

describe.each<[Protocol]>([["grpc"], ["connect"]])("MemoryClient over %s", (protocol) => {
  let client: MemoryClient;
  let smallClient: MemoryClient;
  const id = (name: string) => `${protocol}-${name}`;
  beforeAll(() => {
    client = createMemoryClient({ baseUrl: server.baseUrl, protocol, timeoutMs: 10_000 });
    smallClient = createMemoryClient({ baseUrl: small.baseUrl, protocol, timeoutMs: 10_000 });
  });
  afterAll(() => {
    client?.close();
    smallClient?.close();
  });

  it("keeps session state: deltas on appends, updateSession under an expected version, the merged state on the session", async () => {
    const sessionId = await client.createSession(id("state-app"), "ada");
    const event = await client.addEvent(sessionId, "agent_response", "ok", undefined, { stateDelta: { topic: "cats", "user:lang": "en", "temp:x": 1 } });
    expect(event.stateDelta).toEqual({ topic: "cats", "user:lang": "en" });
    const [batched] = await client.addEvents(sessionId, [{ eventType: "agent_response", stateDelta: { "app:motd": "hi", topic: null } }]);
    expect(batched.stateDelta).toEqual({ "app:motd": "hi", topic: null });
    const session = await client.getSession(sessionId);
    expect(session).toMatchObject({ state: { "user:lang": "en", "app:motd": "hi" }, version: 2 });
    const updated = await client.updateSession(sessionId, { metadata: { title: "t" }, stateDelta: { step: 1 }, expectedVersion: 2 });
    expect(updated).toMatchObject({ metadata: { title: "t" }, state: { step: 1, "user:lang": "en", "app:motd": "hi" }, version: 3 });
    const stale = await errorOf(client.updateSession(sessionId, { stateDelta: { step: 2 }, expectedVersion: 2 }));
    expect(stale.code).toBe(Code.FailedPrecondition);
    expect(currentVersionOf(stale)).toBe(3);
  });

  it("stores null as a value when asked, and removes keys by stateRemovals", async () => {
    const sessionId = await client.createSession(id("nulls-app"), "ada");
    const kept = await client.addEvent(sessionId, "agent_response", "ok", undefined, {
      stateDelta: { kept: null, gone: 1 },
      stateNullsAreValues: true,
    });
    expect(kept).toMatchObject({ stateDelta: { kept: null, gone: 1 }, stateNullsAreValues: true });
    const [removed] = await client.addEvents(sessionId, [{ eventType: "agent_response", stateRemovals: ["gone"] }]);
    expect(removed.stateRemovals).toEqual(["gone"]);
    expect(removed.stateNullsAreValues).toBeUndefined();
    const updated = await client.updateSession(sessionId, { stateDelta: { also: null }, stateNullsAreValues: true });
    expect(updated.state).toEqual({ kept: null, also: null });
  });

  it("creates, gets, lists and deletes sessions", async () => {
    const generated = await client.createSession("app-x", "alice");
    expect(generated).toMatch(/^[!-~]{1,128}$/);
    const named = await client.createSession("app-x", "bob", id("s1"), { team: "red" });
    expect(named).toBe(id("s1"));

    const s = await client.getSession(id("s1"));
    expect(s).toMatchObject({ sessionId: id("s1"), appName: "app-x", userId: "bob", metadata: { team: "red" }, headSeq: 0, eventCount: 0 });
    expect(s.createdAt).toBeInstanceOf(Date);
    expect(s.updatedAt).toBeInstanceOf(Date);

    const first = await client.getOrCreateSession(id("s2"));
    expect(first).toMatchObject({ sessionId: id("s2"), created: true });
    expect(first.session).toMatchObject({ appName: "agent", userId: "user" });
    const again = await client.getOrCreateSession(id("s2"), "other", "other");
    expect(again).toMatchObject({ sessionId: id("s2"), created: false });
    expect(again.session.appName).toBe("agent");

    const mine = await client.listSessions({ appName: "app-x", userId: "bob" });
    expect(mine.map((x) => x.sessionId)).toContain(id("s1"));
    expect(mine.every((x) => x.appName === "app-x" && x.userId === "bob")).toBe(true);

    expect(await client.deleteSession(id("s1"))).toBe(true);
    expect(await client.deleteSession(id("s1"))).toBe(false);
    expect((await errorOf(client.getSession(id("s1")))).code).toBe(Code.NotFound);
  });

  it("pages through listSessions", async () => {
    const app = `pager-${protocol}`;
    for (let i = 0; i < 7; i++) await client.createSession(app, "u", id(`page-${i}`));
    const all = await client.listSessions({ appName: app, pageSize: 3 });
    expect(all.map((s) => s.sessionId)).toEqual([0, 1, 2, 3, 4, 5, 6].map((i) => id(`page-${i}`)));
    expect(await client.listSessions({ appName: app, pageSize: 2, limit: 5 })).toHaveLength(5);
  });

  it("appends events and reads them back in pages", async () => {
    const sid = await client.createSession("app", "u", id("events"));
    const e1 = await client.addEvent(sid, "user_message", "hello", { trace: "t1" });
    expect(e1).toMatchObject({ seq: 1, sessionId: sid, eventType: "user_message", content: "hello", metadata: { trace: "t1" } });
    expect(e1.eventId).not.toBe("");
    expect(e1.timestamp).toBeInstanceOf(Date);
    const when = new Date("2024-05-01T12:00:00.123Z");
    const e2 = await client.addEvent(sid, { eventType: "tool_call", content: { tool: "x", n: [1, 2.5, null, true] }, eventId: "call-1", timestamp: when });
    expect(e2).toMatchObject({ seq: 2, eventId: "call-1", content: { tool: "x", n: [1, 2.5, null, true] } });
    expect(e2.timestamp?.toISOString()).toBe(when.toISOString());
    const e3 = await client.addEvent(sid, "system");
    expect(e3.content).toBeNull();

    const batch = await client.addEvents(
      sid,
      Array.from({ length: 7 }, (_, i) => ({ eventType: i % 2 ? "agent_response" : "user_message", content: `m${i}` })),
    );
    expect(batch.map((e) => e.seq)).toEqual([4, 5, 6, 7, 8, 9, 10]);

    const all = await client.getSessionEvents(sid, { pageSize: 3 });
    expect(all.map((e) => e.seq)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect((await client.getSessionEvents(sid, { afterSeq: 7 })).map((e) => e.seq)).toEqual([8, 9, 10]);
    expect((await client.getSessionEvents(sid, { afterSeq: 2, limit: 4, pageSize: 3 })).map((e) => e.seq)).toEqual([3, 4, 5, 6]);
    const responses = await client.getSessionEvents(sid, { eventTypes: ["agent_response"], pageSize: 2 });
    expect(responses.map((e) => e.seq)).toEqual([5, 7, 9]);
    expect((await client.getSessionEvents(sid, { tail: 2 })).map((e) => e.seq)).toEqual([9, 10]);

    const s = await client.getSession(sid);
    expect(s).toMatchObject({ headSeq: 10, firstSeq: 1, eventCount: 10 });
  });

  it("retries an append idempotently by event_id", async () => {
    const sid = await client.createSession("app", "u", id("retry"));
    const a = await client.addEvent(sid, "tool_call", { tool: "t" }, undefined, { eventId: "once" });
    const b = await client.addEvent(sid, "tool_call", { tool: "t" }, undefined, { eventId: "once" });
    expect(b).toEqual(a);
    expect(await client.getSessionEvents(sid)).toHaveLength(1);
    // A different event under the same id is refused.
    expect((await errorOf(client.addEvent(sid, "tool_call", { tool: "other" }, undefined, { eventId: "once" }))).code).toBe(Code.AlreadyExists);
  });

  it("enforces expectedSeq and reports the current seq", async () => {
    const sid = await client.createSession("app", "u", id("occ"));
    await client.addEvent(sid, "user_message", "a", undefined, { expectedSeq: 0 });
    await client.addEvents(sid, [{ eventType: "user_message", content: "b" }], { expectedSeq: 1 });
    const err = await errorOf(client.addEvent(sid, "user_message", "c", undefined, { expectedSeq: 1 }));
    expect(err.code).toBe(Code.FailedPrecondition);
    expect(currentSeqOf(err)).toBe(2);
    const batchErr = await errorOf(client.addEvents(sid, [{ eventType: "user_message" }], { expectedSeq: 0n }));
    expect(batchErr.code).toBe(Code.FailedPrecondition);
    expect(currentSeqOf(batchErr)).toBe(2);
    expect(currentSeqOf(new Error("plain"))).toBeUndefined();
    expect((await client.addEvent(sid, "user_message", "c", undefined, { expectedSeq: 2 })).seq).toBe(3);
  });

  it("answers NOT_FOUND, ALREADY_EXISTS and INVALID_ARGUMENT", async () => {
    await client.createSession("app", "u", id("dup"));
    expect((await errorOf(client.createSession("app", "u", id("dup")))).code).toBe(Code.AlreadyExists);
    expect((await errorOf(client.addEvent(id("missing"), "user_message", "x"))).code).toBe(Code.NotFound);
    expect((await errorOf(client.getSessionEvents(id("missing")))).code).toBe(Code.NotFound);
    expect((await errorOf(client.buildConversationContext(id("missing"), 5))).code).toBe(Code.NotFound);
    const bad = await errorOf(client.createSession("app", "u", "has space"));
    expect(bad.code).toBe(Code.InvalidArgument);
    expect(bad.rawMessage).toContain("session_id");
    expect((await errorOf(client.addEvent(id("dup"), "9-not-a-type", "x"))).code).toBe(Code.InvalidArgument);
    expect((await errorOf(client.createSession("", "u"))).code).toBe(Code.InvalidArgument);
  });

  it("answers OUT_OF_RANGE for a cursor into evicted events", async () => {
    const sid = await smallClient.createSession("app", "u", id("evict"));
    await smallClient.addEvents(sid, Array.from({ length: 8 }, (_, i) => ({ eventType: "user_message", content: i })));
    const kept = await smallClient.getSessionEvents(sid);
    expect(kept.map((e) => e.seq)).toEqual([4, 5, 6, 7, 8]);
    expect((await errorOf(smallClient.getSessionEvents(sid, { afterSeq: 1 }))).code).toBe(Code.OutOfRange);
    const stream = smallClient.streamSessionEvents(sid, { afterSeq: 1 });
    expect((await errorOf(stream.next())).code).toBe(Code.OutOfRange);
  });

  it("builds the conversation context", async () => {
    const sid = await client.createSession("app", "u", id("ctx"));
    await client.addEvent(sid, "user_message", "What is the weather in Paris?");
    await client.addEvent(sid, "tool_call", { tool: "weather", arguments: { city: "Paris" }, tool_call_id: "call-1" }, undefined, { eventId: "call-1" });
    await client.addEvent(sid, "tool_result", { tool: "weather", result: "18°C, sunny", tool_call_id: "call-1" });
    await client.addEvent(sid, "agent_response", "It is 18°C and sunny in Paris.");
    const ctx = await client.buildConversationContext(sid, 10);
    expect(ctx.text).toContain("User: What is the weather in Paris?");
    expect(ctx.text).toContain("Assistant: It is 18°C and sunny in Paris.");
    expect(ctx.messages[0]).toEqual({ role: "user", content: "What is the weather in Paris?" });
    const call = ctx.messages.find((m) => m.tool_calls);
    expect(call?.tool_calls?.[0]).toMatchObject({ id: "call-1", type: "function", function: { name: "weather" } });
    expect(JSON.parse(call!.tool_calls![0]!.function.arguments)).toEqual({ city: "Paris" });
    expect(ctx.messages.find((m) => m.role === "tool")).toMatchObject({ tool_call_id: "call-1" });
    expect(ctx.messages.at(-1)).toMatchObject({ role: "assistant", content: "It is 18°C and sunny in Paris." });
    expect(ctx.eventsIncluded).toBe(4);
    const short = await client.buildConversationContext(sid, 1);
    expect(short.messages).toHaveLength(1);
  });

  it("streams: replay, caught-up, live events, filters, no heartbeats", async () => {
    const sid = await client.createSession("app", "u", id("stream"));
    await client.addEvents(sid, [
      { eventType: "user_message", content: 1 },
      { eventType: "agent_response", content: 2 },
    ]);
    const controller = new AbortController();
    const caughtUp: number[] = [];
    const seen: Array<[number, string]> = [];
    const iterate = (async () => {
      for await (const e of client.streamSessionEvents(sid, { signal: controller.signal, onCaughtUp: (h) => caughtUp.push(h) })) {
        seen.push([e.seq, e.eventType]);
        if (seen.length === 4) break;
      }
    })();
    const filtered: number[] = [];
    const iterateFiltered = (async () => {
      for await (const e of client.streamSessionEvents(sid, { afterSeq: 1, eventTypes: ["agent_response"] })) {
        filtered.push(e.seq);
        if (filtered.length === 2) break;
      }
    })();
    await new Promise((r) => setTimeout(r, 500)); // past a few heartbeats (200 ms)
    await client.addEvent(sid, "user_message", 3);
    await client.addEvent(sid, "agent_response", 4);
    await Promise.all([iterate, iterateFiltered]);
    controller.abort();
    expect(seen).toEqual([
      [1, "user_message"],
      [2, "agent_response"],
      [3, "user_message"],
      [4, "agent_response"],
    ]);
    expect(caughtUp).toEqual([2]);
    expect(filtered).toEqual([2, 4]);
  });

  it("ends a stream quietly when its signal is aborted", async () => {
    const sid = await client.createSession("app", "u", id("abort"));
    const controller = new AbortController();
    const got: number[] = [];
    const done = (async () => {
      for await (const e of client.streamSessionEvents(sid, { signal: controller.signal })) got.push(e.seq);
    })();
    await client.addEvent(sid, "user_message", "x");
    for (let i = 0; i < 50 && got.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    controller.abort();
    await done;
    expect(got).toEqual([1]);
    expect((await errorOf((async () => { for await (const _ of client.streamSessionEvents(id("nope"))) void _; })())).code).toBe(Code.NotFound);
  });

  it("reports stats and cleans up old sessions", async () => {
    const stats = await client.getMemoryStats();
    expect(stats.backend).toBe("local");
    expect(stats.totalSessions).toBeGreaterThan(0);
    expect(stats.totalEvents).toBeGreaterThan(0);
    expect(stats.avgEventsPerSession).toBeCloseTo(stats.totalEvents / stats.totalSessions);
    // Nothing here is an hour old.
    expect(await client.cleanupOldSessions(1)).toBe(0);
    await expect(client.cleanupOldSessions(0)).rejects.toThrow(RangeError);
  });
});

describe("createMemoryClient", () => {
  it("speaks gRPC-Web too", async () => {
    const client = createMemoryClient({ baseUrl: server.baseUrl, protocol: "grpc-web" });
    try {
      const sid = await client.createSession("app", "u", "grpc-web-1");
      expect((await client.addEvent(sid, "user_message", { hi: 1 })).seq).toBe(1);
      expect((await errorOf(client.getSession("grpc-web-missing"))).code).toBe(Code.NotFound);
    } finally {
      client.close();
    }
  });

  it("speaks binary Connect", async () => {
    const client = createMemoryClient({ baseUrl: server.baseUrl, protocol: "connect", useBinaryFormat: true });
    try {
      const sid = await client.createSession("app", "u", "connect-binary-1");
      expect((await client.addEvent(sid, "user_message", [1, "two"])).content).toEqual([1, "two"]);
    } finally {
      client.close();
    }
  });

  it("rejects an unknown protocol", () => {
    expect(() => createMemoryClient({ baseUrl: server.baseUrl, protocol: "http3" as Protocol })).toThrow(TypeError);
  });

  it("erases a user: every session and event of theirs, counted; a second call finds nothing", async () => {
    const client = createMemoryClient({ baseUrl: server.baseUrl, protocol: "grpc" });
    try {
      const [a, b, kept] = [await client.createSession("erase", "gone", "erase-a"), await client.createSession("erase", "gone", "erase-b"), await client.createSession("erase", "stays", "erase-kept")];
      await client.addEvents(a, [{ eventType: "user_message", content: "one" }, { eventType: "agent_response", content: "two" }]);
      await client.addEvent(b, "user_message", "three");
      await client.addEvent(kept, "user_message", "four");
      expect(await client.deleteUserData("erase", "gone")).toEqual({ removedSessions: 2, removedEvents: 3, removedMemories: 0 });
      expect((await errorOf(client.getSession(a))).code).toBe(Code.NotFound);
      expect(await client.deleteUserData("erase", "gone")).toEqual({ removedSessions: 0, removedEvents: 0, removedMemories: 0 });
      expect((await client.getSessionEvents(kept)).map((e) => e.content)).toEqual(["four"]);
    } finally {
      client.close();
    }
  });

  it("cleans up the stale sessions of one app only", async () => {
    const client = createMemoryClient({ baseUrl: server.baseUrl, protocol: "connect" });
    try {
      await client.createSession("clean-mine", "u", "clean-mine-1");
      await client.createSession("clean-other", "u", "clean-other-1");
      await new Promise((r) => setTimeout(r, 30));
      expect(await client.cleanupOldSessions(10 / 3_600_000, { appName: "clean-mine", userId: "u" })).toBe(1);
      expect((await errorOf(client.getSession("clean-mine-1"))).code).toBe(Code.NotFound);
      expect((await client.getSession("clean-other-1")).appName).toBe("clean-other");
    } finally {
      client.close();
    }
  });

  it("cleans up stale sessions", async () => {
    const client = createMemoryClient({ baseUrl: small.baseUrl, protocol: "grpc" });
    try {
      await client.createSession("cleanup", "u", "stale-1");
      await new Promise((r) => setTimeout(r, 30));
      const before = (await client.getMemoryStats()).totalSessions;
      // A 10 ms max age: every session of this server is older by now.
      const removed = await client.cleanupOldSessions(10 / 3_600_000);
      expect(removed).toBe(before);
      expect((await client.getMemoryStats()).totalSessions).toBe(0);
    } finally {
      client.close();
    }
  });
});
