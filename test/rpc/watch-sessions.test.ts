/**
 * WatchSessions against a real server on 127.0.0.1: several sessions on one
 * stream, each replayed and then followed live with its frames tagged; a
 * session that ends (deleted, out of the key's scope) ends alone while the
 * others go on; bad requests name their field.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { WatchSessionsResponse } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { generateApiKey } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { connectClient, errorOf, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

/** Reads frames until `done` says enough (bounded by a deadline), skipping heartbeats. */
async function framesUntil(
  stream: AsyncIterator<WatchSessionsResponse>,
  done: (seen: WatchSessionsResponse[]) => boolean,
): Promise<WatchSessionsResponse[]> {
  const seen: WatchSessionsResponse[] = [];
  const deadline = Date.now() + 20_000;
  while (!done(seen)) {
    if (Date.now() > deadline) throw new Error(`no end after ${JSON.stringify(seen.map(describeFrame))}`);
    const next = await stream.next();
    if (next.done) break;
    if (next.value.frame.case !== "heartbeat") seen.push(next.value);
  }
  return seen;
}

function describeFrame(f: WatchSessionsResponse): string {
  const v = f.frame;
  if (v.case === "event") return `${f.sessionId}:event#${v.value.seq}`;
  if (v.case === "ended") return `${f.sessionId}:ended:${v.value.code}`;
  return `${f.sessionId}:${v.case}`;
}

describe("WatchSessions", () => {
  let server: TestServer;
  let client: MemoryClient;

  beforeAll(async () => {
    server = await startTestServer();
    client = connectClient(server.baseUrl);
  });
  afterAll(async () => {
    client?.close();
    await server?.stop();
  });

  it("replays and then follows several sessions on one stream, each frame tagged with its session", async () => {
    await client.createSession({ appName: "w", userId: "u", sessionId: "watch-a" });
    await client.createSession({ appName: "w", userId: "u", sessionId: "watch-b" });
    await client.addEvent({ sessionId: "watch-a", event: { eventType: "user_message" } });
    await client.addEvent({ sessionId: "watch-a", event: { eventType: "agent_response" } });
    const controller = new AbortController();
    const stream = client
      .watchSessions(
        { sessions: [{ sessionId: "watch-a", afterSeq: 1n }, { sessionId: "watch-b" }] },
        { signal: controller.signal },
      )
      [Symbol.asyncIterator]();
    try {
      const replay = await framesUntil(stream, (seen) => seen.filter((f) => f.frame.case === "caughtUp").length === 2);
      expect(replay.map(describeFrame).sort()).toEqual(["watch-a:caughtUp", "watch-a:event#2", "watch-b:caughtUp"]);
      await client.addEvent({ sessionId: "watch-b", event: { eventType: "user_message" } });
      await client.addEvent({ sessionId: "watch-a", event: { eventType: "tool_call" } });
      const live = await framesUntil(stream, (seen) => seen.length === 2);
      expect(live.map(describeFrame).sort()).toEqual(["watch-a:event#3", "watch-b:event#1"]);
      const a3 = live.find((f) => f.sessionId === "watch-a")!.frame;
      expect(a3.case === "event" && a3.value.eventType).toBe("tool_call");
    } finally {
      controller.abort();
    }
  });

  it("ends a deleted session alone with NOT_FOUND while the others stay live", async () => {
    await client.createSession({ appName: "w", userId: "u", sessionId: "watch-gone" });
    await client.createSession({ appName: "w", userId: "u", sessionId: "watch-stays" });
    const controller = new AbortController();
    const stream = client
      .watchSessions(
        { sessions: [{ sessionId: "watch-gone" }, { sessionId: "watch-stays" }, { sessionId: "watch-never-was" }] },
        { signal: controller.signal },
      )
      [Symbol.asyncIterator]();
    try {
      const start = await framesUntil(stream, (seen) => seen.filter((f) => f.frame.case !== "event").length === 3);
      expect(start.map(describeFrame).sort()).toEqual([
        "watch-gone:caughtUp",
        "watch-never-was:ended:NOT_FOUND",
        "watch-stays:caughtUp",
      ]);
      await client.deleteSession({ sessionId: "watch-gone" });
      const [ended] = await framesUntil(stream, (seen) => seen.length === 1);
      expect(describeFrame(ended!)).toBe("watch-gone:ended:NOT_FOUND");
      await client.addEvent({ sessionId: "watch-stays", event: { eventType: "user_message" } });
      const [event] = await framesUntil(stream, (seen) => seen.length === 1);
      expect(describeFrame(event!)).toBe("watch-stays:event#1");
    } finally {
      controller.abort();
    }
  });

  it("answers INVALID_ARGUMENT naming the field for no session, a session named twice, too many sessions or a bad id", async () => {
    const first = (req: Parameters<MemoryClient["watchSessions"]>[0]) =>
      client.watchSessions(req)[Symbol.asyncIterator]().next();
    const none = await errorOf(first({ sessions: [] }));
    expect([none.code, none.rawMessage]).toEqual([Code.InvalidArgument, "sessions: must name at least one session"]);
    const twice = await errorOf(first({ sessions: [{ sessionId: "x" }, { sessionId: "x" }] }));
    expect(twice.code).toBe(Code.InvalidArgument);
    expect(twice.rawMessage).toMatch(/^sessions\[1\]\.session_id: /);
    const many = await errorOf(first({ sessions: Array.from({ length: 101 }, (_, i) => ({ sessionId: `s${i}` })) }));
    expect(many.code).toBe(Code.InvalidArgument);
    expect(many.rawMessage).toMatch(/^sessions: at most 100 sessions/);
    const badId = await errorOf(first({ sessions: [{ sessionId: "ok" }, { sessionId: "has space" }] }));
    expect(badId.code).toBe(Code.InvalidArgument);
    expect(badId.rawMessage).toMatch(/^sessions\[1\]\.session_id: /);
  });
});

describe("WatchSessions with API keys", () => {
  let dir: string;
  let server: TestServer;
  let owner: MemoryClient;
  let other: MemoryClient;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "engram-watch-"));
    const keys = new FileKeyStore(path.join(dir, "keys.json"));
    const a = generateApiKey({ role: "write", apps: ["app-a"] });
    const b = generateApiKey({ role: "read", apps: ["app-b"] });
    await keys.create(a.record);
    await keys.create(b.record);
    server = await startTestServer({ config: { auth: true, authKeysFile: keys.path, authCacheMs: 0 } });
    owner = connectClient(server.baseUrl, { headers: { authorization: `Bearer ${a.key}` } });
    other = connectClient(server.baseUrl, { headers: { authorization: `Bearer ${b.key}` } });
  });
  afterAll(async () => {
    owner?.close();
    other?.close();
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("ends another tenant's session alone with NOT_FOUND, word for word as an absent one, and never sends its events", async () => {
    await owner.createSession({ appName: "app-a", userId: "u", sessionId: "tenant-a-session" });
    await owner.addEvent({
      sessionId: "tenant-a-session",
      event: { eventType: "user_message", content: { kind: { case: "stringValue", value: "secret" } } },
    });
    const controller = new AbortController();
    const stream = other
      .watchSessions(
        { sessions: [{ sessionId: "tenant-a-session" }, { sessionId: "absent-session" }] },
        { signal: controller.signal },
      )
      [Symbol.asyncIterator]();
    try {
      const frames = await framesUntil(stream, (seen) => seen.length === 2);
      const ended = new Map(frames.map((f) => [f.sessionId, f.frame]));
      const foreign = ended.get("tenant-a-session");
      const absent = ended.get("absent-session");
      expect(foreign?.case).toBe("ended");
      expect(absent?.case).toBe("ended");
      if (foreign?.case === "ended" && absent?.case === "ended") {
        expect(foreign.value.code).toBe("NOT_FOUND");
        expect(foreign.value.message).toBe(absent.value.message.replace("absent-session", "tenant-a-session"));
      }
      // Both ended: the stream is over, and no event of the foreign session came.
      expect((await stream.next()).done).toBe(true);
    } finally {
      controller.abort();
    }
  });
});
