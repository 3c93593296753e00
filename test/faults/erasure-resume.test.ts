/**
 * Erasures cut short by a crash, then finished. A server process on a
 * dedicated Redis starts DeleteUserData for a user with hundreds of sessions;
 * once the first sessions are gone, Redis holds every write (CLIENT PAUSE
 * WRITE) so the erasure is frozen midway, and the server is SIGKILLed. Then:
 *   - what is left of the user is whole sessions only (every one still
 *     holds all its events, and the store's counters agree with what is there),
 *     and the erasure is recorded as in progress;
 *   - either DeleteUserData on a new server removes exactly what was left and
 *     says so, or a new server process finishes the erasure by itself at
 *     start-up and logs the counts;
 *   - nothing of other users (same user in another app, another user of the
 *     same app) was touched at any point.
 * And an erasure recorded in a store that is down when a server starts is
 * finished once that server's store opens late (src/store/connecting.ts).
 * Every loop is bounded in count and time; everything runs on 127.0.0.1.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisStore } from "../../src/store/redis.js";
import type { MemoryStore, NewEvent } from "../../src/store/types.js";
import { grpcJsClient, errorOf } from "../support/clients.js";
import { spawnServer, startTestServer } from "../support/engram.js";
import { startRedisServer, type RedisServer } from "../support/redis-server.js";
import { killHard } from "../replicas/suite.js";

const PREFIX = `erasure_${process.pid}`;
const APP = "erasure-app";
/** Two users to erase, one per case. */
const ERASED = ["erased-by-call", "erased-at-start-up"];
const ERASED_SESSIONS = 600;
const NEIGHBOUR_SESSIONS = 40;
const EVENTS_PER_SESSION = 3;
const LIMITS = { maxSessions: 100_000, maxSessionEvents: 500 };
const hex = (s: string) => Buffer.from(s, "utf8").toString("hex");
const userIndex = (userId: string) => `${PREFIX}:ix:au:${hex(APP)}:${hex(userId)}`;
const ENV = () => ({
  MEMORY_TYPE: "redis",
  MEMORY_REDIS_URL: redis.url,
  MEMORY_KEY_PREFIX: PREFIX,
  MEMORY_MAX_SESSIONS: String(LIMITS.maxSessions),
});

let redis: RedisServer;
let observer: Redis;
let seeder: MemoryStore;

const events = (label: string): NewEvent[] =>
  Array.from({ length: EVENTS_PER_SESSION }, (_, i) => ({
    eventId: `${label}-${i}`,
    eventType: "user_message",
    content: `${label} says ${i}`,
    metadata: {},
    timestamp: Date.now(),
    fingerprint: "",
  }));

/** Creates `count` sessions of (app, user), each with EVENTS_PER_SESSION events, 50 at a time. */
async function seed(label: string, appName: string, userId: string, count: number): Promise<void> {
  for (let i = 0; i < count; i += 50) {
    await Promise.all(
      Array.from({ length: Math.min(50, count - i) }, async (_, j) => {
        const sessionId = `${label}-${String(i + j).padStart(4, "0")}`;
        await seeder.createSession({ sessionId, appName, userId, metadata: {}, now: Date.now() });
        await seeder.appendEvents(sessionId, events(sessionId));
      }),
    );
  }
}

/** Every session of (app, user), read page by page through the store. */
async function sessionsOf(appName: string, userId: string) {
  const out = [];
  let after: string | undefined;
  for (let page = 0; page < 100; page++) {
    const rows = await seeder.listSessions({ appName, userId, afterSessionId: after, limit: 200 });
    out.push(...rows);
    if (rows.length < 200) return out;
    after = rows[rows.length - 1].sessionId;
  }
  throw new Error("more pages than expected");
}

beforeAll(async () => {
  // A dedicated Redis: CLIENT PAUSE must not stall the other test files' shared one.
  redis = await startRedisServer({ appendonly: false });
  observer = new Redis(redis.url);
  seeder = await RedisStore.open({ url: redis.url, keyPrefix: PREFIX, limits: LIMITS });
  for (const userId of ERASED) {
    await seed(userId, APP, userId, ERASED_SESSIONS);
    await seed(`${userId}-other-app`, `${APP}-2`, userId, NEIGHBOUR_SESSIONS);
  }
  await seed("other-user", APP, "kept-user", NEIGHBOUR_SESSIONS);
}, 120_000);

afterAll(async () => {
  await observer?.call("CLIENT", "UNPAUSE").catch(() => {});
  observer?.disconnect();
  await seeder?.close();
  await redis?.destroy();
});

/**
 * Starts erasing `userId` on a server process and SIGKILLs it once the
 * erasure has removed something, with every Redis write held meanwhile so it
 * cannot finish first; resolves with how many of the user's sessions are left.
 */
/** Ids of the Redis clients named for PREFIX: this file's own store's, and any server's it starts. */
async function prefixClients(): Promise<string[]> {
  const list = (await observer.call("CLIENT", "LIST")) as string;
  return list
    .split("\n")
    .filter((line) => line.includes(` name=${PREFIX}:`))
    .map((line) => /^id=(\d+)/.exec(line)![1]);
}

async function eraseUntilKilled(userId: string): Promise<number> {
  const before = new Set(await prefixClients());
  const server = await spawnServer(ENV());
  const client = grpcJsClient(server.address);
  try {
    expect(await observer.zcard(userIndex(userId))).toBe(ERASED_SESSIONS);
    const interrupted = errorOf(client.deleteUserData({ appName: APP, userId }, { timeoutMs: 60_000 }));
    // Wait (at most 30 s, polling) for the erasure to have removed something, then freeze every write.
    const deadline = Date.now() + 30_000;
    while ((await observer.zcard(userIndex(userId))) === ERASED_SESSIONS) {
      if (Date.now() > deadline) throw new Error("the erasure did not start within 30 s");
      await sleep(1);
    }
    await observer.call("CLIENT", "PAUSE", "60000", "WRITE");
    await killHard(server);
    await observer.call("CLIENT", "UNPAUSE");
    await interrupted; // rejects unless the call failed (the server died under it)
    // Count once Redis has dropped the killed server's connections: nothing of it can still write.
    const droppedBy = Date.now() + 10_000;
    while ((await prefixClients()).some((id) => !before.has(id))) {
      if (Date.now() > droppedBy) throw new Error("Redis still lists the killed server's connections after 10 s");
      await sleep(20);
    }
    const left = await observer.zcard(userIndex(userId));
    expect(left, "the crash must come midway for this test to mean anything").toBeGreaterThan(0);
    expect(left).toBeLessThan(ERASED_SESSIONS);
    return left;
  } finally {
    client.close();
    await killHard(server);
  }
}

/** Every session left of `userId` is whole; the erasure is recorded; the counters agree. */
async function expectWholeSessions(userId: string, left: number, otherSessions: number): Promise<void> {
  const remaining = await sessionsOf(APP, userId);
  expect(remaining).toHaveLength(left);
  for (const session of remaining) {
    const page = await seeder.readEvents(session.sessionId, { limit: 10 });
    expect(
      page.events.map((e) => e.eventId),
      session.sessionId,
    ).toEqual(events(session.sessionId).map((e) => e.eventId));
  }
  expect(await observer.hexists(`${PREFIX}:erasures`, `${hex(APP)}:${hex(userId)}`)).toBe(1);
  const total = left + otherSessions;
  expect(await seeder.stats()).toEqual({ totalSessions: total, totalEvents: total * EVENTS_PER_SESSION });
}

/** Nothing of `userId` is left, not even the record of its erasure; nobody else lost anything. */
async function expectErased(userId: string, otherSessions: number): Promise<void> {
  expect(await sessionsOf(APP, userId)).toEqual([]);
  expect(await observer.exists(userIndex(userId))).toBe(0);
  expect(await observer.hexists(`${PREFIX}:erasures`, `${hex(APP)}:${hex(userId)}`)).toBe(0);
  expect(await observer.keys(`${PREFIX}:s:${hex(`${userId}-0`)}*`)).toEqual([]);
  for (const [appName, owner] of [
    [`${APP}-2`, userId],
    [APP, "kept-user"],
  ]) {
    const kept = await sessionsOf(appName, owner);
    expect(kept, `${appName}/${owner}`).toHaveLength(NEIGHBOUR_SESSIONS);
    for (const session of kept)
      expect((await seeder.readEvents(session.sessionId, { limit: 10 })).events).toHaveLength(EVENTS_PER_SESSION);
  }
  expect(await seeder.stats()).toEqual({
    totalSessions: otherSessions,
    totalEvents: otherSessions * EVENTS_PER_SESSION,
  });
}

describe("DeleteUserData after a crash midway", () => {
  // Each case erases one user; what the store holds besides: the other case's user while not yet erased, and every neighbour.
  const neighbours = NEIGHBOUR_SESSIONS * (ERASED.length + 1);

  it("leaves whole sessions only, and a second call on a new server removes exactly what was left", async () => {
    const [userId, pending] = ERASED;
    const left = await eraseUntilKilled(userId);
    await expectWholeSessions(userId, left, neighbours + ERASED_SESSIONS);
    // An in-process server: main.ts's start-up resume does not run, so this call alone finishes the job.
    const second = await startTestServer({
      store: await RedisStore.open({ url: redis.url, keyPrefix: PREFIX, limits: LIMITS }),
    });
    const client = grpcJsClient(second.address);
    try {
      const resumed = await client.deleteUserData({ appName: APP, userId }, { timeoutMs: 60_000 });
      expect(resumed.removedSessions).toBe(BigInt(left));
      expect(resumed.removedEvents).toBe(BigInt(left * EVENTS_PER_SESSION));
      const again = await client.deleteUserData({ appName: APP, userId }, { timeoutMs: 60_000 });
      expect([again.removedSessions, again.removedEvents]).toEqual([0n, 0n]);
    } finally {
      client.close();
      await second.stop();
    }
    await expectErased(userId, neighbours + (await sessionsOf(APP, pending)).length);
  }, 180_000);

  it("leaves whole sessions only, and a new server process finishes the erasure by itself at start-up", async () => {
    const [other, userId] = ERASED;
    // The other case's user, when that case did not run first (vitest -t).
    const others = neighbours + (await sessionsOf(APP, other)).length;
    const left = await eraseUntilKilled(userId);
    await expectWholeSessions(userId, left, others);
    const second = await spawnServer(ENV());
    try {
      // Bounded: the resume log line within 30 s.
      const deadline = Date.now() + 30_000;
      let line: string | undefined;
      while (!(line = second.lines.find((l) => l.includes('"msg":"erasures resumed"')))) {
        if (Date.now() > deadline)
          throw new Error(`no "erasures resumed" line within 30 s:\n${second.lines.join("\n")}`);
        await sleep(20);
      }
      expect(JSON.parse(line)).toMatchObject({ users: 1, sessions: left, events: left * EVENTS_PER_SESSION });
      // Counts only: the log line names no app or user.
      expect(line).not.toContain(userId);
      expect(line).not.toContain(APP);
      const metrics = await (await fetch(`${second.baseUrl}/metrics`)).text();
      expect(metrics).toContain(`engram_sessions_removed_total{reason="erasure"} ${left}`);
    } finally {
      await killHard(second);
    }
    await expectErased(userId, others);
  }, 180_000);
});

describe("an erasure recorded while the backend is down at start-up", () => {
  it("is finished by a server that started unready, once its store opens", async () => {
    // Its own Redis with an AOF: what was written survives the outage.
    const late = await startRedisServer({ appendonly: true });
    const prefix = `${PREFIX}_late`;
    const userId = "erased-when-back";
    let server: Awaited<ReturnType<typeof spawnServer>> | undefined;
    try {
      const store = await RedisStore.open({ url: late.url, keyPrefix: prefix, limits: LIMITS });
      for (const [sessionId, owner] of [
        ["late-1", userId],
        ["late-2", userId],
        ["late-kept", "kept-user"],
      ]) {
        await store.createSession({ sessionId, appName: APP, userId: owner, metadata: {}, now: Date.now() });
        await store.appendEvents(sessionId, events(sessionId));
      }
      // The record an erasure writes before removing anything, left by a replica that died right after.
      await store.close();
      const writer = new Redis(late.url);
      await writer.hset(`${prefix}:erasures`, `${hex(APP)}:${hex(userId)}`, "died-before-removing");
      writer.disconnect();
      await late.stop();

      server = await spawnServer({
        MEMORY_TYPE: "redis",
        MEMORY_REDIS_URL: late.url,
        MEMORY_KEY_PREFIX: prefix,
        MEMORY_MAX_SESSIONS: String(LIMITS.maxSessions),
      });
      // Bounded: the first failed attempt to open the store within 15 s, then the backend comes back.
      const failedBy = Date.now() + 15_000;
      while (!server.lines.some((l) => l.includes("cannot open the store yet"))) {
        if (Date.now() > failedBy)
          throw new Error(`the server did not report the store down:\n${server.lines.join("\n")}`);
        await sleep(20);
      }
      await late.restart();
      const deadline = Date.now() + 30_000;
      let line: string | undefined;
      while (!(line = server.lines.find((l) => l.includes('"msg":"erasures resumed"')))) {
        if (Date.now() > deadline)
          throw new Error(`no "erasures resumed" line within 30 s:\n${server.lines.join("\n")}`);
        await sleep(20);
      }
      expect(JSON.parse(line)).toMatchObject({ users: 1, sessions: 2, events: 2 * EVENTS_PER_SESSION });
      const check = await RedisStore.open({ url: late.url, keyPrefix: prefix, limits: LIMITS });
      try {
        expect((await check.listSessions({ limit: 10 })).map((s) => s.sessionId)).toEqual(["late-kept"]);
        expect(await check.stats()).toEqual({ totalSessions: 1, totalEvents: EVENTS_PER_SESSION });
      } finally {
        await check.close();
      }
    } finally {
      if (server) await killHard(server);
      await late.destroy();
    }
  }, 120_000);
});
