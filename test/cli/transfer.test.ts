/**
 * `engram export` and `engram import` between stores: sessions exported from
 * a local-store server and imported into a Redis-store server come back
 * identical (ids, types, content, metadata, timestamps, seqs), a second
 * import adds nothing, and bad lines are reported by number while the rest
 * still load.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMemoryClient, type MemoryClient, type MemoryEvent } from "@engram-memory/client";
import { RedisStore } from "../../src/store/redis.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { runEngram } from "./run.js";

const redisUrl = process.env.MEMORY_TEST_REDIS_URL!;
const keyPrefix = `cli${process.pid}`;
const LONG_SESSION_EVENTS = 230;

let dir: string;
let source: TestServer;
let target: TestServer;
let from: MemoryClient;
let to: MemoryClient;

const strip = (events: MemoryEvent[]) =>
  events.map((e) => ({
    id: e.eventId,
    type: e.eventType,
    content: e.content,
    metadata: e.metadata,
    ts: e.timestamp?.toISOString(),
    seq: e.seq,
  }));

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-cli-transfer-"));
  source = await startTestServer();
  const limits = { maxSessions: 1000, maxSessionEvents: 500 };
  target = await startTestServer({
    store: await RedisStore.open({ url: redisUrl, keyPrefix, limits }),
    config: { memoryType: "redis" },
  });
  from = createMemoryClient({ baseUrl: source.baseUrl, protocol: "connect" });
  to = createMemoryClient({ baseUrl: target.baseUrl, protocol: "connect" });

  await from.createSession("weather-bot", "alice", "t-chat", { channel: "web", tags: ["a", "b"] });
  await from.addEvent(
    "t-chat",
    "user_message",
    "Wie ist das Wetter in Paris? 🌦",
    { lang: "de" },
    { timestamp: new Date("2025-01-02T03:04:05.678Z") },
  );
  await from.addEvent(
    "t-chat",
    "tool_call",
    { tool: "weather", arguments: { city: "Paris", days: [1, 2] }, tool_call_id: "c1" },
    undefined,
    { eventId: "c1" },
  );
  await from.addEvent("t-chat", "tool_result", { tool: "weather", result: null, ok: true, tool_call_id: "c1" });
  await from.addEvent("t-chat", "agent_response", "18°C");
  await from.createSession("support-bot", "bob", "t-long");
  await from.addEvents(
    "t-long",
    Array.from({ length: LONG_SESSION_EVENTS }, (_, i) => ({
      eventType: "user_message",
      content: { n: i, text: "x".repeat(200) },
    })),
  );
  await from.createSession("support-bot", "carol", "t-empty");
});

afterAll(async () => {
  from?.close();
  to?.close();
  await source?.stop();
  await target?.stop();
  const admin = new Redis(redisUrl);
  let cursor = "0";
  do {
    const [next, keys] = await admin.scan(cursor, "MATCH", `${keyPrefix}:*`, "COUNT", 1000);
    if (keys.length > 0) await admin.del(...keys);
    cursor = next;
  } while (cursor !== "0");
  await admin.quit();
  rmSync(dir, { recursive: true, force: true });
});

describe("export from a local store, import into Redis", () => {
  const file = () => path.join(dir, "backup.jsonl");

  it("exports one KAOS session dict per line, with progress on stderr", async () => {
    const run = await runEngram(["export", "--url", source.baseUrl, "-o", file()]);
    expect(run.code).toBe(0);
    expect(run.stderr).toContain(`exported 3 sessions, ${LONG_SESSION_EVENTS + 4} events to ${file()}`);
    const lines = readFileSync(file(), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(lines.map((l) => l.session_id)).toEqual(["t-chat", "t-empty", "t-long"]);
    const chat = lines[0];
    expect(Object.keys(chat).sort()).toEqual([
      "app_name",
      "created_at",
      "events",
      "metadata",
      "session_id",
      "updated_at",
      "user_id",
    ]);
    expect(chat).toMatchObject({
      app_name: "weather-bot",
      user_id: "alice",
      metadata: { channel: "web", tags: ["a", "b"] },
    });
    expect(chat.events[0]).toEqual({
      event_id: expect.any(String),
      timestamp: "2025-01-02T03:04:05.678Z",
      event_type: "user_message",
      content: "Wie ist das Wetter in Paris? 🌦",
      metadata: { lang: "de" },
      seq: 1,
    });
    expect(lines[2].events).toHaveLength(LONG_SESSION_EVENTS);
    // stdout carries the same lines when no file is given.
    const stdout = await runEngram(["export", "--url", source.baseUrl, "--session", "t-chat", "--quiet"]);
    expect(stdout.stderr).toBe("");
    expect(JSON.parse(stdout.stdout)).toEqual(chat);
  });

  it("imports into a Redis-store server with the same ids, content, metadata, times and seqs", async () => {
    const run = await runEngram(["import", file(), "--url", target.baseUrl, "--batch-size", "100", "--json"]);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({
      sessions: 3,
      created_sessions: 3,
      events: LONG_SESSION_EVENTS + 4,
      new_events: LONG_SESSION_EVENTS + 4,
      failed_lines: 0,
      failures: [],
    });
    expect(run.stderr).toContain(
      `imported 3 sessions (3 created), ${LONG_SESSION_EVENTS + 4} events (${LONG_SESSION_EVENTS + 4} new)`,
    );
    for (const id of ["t-chat", "t-long", "t-empty"]) {
      const [a, b] = [await from.getSession(id), await to.getSession(id)];
      expect({ app: b.appName, user: b.userId, metadata: b.metadata }).toEqual({
        app: a.appName,
        user: a.userId,
        metadata: a.metadata,
      });
      expect(strip(await to.getSessionEvents(id))).toEqual(strip(await from.getSessionEvents(id)));
    }
    expect((await to.getMemoryStats()).backend).toBe("redis");
  });

  it("adds nothing when the same file is imported again", async () => {
    const before = await to.getMemoryStats();
    const run = await runEngram(["import", file(), "--url", target.baseUrl, "--json", "--quiet"]);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ sessions: 3, created_sessions: 0, new_events: 0 });
    const after = await to.getMemoryStats();
    expect(after.totalEvents).toBe(before.totalEvents);
    expect(after.totalSessions).toBe(before.totalSessions);
    // And exporting the copy gives the same events back.
    const again = await runEngram(["export", "--url", target.baseUrl, "--quiet"]);
    const events = (text: string) =>
      text
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l).events);
    expect(events(again.stdout)).toEqual(events(readFileSync(file(), "utf8")));
  });
});

describe("import of bad input", () => {
  it("reports bad lines by number and field, loads the rest, and exits 1", async () => {
    const good = JSON.stringify({
      session_id: "t-good",
      app_name: "a",
      user_id: "u",
      events: [
        { event_id: "g1", event_type: "user_message", content: "hi", metadata: {}, timestamp: "2025-05-05T05:05:05Z" },
      ],
    });
    const input = [
      "{not json",
      JSON.stringify({ session_id: "t-bad", app_name: "a", user_id: "u", events: [{ event_type: "user_message" }] }),
      "",
      good,
      JSON.stringify({
        session_id: "t-bad-type",
        app_name: "a",
        user_id: "u",
        events: [{ event_id: "b1", event_type: "9 not a type" }],
      }),
    ].join("\n");
    const run = await runEngram(["import", "-", "--url", target.baseUrl], { input });
    expect(run.code).toBe(1);
    expect(run.stderr).toContain("line 1: not JSON");
    expect(run.stderr).toContain("line 2: events[0].event_id: expected a non-empty string");
    expect(run.stderr).toMatch(/line 5 \(session t-bad-type\): \[invalid_argument\] events\[0\]\.event_type/);
    expect(run.stderr).toContain("3 lines failed");
    const events = await to.getSessionEvents("t-good");
    expect(events.map((e) => [e.eventId, e.content, e.timestamp?.toISOString()])).toEqual([
      ["g1", "hi", "2025-05-05T05:05:05.000Z"],
    ]);
  });

  it("exits 1 when the file does not exist", async () => {
    const missing = path.join(dir, "missing.jsonl");
    writeFileSync(path.join(dir, "placeholder"), "");
    const run = await runEngram(["import", missing, "--url", target.baseUrl]);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain("ENOENT");
  });
});
