/**
 * Failover on a Redis Cluster (3 masters + 3 replicas, test/support/redis-cluster.ts)
 * under write load, with and without MEMORY_REDIS_WAIT_REPLICAS. One Engram
 * server per setting (WAIT 0 and WAIT 1), each with its own key prefix; one
 * writer per session appends with client-chosen event ids. Two faults:
 *
 *   - "kill -9": the master holding most of the sessions' keys is killed
 *     with SIGKILL mid-writes; its replica is promoted and writes resume.
 *   - "lagging replica": that master's replica is frozen (SIGSTOP) and its
 *     link cut (CLIENT KILL TYPE replica on the master) while writes go on,
 *     then the master is killed and the replica thawed: the replica that is
 *     promoted lacks everything the master acknowledged meanwhile. This is the window asynchronous replication leaves open,
 *     made deterministic: with WAIT 0 those acknowledged writes are lost;
 *     with WAIT 1 they were never acknowledged (UNAVAILABLE, unknown outcome).
 *
 * After each fault the checker reads every session back and asserts: seqs
 * are 1..n with no hole, no event id twice (also after retrying every
 * unknown-outcome append with its id), and with WAIT 1 no acknowledged
 * append is missing or moved to another seq. It counts, for the README's
 * durability table, acknowledged appends lost (absent, or their seq now
 * names another event) with each setting. Every loop is bounded in count
 * and time; ENGRAM_FAILOVER_ROUNDS repeats each fault (default 1).
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grpcJsClient, type MemoryClient } from "../support/clients.js";
import { spawnServer, type ServerProcess } from "../support/engram.js";
import { startRedisCluster, type ClusterNode, type RedisCluster } from "../support/redis-cluster.js";

const ROUNDS = Number(process.env.ENGRAM_FAILOVER_ROUNDS ?? 1);
const SESSIONS = 6;
/** Each append's deadline: longer than a WAIT's bound (half of the store timeout). */
const DEADLINE_MS = 3000;
const STORE_TIMEOUT_MS = 2000;

interface Attempt {
  eventId: string;
  session: string;
  outcome: "acked" | "unknown";
  seq?: number;
  /** When the call was sent: an acknowledgement counts as "after the kill" only for a call sent after it. */
  sent: number;
  at: number;
  code?: Code;
}

/** What one fault did to the acknowledged history. */
interface Figures {
  acked: number;
  unknown: number;
  lost: number;
  duplicates: number;
  holes: number;
  /** ms from the kill until every session had an append acknowledged again. */
  resumedAfterMs: number;
}

let cluster: RedisCluster;
const servers = new Map<number, { proc: ServerProcess; client: MemoryClient; prefix: string }>();
const figures: Array<{ fault: string; wait: number } & Figures> = [];
let unique = 0;

beforeAll(async () => {
  cluster = await startRedisCluster();
  for (const wait of [0, 1]) {
    const prefix = `failover${wait}_${process.pid}`;
    const proc = await spawnServer({
      MEMORY_TYPE: "redis",
      MEMORY_REDIS_URL: cluster.url,
      MEMORY_KEY_PREFIX: prefix,
      MEMORY_REDIS_WAIT_REPLICAS: String(wait),
      MEMORY_STORE_TIMEOUT_MS: String(STORE_TIMEOUT_MS),
      MEMORY_MAX_SESSION_EVENTS: "100000",
    });
    servers.set(wait, { proc, client: grpcJsClient(proc.address), prefix });
  }
}, 120_000);

afterAll(async () => {
  for (const { proc, client } of servers.values()) {
    client.close();
    await proc.kill();
  }
  await cluster?.stop();
  if (figures.length > 0) console.log(`failover figures:\n${figures.map((f) => JSON.stringify(f)).join("\n")}`);
}, 60_000);

/**
 * The master holding most of `sessions` (found by their hex ids in key
 * names, keys.ts): where killing hurts most. A key of it, to kill it by.
 */
async function busiestMaster(prefix: string, sessions: readonly string[]): Promise<{ master: ClusterNode; key: string }> {
  const counts = new Map<ClusterNode, { key: string; sessions: number }>();
  for (const slot of [0, 8192, 16_383]) {
    const master = await cluster.masterOf(slot);
    for (const sessionId of sessions) {
      const pattern = `${prefix}*${Buffer.from(sessionId).toString("hex")}*`;
      let cursor = "0";
      // Bounded: a few hundred keys per prefix at most.
      for (let page = 0; page < 100; page++) {
        const [next, keys] = (await cluster.admin(master).scan(cursor, "MATCH", pattern, "COUNT", 1000)) as [string, string[]];
        if (keys.length > 0) {
          const entry = counts.get(master) ?? { key: keys[0], sessions: 0 };
          entry.sessions++;
          counts.set(master, entry);
          break;
        }
        cursor = next;
        if (cursor === "0") break;
      }
    }
  }
  const best = [...counts.entries()].sort((a, b) => b[1].sessions - a[1].sessions)[0];
  if (!best) throw new Error(`no session of ${prefix} found on any master`);
  return { master: best[0], key: best[1].key };
}

/** Every event of a session, paged (bounded). */
async function readAll(client: MemoryClient, sessionId: string): Promise<Array<{ seq: number; eventId: string }>> {
  const log: Array<{ seq: number; eventId: string }> = [];
  for (let after = 0, page = 0; page < 100; page++) {
    const { events } = await client.getSessionEvents({ sessionId, afterSeq: BigInt(after), limit: 1000 }, { timeoutMs: 10_000 } as never);
    log.push(...events.map((e) => ({ seq: Number(e.seq), eventId: e.eventId })));
    if (events.length < 1000) break;
    after = Number(events[events.length - 1].seq);
  }
  return log;
}

/**
 * Runs one fault on the server with WAIT `wait`: writers on SESSIONS
 * sessions, `fault()` once enough appends are acknowledged, writers until
 * writes have resumed on every session, then the history check.
 */
async function underWriteLoad(wait: number, label: string, fault: (sessions: readonly string[]) => Promise<ClusterNode>): Promise<Figures> {
  const { client } = servers.get(wait)!;
  const run = `${label}-${++unique}`;
  const sessions = Array.from({ length: SESSIONS }, (_, i) => `${run}-s${i}`);
  for (const sessionId of sessions) await client.createSession({ appName: "failover", userId: "u", sessionId }, { timeoutMs: 10_000 } as never);

  const attempts: Attempt[] = [];
  const unexpected: string[] = [];
  let stop = false;
  let killedAt: number | undefined;
  const writer = async (sessionId: string) => {
    for (let i = 0; i < 3000 && !stop; i++) {
      const eventId = `${sessionId}-e${i}`;
      const sent = Date.now();
      try {
        const res = await client.addEvent({ sessionId, event: { eventType: "user_message", eventId } }, { timeoutMs: DEADLINE_MS } as never);
        attempts.push({ eventId, session: sessionId, outcome: "acked", seq: Number(res.event!.seq), sent, at: Date.now() });
      } catch (err) {
        const code = ConnectError.from(err).code;
        // A failover may only ever look like "could not tell", never like a client mistake or INTERNAL (checked below).
        if (code !== Code.Unavailable && code !== Code.DeadlineExceeded) unexpected.push(`${eventId}: ${String(err)}`);
        attempts.push({ eventId, session: sessionId, outcome: "unknown", sent, at: Date.now(), code });
        await sleep(50);
      }
    }
  };
  const acked = () => attempts.filter((a) => a.outcome === "acked");
  const until = async (what: string, timeoutMs: number, done: () => boolean) => {
    const deadline = Date.now() + timeoutMs;
    while (!done()) {
      if (Date.now() > deadline) throw new Error(`${run}: ${what} not reached within ${timeoutMs} ms`);
      await sleep(50);
    }
  };

  const writers = Promise.all(sessions.map(writer));
  let killed: ClusterNode | undefined;
  let rejoined = false;
  const rejoin = async () => {
    // The killed node comes back as a replica of the promoted one.
    await cluster.restartNode(killed!);
    rejoined = true;
  };
  try {
    await until("60 acknowledged appends", 20_000, () => acked().length >= 60);
    killed = await fault(sessions);
    killedAt = Date.now();
    await cluster.waitForFailover(killed);
    // With WAIT 1 and one replica per master, the promoted master has no replica to wait for
    // until the killed node rejoins: its shard refuses every write (UNAVAILABLE) until then.
    if (wait > 0) await rejoin();
    // Writes resume: every session gets appends acknowledged after the promotion.
    await until("appends acknowledged on every session after the failover", 30_000, () =>
      sessions.every((s) => attempts.some((a) => a.session === s && a.outcome === "acked" && a.sent > killedAt!)),
    );
  } finally {
    stop = true;
    await writers;
    // Whatever happened, the next fault needs a whole cluster.
    if (killed && !rejoined) await rejoin();
  }

  expect(unexpected).toEqual([]);
  // Retry every unknown outcome with its event id (idempotent), bounded in tries and in total time.
  const unknown = attempts.filter((a) => a.outcome === "unknown");
  const retryBy = Date.now() + 30_000;
  for (const a of unknown) {
    let done = false;
    for (let i = 0; i < 20 && !done && Date.now() < retryBy; i++) {
      try {
        await client.addEvent({ sessionId: a.session, event: { eventType: "user_message", eventId: a.eventId } }, { timeoutMs: 5000 } as never);
        done = true;
      } catch {
        await sleep(200);
      }
    }
    expect(done, `retry of ${a.eventId}`).toBe(true);
  }

  let lost = 0;
  let duplicates = 0;
  let holes = 0;
  for (const sessionId of sessions) {
    const log = await readAll(client, sessionId);
    holes += log.filter((e, i) => e.seq !== i + 1).length;
    const seqOf = new Map(log.map((e) => [e.eventId, e.seq]));
    duplicates += log.length - seqOf.size;
    for (const a of acked().filter((x) => x.session === sessionId)) {
      // Lost: gone, or re-appended by the retry above at another seq (a lost write whose seq a later append took).
      if (seqOf.get(a.eventId) !== a.seq) lost++;
    }
  }
  // Writes resumed when the last session got its first acknowledgement after the kill.
  const resumedAt = Math.max(...sessions.map((s) => acked().find((a) => a.session === s && a.sent > killedAt!)?.at ?? Number.NaN));
  const result: Figures = { acked: acked().length, unknown: unknown.length, lost, duplicates, holes, resumedAfterMs: resumedAt - killedAt! };
  figures.push({ fault: label, wait, ...result });
  return result;
}

describe("Redis Cluster failover under write load", () => {
  for (const wait of [0, 1]) {
    it(`kill -9 of a master, MEMORY_REDIS_WAIT_REPLICAS=${wait}: a replica is promoted, writes resume, no seq hole and no duplicate${wait ? ", nothing acknowledged is lost" : ""}`, async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const f = await underWriteLoad(wait, "kill9", async (sessions) => {
          const { key } = await busiestMaster(servers.get(wait)!.prefix, sessions);
          return cluster.killMaster(key);
        });
        expect(f.holes).toBe(0);
        expect(f.duplicates).toBe(0);
        expect(f.resumedAfterMs).toBeGreaterThan(0);
        if (wait > 0) expect(f.lost).toBe(0);
      }
    }, 240_000 * ROUNDS);
  }

  for (const wait of [0, 1]) {
    it(`a lagging replica promoted, MEMORY_REDIS_WAIT_REPLICAS=${wait}: ${wait ? "nothing acknowledged is lost: what the replica missed was never acknowledged" : "the appends acknowledged while it lagged are lost, and still no seq hole or duplicate"}`, async () => {
      for (let round = 0; round < ROUNDS; round++) {
        const f = await underWriteLoad(wait, "lagging", async (sessions) => {
          const { key, master } = await busiestMaster(servers.get(wait)!.prefix, sessions);
          const [replica] = await cluster.replicasOf(master);
          // Freeze the replica, then cut its link from the master's side: it keeps what reached
          // its socket until now (the kernel buffers it) and can neither read nor reconnect after.
          cluster.pause(replica);
          try {
            await cluster.admin(master).call("CLIENT", "KILL", "TYPE", "replica");
            // Writes go on against the master, replicated nowhere.
            await sleep(1500);
            return await cluster.killMaster(key);
          } finally {
            cluster.resume(replica);
          }
        });
        expect(f.holes).toBe(0);
        expect(f.duplicates).toBe(0);
        if (wait > 0) expect(f.lost).toBe(0);
        else expect(f.lost).toBeGreaterThan(0);
      }
    }, 240_000 * ROUNDS);
  }
});
