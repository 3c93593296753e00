/**
 * A stream reader that stops reading must not make the server buffer for it:
 * with the session on Redis (so stored events do not live in the server's
 * heap), ~94 MB is appended while a gRPC stream sits paused. A paused stream
 * holds one 64-event page (4 MB) plus what is in flight (measured: 5 to 12 MB
 * of growth), so the server's heap may grow by at most a quarter of what was
 * appended (24 MB). The heap cap (256 MB) is far above that, so a server that
 * buffers fails this assertion rather than dying of it (one that ignores
 * backpressure grows ~87 MB). The server's caches of recent events (bounded by
 * bytes, src/service/memory-service.ts) are filled first by appends to
 * another session, so they do not count as growth; heap in use is the lowest
 * of several samples, to look past garbage not yet collected. Once the reader
 * resumes it gets every event, in order. (Before streams read 64 events at a time, one 1,000-event page of
 * 64 KB events held 64 MB per paused reader.)
 */
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { grpcJsClient, rawEventStream, type MemoryClient } from "../support/clients.js";
import { spawnServer, type ServerProcess } from "../support/engram.js";

const EVENTS = 1500;
const CONTENT_BYTES = 64 * 1024;
const SESSION = `slow-${process.pid}`;
/** What a paused stream may add to the server's heap: a quarter of what is appended meanwhile (~94 MB). */
const MAX_GROWTH_MB = 24;

let server: ServerProcess;
let client: MemoryClient;

beforeAll(async () => {
  server = await spawnServer({
    MEMORY_TYPE: "redis",
    MEMORY_REDIS_URL: process.env.MEMORY_TEST_REDIS_URL!,
    MEMORY_KEY_PREFIX: `slow${process.pid}`,
    MEMORY_MAX_SESSION_EVENTS: String(EVENTS * 2),
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --max-old-space-size=256`,
  });
  client = grpcJsClient(server.address);
  await client.createSession({ appName: "slow", userId: "u", sessionId: SESSION });
  // Fill the recent-event caches to their byte bound with another session's events (no stream reads them).
  const warm = `${SESSION}-warm`;
  await client.createSession({ appName: "slow", userId: "u", sessionId: warm });
  const filler = "w".repeat(CONTENT_BYTES);
  for (let batch = 0; batch < 8; batch++) {
    await client.addEvents({
      sessionId: warm,
      events: Array.from({ length: 50 }, () => ({
        eventType: "tool_result",
        content: { kind: { case: "stringValue" as const, value: filler } },
      })),
    });
    await client.getSessionEvents({ sessionId: warm, afterSeq: BigInt(batch * 50), limit: 50 });
  }
}, 60_000);

afterAll(async () => {
  client?.close();
  await server?.kill();
});

/** The server's heap in use: the lowest of `samples` readings 100 ms apart (garbage comes and goes; what is live stays). */
async function heapUsed(samples = 10): Promise<number> {
  let lowest = Number.POSITIVE_INFINITY;
  for (let i = 0; i < samples; i++) {
    const text = await (await fetch(`${server.baseUrl}/metrics`)).text();
    lowest = Math.min(lowest, Number(/^engram_nodejs_heap_size_used_bytes (\S+)$/m.exec(text)![1]));
    await sleep(100);
  }
  return lowest;
}

describe("a slow stream consumer", () => {
  it("does not grow the server's memory with what it has not read, and then gets everything in order", async () => {
    const { client: raw, call } = rawEventStream(server.address, { sessionId: SESSION, afterSeq: 0n });
    const seqs: number[] = [];
    let caughtUp = false;
    call.on("data", (frame: { frame: { case: string; value: { seq: bigint } } }) => {
      if (frame.frame.case === "event") seqs.push(Number(frame.frame.value.seq));
      if (frame.frame.case === "caughtUp") caughtUp = true;
    });
    try {
      // Subscribed and caught up (empty session) before anything is appended.
      const caughtUpBy = Date.now() + 10_000;
      while (!caughtUp && Date.now() < caughtUpBy) await sleep(10);
      expect(caughtUp, "the stream's caught-up frame").toBe(true);
      call.pause();
      const before = await heapUsed();
      const filler = "x".repeat(CONTENT_BYTES);
      for (let batch = 0; batch < EVENTS / 50; batch++) {
        await client.addEvents({
          sessionId: SESSION,
          events: Array.from({ length: 50 }, () => ({
            eventType: "tool_result",
            content: { kind: { case: "stringValue" as const, value: filler } },
          })),
        });
      }
      // Time for the server to try to push to the paused reader: what it does meanwhile is what is measured.
      await sleep(1000);
      const during = await heapUsed();
      const appendedMb = (EVENTS * CONTENT_BYTES) / 2 ** 20;
      const grewMb = (during - before) / 2 ** 20;
      console.log(
        `slow consumer: appended ${appendedMb.toFixed(0)} MB while paused; server heap grew ${grewMb.toFixed(1)} MB; delivered so far ${seqs.length}`,
      );
      expect(seqs.length).toBeLessThan(EVENTS);
      expect(grewMb).toBeLessThan(MAX_GROWTH_MB);
      expect(server.child.exitCode).toBeNull();

      call.resume();
      const deadline = Date.now() + 60_000;
      while (seqs.length < EVENTS && Date.now() < deadline) await sleep(100);
      expect(seqs).toEqual(Array.from({ length: EVENTS }, (_, i) => i + 1));
      expect(server.child.exitCode).toBeNull();
    } finally {
      call.on("error", () => {}); // the cancel below ends it with CANCELLED
      call.cancel();
      raw.close();
    }
  }, 120_000);
});
