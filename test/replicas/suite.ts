/**
 * The replica suite: several Engram server processes on one shared backend
 * (Redis, PostgreSQL), and the faults an operator meets: a replica killed
 * with SIGKILL, the backend restarted under live streams, the backend gone.
 *
 * A backend's test file calls
 *
 *   describeReplicaSuite(() => backend, { beforeAll, afterAll })
 *
 * where setup.beforeAll starts a DEDICATED backend server (this suite stops
 * and restarts it, so it must never be the shared one other files use) and
 * the thunk then returns a ReplicaBackend for it:
 *   - env(): what spawnServer needs (MEMORY_TYPE, the URL, a MEMORY_KEY_PREFIX unique to the file);
 *   - interrupt(): breaks every connection as an operator would and resolves once it answers again;
 *   - outage(): makes it unreachable; resolves with a function that brings it back and waits for it.
 *
 * Every case is bounded in count and time, and uses 127.0.0.1 only. Writers
 * use client-chosen event ids and retry on failure, so "acknowledged" and
 * "appended exactly once" can both be checked.
 */
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { setTimeout as sleep } from "node:timers/promises";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnServer, type ServerProcess } from "../support/engram.js";
import { codeOf, connectClient, grpcJsClient, type MemoryClient } from "../support/clients.js";

/** A shared backend the suite can interrupt; see the file header. */
export interface ReplicaBackend {
  name: string; // "redis" | "postgres"
  /** Env for spawnServer: MEMORY_TYPE, the URL, and a MEMORY_KEY_PREFIX unique to this test file. */
  env(): Record<string, string>;
  /** Interrupts the backend as an operator would (restart Redis with AOF / pg_terminate_backend every Engram connection incl. LISTEN) and resolves once it answers again. */
  interrupt(): Promise<void>;
  /** Makes the backend unreachable (stop it); resolves with a function that brings it back and waits until it answers. */
  outage(): Promise<() => Promise<void>>;
}

/** A replica and a client of each protocol on it. */
interface Replica {
  proc: ServerProcess;
  grpc: MemoryClient;
  connect: MemoryClient;
}

let unique = 0;
const sessionId = (label: string) => `${label}-${process.pid}-${++unique}-${Date.now().toString(36)}`;

async function startReplica(env: Record<string, string>): Promise<Replica> {
  const proc = await spawnServer(env);
  return { proc, grpc: grpcJsClient(proc.address), connect: connectClient(proc.baseUrl) };
}

/** Pids of every descendant of `pid` (Linux /proc), children first. */
function descendants(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      // Field 4 of /proc/<pid>/stat is the parent pid; the name (field 2) may hold spaces, so cut after ")".
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === pid) children.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return children.flatMap((child) => [child, ...descendants(child)]);
}

/**
 * SIGKILLs the server itself, not only the tsx wrapper spawnServer starts
 * (SIGKILL cannot be relayed: the wrapper's child would live on).
 */
export async function killHard(proc: ServerProcess): Promise<void> {
  if (proc.child.pid !== undefined && proc.child.exitCode === null && proc.child.signalCode === null) {
    for (const pid of descendants(proc.child.pid)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  }
  await proc.kill("SIGKILL");
}

async function stopReplica(r: Replica | undefined): Promise<void> {
  if (!r) return;
  r.grpc.close();
  await killHard(r.proc);
}

/**
 * Appends one event with a client-chosen id, retrying (same id: idempotent)
 * until acknowledged or `deadline`; returns its seq.
 */
async function appendAcknowledged(
  client: () => MemoryClient,
  id: string,
  eventId: string,
  deadline: number,
): Promise<number> {
  for (;;) {
    try {
      const res = await client().addEvent({ sessionId: id, event: { eventType: "user_message", eventId } }, {
        timeoutMs: 3000,
      } as never);
      return Number(res.event!.seq);
    } catch (err) {
      if (Date.now() > deadline)
        throw new Error(`event ${eventId} not acknowledged in time: ${String(err)}`, { cause: err });
      await sleep(100);
    }
  }
}

/**
 * Follows a session's stream until `until()` says the head to reach, resuming
 * from the last delivered seq whenever it ends (on `client()`, which may
 * change); returns every delivered seq in order, duplicates included, and
 * how many times it was re-opened.
 */
async function follow(
  client: () => MemoryClient,
  id: string,
  until: () => number | undefined,
  timeoutMs: number,
  started?: () => void,
): Promise<{ seqs: number[]; resumes: number }> {
  const seqs: number[] = [];
  let resumes = 0;
  const deadline = Date.now() + timeoutMs;
  const reached = () => {
    const target = until();
    return target !== undefined && seqs.length > 0 && seqs[seqs.length - 1] >= target;
  };
  for (let opened = 0; !reached() && Date.now() < deadline; opened++) {
    // A stream that ended (with an error or without) and is opened again from its last seq.
    if (opened > 0) resumes++;
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), Math.max(0, deadline - Date.now()));
    // Check the target between frames too: heartbeats arrive every 200 ms.
    const poll = setInterval(() => reached() && controller.abort(), 50);
    try {
      const after = seqs.length > 0 ? BigInt(seqs[seqs.length - 1]) : undefined;
      for await (const frame of client().streamSessionEvents(
        { sessionId: id, afterSeq: after },
        { signal: controller.signal },
      )) {
        if (frame.frame.case === "caughtUp") started?.();
        if (frame.frame.case === "event") seqs.push(Number(frame.frame.value.seq));
        if (reached()) break;
      }
    } catch {
      if (!reached() && !controller.signal.aborted) await sleep(200);
    } finally {
      clearTimeout(timer);
      clearInterval(poll);
      controller.abort();
    }
  }
  return { seqs, resumes };
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

/** grpc.health.v1 Check of the whole server ("" service). */
function healthCheck(address: string): Promise<string> {
  const require = createRequire(import.meta.url);
  const def = grpc.loadPackageDefinition(
    protoLoader.loadSync(require("grpc-health-check").protoPath, { enums: String }),
  ) as unknown as {
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
  };
  const client = new def.grpc.health.v1.Health(address, grpc.credentials.createInsecure());
  return new Promise<string>((resolve, reject) => {
    (
      client as unknown as {
        check: (r: object, o: object, cb: (e: Error | null, r?: { status: string }) => void) => void;
      }
    ).check({ service: "" }, { deadline: new Date(Date.now() + 2000) }, (err, res) => {
      client.close();
      if (err) reject(err);
      else resolve(res!.status);
    });
  });
}

/** Polls `probe` until it returns `want`, for up to `timeoutMs`. */
async function eventually<T>(probe: () => Promise<T>, want: T, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last: T | string | undefined;
  for (;;) {
    try {
      last = await probe();
    } catch (err) {
      last = String(err);
    }
    if (last === want) return;
    if (Date.now() > deadline) throw new Error(`expected ${String(want)}, still ${String(last)} after ${timeoutMs} ms`);
    await sleep(100);
  }
}

/**
 * Registers the replica suite for one backend. `knownBugs.outage` names a
 * store bug that makes case 4 fail on this backend: the case then runs as
 * expected to fail (it.fails), so it turns red the day the bug is fixed and
 * the note must go.
 */
export function describeReplicaSuite(
  backend: () => ReplicaBackend,
  setup: { beforeAll(): Promise<void>; afterAll(): Promise<void> },
  knownBugs: { outage?: string } = {},
): void {
  describe("replicas on a shared backend", () => {
    let b: ReplicaBackend;
    let one: Replica | undefined;
    let two: Replica | undefined;

    beforeAll(async () => {
      await setup.beforeAll();
      b = backend();
      [one, two] = await Promise.all([startReplica(b.env()), startReplica(b.env())]);
    }, 90_000);

    afterAll(async () => {
      await Promise.all([stopReplica(one), stopReplica(two)]);
      await setup.afterAll();
    }, 60_000);

    it("1. two replicas: writers on both, every subscriber on both sees seq 1..n exactly once, in order", async () => {
      const id = sessionId("cross");
      await one!.grpc.createSession({ appName: "app", userId: "u", sessionId: id });
      const n = 100;
      let ready = 0;
      const subscribers = [one!.connect, one!.grpc, two!.connect, two!.grpc].map((c) =>
        follow(
          () => c,
          id,
          () => n,
          30_000,
          () => ready++,
        ),
      );
      await eventually(async () => ready >= 4, true, 10_000);
      const deadline = Date.now() + 30_000;
      const writer = async (r: Replica, name: string) => {
        for (let i = 0; i < n / 2; i++) await appendAcknowledged(() => r.grpc, id, `${name}-${i}`, deadline);
      };
      await Promise.all([writer(one!, "w1"), writer(two!, "w2")]);
      for (const { seqs, resumes } of await Promise.all(subscribers)) {
        expect(resumes).toBe(0);
        expect(seqs).toEqual(range(n));
      }
      const { events } = await two!.connect.getSessionEvents({ sessionId: id, limit: 1000 });
      expect(events.map((e) => Number(e.seq))).toEqual(range(n));
      expect(new Set(events.map((e) => e.eventId)).size).toBe(n);
    }, 60_000);

    it("2. a replica killed with SIGKILL mid-writes loses no acknowledged event; a stream resumed on the other has no gap", async () => {
      const id = sessionId("kill");
      await one!.grpc.createSession({ appName: "app", userId: "u", sessionId: id });
      const acknowledged = new Set<string>();
      const victim = one!;
      // A stream on the victim, resumed on the survivor once the victim is gone.
      let streamOn = victim.connect;
      let target: number | undefined;
      const stream = follow(
        () => streamOn,
        id,
        () => target,
        30_000,
      );
      const writeUntilFailure = async (r: Replica, name: string, count: number) => {
        for (let i = 0; i < count; i++) {
          try {
            await r.grpc.addEvent({ sessionId: id, event: { eventType: "user_message", eventId: `${name}-${i}` } }, {
              timeoutMs: 3000,
            } as never);
            acknowledged.add(`${name}-${i}`);
          } catch {
            return; // the replica died under this call: not acknowledged
          }
        }
      };
      const victimWrites = writeUntilFailure(victim, "victim", 1000);
      const survivorWrites = writeUntilFailure(two!, "survivor", 40);
      try {
        await eventually(async () => acknowledged.size >= 20, true, 10_000);
        streamOn = two!.connect;
        await killHard(victim.proc);
        // Writes after the kill reach the resumed stream only through the survivor.
        await writeUntilFailure(two!, "after", 10);
        victim.grpc.close();
        await Promise.all([victimWrites, survivorWrites]);
      } finally {
        // The next cases need two replicas again, whatever happened here.
        one = await startReplica(b.env());
      }
      const { events } = await two!.connect.getSessionEvents({ sessionId: id, limit: 1000 });
      const stored = events.map((e) => e.eventId);
      for (const eventId of acknowledged) expect(stored).toContain(eventId);
      expect(events.map((e) => Number(e.seq))).toEqual(range(events.length));
      expect(new Set(stored).size).toBe(stored.length);
      target = events.length;
      const { seqs, resumes } = await stream;
      expect(resumes).toBeGreaterThanOrEqual(1);
      expect(seqs).toEqual(range(events.length));
    }, 90_000);

    it(`3. a backend interrupt under live streams: the streams (resumed if need be) deliver everything once, in order`, async () => {
      const id = sessionId("interrupt");
      await one!.grpc.createSession({ appName: "app", userId: "u", sessionId: id });
      const total = 40;
      let target: number | undefined;
      let ready = 0;
      const followers = [one!.connect, two!.grpc].map((c) =>
        follow(
          () => c,
          id,
          () => target,
          60_000,
          () => ready++,
        ),
      );
      await eventually(async () => ready >= 2, true, 10_000);
      const deadline = Date.now() + 45_000;
      let written = 0;
      const writes = (async () => {
        for (let i = 0; i < total; i++) {
          await appendAcknowledged(() => (i % 2 === 0 ? one!.grpc : two!.connect), id, `e-${i}`, deadline);
          written++;
          // Paced on purpose: the outage below must fall in the middle of the writes, not after them.
          await sleep(20);
        }
      })();
      await eventually(async () => written >= 10, true, 10_000);
      await b.interrupt();
      await writes;
      const { events } = await two!.connect.getSessionEvents({ sessionId: id, limit: 1000 });
      // Each event id exactly once, whatever was re-sent or retried.
      expect(events.map((e) => e.eventId).sort()).toEqual(
        range(total)
          .map((i) => `e-${i - 1}`)
          .sort(),
      );
      expect(events.map((e) => Number(e.seq))).toEqual(range(total));
      target = total;
      for (const { seqs } of await Promise.all(followers)) expect(seqs).toEqual(range(total));
    }, 90_000);

    (knownBugs.outage ? it.fails : it)(
      `4. a backend outage: calls fail UNAVAILABLE within their deadline, health goes NOT_SERVING and back, nothing crashes${knownBugs.outage ? ` (known bug: ${knownBugs.outage})` : ""}`,
      async () => {
        const id = sessionId("outage");
        await one!.grpc.createSession({ appName: "app", userId: "u", sessionId: id });
        await one!.grpc.addEvent({ sessionId: id, event: { eventType: "user_message", eventId: "before" } });
        const restore = await b.outage();
        try {
          for (const r of [one!, two!]) {
            for (const call of [
              () => r.grpc.getSession({ sessionId: id }, { timeoutMs: 4000 } as never),
              () =>
                r.grpc.addEvent({ sessionId: id, event: { eventType: "user_message", eventId: "during" } }, {
                  timeoutMs: 4000,
                } as never),
              () => r.connect.listSessions({}, { timeoutMs: 4000 } as never),
            ]) {
              const started = Date.now();
              expect(
                await codeOf(call()),
                `replica ${[one, two].indexOf(r)} call ${call.toString().slice(0, 60)}`,
              ).toBe(Code.Unavailable);
              expect(Date.now() - started).toBeLessThan(4000);
            }
            await eventually(() => healthCheck(r.proc.address), "NOT_SERVING", 8000);
            await eventually(async () => (await fetch(`${r.proc.baseUrl}/readyz`)).status, 503, 4000);
          }
        } finally {
          await restore();
        }
        for (const r of [one!, two!]) {
          await eventually(() => healthCheck(r.proc.address), "SERVING", 10_000);
          await eventually(async () => (await fetch(`${r.proc.baseUrl}/readyz`)).status, 200, 4000);
          expect(r.proc.child.exitCode).toBeNull();
          expect(r.proc.child.signalCode).toBeNull();
        }
        const { events } = await two!.grpc.getSessionEvents({ sessionId: id });
        expect(events.map((e) => e.eventId)).toContain("before");
        // A write refused during the outage can be made now.
        const after = await one!.grpc.addEvent({
          sessionId: id,
          event: { eventType: "user_message", eventId: "during" },
        });
        expect(after.event!.eventId).toBe("during");
      },
      90_000,
    );
  });
}
