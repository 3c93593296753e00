/**
 * Stream fan-out: 1 writer, N subscribers spread over 2 Engram replicas on
 * one Redis, against the same client driving 2 bare grpc-js servers that
 * write a pre-serialized frame to every stream (bench/fanout-baseline-server.ts).
 */
import { create, toBinary } from "@bufbuild/protobuf";
import {
  GetOrCreateSessionRequestSchema,
  StreamSessionEventsRequestSchema,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { forkWorker, startEngram } from "./lib/processes.js";
import type { FanoutSpec } from "./fanout-client.js";
import { FANOUT_PUBLISH, FANOUT_SUBSCRIBE } from "./fanout-baseline-server.js";
import type { FanoutFigures, FanoutResult, Profile } from "./types.js";
import { SeedClient } from "./workloads.js";

const REPLICAS = 2;

/** Runs every configured subscriber count; returns Engram's and the baseline's figures side by side. */
export async function runFanout(
  profile: Profile,
  redisUrl: string,
  log: (message: string) => void,
  nodeArgs: string[] = [],
): Promise<FanoutResult[]> {
  const results: FanoutResult[] = [];
  const prefix = `fanout_${Date.now()}`;
  const replicas = await Promise.all(
    Array.from({ length: REPLICAS }, () =>
      startEngram(
        ["--memory-type", "redis", "--redis-url", redisUrl, "--key-prefix", prefix, "--max-session-events", "1000000"],
        {},
        nodeArgs,
      ),
    ),
  );
  const baselines = Array.from({ length: REPLICAS }, () => forkWorker("fanout-baseline-server.ts"));
  const client = forkWorker("fanout-client.ts");
  try {
    const baselinePorts = await Promise.all(baselines.map((b) => b.request<number>({})));
    for (const subscribers of profile.fanoutSubscribers) {
      const sessionId = `fanout-${subscribers}`;
      const seeder = new SeedClient(replicas[0].address);
      await seeder.call(
        "GetOrCreateSession",
        Buffer.from(
          toBinary(
            GetOrCreateSessionRequestSchema,
            create(GetOrCreateSessionRequestSchema, { sessionId, appName: "bench", userId: "bench" }),
          ),
        ),
      );
      seeder.close();
      const engram = await client.request<FanoutFigures>({
        targets: replicas.map((r) => r.address),
        streamPath: "/engram.v1.MemoryService/StreamSessionEvents",
        streamRequest: Buffer.from(
          toBinary(
            StreamSessionEventsRequestSchema,
            create(StreamSessionEventsRequestSchema, { sessionId, afterSeq: 0n }),
          ),
        ).toString("base64"),
        subscribers,
        durationMs: profile.fanoutMs,
        writer: { kind: "engram", sessionId },
        serverPids: replicas.map((r) => r.pid),
      } satisfies FanoutSpec);
      const preSerialized = await client.request<FanoutFigures>({
        targets: baselinePorts.map((p) => `127.0.0.1:${p}`),
        streamPath: FANOUT_SUBSCRIBE,
        streamRequest: "",
        subscribers,
        durationMs: profile.fanoutMs,
        writer: { kind: "publish", path: FANOUT_PUBLISH },
        serverPids: baselines.map((b) => b.pid),
      } satisfies FanoutSpec);
      const result = {
        subscribers,
        replicas: REPLICAS,
        engram,
        preSerialized,
        ratio: engram.deliveredPerSecond / preSerialized.deliveredPerSecond,
      };
      log(
        `fan-out ${subscribers}: engram ${engram.deliveredPerSecond}/s (p50 ${engram.p50Us}µs p99 ${engram.p99Us}µs, ${engram.serverCpuUsPerDelivery}µs cpu/delivery, ${engram.delivered}/${engram.expected}); pre-serialized ${preSerialized.deliveredPerSecond}/s (p50 ${preSerialized.p50Us}µs, ${preSerialized.serverCpuUsPerDelivery}µs cpu/delivery); ratio ${result.ratio.toFixed(2)}`,
      );
      results.push(result);
    }
  } finally {
    await client.stop();
    for (const b of baselines) await b.stop();
    for (const r of replicas) await r.stop();
  }
  return results;
}
