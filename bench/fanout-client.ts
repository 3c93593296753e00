/**
 * The fan-out client, a forked child of the runner: opens N server streams
 * spread over the replicas (raw gRPC framing on node:http2, one connection
 * per replica), waits until every stream is live, then runs one writer (one
 * append at a time) for a bounded time and records, for every delivered
 * event, the time from the start of its append to its arrival. The event id
 * carries the append's start time, so no clock other than this process's is
 * involved.
 */
import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import {
  AddEventRequestSchema,
  StreamSessionEventsResponseSchema,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { LatencyRecorder, round } from "./lib/latency.js";
import { processCpuSeconds, serveRequests } from "./lib/processes.js";
import type { FanoutFigures } from "./types.js";
import { CONTENT_100B } from "./workloads.js";

/** One fan-out run. */
export interface FanoutSpec {
  /** Replica addresses; subscriber i streams from targets[i % n]. */
  targets: string[];
  /** Stream method path and its serialized request (base64). */
  streamPath: string;
  streamRequest: string;
  subscribers: number;
  durationMs: number;
  /** How the writer publishes: Engram's AddEvent to the first replica, or the baseline's Publish to every replica. */
  writer: { kind: "engram"; sessionId: string } | { kind: "publish"; path: string };
  /** Server processes whose CPU is charged per delivery. */
  serverPids: number[];
}

function frame(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

/** Splits a stream's DATA chunks into gRPC messages. */
class MessageReader {
  private pending: Buffer = Buffer.alloc(0);

  push(chunk: Buffer, onMessage: (message: Buffer) => void): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 5) {
      const length = this.pending.readUInt32BE(1);
      if (this.pending.length < 5 + length) return;
      onMessage(this.pending.subarray(5, 5 + length));
      this.pending = this.pending.subarray(5 + length);
    }
  }
}

/** The event_id of a StreamSessionEventsResponse carrying an event (field 1 → Event field 1), else undefined. */
function eventIdOf(message: Buffer): string | undefined {
  const outer = new BinaryReader(message);
  while (outer.pos < outer.len) {
    const [field, wireType] = outer.tag();
    if (field === 1 && wireType === 2) {
      const event = new BinaryReader(outer.bytes());
      while (event.pos < event.len) {
        const [f, w] = event.tag();
        if (f === 1 && w === 2) return event.string();
        event.skip(w);
      }
      return undefined;
    }
    outer.skip(wireType);
  }
  return undefined;
}

function unary(session: http2.ClientHttp2Session, path: string, message: Uint8Array): Promise<void> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
    });
    let status: string | undefined;
    stream.on("response", (h) => {
      if (h["grpc-status"] !== undefined) status = String(h["grpc-status"]);
    });
    stream.on("trailers", (t) => (status = String(t["grpc-status"])));
    stream.on("data", () => {});
    stream.on("error", reject);
    stream.on("end", () => (status === "0" ? resolve() : reject(new Error(`${path}: grpc-status ${status}`))));
    stream.end(frame(message));
  });
}

async function runFanout(spec: FanoutSpec): Promise<FanoutFigures> {
  const sessions = spec.targets.map((t) => {
    const s = http2.connect(`http://${t}`, { settings: { initialWindowSize: 1 << 20 } });
    s.on("error", () => {});
    return s;
  });
  const latency = new LatencyRecorder();
  let delivered = 0;
  let live = 0;
  let lastDelivery = 0;
  const sendTimes = new Map<string, number>();
  let allLive: () => void = () => {};
  const everyoneLive = new Promise<void>((resolve) => (allLive = resolve));
  const streams: http2.ClientHttp2Stream[] = [];
  const request = frame(Buffer.from(spec.streamRequest, "base64"));
  for (let i = 0; i < spec.subscribers; i++) {
    const stream = sessions[i % sessions.length].request({
      ":method": "POST",
      ":path": spec.streamPath,
      "content-type": "application/grpc",
      te: "trailers",
    });
    streams.push(stream);
    const reader = new MessageReader();
    let isLive = false;
    stream.on("data", (chunk: Buffer) =>
      reader.push(chunk, (message) => {
        const id = eventIdOf(message);
        const sent = id === undefined ? undefined : sendTimes.get(id);
        if (sent === undefined) {
          // caught_up (or a heartbeat): the stream is following live.
          if (!isLive) {
            isLive = true;
            if (++live === spec.subscribers) allLive();
          }
          return;
        }
        const now = performance.now();
        delivered++;
        lastDelivery = now;
        latency.add((now - sent) * 1000);
      }),
    );
    stream.on("error", () => {});
    stream.end(request);
  }
  const opened = await Promise.race([
    everyoneLive.then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), 60_000)),
  ]);
  if (!opened) throw new Error(`only ${live} of ${spec.subscribers} streams went live in 60 s`);

  const cpu = () => spec.serverPids.reduce((sum, pid) => sum + processCpuSeconds(pid), 0);
  const cpuStart = cpu();
  const started = performance.now();
  let appended = 0;
  const writerSession = sessions[0];
  const publish = async (id: string, sent: number) => {
    if (spec.writer.kind === "engram") {
      const message = toBinary(
        AddEventRequestSchema,
        create(AddEventRequestSchema, {
          sessionId: spec.writer.sessionId,
          event: {
            eventId: id,
            eventType: "user_message",
            content: { kind: { case: "stringValue", value: CONTENT_100B } },
          },
        }),
      );
      await unary(writerSession, "/engram.v1.MemoryService/AddEvent", message);
    } else {
      // The frame Engram would send for this event, serialized once, written by the baseline to every stream.
      const message = toBinary(
        StreamSessionEventsResponseSchema,
        create(StreamSessionEventsResponseSchema, {
          frame: {
            case: "event",
            value: {
              eventId: id,
              eventType: "user_message",
              content: { kind: { case: "stringValue", value: CONTENT_100B } },
              timestamp: timestampFromMs(Date.now()),
              seq: BigInt(appended + 1),
              sessionId: "fanout",
            },
          },
        }),
      );
      const path = spec.writer.path;
      await Promise.all(sessions.map((s) => unary(s, path, message)));
    }
    void sent;
  };
  while (performance.now() - started < spec.durationMs) {
    const sent = performance.now();
    const id = `fanout-${appended}`;
    sendTimes.set(id, sent);
    await publish(id, sent);
    appended++;
  }
  // Let the streams drain (bounded).
  const expected = appended * spec.subscribers;
  const drainUntil = performance.now() + 30_000;
  while (delivered < expected && performance.now() < drainUntil) await new Promise((r) => setTimeout(r, 10));
  const cpuUsed = cpu() - cpuStart;
  for (const s of streams) s.close(http2.constants.NGHTTP2_CANCEL);
  for (const s of sessions) s.close();
  const seconds = ((lastDelivery || performance.now()) - started) / 1000;
  return {
    appended,
    delivered,
    expected,
    deliveredPerSecond: round(delivered / seconds),
    ...pick(latency.summary()),
    serverCpuUsPerDelivery: delivered > 0 ? round((cpuUsed / delivered) * 1e6, 2) : Number.NaN,
  };
}

function pick(s: { p50Us: number; p99Us: number }) {
  return { p50Us: s.p50Us, p99Us: s.p99Us };
}

serveRequests((spec: FanoutSpec) => runFanout(spec));
