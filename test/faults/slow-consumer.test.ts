/**
 * A stream reader that stops reading must not make the server buffer for it:
 * with the session on Redis (so stored events do not live in the server's
 * heap) and the server's heap capped at 96 MB, ~94 MB is appended while a
 * gRPC stream sits paused. Buffering it would exhaust the heap and kill the
 * server; instead the server stays up, and once the reader resumes it gets
 * every event, in order. (Before streams read 64 events at a time, one
 * 1,000-event page of 64 KB events held 64 MB per paused reader.)
 */
import { setTimeout as sleep } from "node:timers/promises";
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StreamSessionEventsRequestSchema, StreamSessionEventsResponseSchema } from "../../src/gen/engram/v1/memory_pb.js";
import { grpcJsClient, type MemoryClient } from "../support/clients.js";
import { spawnServer, type ServerProcess } from "../support/engram.js";

const EVENTS = 1500;
const CONTENT_BYTES = 64 * 1024;
const SESSION = `slow-${process.pid}`;

let server: ServerProcess;
let client: MemoryClient;

beforeAll(async () => {
  server = await spawnServer({
    MEMORY_TYPE: "redis",
    MEMORY_REDIS_URL: process.env.MEMORY_TEST_REDIS_URL!,
    MEMORY_KEY_PREFIX: `slow${process.pid}`,
    MEMORY_MAX_SESSION_EVENTS: String(EVENTS * 2),
    NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} --max-old-space-size=96`,
  });
  client = grpcJsClient(server.address);
  await client.createSession({ appName: "slow", userId: "u", sessionId: SESSION });
});

afterAll(async () => {
  client?.close();
  await server?.kill();
});

async function heapUsed(): Promise<number> {
  const text = await (await fetch(`${server.baseUrl}/metrics`)).text();
  return Number(/^engram_nodejs_heap_size_used_bytes (\S+)$/m.exec(text)![1]);
}

describe("a slow stream consumer", () => {
  it("does not grow the server's memory with what it has not read, and then gets everything in order", async () => {
    const raw = new grpc.Client(server.address, grpc.credentials.createInsecure());
    const call = raw.makeServerStreamRequest(
      "/engram.v1.MemoryService/StreamSessionEvents",
      (m: object) => Buffer.from(toBinary(StreamSessionEventsRequestSchema, create(StreamSessionEventsRequestSchema, m as never))),
      (b: Buffer) => fromBinary(StreamSessionEventsResponseSchema, b),
      { sessionId: SESSION, afterSeq: 0n },
    );
    const seqs: number[] = [];
    call.on("data", (frame: { frame: { case: string; value: { seq: bigint } } }) => {
      if (frame.frame.case === "event") seqs.push(Number(frame.frame.value.seq));
    });
    try {
      await sleep(300); // subscribed and caught up (empty session)
      call.pause();
      const before = await heapUsed();
      const filler = "x".repeat(CONTENT_BYTES);
      for (let batch = 0; batch < EVENTS / 50; batch++) {
        await client.addEvents({
          sessionId: SESSION,
          events: Array.from({ length: 50 }, () => ({ eventType: "tool_result", content: { kind: { case: "stringValue" as const, value: filler } } })),
        });
      }
      await sleep(1000); // let the server try to push
      const during = await heapUsed();
      const appendedMb = (EVENTS * CONTENT_BYTES) / 2 ** 20;
      const grewMb = (during - before) / 2 ** 20;
      console.log(`slow consumer: appended ${appendedMb.toFixed(0)} MB while paused; server heap grew ${grewMb.toFixed(1)} MB; delivered so far ${seqs.length}`);
      expect(seqs.length).toBeLessThan(EVENTS);
      expect(grewMb).toBeLessThan(96);
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
