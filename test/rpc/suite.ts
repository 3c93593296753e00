/**
 * The RPC-level suite: every method of MemoryService, through a real server
 * over real sockets, on both protocols (grpc-js over h2c, Connect over
 * HTTP/1.1). describeRpcSuite(name, storeFactory) runs it on any store.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Code } from "@connectrpc/connect";
import type { StoreLimits, MemoryStore } from "../../src/store/types.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { codeOf, errorOf, PROTOCOLS, type MemoryClient } from "../support/clients.js";
import { describeStateRpc } from "./state-suite.js";
import { collect, collectLive, seqsOf, sid } from "./fixtures.js";

/** Makes a fresh store for one server. */
export type RpcStoreFactory = (limits: StoreLimits) => Promise<MemoryStore>;

export { collect, seqsOf, sid };

/** Registers the whole RPC suite for one store. */
export function describeRpcSuite(storeName: string, storeFactory?: RpcStoreFactory): void {
  describe.each(PROTOCOLS)(`MemoryService over %s on the ${storeName} store`, (protocol, makeClient) => {
    const json = protocol.includes("JSON");
    let server: TestServer;
    let small: TestServer; // MEMORY_MAX_SESSION_EVENTS=5, for eviction
    let client: MemoryClient;
    let smallClient: MemoryClient;

    beforeAll(async () => {
      server = await startTestServer({
        store: storeFactory ? await storeFactory({ maxSessions: 1000, maxSessionEvents: 500 }) : undefined,
      });
      small = await startTestServer({
        store: storeFactory ? await storeFactory({ maxSessions: 1000, maxSessionEvents: 5 }) : undefined,
        config: { maxSessionEvents: 5 },
      });
      client = makeClient(server as never);
      smallClient = makeClient(small as never);
    });
    afterAll(async () => {
      client?.close();
      smallClient?.close();
      await server?.stop();
      await small?.stop();
    });

    const newSession = async (id = sid()) => {
      await client.createSession({ appName: "app", userId: "user", sessionId: id });
      return id;
    };

    describe("sessions", () => {
      it("CreateSession generates a UUID when no id is given", async () => {
        const { session } = await client.createSession({ appName: "app", userId: "user", metadata: { team: "a" } });
        expect(session!.sessionId).toMatch(/^[0-9a-f-]{36}$/);
        expect(session!.metadata).toEqual({ team: "a" });
        expect(session!.headSeq).toBe(0n);
        expect(session!.createdAt).toBeDefined();
      });

      it("CreateSession answers ALREADY_EXISTS for a taken id", async () => {
        const id = await newSession();
        const err = await errorOf(client.createSession({ appName: "app", userId: "user", sessionId: id }));
        expect(err.code).toBe(Code.AlreadyExists);
        expect(err.rawMessage).toContain("session_id");
      });

      it("GetOrCreateSession creates once, even under 20 concurrent calls", async () => {
        const id = sid();
        const results = await Promise.all(
          Array.from({ length: 20 }, () => client.getOrCreateSession({ sessionId: id })),
        );
        expect(results.filter((r) => r.created)).toHaveLength(1);
        expect(results[0].session).toMatchObject({ appName: "agent", userId: "user", sessionId: id });
        expect((await client.getOrCreateSession({ sessionId: id })).created).toBe(false);
      });

      it("GetSession returns the session or NOT_FOUND", async () => {
        const id = await newSession();
        expect((await client.getSession({ sessionId: id })).session!.sessionId).toBe(id);
        const err = await errorOf(client.getSession({ sessionId: sid("missing") }));
        expect(err.code).toBe(Code.NotFound);
        expect(err.rawMessage).toContain("session_id");
      });

      it("ListSessions pages with an opaque token and filters by app and user", async () => {
        const app = sid("app");
        for (let i = 0; i < 5; i++)
          await client.createSession({ appName: app, userId: i < 3 ? "u1" : "u2", sessionId: `${app}-${i}` });
        const seen: string[] = [];
        let pageToken = "";
        for (let pages = 0; pages < 10; pages++) {
          const page = await client.listSessions({ appName: app, pageSize: 2, pageToken });
          seen.push(...page.sessions.map((s) => s.sessionId));
          pageToken = page.nextPageToken;
          if (!pageToken) break;
        }
        expect(seen).toEqual([0, 1, 2, 3, 4].map((i) => `${app}-${i}`));
        const u2 = await client.listSessions({ appName: app, userId: "u2" });
        expect(u2.sessions.map((s) => s.sessionId)).toEqual([`${app}-3`, `${app}-4`]);
        expect(u2.nextPageToken).toBe("");
        const first = await client.listSessions({ appName: app, pageSize: 2 });
        const err = await errorOf(client.listSessions({ appName: app, userId: "u1", pageToken: first.nextPageToken }));
        expect(err.code).toBe(Code.InvalidArgument);
        expect(err.rawMessage).toContain("page_token");
        expect(await codeOf(client.listSessions({ pageToken: "not-a-token" }))).toBe(Code.InvalidArgument);
        expect(await codeOf(client.listSessions({ pageSize: 1001 }))).toBe(Code.InvalidArgument);
      });

      it("DeleteSession removes the session and reports whether it existed", async () => {
        const id = await newSession();
        await client.addEvent({
          sessionId: id,
          event: { eventType: "user_message", content: { kind: { case: "stringValue", value: "x" } } },
        });
        expect((await client.deleteSession({ sessionId: id })).deleted).toBe(true);
        expect((await client.deleteSession({ sessionId: id })).deleted).toBe(false);
        expect(await codeOf(client.getSessionEvents({ sessionId: id }))).toBe(Code.NotFound);
      });
    });

    describe("appends", () => {
      const text = (value: string) => ({ kind: { case: "stringValue" as const, value } });

      it("AddEvent assigns seq 1, 2, 3 and stamps the time", async () => {
        const id = await newSession();
        const before = Date.now();
        const seqs = [];
        for (const t of ["user_message", "agent_response", "user_message"]) {
          seqs.push((await client.addEvent({ sessionId: id, event: { eventType: t, content: text(t) } })).event!.seq);
        }
        expect(seqs).toEqual([1n, 2n, 3n]);
        const { events } = await client.getSessionEvents({ sessionId: id });
        expect(Number(events[0].timestamp!.seconds) * 1000).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000);
        expect(events.map((e) => e.eventType)).toEqual(["user_message", "agent_response", "user_message"]);
      });

      it("keeps a client timestamp, any JSON content and metadata", async () => {
        const id = await newSession();
        const content = {
          kind: {
            case: "structValue" as const,
            value: {
              fields: {
                tool: text("search"),
                args: {
                  kind: {
                    case: "listValue" as const,
                    value: {
                      values: [
                        { kind: { case: "numberValue" as const, value: 1.5 } },
                        { kind: { case: "boolValue" as const, value: true } },
                        { kind: { case: "nullValue" as const, value: 0 } },
                      ],
                    },
                  },
                },
              },
            },
          },
        };
        const res = await client.addEvent({
          sessionId: id,
          event: {
            eventType: "tool_call",
            content: content as never,
            metadata: { trace_id: "t1", n: 2 },
            timestamp: { seconds: 1_700_000_000n, nanos: 5_000_000 },
          },
        });
        expect(res.event!.timestamp).toMatchObject({ seconds: 1_700_000_000n, nanos: 5_000_000 });
        const { events } = await client.getSessionEvents({ sessionId: id });
        expect(events[0].metadata).toEqual({ trace_id: "t1", n: 2 });
        const fields = (events[0].content!.kind as { value: { fields: Record<string, { kind: { value: unknown } }> } })
          .value.fields;
        expect(fields.tool.kind.value).toBe("search");
      });

      it("50 concurrent AddEvent calls to one session get seq 1..50 exactly", async () => {
        const id = await newSession();
        const results = await Promise.all(
          Array.from({ length: 50 }, (_, i) =>
            client.addEvent({ sessionId: id, event: { eventType: "user_message", content: text(String(i)) } }),
          ),
        );
        expect(results.map((r) => Number(r.event!.seq)).sort((a, b) => a - b)).toEqual(
          Array.from({ length: 50 }, (_, i) => i + 1),
        );
        const { events } = await client.getSessionEvents({ sessionId: id, limit: 100 });
        expect(events.map((e) => Number(e.seq))).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
      });

      it("a retried event_id returns the original event; other content is ALREADY_EXISTS", async () => {
        const id = await newSession();
        const event = { eventId: "evt-1", eventType: "user_message", content: text("hello") };
        const first = await client.addEvent({ sessionId: id, event });
        await client.addEvent({ sessionId: id, event: { eventType: "agent_response", content: text("hi") } });
        const retry = await client.addEvent({ sessionId: id, event });
        expect(retry.event).toEqual(first.event);
        const err = await errorOf(client.addEvent({ sessionId: id, event: { ...event, content: text("changed") } }));
        expect(err.code).toBe(Code.AlreadyExists);
        expect(err.rawMessage).toContain("event.event_id");
        expect((await client.getSession({ sessionId: id })).session!.headSeq).toBe(2n);
      });

      it("expected_seq: a mismatch is FAILED_PRECONDITION carrying the current seq", async () => {
        const id = await newSession();
        await client.addEvent({ sessionId: id, event: { eventType: "user_message" }, expectedSeq: 0n });
        await client.addEvent({ sessionId: id, event: { eventType: "user_message" }, expectedSeq: 1n });
        const err = await errorOf(
          client.addEvent({ sessionId: id, event: { eventType: "user_message" }, expectedSeq: 1n }),
        );
        expect(err.code).toBe(Code.FailedPrecondition);
        expect(err.rawMessage).toContain("expected_seq");
        expect(err.metadata.get("engram-current-seq")).toBe("2");
      });

      it("AddEvent to an unknown session is NOT_FOUND", async () => {
        const err = await errorOf(client.addEvent({ sessionId: sid("nope"), event: { eventType: "user_message" } }));
        expect(err.code).toBe(Code.NotFound);
        expect(err.rawMessage).toContain("session_id");
      });

      it("AddEvents appends a batch atomically", async () => {
        const id = await newSession();
        const res = await client.addEvents({
          sessionId: id,
          events: [{ eventType: "user_message", eventId: "a" }, { eventType: "agent_response" }],
        });
        expect(res.events.map((e) => e.seq)).toEqual([1n, 2n]);
        const err = await errorOf(
          client.addEvents({
            sessionId: id,
            events: [{ eventType: "user_message" }, { eventType: "tool_call", eventId: "a" }],
          }),
        );
        expect(err.code).toBe(Code.AlreadyExists);
        expect((await client.getSession({ sessionId: id })).session!.headSeq).toBe(2n);
        expect(await codeOf(client.addEvents({ sessionId: id, events: [] }))).toBe(Code.InvalidArgument);
        const dup = await errorOf(
          client.addEvents({
            sessionId: id,
            events: [
              { eventType: "x", eventId: "d" },
              { eventType: "x", eventId: "d" },
            ],
          }),
        );
        expect(dup.code).toBe(Code.InvalidArgument);
        expect(dup.rawMessage).toContain("events[1].event_id");
        const tooMany = await errorOf(
          client.addEvents({ sessionId: id, events: Array.from({ length: 501 }, () => ({ eventType: "x" })) }),
        );
        expect(tooMany.code).toBe(Code.InvalidArgument);
        expect(tooMany.rawMessage).toContain("events");
      });
    });

    describe("reads", () => {
      it("GetSessionEvents filters by type, pages with a token and reads the tail", async () => {
        const id = await newSession();
        const types = Array.from({ length: 12 }, (_, i) => (i % 3 === 0 ? "tool_call" : "user_message"));
        await client.addEvents({ sessionId: id, events: types.map((eventType) => ({ eventType })) });
        const seqs: number[] = [];
        let pageToken = "";
        for (let pages = 0; pages < 10; pages++) {
          const page = await client.getSessionEvents({ sessionId: id, limit: 5, pageToken });
          seqs.push(...page.events.map((e) => Number(e.seq)));
          expect(page.headSeq).toBe(12n);
          pageToken = page.nextPageToken;
          if (!pageToken) break;
        }
        expect(seqs).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
        const calls = await client.getSessionEvents({ sessionId: id, eventTypes: ["tool_call"] });
        expect(calls.events.map((e) => Number(e.seq))).toEqual([1, 4, 7, 10]);
        const after = await client.getSessionEvents({ sessionId: id, afterSeq: 10n });
        expect(after.events.map((e) => Number(e.seq))).toEqual([11, 12]);
        const tail = await client.getSessionEvents({ sessionId: id, tail: 3 });
        expect(tail.events.map((e) => Number(e.seq))).toEqual([10, 11, 12]);
        expect(await codeOf(client.getSessionEvents({ sessionId: id, tail: 3, afterSeq: 1n }))).toBe(
          Code.InvalidArgument,
        );
        const other = await errorOf(
          client.getSessionEvents({
            sessionId: id,
            eventTypes: ["tool_call"],
            pageToken: (await client.getSessionEvents({ sessionId: id, limit: 2 })).nextPageToken,
          }),
        );
        expect(other.code).toBe(Code.InvalidArgument);
        expect(other.rawMessage).toContain("page_token");
      });

      it("answers OUT_OF_RANGE for a cursor into evicted events", async () => {
        const id = sid();
        await smallClient.createSession({ appName: "app", userId: "user", sessionId: id });
        await smallClient.addEvents({
          sessionId: id,
          events: Array.from({ length: 8 }, () => ({ eventType: "user_message" })),
        });
        const all = await smallClient.getSessionEvents({ sessionId: id });
        expect(all.events.map((e) => Number(e.seq))).toEqual([4, 5, 6, 7, 8]);
        const err = await errorOf(smallClient.getSessionEvents({ sessionId: id, afterSeq: 1n }));
        expect(err.code).toBe(Code.OutOfRange);
        expect(err.rawMessage).toContain("after_seq");
        expect((await smallClient.getSession({ sessionId: id })).session).toMatchObject({
          firstSeq: 4n,
          headSeq: 8n,
          eventCount: 5n,
        });
      });

      it("ListEvents returns the newest events, oldest first, for one session or all", async () => {
        const id = await newSession();
        await client.addEvents({
          sessionId: id,
          events: Array.from({ length: 5 }, (_, i) => ({ eventType: "user_message", eventId: `e${i}` })),
        });
        const one = await client.listEvents({ sessionId: id, limit: 3 });
        expect(one.events.map((e) => e.eventId)).toEqual(["e2", "e3", "e4"]);
        const all = await client.listEvents({});
        expect(all.events.length).toBeGreaterThan(0);
        expect(all.events.length).toBeLessThanOrEqual(100);
        expect(await codeOf(client.listEvents({ limit: 1001 }))).toBe(Code.InvalidArgument);
      });
    });

    describe("streams", () => {
      it("replays, marks caught up, then delivers live events in order", async () => {
        const id = await newSession();
        await client.addEvents({
          sessionId: id,
          events: [{ eventType: "user_message" }, { eventType: "agent_response" }],
        });
        const controller = new AbortController();
        const stream = client.streamSessionEvents({ sessionId: id }, { signal: controller.signal });
        const live = collectLive(stream, (f) => seqsOf(f).length >= 5, controller);
        await live.caughtUp;
        for (let i = 0; i < 3; i++) await client.addEvent({ sessionId: id, event: { eventType: "user_message" } });
        const frames = await live.frames;
        controller.abort();
        expect(seqsOf(frames)).toEqual([1, 2, 3, 4, 5]);
        const caughtUp = frames.findIndex((f) => f.frame.case === "caughtUp");
        expect(caughtUp).toBe(2);
        expect(frames[caughtUp].frame.value).toMatchObject({ headSeq: 2n });
      });

      it("resumes after a disconnect with no gap and no duplicate", async () => {
        const id = await newSession();
        await client.addEvents({
          sessionId: id,
          events: Array.from({ length: 3 }, () => ({ eventType: "user_message" })),
        });
        const c1 = new AbortController();
        const first = await collect(
          client.streamSessionEvents({ sessionId: id }, { signal: c1.signal }),
          (f) => seqsOf(f).length >= 3,
          c1,
        );
        c1.abort();
        const last = seqsOf(first).at(-1)!;
        await client.addEvents({
          sessionId: id,
          events: Array.from({ length: 4 }, () => ({ eventType: "user_message" })),
        });
        const c2 = new AbortController();
        const stream = client.streamSessionEvents({ sessionId: id, afterSeq: BigInt(last) }, { signal: c2.signal });
        const live = collectLive(stream, (f) => seqsOf(f).length >= 6, c2);
        await live.caughtUp;
        await client.addEvents({
          sessionId: id,
          events: Array.from({ length: 2 }, () => ({ eventType: "user_message" })),
        });
        const second = await live.frames;
        c2.abort();
        expect([...seqsOf(first), ...seqsOf(second)]).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
      });

      it("filters by event type and sends heartbeats with the head seq", async () => {
        const id = await newSession();
        await client.addEvents({
          sessionId: id,
          events: [{ eventType: "user_message" }, { eventType: "tool_call" }, { eventType: "user_message" }],
        });
        const controller = new AbortController();
        const frames = await collect(
          client.streamSessionEvents({ sessionId: id, eventTypes: ["tool_call"] }, { signal: controller.signal }),
          (f) => f.some((x) => x.frame.case === "heartbeat"),
          controller,
        );
        controller.abort();
        expect(seqsOf(frames)).toEqual([2]);
        expect(frames.find((f) => f.frame.case === "caughtUp")!.frame.value).toMatchObject({ headSeq: 3n });
        expect(frames.find((f) => f.frame.case === "heartbeat")!.frame.value).toMatchObject({ headSeq: 3n });
      });

      it("ends OUT_OF_RANGE when the cursor points into evicted events", async () => {
        const id = sid();
        await smallClient.createSession({ appName: "app", userId: "user", sessionId: id });
        await smallClient.addEvents({
          sessionId: id,
          events: Array.from({ length: 9 }, () => ({ eventType: "user_message" })),
        });
        const controller = new AbortController();
        const err = await errorOf(
          collect(
            smallClient.streamSessionEvents({ sessionId: id, afterSeq: 2n }, { signal: controller.signal }),
            () => false,
            controller,
          ),
        );
        expect(err.code).toBe(Code.OutOfRange);
        // From the oldest retained event (no cursor) it works.
        const c2 = new AbortController();
        const frames = await collect(
          smallClient.streamSessionEvents({ sessionId: id }, { signal: c2.signal }),
          (f) => f.some((x) => x.frame.case === "caughtUp"),
          c2,
        );
        c2.abort();
        expect(seqsOf(frames)).toEqual([5, 6, 7, 8, 9]);
      });

      it("ends NOT_FOUND when the session is deleted while streaming", async () => {
        const id = await newSession();
        const controller = new AbortController();
        const stream = client.streamSessionEvents({ sessionId: id }, { signal: controller.signal });
        const live = collectLive(stream, () => false, controller);
        const outcome = errorOf(live.frames);
        await live.caughtUp;
        await client.deleteSession({ sessionId: id });
        const err = await outcome;
        expect(err.code).toBe(Code.NotFound);
        expect(
          await codeOf(
            collect(client.streamSessionEvents({ sessionId: sid("nope") }), () => false, new AbortController()),
          ),
        ).toBe(Code.NotFound);
      });

      it("frees the server-side subscription when the client cancels", async () => {
        const id = await newSession();
        const before = server.service.hub.activeSessions;
        const controllers = Array.from({ length: 3 }, () => new AbortController());
        const streams = controllers.map((c) =>
          collect(
            client.streamSessionEvents({ sessionId: id }, { signal: c.signal }),
            (f) => f.some((x) => x.frame.case === "caughtUp"),
            c,
          ),
        );
        await Promise.all(streams);
        // Keep them open: wait for the caught-up frames, then cancel.
        const live = controllers.map((c) =>
          collectLive(client.streamSessionEvents({ sessionId: id }, { signal: c.signal }), () => false, c),
        );
        const open = live.map((l) => l.frames.catch(() => []));
        await Promise.all(live.map((l) => l.caughtUp));
        expect(server.service.hub.activeSessions).toBe(before + 1);
        for (const c of controllers) c.abort();
        await Promise.all(open);
        const deadline = Date.now() + 5000;
        while (server.service.hub.activeSessions !== before && Date.now() < deadline) await sleep(20);
        expect(server.service.hub.activeSessions).toBe(before);
      });
    });

    describe("context, stats and cleanup", () => {
      it("BuildConversationContext gives the KAOS text and paired chat messages", async () => {
        const id = await newSession();
        const s = (value: string) => ({ kind: { case: "stringValue" as const, value } });
        const obj = (fields: Record<string, ReturnType<typeof s>>) => ({
          kind: { case: "structValue" as const, value: { fields } },
        });
        await client.addEvents({
          sessionId: id,
          events: [
            { eventType: "user_message", content: s("What is the weather?") },
            { eventType: "tool_call", content: obj({ tool: s("weather"), tool_call_id: s("c1") }) as never },
            {
              eventType: "tool_result",
              content: obj({ tool: s("weather"), tool_call_id: s("c1"), result: s("sunny") }) as never,
            },
            { eventType: "agent_response", content: s("It is sunny.") },
            { eventType: "tool_call", content: obj({ tool: s("pending") }) as never },
          ],
        });
        const ctx = await client.buildConversationContext({ sessionId: id, maxEvents: 10 });
        expect(ctx.text).toBe("User: What is the weather?\nAssistant: It is sunny.");
        expect(ctx.messages.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
        expect(ctx.messages[1].toolCalls[0]).toMatchObject({
          id: "c1",
          type: "function",
          function: { name: "weather", arguments: "{}" },
        });
        expect(ctx.messages[2]).toMatchObject({ toolCallId: "c1", content: "sunny" });
        expect(ctx.eventsIncluded).toBe(4);
        expect(ctx.eventsDropped).toBe(1);
        // The default window is MEMORY_CONTEXT_LIMIT (6) events; a window that cuts a pair drops both halves.
        const cut = await client.buildConversationContext({ sessionId: id, maxEvents: 3 });
        expect(cut.messages.map((m) => m.role)).toEqual(["assistant"]);
        expect(cut.text).toBe("Assistant: It is sunny.");
        expect(await codeOf(client.buildConversationContext({ sessionId: sid("nope") }))).toBe(Code.NotFound);
      });

      it("GetStats reports totals and the backend", async () => {
        const stats = await client.getStats({});
        expect(stats.backend).toBe(storeName);
        expect(stats.totalSessions).toBeGreaterThan(0n);
        expect(stats.avgEventsPerSession).toBeCloseTo(Number(stats.totalEvents) / Number(stats.totalSessions));
      });

      it("Cleanup removes sessions idle longer than max_age and requires max_age", async () => {
        // Idle time is what Cleanup measures. Margins of a second each way: a loaded machine may take hundreds of ms between calls.
        const id = await newSession();
        await sleep(2000);
        const fresh = await newSession();
        const res = await client.cleanup({ maxAge: { seconds: 1n } });
        expect(res.removedSessions).toBeGreaterThanOrEqual(1n);
        expect(await codeOf(client.getSession({ sessionId: id }))).toBe(Code.NotFound);
        expect(await codeOf(client.getSession({ sessionId: fresh }))).toBe("ok");
        expect((await errorOf(client.cleanup({}))).rawMessage).toContain("max_age");
        expect(await codeOf(client.cleanup({ maxAge: { seconds: -5n } }))).toBe(Code.InvalidArgument);
      });
    });

    describeStateRpc(() => client);

    describe("erasure", () => {
      it("DeleteUserData removes every session and event of the user, counts them, ends their live streams NOT_FOUND, and keeps everyone else", async () => {
        const app = sid("erase-app");
        const [s1, s2, kept, otherApp] = [sid("erase"), sid("erase"), sid("kept"), sid("other-app")];
        await client.createSession({ appName: app, userId: "erased", sessionId: s1 });
        await client.createSession({ appName: app, userId: "erased", sessionId: s2 });
        await client.createSession({ appName: app, userId: "kept", sessionId: kept });
        await client.createSession({ appName: `${app}-2`, userId: "erased", sessionId: otherApp });
        await client.addEvents({
          sessionId: s1,
          events: [{ eventType: "user_message" }, { eventType: "agent_response" }],
        });
        await client.addEvent({ sessionId: s2, event: { eventType: "user_message" } });
        await client.addEvent({ sessionId: kept, event: { eventType: "user_message" } });
        await client.addEvent({ sessionId: otherApp, event: { eventType: "user_message" } });

        const controller = new AbortController();
        let caughtUp!: () => void;
        const live = new Promise<void>((resolve) => (caughtUp = resolve));
        const outcome = errorOf(
          collect(
            client.streamSessionEvents({ sessionId: s1 }, { signal: controller.signal }),
            (frames) => {
              if (frames.some((f) => f.frame.case === "caughtUp")) caughtUp();
              return false;
            },
            controller,
          ),
        );
        await live;

        const erased = await client.deleteUserData({ appName: app, userId: "erased" });
        expect(erased.removedSessions).toBe(2n);
        expect(erased.removedEvents).toBe(3n);
        expect((await outcome).code).toBe(Code.NotFound);
        for (const id of [s1, s2]) expect(await codeOf(client.getSession({ sessionId: id }))).toBe(Code.NotFound);
        expect((await client.listSessions({ appName: app, userId: "erased" })).sessions).toEqual([]);
        expect((await client.getSessionEvents({ sessionId: kept })).events).toHaveLength(1);
        expect((await client.getSessionEvents({ sessionId: otherApp })).events).toHaveLength(1);
        // Safe to repeat: the second call finds nothing left.
        const again = await client.deleteUserData({ appName: app, userId: "erased" });
        expect([again.removedSessions, again.removedEvents]).toEqual([0n, 0n]);
      });

      it("DeleteUserData requires app_name and user_id, naming the field", async () => {
        for (const [req, field] of [
          [{ userId: "u" }, "app_name"],
          [{ appName: "a" }, "user_id"],
          [{ appName: "a", userId: "bad\u0000nul" }, "user_id"],
        ] as const) {
          const err = await errorOf(client.deleteUserData(req));
          expect(err.code).toBe(Code.InvalidArgument);
          expect(err.rawMessage).toMatch(new RegExp(`^${field}: `));
        }
      });

      it("Cleanup with app_name and user_id removes only that tenant's idle sessions", async () => {
        const app = sid("clean-app");
        const [mine, otherUser, otherApp] = [sid("mine"), sid("other-user"), sid("other-app")];
        await client.createSession({ appName: app, userId: "u", sessionId: mine });
        await client.createSession({ appName: app, userId: "v", sessionId: otherUser });
        await client.createSession({ appName: `${app}-2`, userId: "u", sessionId: otherApp });
        // Idle time is what Cleanup measures: past max_age (1 s) with a second's margin for a loaded machine.
        await sleep(2000);
        const res = await client.cleanup({ maxAge: { seconds: 1n }, appName: app, userId: "u" });
        expect(res.removedSessions).toBe(1n);
        expect(await codeOf(client.getSession({ sessionId: mine }))).toBe(Code.NotFound);
        expect(await codeOf(client.getSession({ sessionId: otherUser }))).toBe("ok");
        expect(await codeOf(client.getSession({ sessionId: otherApp }))).toBe("ok");
        expect((await client.cleanup({ maxAge: { seconds: 1n }, appName: `${app}-2` })).removedSessions).toBe(1n);
        expect(await codeOf(client.getSession({ sessionId: otherUser }))).toBe("ok");
        const err = await errorOf(client.cleanup({ maxAge: { seconds: 1n }, appName: "" }));
        expect(err.code).toBe(Code.InvalidArgument);
        expect(err.rawMessage).toMatch(/^app_name: must not be empty when set/);
      });
    });

    describe("bad input answers INVALID_ARGUMENT naming the field", () => {
      const cases: Array<[string, (c: MemoryClient, id: string) => Promise<unknown>, string]> = [
        ["empty session_id", (c) => c.getSession({ sessionId: "" }), "session_id"],
        ["oversized session_id", (c) => c.getSession({ sessionId: "x".repeat(129) }), "session_id"],
        [
          "session_id with a space",
          (c) => c.createSession({ appName: "a", userId: "u", sessionId: "has space" }),
          "session_id",
        ],
        [
          "session_id with non-ASCII",
          (c) => c.createSession({ appName: "a", userId: "u", sessionId: "naïve" }),
          "session_id",
        ],
        ["empty app_name", (c) => c.createSession({ appName: "", userId: "u" }), "app_name"],
        ["oversized user_id", (c) => c.createSession({ appName: "a", userId: "é".repeat(129) }), "user_id"],
        ["NUL in app_name", (c) => c.createSession({ appName: "a\u0000b", userId: "u" }), "app_name"],
        ["missing event", (c, id) => c.addEvent({ sessionId: id }), "event"],
        ["empty event_type", (c, id) => c.addEvent({ sessionId: id, event: { eventType: "" } }), "event.event_type"],
        [
          "event_type off pattern",
          (c, id) => c.addEvent({ sessionId: id, event: { eventType: "9 bad" } }),
          "event.event_type",
        ],
        [
          "event_id off pattern",
          (c, id) => c.addEvent({ sessionId: id, event: { eventType: "x", eventId: "a b" } }),
          "event.event_id",
        ],
        [
          "content over 256 KiB",
          (c, id) =>
            c.addEvent({
              sessionId: id,
              event: { eventType: "x", content: { kind: { case: "stringValue", value: "x".repeat(262_145) } } },
            }),
          "event",
        ],
        [
          "content nested 65 deep",
          (c, id) => c.addEvent({ sessionId: id, event: { eventType: "x", content: nested(65) } }),
          "event.content",
        ],
        // Far deeper nesting is stopped while decoding; binary bodies are walked again to name the field (src/server/nesting.ts), JSON decoding names nothing.
        [
          "content nested 500 deep",
          (c, id) => c.addEvent({ sessionId: id, event: { eventType: "x", content: nested(500) } }),
          json ? "" : "event.content",
        ],
        [
          "NUL in content",
          (c, id) =>
            c.addEvent({
              sessionId: id,
              event: { eventType: "x", content: { kind: { case: "stringValue", value: "a\u0000" } } },
            }),
          "event.content",
        ],
        [
          "NUL in a metadata key",
          (c, id) => c.addEvent({ sessionId: id, event: { eventType: "x", metadata: { "k\u0000": 1 } } }),
          "event.metadata",
        ],
        [
          "metadata nested 65 deep",
          (c, id) => c.addEvent({ sessionId: id, event: { eventType: "x", metadata: nestedJson(65) as never } }),
          "event.metadata",
        ],
        // (JSON clients cannot even encode such a timestamp, so only binary protocols send it.)
        ...(json
          ? []
          : [
              [
                "timestamp out of range",
                (c: MemoryClient, id: string) =>
                  c.addEvent({ sessionId: id, event: { eventType: "x", timestamp: { seconds: 253402300800n } } }),
                "event.timestamp",
              ] as (typeof cases)[number],
            ]),
        ["limit over 1000", (c, id) => c.getSessionEvents({ sessionId: id, limit: 1001 }), "limit"],
        [
          "event_types entry off pattern",
          (c, id) => c.getSessionEvents({ sessionId: id, eventTypes: ["ok", ""] }),
          "event_types[1]",
        ],
        [
          "max_events over 1000",
          (c, id) => c.buildConversationContext({ sessionId: id, maxEvents: 5000 }),
          "max_events",
        ],
        [
          "stream with a bad session_id",
          (c) => collect(c.streamSessionEvents({ sessionId: "bad id" }), () => false, new AbortController()),
          "session_id",
        ],
      ];
      it.each(cases)("%s", async (_name, call, field) => {
        const id = await newSession();
        const err = await errorOf(call(client, id));
        expect(err.code).toBe(Code.InvalidArgument);
        expect(err.rawMessage.startsWith(field)).toBe(true);
      });

      it("refuses a message over the size limit with RESOURCE_EXHAUSTED", async () => {
        const id = await newSession();
        const huge = { kind: { case: "stringValue" as const, value: "y".repeat(9 * 1024 * 1024) } };
        expect(await codeOf(client.addEvent({ sessionId: id, event: { eventType: "x", content: huge } }))).toBe(
          Code.ResourceExhausted,
        );
        // The server is still fine.
        expect(await codeOf(client.getSession({ sessionId: id }))).toBe("ok");
      });
    });
  });
}

function nested(depth: number): never {
  let v: unknown = { kind: { case: "stringValue", value: "leaf" } };
  for (let i = 0; i < depth; i++) v = { kind: { case: "listValue", value: { values: [v] } } };
  return v as never;
}

function nestedJson(depth: number): unknown {
  let v: unknown = "leaf";
  for (let i = 0; i < depth; i++) v = { k: v };
  return v;
}
