/**
 * Resharding a Redis Cluster (3 masters + 3 replicas) under live reads and
 * writes. Sessions of one app are written, read, listed page by page (small
 * pages, so cursors span the move) and streamed while slots holding them
 * move to another master, twice:
 *   1. every slot holding the sessions' keys on the busiest master, moved
 *      key batch by key batch as `redis-cli --cluster reshard` does, with the
 *      load running between batches (the slot half-migrated: ASK redirects,
 *      TRYAGAIN for a script whose keys are split);
 *   2. a slot range moved by `redis-cli --cluster reshard` itself.
 * Then: every acknowledged append is in its session at its seq, seqs are
 * gapless, no event id twice; every listing pass that ran across the move
 * returned every session exactly once, in order; the live stream delivered
 * 1..n once, in order. Every loop is bounded in count and time.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grpcJsClient, type MemoryClient } from "../support/clients.js";
import { spawnServer, type ServerProcess } from "../support/engram.js";
import { startRedisCluster, type ClusterNode, type RedisCluster } from "../support/redis-cluster.js";

const SESSIONS = 12;
const PAGE_SIZE = 5;
const APP = "reshard";

let cluster: RedisCluster;
let server: ServerProcess;
let client: MemoryClient;
const prefix = `reshard_${process.pid}`;

beforeAll(async () => {
  cluster = await startRedisCluster();
  server = await spawnServer({
    MEMORY_TYPE: "redis",
    MEMORY_REDIS_URL: cluster.url,
    MEMORY_KEY_PREFIX: prefix,
    MEMORY_MAX_SESSION_EVENTS: "100000",
  });
  client = grpcJsClient(server.address);
}, 120_000);

afterAll(async () => {
  client?.close();
  await server?.kill();
  await cluster?.stop();
}, 60_000);

/** Slot -> number of keys under the prefix, per master. */
async function slotsByMaster(): Promise<Map<ClusterNode, Map<number, number>>> {
  const result = new Map<ClusterNode, Map<number, number>>();
  const masters = new Map<number, ClusterNode>();
  for (const slot of [0, 8192, 16_383]) masters.set((await cluster.masterOf(slot)).index, await cluster.masterOf(slot));
  for (const master of masters.values()) {
    const slots = new Map<number, number>();
    let cursor = "0";
    for (let page = 0; page < 100; page++) {
      const [next, keys] = (await cluster.admin(master).scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000)) as [
        string,
        string[],
      ];
      for (const key of keys) {
        const slot = await cluster.slotOf(key);
        slots.set(slot, (slots.get(slot) ?? 0) + 1);
      }
      cursor = next;
      if (cursor === "0") break;
    }
    result.set(master, slots);
  }
  return result;
}

/**
 * Runs writers, readers, a paging lister and a live stream on every session
 * while `move(tick)` reshards (tick() runs one round of checks in between);
 * then checks the history.
 */
async function underLoad(label: string, move: (tick: () => Promise<void>) => Promise<void>): Promise<void> {
  const sessions = Array.from({ length: SESSIONS }, (_, i) => `${label}-${String(i).padStart(3, "0")}`);
  for (const sessionId of sessions)
    await client.createSession({ appName: APP, userId: "u", sessionId }, { timeoutMs: 10_000 } as never);
  const listed = async () => {
    const ids: string[] = [];
    let pageToken = "";
    for (let page = 0; page < 100; page++) {
      const res = await client.listSessions({ appName: APP, pageSize: PAGE_SIZE, pageToken }, {
        timeoutMs: 10_000,
      } as never);
      ids.push(...res.sessions.map((s) => s.sessionId).filter((id) => id.startsWith(`${label}-`)));
      pageToken = res.nextPageToken;
      if (!pageToken) break;
      // A cursor held across the move: the next page is asked for a little later.
      await sleep(20);
    }
    return ids;
  };

  const acked = new Map<string, number>();
  const writeErrors: string[] = [];
  const readErrors: string[] = [];
  const listings: string[][] = [];
  let stop = false;
  let writes = 0;

  const writer = async (sessionId: string) => {
    for (let i = 0; i < 2000 && !stop; i++) {
      const eventId = `${sessionId}-e${i}`;
      // Retried with its id until acknowledged (bounded): a refused or unanswered append may be retried safely.
      for (let attempt = 0; attempt < 20; attempt++) {
        try {
          const res = await client.addEvent({ sessionId, event: { eventType: "user_message", eventId } }, {
            timeoutMs: 5000,
          } as never);
          acked.set(eventId, Number(res.event!.seq));
          writes++;
          break;
        } catch (err) {
          const code = ConnectError.from(err).code;
          writeErrors.push(`${eventId}: ${String(err)}`);
          // Only "could not tell" is acceptable (checked after the load, not in this background loop).
          if (code !== Code.Unavailable && code !== Code.DeadlineExceeded)
            readErrors.push(`write ${eventId}: ${String(err)}`);
          await sleep(50);
        }
      }
      await sleep(30);
    }
  };
  const reader = async () => {
    for (let i = 0; i < 5000 && !stop; i++) {
      const sessionId = sessions[i % sessions.length];
      try {
        const { events } = await client.getSessionEvents({ sessionId, limit: 1000 }, { timeoutMs: 5000 } as never);
        const seqs = events.map((e) => Number(e.seq));
        if (seqs.some((seq, j) => seq !== j + 1)) readErrors.push(`${sessionId}: seqs ${seqs.join(",")}`);
      } catch (err) {
        readErrors.push(`read ${sessionId}: ${String(err)}`);
      }
      await sleep(20);
    }
  };
  const lister = async () => {
    for (let i = 0; i < 500 && !stop; i++) {
      try {
        listings.push(await listed());
      } catch (err) {
        readErrors.push(`list: ${String(err)}`);
      }
    }
  };
  // One live stream per session, until told the head.
  const heads = new Map<string, number>();
  const streamed = new Map<string, number[]>();
  const streamAbort = new AbortController();
  const follow = async (sessionId: string) => {
    const seqs: number[] = [];
    streamed.set(sessionId, seqs);
    try {
      for await (const frame of client.streamSessionEvents(
        { sessionId, afterSeq: 0n },
        { signal: streamAbort.signal },
      )) {
        if (frame.frame.case === "event") seqs.push(Number(frame.frame.value.seq));
        const head = heads.get(sessionId);
        if (head !== undefined && seqs.length > 0 && seqs[seqs.length - 1] >= head) break;
      }
    } catch (err) {
      if (!streamAbort.signal.aborted) readErrors.push(`stream ${sessionId}: ${String(err)}`);
    }
  };

  const streams = sessions.map(follow);
  const load = Promise.all([...sessions.map(writer), reader(), lister()]);
  const tick = async () => {
    // Between batches: one listing pass and one write, so every half-migrated state sees both.
    try {
      listings.push(await listed());
    } catch (err) {
      readErrors.push(`list between batches: ${String(err)}`);
    }
    const before = writes;
    const deadline = Date.now() + 10_000;
    while (writes === before && Date.now() < deadline) await sleep(10);
  };
  try {
    // Some history before the move.
    const deadline = Date.now() + 20_000;
    while (writes < SESSIONS * 3 && Date.now() < deadline) await sleep(20);
    await move(tick);
    // And some after.
    const after = writes + SESSIONS * 2;
    const deadlineAfter = Date.now() + 20_000;
    while (writes < after && Date.now() < deadlineAfter) await sleep(20);
  } finally {
    stop = true;
    await load;
  }

  expect(readErrors).toEqual([]);
  for (const sessionId of sessions) {
    const { events } = await client.getSessionEvents({ sessionId, limit: 1000 }, { timeoutMs: 10_000 } as never);
    expect(events.map((e) => Number(e.seq))).toEqual(events.map((_, i) => i + 1));
    expect(new Set(events.map((e) => e.eventId)).size).toBe(events.length);
    const seqOf = new Map(events.map((e) => [e.eventId, Number(e.seq)]));
    for (const [eventId, seq] of acked)
      if (eventId.startsWith(`${sessionId}-e`)) expect(seqOf.get(eventId), eventId).toBe(seq);
    heads.set(sessionId, events.length);
  }
  const settle = Date.now() + 20_000;
  while (Date.now() < settle && sessions.some((s) => (streamed.get(s)!.at(-1) ?? 0) < heads.get(s)!)) await sleep(50);
  streamAbort.abort();
  await Promise.all(streams);
  for (const sessionId of sessions)
    expect(streamed.get(sessionId), `stream of ${sessionId}`).toEqual(
      Array.from({ length: heads.get(sessionId)! }, (_, i) => i + 1),
    );
  expect(listings.length).toBeGreaterThan(1);
  for (const ids of listings) expect(ids).toEqual(sessions);
  console.log(
    `resharding ${label}: ${acked.size} appends acknowledged, ${writeErrors.length} refused and retried, ${listings.length} listing passes, ${SESSIONS} streams gapless`,
  );
}

describe("Redis Cluster resharding under reads and writes", () => {
  it("moves every slot holding live sessions off one master, batch by batch, and loses nothing, breaks no cursor and no stream", async () => {
    await underLoad("batches", async (tick) => {
      const byMaster = await slotsByMaster();
      const [from, slots] = [...byMaster.entries()].sort((a, b) => b[1].size - a[1].size)[0];
      const to = [...byMaster.keys()].find((master) => master.index !== from.index)!;
      expect(slots.size).toBeGreaterThan(0);
      await cluster.migrateSlots([...slots.keys()], to, { keysPerBatch: 25, betweenBatches: tick });
      const after = await slotsByMaster();
      for (const slot of slots.keys()) expect([...after.get(to)!.keys()]).toContain(slot);
    });
  }, 120_000);

  it("moves a slot range holding live sessions with redis-cli --cluster reshard and loses nothing, breaks no cursor and no stream", async () => {
    await underLoad("redis-cli", async () => {
      // redis-cli moves the source's lowest slots first: move just enough to take its lowest slot holding sessions.
      const byMaster = await slotsByMaster();
      let best: { from: ClusterNode; count: number } | undefined;
      for (const [master, slots] of byMaster) {
        if (slots.size === 0) continue;
        const lowest = Math.min(...slots.keys());
        // The slots it serves up to and including its lowest slot holding sessions.
        const count = (await cluster.rangesOf(master)).reduce(
          (sum, [from, to]) => sum + Math.max(0, Math.min(to, lowest) - from + 1),
          0,
        );
        if (!best || count < best.count) best = { from: master, count };
      }
      expect(best).toBeDefined();
      const to = [...byMaster.keys()].find((master) => master.index !== best!.from.index)!;
      await cluster.reshard(best!.from, to, best!.count);
      expect((await slotsByMaster()).get(to)!.size).toBeGreaterThan(byMaster.get(to)!.size);
    });
  }, 120_000);
});
