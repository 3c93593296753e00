/**
 * Fault suite with a history checker, for any shared backend. Two replicas
 * share it; writers append on both replicas (client event ids, 2 s
 * deadlines) and a live stream follows the session on each replica while
 * the backend is blackholed (connections stay open, nothing is answered:
 * only deadlines and timeouts notice; 20 s unless the backend says) and then
 * comes back. A backend's test file wires it in (history.test.ts: PostgreSQL
 * through a chaos proxy; history-cluster.test.ts: a Redis Cluster whose
 * nodes are all frozen). Afterwards the checker asserts on the recorded
 * history:
 *   - every acknowledged append is in the log exactly once, at its seq;
 *   - every append whose outcome was unknown, retried with its event id, is
 *     there exactly once (at most once before the retry);
 *   - the log's seqs are gapless; nothing else is in it;
 *   - each stream, across its reconnects, delivered every seq once, in order;
 *   - a write acknowledged by one replica is read back from the other;
 *   - no call hung past its deadline, and health went NOT_SERVING and back;
 *   - calls sent without any deadline still ended during the blackhole,
 *     answered UNAVAILABLE or DEADLINE_EXCEEDED by the server itself, bounded
 *     by its store timeout (MEMORY_STORE_TIMEOUT_MS): the client never gave
 *     up on them (only a test watchdog, at the end of the blackhole, would).
 * Every loop is bounded in count and time.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMemoryClient, type MemoryClient as TsClient } from "../../clients/typescript/src/index.js";
import { grpcJsClient, type MemoryClient } from "../support/clients.js";
import { spawnServer, type ServerProcess } from "../support/engram.js";

const DEADLINE_MS = 2000;
/** The replicas' bound on one store command or statement (MEMORY_STORE_TIMEOUT_MS): what ends calls that carry no deadline. */
const STORE_TIMEOUT_MS = 2000;
const SESSION = `history-${process.pid}`;

/** A shared backend the checker can blackhole. */
export interface HistoryBackend {
  /** Env for spawnServer: MEMORY_TYPE, the URL (through whatever the blackhole needs), a MEMORY_KEY_PREFIX of this file. */
  env: Record<string, string>;
  /** Connections stay open, nothing is answered. */
  blackhole(): Promise<void>;
  /** Traffic flows again. */
  pass(): Promise<void>;
  /** How long the blackhole lasts (ms); ENGRAM_BLACKHOLE_MS overrides it, 20 s when neither says. */
  blackholeMs?: number;
}

interface Attempt {
  eventId: string;
  replica: number;
  outcome: "acked" | "unknown";
  seq?: number;
  ms: number;
  code?: Code;
}

let replicas: ServerProcess[];
let clients: MemoryClient[];

/** Follows the session on one replica with the TS client's resuming stream; records (seq, event id). */
function follow(baseUrl: string, stop: AbortSignal) {
  const client: TsClient = createMemoryClient({ baseUrl, protocol: "grpc" });
  const seen: { seq: number; eventId: string }[] = [];
  let reconnects = 0;
  const done = (async () => {
    try {
      for await (const e of client.streamSessionEvents(SESSION, {
        afterSeq: 0,
        signal: stop,
        maxRetries: 1000,
        maxBackoffMs: 500,
        onReconnect: () => void reconnects++,
      })) {
        seen.push({ seq: e.seq, eventId: e.eventId });
      }
    } finally {
      client.close();
    }
  })();
  return { seen, done, reconnects: () => reconnects };
}

async function readyz(r: ServerProcess): Promise<number> {
  try {
    return (await fetch(`${r.baseUrl}/readyz`, { signal: AbortSignal.timeout(2000) })).status;
  } catch {
    return 0;
  }
}

/**
 * Registers the checker for one backend: `setup.start()` brings up a
 * backend dedicated to the file (the suite blackholes it), `setup.stop()` ends it.
 */
export function describeHistorySuite(
  title: string,
  setup: { start(): Promise<HistoryBackend>; stop(): Promise<void> },
): void {
  let backend: HistoryBackend;
  let BLACKHOLE_MS = 20_000;

  beforeAll(async () => {
    backend = await setup.start();
    BLACKHOLE_MS = Number(process.env.ENGRAM_BLACKHOLE_MS ?? backend.blackholeMs ?? 20_000);
    const env = {
      ...backend.env,
      MEMORY_MAX_SESSION_EVENTS: "100000",
      MEMORY_STORE_TIMEOUT_MS: String(STORE_TIMEOUT_MS),
    };
    replicas = [await spawnServer(env)];
    replicas.push(await spawnServer(env));
    clients = replicas.map((r) => grpcJsClient(r.address));
    await clients[0].createSession({ appName: "faults", userId: "u", sessionId: SESSION });
  }, 120_000);

  afterAll(async () => {
    for (const c of clients ?? []) c.close();
    await Promise.all((replicas ?? []).map((r) => r.kill()));
    await setup.stop();
  }, 60_000);

  describe(title, () => {
    it("loses no acknowledged event, duplicates none, keeps seqs and streams gapless, and recovers", async () => {
      const attempts: Attempt[] = [];
      const stop = new AbortController();
      const streams = replicas.map((r) => follow(r.baseUrl, stop.signal));
      let phase: "normal" | "blackhole" | "recovered" = "normal";
      let sawNotServing = false;

      /** One writer per replica, appending until `until`; bounded by count too. */
      const writer = async (replica: number, until: () => boolean) => {
        for (let i = 0; i < 5000 && !until(); i++) {
          const eventId = `w${replica}-${phase}-${i}`;
          const started = Date.now();
          try {
            const res = await clients[replica].addEvent(
              {
                sessionId: SESSION,
                event: {
                  eventId,
                  eventType: "user_message",
                  content: { kind: { case: "stringValue", value: eventId } },
                },
              },
              { timeoutMs: DEADLINE_MS },
            );
            attempts.push({
              eventId,
              replica,
              outcome: "acked",
              seq: Number(res.event!.seq),
              ms: Date.now() - started,
            });
          } catch (err) {
            const code = ConnectError.from(err).code;
            // Only "could not tell" codes are acceptable under this fault.
            expect([Code.Unavailable, Code.DeadlineExceeded], `${eventId}: ${String(err)}`).toContain(code);
            attempts.push({ eventId, replica, outcome: "unknown", ms: Date.now() - started, code });
            await sleep(100);
          }
        }
      };

      // 1. Normal operation.
      let t = Date.now();
      await Promise.all([0, 1].map((r) => writer(r, () => Date.now() - t > 2000)));
      expect(attempts.every((a) => a.outcome === "acked")).toBe(true);

      /**
       * Appends with no deadline at all, in the first half of the blackhole: the
       * server's store timeout must end each of them. A watchdog cancels any
       * still open when the blackhole ends, which shows up as CANCELLED.
       */
      const undeadlined: Attempt[] = [];
      const writerWithoutDeadline = async (replica: number, watchdog: AbortSignal) => {
        for (let i = 0; i < 50 && Date.now() - t < BLACKHOLE_MS / 2; i++) {
          const eventId = `n${replica}-nodeadline-${i}`;
          const started = Date.now();
          try {
            const res = await clients[replica].addEvent(
              {
                sessionId: SESSION,
                event: {
                  eventId,
                  eventType: "user_message",
                  content: { kind: { case: "stringValue", value: eventId } },
                },
              },
              { signal: watchdog },
            );
            attempts.push({
              eventId,
              replica,
              outcome: "acked",
              seq: Number(res.event!.seq),
              ms: Date.now() - started,
            });
          } catch (err) {
            const attempt: Attempt = {
              eventId,
              replica,
              outcome: "unknown",
              ms: Date.now() - started,
              code: ConnectError.from(err).code,
            };
            attempts.push(attempt);
            undeadlined.push(attempt);
          }
        }
      };

      // 2. Blackhole: every call must still end within its deadline (plus scheduling slack).
      phase = "blackhole";
      await backend.blackhole();
      t = Date.now();
      const watchdog = new AbortController();
      const watchdogTimer = setTimeout(() => watchdog.abort(), BLACKHOLE_MS);
      const withoutDeadline = Promise.all([0, 1].map((r) => writerWithoutDeadline(r, watchdog.signal)));
      const watchHealth = (async () => {
        while (Date.now() - t < BLACKHOLE_MS) {
          if ((await readyz(replicas[0])) === 503 && (await readyz(replicas[1])) === 503) sawNotServing = true;
          await sleep(500);
        }
      })();
      await Promise.all([0, 1].map((r) => writer(r, () => Date.now() - t > BLACKHOLE_MS)));
      await watchHealth;
      await withoutDeadline;
      clearTimeout(watchdogTimer);
      const during = attempts.filter((a) => a.eventId.includes("-blackhole-"));
      expect(during.length).toBeGreaterThan(0);
      expect(during.filter((a) => a.outcome === "unknown").length).toBeGreaterThan(0);
      expect(Math.max(...during.map((a) => a.ms))).toBeLessThan(DEADLINE_MS + 1500);
      expect(sawNotServing).toBe(true);
      // The server, not the client, ended every call that had no deadline, and before the backend came back.
      expect(undeadlined.length).toBeGreaterThan(0);
      for (const a of undeadlined)
        expect([Code.Unavailable, Code.DeadlineExceeded], `${a.eventId} after ${a.ms} ms: code ${a.code}`).toContain(
          a.code,
        );
      console.log(
        `history: ${undeadlined.length} calls without a deadline ended by the server in at most ${Math.max(...undeadlined.map((a) => a.ms))} ms`,
      );

      // 3. Recovery: both replicas report SERVING again, within a bound.
      await backend.pass();
      phase = "recovered";
      const recoverBy = Date.now() + 60_000;
      while (Date.now() < recoverBy && ((await readyz(replicas[0])) !== 200 || (await readyz(replicas[1])) !== 200))
        await sleep(250);
      expect([await readyz(replicas[0]), await readyz(replicas[1])]).toEqual([200, 200]);

      // 4. Writes after recovery, with read-your-writes across replicas.
      t = Date.now();
      const deadlineAfter = Date.now() + 30_000;
      await Promise.all([0, 1].map((r) => writer(r, () => Date.now() - t > 2000 || Date.now() > deadlineAfter)));
      const lastAcked = attempts.filter((a) => a.outcome === "acked" && a.eventId.includes("-recovered-"));
      expect(lastAcked.length).toBeGreaterThan(0);
      for (const a of lastAcked.slice(-10)) {
        const other = clients[1 - a.replica];
        const page = await other.getSessionEvents({ sessionId: SESSION, afterSeq: BigInt(a.seq! - 1), limit: 1 });
        expect(page.events[0]?.eventId, `replica ${1 - a.replica} reads ${a.eventId}`).toBe(a.eventId);
      }

      // 5. Retry every unknown-outcome append with its event id until it is acknowledged (bounded).
      const unknown = attempts.filter((a) => a.outcome === "unknown");
      const before = new Map<string, number>();
      {
        const { events } = await clients[0].getSessionEvents({ sessionId: SESSION, limit: 1000 });
        const all = [...events];
        let next = events.length === 1000 ? Number(events[999].seq) : undefined;
        for (let page = 0; next !== undefined && page < 100; page++) {
          const more = await clients[0].getSessionEvents({ sessionId: SESSION, afterSeq: BigInt(next), limit: 1000 });
          all.push(...more.events);
          next = more.events.length === 1000 ? Number(more.events[999].seq) : undefined;
        }
        for (const e of all) before.set(e.eventId, (before.get(e.eventId) ?? 0) + 1);
      }
      // At most once before any retry.
      for (const a of unknown) expect(before.get(a.eventId) ?? 0, a.eventId).toBeLessThanOrEqual(1);
      const retried = new Map<string, number>();
      for (const a of unknown) {
        for (let i = 0; i < 20; i++) {
          try {
            const res = await clients[a.replica].addEvent(
              {
                sessionId: SESSION,
                event: {
                  eventId: a.eventId,
                  eventType: "user_message",
                  content: { kind: { case: "stringValue", value: a.eventId } },
                },
              },
              { timeoutMs: 5000 },
            );
            retried.set(a.eventId, Number(res.event!.seq));
            break;
          } catch {
            await sleep(200);
          }
        }
        expect(retried.has(a.eventId), `retry of ${a.eventId}`).toBe(true);
      }

      // 6. The final log.
      const log: { seq: number; eventId: string }[] = [];
      for (let after = 0, page = 0; page < 100; page++) {
        const { events } = await clients[1].getSessionEvents({
          sessionId: SESSION,
          afterSeq: BigInt(after),
          limit: 1000,
        });
        log.push(...events.map((e) => ({ seq: Number(e.seq), eventId: e.eventId })));
        if (events.length < 1000) break;
        after = Number(events[events.length - 1].seq);
      }
      expect(log.map((e) => e.seq)).toEqual(log.map((_, i) => i + 1));
      const bySeq = new Map(log.map((e) => [e.eventId, e.seq]));
      expect(bySeq.size).toBe(log.length); // no event id twice
      const acked = attempts.filter((a) => a.outcome === "acked");
      for (const a of acked) expect(bySeq.get(a.eventId), a.eventId).toBe(a.seq);
      for (const [id, seq] of retried) expect(bySeq.get(id), id).toBe(seq);
      expect(log.length).toBe(acked.length + retried.size);

      // 7. Both streams delivered exactly the log, in order, once each.
      const head = log.length;
      const settleBy = Date.now() + 30_000;
      while (Date.now() < settleBy && streams.some((s) => (s.seen.at(-1)?.seq ?? 0) < head)) await sleep(100);
      stop.abort();
      await Promise.allSettled(streams.map((s) => s.done));
      for (const s of streams) {
        expect(s.seen.map((e) => e.seq)).toEqual(log.map((e) => e.seq));
        expect(s.seen.map((e) => e.eventId)).toEqual(log.map((e) => e.eventId));
      }
      console.log(
        `history: ${acked.length} acknowledged, ${unknown.length} unknown outcomes retried (${[...retried.keys()].filter((id) => before.get(id)).length} had been applied), ` +
          `log ${head} events gapless; stream reconnects ${streams.map((s) => s.reconnects()).join("/")}; events lost 0`,
      );
    }, 180_000);
  });
}
