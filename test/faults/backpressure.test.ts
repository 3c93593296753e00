/**
 * A stream that waits for its reader must leave nothing behind after each
 * wait. The server writes a frame, and when grpc-js' buffer is full it waits
 * for 'drain' or for the call to end; a wait that kept an 'abort' listener
 * per episode piled them up on the call's signal (Node warns past 10 with a
 * MaxListenersExceededWarning, and each kept its closure alive until the
 * call ended). A 16,000-event catch-up read through a real grpc-js client
 * makes the server wait for its reader about once every 16 frames
 * (grpc-js' high-water mark), so ~1,000 waits on one call.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { StreamSessionEventsResponse } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { grpcJsClient, rawEventStream, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

const EVENTS = 16_000;
const BATCH = 500;
const SESSION = "backpressure";

let server: TestServer;
let client: MemoryClient;

beforeAll(async () => {
  server = await startTestServer({ config: { maxSessionEvents: EVENTS } });
  client = grpcJsClient(server.address);
  await client.createSession({ appName: "backpressure", userId: "u", sessionId: SESSION });
  for (let appended = 0; appended < EVENTS; appended += BATCH) {
    await client.addEvents({
      sessionId: SESSION,
      events: Array.from({ length: BATCH }, () => ({ eventType: "tool_result" })),
    });
  }
});

afterAll(async () => {
  client?.close();
  await server?.stop();
});

describe("a gRPC stream whose reader keeps it waiting", () => {
  it("adds no listener per backpressure wait: 16,000 frames to one reader raise no MaxListenersExceededWarning", async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
    process.on("warning", onWarning);
    const { client: raw, call } = rawEventStream(
      server.address,
      { sessionId: SESSION, afterSeq: 0n },
      { deadline: Date.now() + 60_000 },
    );
    call.on("error", () => {}); // the cancel below ends it with CANCELLED
    try {
      const received = await new Promise<number>((resolve, reject) => {
        let events = 0;
        call.on("data", (frame: StreamSessionEventsResponse) => {
          if (frame.frame.case === "event") events++;
          else if (frame.frame.case === "caughtUp") resolve(events);
        });
        call.on("error", reject);
      });
      expect(received).toBe(EVENTS);
      // Warnings are emitted on the next tick after the listener that crossed the limit.
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.filter((w) => w.startsWith("MaxListenersExceededWarning"))).toEqual([]);
    } finally {
      process.off("warning", onWarning);
      call.cancel();
      raw.close();
    }
  }, 90_000);
});
