/**
 * Bytes per stored event on the local store, in its own process (run with
 * --expose-gc): events go in through MemoryService.addEvent, as the server
 * stores them (request decoding aside), and the heap is measured after full
 * garbage collections before and after.
 */
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { AddEventRequestSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { DEFAULT_SERVICE_LIMITS } from "../src/service/limits.js";
import { MemoryService } from "../src/service/memory-service.js";
import { LocalStore } from "../src/store/local.js";
import { serveRequests } from "./lib/processes.js";
import type { MemoryResult } from "./types.js";

/** Events per session: the default MEMORY_MAX_SESSION_EVENTS, so nothing is evicted. */
const EVENTS_PER_SESSION = 500;

function settle(): NodeJS.MemoryUsage {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error("run with --expose-gc");
  for (let i = 0; i < 4; i++) gc();
  return process.memoryUsage();
}

async function measure(message: { events: number; content: string }): Promise<MemoryResult> {
  const sessions = Math.ceil(message.events / EVENTS_PER_SESSION);
  const store = new LocalStore({ maxSessions: sessions, maxSessionEvents: EVENTS_PER_SESSION });
  const service = new MemoryService(store, { limits: DEFAULT_SERVICE_LIMITS, contextLimit: 6, heartbeatMs: 15_000 });
  const ids = Array.from({ length: sessions }, () => randomUUID());
  for (const sessionId of ids)
    await service.getOrCreateSession({ sessionId, appName: "bench", userId: "bench" } as never);
  const before = settle();
  for (let i = 0; i < message.events; i++) {
    // A fresh request and content string per event, as decoding a request makes them.
    // Flat strings, as decoding a request yields (a slice would keep its parent alive).
    const content = Buffer.from((message.content + i).slice(-message.content.length)).toString();
    await service.addEvent(
      create(AddEventRequestSchema, {
        sessionId: ids[i % sessions],
        event: { eventType: "user_message", content: { kind: { case: "stringValue", value: content } } },
      }),
    );
  }
  const after = settle();
  // Both stay reachable until after the reading: V8 may collect what is no longer used.
  const stats = await (service.store as LocalStore).stats();
  if (stats.totalEvents !== message.events)
    throw new Error(`stored ${stats.totalEvents} events, expected ${message.events}`);
  const per = (key: "heapUsed" | "rss" | "external") => Math.round((after[key] - before[key]) / message.events);
  return {
    events: message.events,
    contentBytes: Buffer.byteLength(message.content),
    heapBytesPerEvent: per("heapUsed"),
    rssBytesPerEvent: per("rss"),
    externalBytesPerEvent: per("external"),
    method: `${sessions} sessions × ${EVENTS_PER_SESSION} events appended through MemoryService.addEvent (server-generated event ids) in a child process; heapUsed after forced GC, after minus before, divided by the event count.`,
  };
}

serveRequests(measure);
