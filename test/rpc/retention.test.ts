/**
 * Retention as an operator sees it, against real server processes: the
 * start-up line says what gets deleted, the idle sweep removes sessions, and
 * every removal is counted by reason in /metrics and logged as counts only,
 * at most one line a minute.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { spawnServer, type ServerProcess } from "../support/engram.js";
import { connectClient } from "../support/clients.js";
import { sid } from "./suite.js";

/** The parsed JSON log lines whose msg starts with `prefix`. */
function logged(proc: ServerProcess, prefix: string): Array<Record<string, unknown>> {
  return proc.lines
    .map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        return undefined;
      }
    })
    .filter(
      (entry): entry is Record<string, unknown> => typeof entry?.msg === "string" && entry.msg.startsWith(prefix),
    );
}

/** The value of one series in /metrics, 0 when absent. */
async function metric(proc: ServerProcess, series: string): Promise<number> {
  const text = await (await fetch(`${proc.baseUrl}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
}

/** Polls `check` every 50 ms for up to `timeoutMs`. */
async function eventually(check: () => Promise<boolean> | boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await sleep(50);
  }
}

describe("the start-up line states the retention in force", () => {
  it("local: the in-memory default caps, said to be defaults", async () => {
    const proc = await spawnServer({ MEMORY_MAX_SESSIONS: "", MEMORY_MAX_SESSION_EVENTS: "" });
    try {
      const [line] = logged(proc, "store durability");
      expect(line.msg).toContain("retention: at most 1000 sessions");
      expect(line.retention).toContain("at most 500 events per session (the oldest are trimmed)");
      expect(line.retention).toContain("the local store's in-memory defaults");
    } finally {
      await proc.kill();
    }
  });

  it("postgres: what a crash leaves, then that nothing is deleted by default", async () => {
    const proc = await spawnServer({
      MEMORY_TYPE: "postgres",
      MEMORY_POSTGRES_URL: process.env.MEMORY_TEST_POSTGRES_URL!,
      MEMORY_KEY_PREFIX: `retention_${process.pid}`,
    });
    try {
      const [line] = logged(proc, "store durability");
      expect(line.msg).toMatch(
        /^store durability: synchronous_commit=.*survives a crash.*; retention: no cap on sessions; no cap on events per session; idle sessions are kept;/,
      );
    } finally {
      await proc.kill();
    }
  });

  it("redis: no cap by default, and the per-app caps and dedupe window the operator chose", async () => {
    const env = {
      MEMORY_TYPE: "redis",
      MEMORY_REDIS_URL: process.env.MEMORY_TEST_REDIS_URL!,
      MEMORY_KEY_PREFIX: `retention_${process.pid}`,
    };
    const plain = await spawnServer(env);
    try {
      const [line] = logged(plain, "store durability");
      expect(line.msg).toMatch(
        /^store durability: AOF.*; retention: no cap on sessions; no cap on events per session; idle sessions are kept; a trimmed event's id dedupes retries for 120000 ms/,
      );
      expect(line.retention).not.toContain("defaults");
    } finally {
      await plain.kill();
    }
    const chosen = await spawnServer({
      ...env,
      MEMORY_RETENTION_APPS: '{"bot": {"max_session_events": 100, "session_idle_ms": 60000}}',
      MEMORY_DEDUPE_WINDOW_MS: "0",
    });
    try {
      const [line] = logged(chosen, "store durability");
      expect(line.retention).toContain('app "bot": at most 100 events per session, sessions idle 60000 ms are removed');
      expect(line.retention).toContain("a trimmed event's id is forgotten at once");
    } finally {
      await chosen.kill();
    }
  });
});

describe("removals are counted by reason and logged as counts", () => {
  it("sweeps idle sessions, counts trims, evictions and deletes, and logs counts without tenant data, at most one line a minute", async () => {
    const proc = await spawnServer({
      MEMORY_SESSION_IDLE_MS: "1500",
      MEMORY_MAX_SESSIONS: "3",
      MEMORY_MAX_SESSION_EVENTS: "2",
    });
    try {
      const client = connectClient(proc.baseUrl);
      const idle = sid();
      await client.createSession({ appName: "secret-app", userId: "secret-user", sessionId: idle });

      // The idle sweep removes it (TTL 1.5 s, swept every 750 ms).
      await eventually(() =>
        client.getSession({ sessionId: idle }).then(
          () => false,
          (err) => ConnectError.from(err).code === Code.NotFound,
        ),
      );
      expect(await metric(proc, 'engram_sessions_removed_total{reason="idle"}')).toBe(1);

      // The first removal line comes at once, with counts only.
      await eventually(() => logged(proc, "retention: data removed").length === 1);
      const [first] = logged(proc, "retention: data removed");
      expect(first.removed).toEqual({ sessions_idle: 1 });

      // Trims (past 2 events), an eviction (past 3 sessions) and a delete are counted at once, but logged only after a minute.
      const ids = Array.from({ length: 4 }, () => sid());
      for (const id of ids) await client.createSession({ appName: "secret-app", userId: "secret-user", sessionId: id });
      await client.addEvents({
        sessionId: ids[3],
        events: Array.from({ length: 5 }, () => ({ eventType: "user_message" })),
      });
      expect((await client.deleteSession({ sessionId: ids[3] })).deleted).toBe(true);
      expect(await metric(proc, "engram_events_trimmed_total")).toBe(3);
      expect(await metric(proc, 'engram_sessions_removed_total{reason="evicted"}')).toBe(1);
      expect(await metric(proc, 'engram_sessions_removed_total{reason="delete"}')).toBe(1);
      // No second line within 2.5 s: the absence of an early log line is what is checked.
      await sleep(2500);
      expect(logged(proc, "retention: data removed")).toHaveLength(1);
      for (const secret of [idle, ...ids, "secret-app", "secret-user"]) {
        expect(proc.lines.filter((l) => l.includes(secret))).toEqual([]);
      }
    } finally {
      await proc.kill();
    }
  });
});
