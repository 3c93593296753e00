/**
 * An erasure cut short by a crash, then resumed. A server process on a
 * dedicated Redis starts DeleteUserData for a user with hundreds of sessions;
 * once the first sessions are gone, Redis holds every write (CLIENT PAUSE
 * WRITE) so the erasure is frozen midway, and the server is SIGKILLed. Then:
 *   - what is left of the user is whole sessions only (every one still
 *     holds all its events, and the store's counters agree with what is there);
 *   - DeleteUserData on a new server removes exactly what was left and says so;
 *   - nothing of other users (same user in another app, another user of the
 *     same app) was touched at any point.
 * Every loop is bounded in count and time; everything runs on 127.0.0.1.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisStore } from "../../src/store/redis.js";
import type { MemoryStore, NewEvent } from "../../src/store/types.js";
import { grpcJsClient, errorOf } from "../support/clients.js";
import { spawnServer } from "../support/engram.js";
import { startRedisServer, type RedisServer } from "../support/redis-server.js";
import { killHard } from "../replicas/suite.js";

const PREFIX = `erasure_${process.pid}`;
const APP = "erasure-app";
const ERASED = "erased-user";
const ERASED_SESSIONS = 600;
const NEIGHBOUR_SESSIONS = 40;
const EVENTS_PER_SESSION = 3;
const LIMITS = { maxSessions: 100_000, maxSessionEvents: 500 };
const hex = (s: string) => Buffer.from(s, "utf8").toString("hex");
const USER_INDEX = `${PREFIX}:ix:au:${hex(APP)}:${hex(ERASED)}`;

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
  await seed("erased", APP, ERASED, ERASED_SESSIONS);
  await seed("same-user-other-app", `${APP}-2`, ERASED, NEIGHBOUR_SESSIONS);
  await seed("other-user", APP, "kept-user", NEIGHBOUR_SESSIONS);
}, 120_000);

afterAll(async () => {
  await observer?.call("CLIENT", "UNPAUSE").catch(() => {});
  observer?.disconnect();
  await seeder?.close();
  await redis?.destroy();
});

describe("DeleteUserData after a crash midway", () => {
  it("leaves whole sessions only, and a second call on a new server removes exactly what was left", async () => {
    const env = { MEMORY_TYPE: "redis", MEMORY_REDIS_URL: redis.url, MEMORY_KEY_PREFIX: PREFIX, MEMORY_MAX_SESSIONS: String(LIMITS.maxSessions) };
    const first = await spawnServer(env);
    const firstClient = grpcJsClient(first.address);
    let left: number;
    try {
      expect(await observer.zcard(USER_INDEX)).toBe(ERASED_SESSIONS);
      const interrupted = errorOf(firstClient.deleteUserData({ appName: APP, userId: ERASED }, { timeoutMs: 60_000 }));
      // Wait (at most 30 s, polling) for the erasure to have removed something, then freeze every write.
      const deadline = Date.now() + 30_000;
      while ((await observer.zcard(USER_INDEX)) === ERASED_SESSIONS) {
        if (Date.now() > deadline) throw new Error("the erasure did not start within 30 s");
        await sleep(1);
      }
      await observer.call("CLIENT", "PAUSE", "60000", "WRITE");
      await killHard(first);
      await observer.call("CLIENT", "UNPAUSE");
      // The killed server's connection is gone; give Redis a moment to drop it before counting.
      await sleep(300);
      left = await observer.zcard(USER_INDEX);
      expect(left, "the crash must come midway for this test to mean anything").toBeGreaterThan(0);
      expect(left).toBeLessThan(ERASED_SESSIONS);
      await interrupted; // rejects unless the call failed (the server died under it)
    } finally {
      firstClient.close();
      await killHard(first);
    }

    // Whole sessions only: every session left still holds all its events, and the counters agree.
    const remaining = await sessionsOf(APP, ERASED);
    expect(remaining).toHaveLength(left);
    for (const session of remaining) {
      const page = await seeder.readEvents(session.sessionId, { limit: 10 });
      expect(page.events.map((e) => e.eventId), session.sessionId).toEqual(events(session.sessionId).map((e) => e.eventId));
    }
    const total = left + 2 * NEIGHBOUR_SESSIONS;
    expect(await seeder.stats()).toEqual({ totalSessions: total, totalEvents: total * EVENTS_PER_SESSION });

    // A new server finishes the job and counts what it removed itself.
    const second = await spawnServer(env);
    const secondClient = grpcJsClient(second.address);
    try {
      const resumed = await secondClient.deleteUserData({ appName: APP, userId: ERASED }, { timeoutMs: 60_000 });
      expect(resumed.removedSessions).toBe(BigInt(left));
      expect(resumed.removedEvents).toBe(BigInt(left * EVENTS_PER_SESSION));
      const again = await secondClient.deleteUserData({ appName: APP, userId: ERASED }, { timeoutMs: 60_000 });
      expect([again.removedSessions, again.removedEvents]).toEqual([0n, 0n]);
    } finally {
      secondClient.close();
      await killHard(second);
    }

    expect(await sessionsOf(APP, ERASED)).toEqual([]);
    expect(await observer.exists(USER_INDEX)).toBe(0);
    // Nobody else lost anything.
    for (const [appName, userId] of [[`${APP}-2`, ERASED], [APP, "kept-user"]]) {
      const kept = await sessionsOf(appName, userId);
      expect(kept, `${appName}/${userId}`).toHaveLength(NEIGHBOUR_SESSIONS);
      for (const session of kept) expect((await seeder.readEvents(session.sessionId, { limit: 10 })).events).toHaveLength(EVENTS_PER_SESSION);
    }
    expect(await seeder.stats()).toEqual({ totalSessions: 2 * NEIGHBOUR_SESSIONS, totalEvents: 2 * NEIGHBOUR_SESSIONS * EVENTS_PER_SESSION });
    // No key of an erased session is left behind (session hash, events, event ids).
    const leftovers = await observer.keys(`${PREFIX}:s:${hex("erased-")}*`);
    expect(leftovers).toEqual([]);
  }, 180_000);
});
