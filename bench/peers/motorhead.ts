/**
 * Motorhead (getmetal/motorhead, Rust, actix-web + Redis) on the same
 * redis-server as Engram's Redis store. Motorhead is not on crates.io: it is
 * built by whoever runs the bench from its public source, outside this
 * checkout, and named by ENGRAM_BENCH_MOTORHEAD=/path/to/motorhead
 * (bench/README.md says how and which commit was measured).
 *
 * The same workloads run against Engram over gRPC, Engram over Connect JSON
 * (HTTP/1.1), Engram's KAOS REST reads (GET /memory/events; KAOS has no REST
 * append, so that party sits out the append) and Motorhead's JSON API, in
 * rounds that rotate the parties, so the ratios compare measurements taken
 * seconds apart on this shared box.
 * Four more parties give Node.js's floor on the same calls: bare node:http2
 * (gRPC framing by hand) and node:http servers answering the bytes Engram
 * answered, doing nothing else, and each of them making one Redis round
 * trip per call first (bench/transport-floor-server.ts).
 *
 * Motorhead summarizes a session with an LLM once it holds more than
 * MOTORHEAD_MAX_WINDOW_SIZE messages, and a read returns that window. Two
 * Motorhead processes share the Redis data: the writer with a window no
 * session reaches (so an append never starts a summary, which here would be
 * a failing call to an unreachable OpenAI), the reader with a window of 19,
 * so GET /sessions/{id}/memory returns the last 20 messages (LRANGE 0 19).
 */
import { spawn, type ChildProcess } from "node:child_process";
import http from "node:http";
import { create, toBinary } from "@bufbuild/protobuf";
import {
  AddEventsRequestSchema,
  GetOrCreateSessionRequestSchema,
  GetSessionEventsRequestSchema,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { LoadResult } from "../lib/closed-loop.js";
import { forkWorker, startEngram, type Worker } from "../lib/processes.js";
import type { LoadSpec } from "../loadgen.js";
import type { FloorPorts } from "../transport-floor-server.js";
import { freePort } from "../../test/support/host.js";
import type { MotorheadComparison, MotorheadParty, MotorheadRow, Profile } from "../types.js";
import { addEventRequest, CONTENT_100B, SeedClient, SERVICE } from "../workloads.js";

/** Environment variable naming the Motorhead binary. */
export const MOTORHEAD_ENV = "ENGRAM_BENCH_MOTORHEAD";

const PARTIES: MotorheadParty[] = [
  "Engram gRPC",
  "Engram Connect JSON",
  "Engram REST",
  "Motorhead",
  "Node http2 floor",
  "Node HTTP/1.1 floor",
  "Node HTTP/1.1 + Redis floor",
  "Node http2 + Redis floor",
];
const READ_SIZES = [20, 1000];

/** A Motorhead process on a loopback port. */
interface MotorheadProcess {
  pid: number;
  port: number;
  stop(): Promise<void>;
}

async function startMotorhead(binary: string, redisUrl: string, windowSize: number): Promise<MotorheadProcess> {
  const port = await freePort();
  // RUST_LOG=warn: its access log (actix Logger at info) would write a line per request.
  const child: ChildProcess = spawn(binary, [], {
    env: {
      PATH: process.env.PATH ?? "",
      REDIS_URL: redisUrl,
      PORT: String(port),
      MOTORHEAD_MAX_WINDOW_SIZE: String(windowSize),
      RUST_LOG: "warn",
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr = (stderr + d).slice(-2000)));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`motorhead exited at start: ${stderr}`);
    if ((await httpJson(port, "GET", "/sessions?page=1&size=1").catch(() => undefined)) !== undefined) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`motorhead did not answer on port ${port} within 30 s: ${stderr}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { pid: child.pid!, port, stop };
}

/** One JSON request to 127.0.0.1:port; rejects on a non-2xx answer. */
function httpJson(port: number, method: string, path: string, body?: unknown): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(
      { host: "127.0.0.1", port, method, path, headers: payload ? { "content-type": "application/json" } : {} },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (d: Buffer) => chunks.push(d));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString();
          if (res.statusCode! >= 300)
            reject(new Error(`${method} ${path}: HTTP ${res.statusCode} ${text.slice(0, 200)}`));
          else resolve(text ? JSON.parse(text) : undefined);
        });
      },
    );
    req.setTimeout(10_000, () => req.destroy(new Error(`${method} ${path}: no answer in 10 s`)));
    req.on("error", reject);
    req.end(payload);
  });
}

const b64 = (s: string | Buffer) => Buffer.from(s).toString("base64");
const appendSession = (i: number) => `mh-append-${i}`;
const readSession = (n: number) => `mh-read-${n}`;

/** The same workload for each party, as load specs without timing. */
type Spec = Omit<LoadSpec, "durationMs" | "warmupMs" | "concurrency" | "cpuPids">;

/** Each workload's specs of the parties measured directly (REST only where KAOS has the call). */
type DirectSpecs = Record<"Engram gRPC" | "Engram Connect JSON" | "Motorhead", Spec> & { "Engram REST"?: Spec };

/** Engram's specs with the floor parties added: the same requests, to the floor servers. */
function withFloors(specs: DirectSpecs, floor: FloorPorts): Partial<Record<MotorheadParty, Spec>> {
  return {
    ...specs,
    "Node http2 floor": { ...specs["Engram gRPC"], target: `127.0.0.1:${floor.grpcPort}` },
    "Node HTTP/1.1 floor": { ...specs["Engram Connect JSON"], target: `127.0.0.1:${floor.http1Port}` },
    "Node HTTP/1.1 + Redis floor": { ...specs["Engram Connect JSON"], target: `127.0.0.1:${floor.http1RedisPort}` },
    "Node http2 + Redis floor": { ...specs["Engram gRPC"], target: `127.0.0.1:${floor.grpcRedisPort}` },
  };
}

/**
 * Engram's answer to one request of each workload's gRPC and Connect JSON
 * specs, by path, for the floor servers to answer with (the two reads share
 * a path and answer as many bytes: 20 events each).
 */
async function engramAnswers(
  engramAddress: string,
  specs: DirectSpecs[],
): Promise<{ grpc: Record<string, string>; http1: Record<string, string> }> {
  const client = new SeedClient(engramAddress);
  const grpc: Record<string, string> = {};
  const http1: Record<string, string> = {};
  try {
    for (const spec of specs) {
      const g = spec["Engram gRPC"];
      grpc[g.method] = (
        await client.call(g.method.slice(SERVICE.length), Buffer.from(g.requests[0], "base64"))
      ).toString("base64");
      const c = spec["Engram Connect JSON"];
      const [, port] = engramAddress.split(":");
      http1[c.http!.paths[0]] = Buffer.from(
        JSON.stringify(
          await httpJson(
            Number(port),
            "POST",
            c.http!.paths[0],
            JSON.parse(Buffer.from(c.requests[0], "base64").toString()),
          ),
        ),
      ).toString("base64");
    }
  } finally {
    client.close();
  }
  return { grpc, http1 };
}

function workloads(
  maxC: number,
  engram: string,
  writer: MotorheadProcess,
  reader: MotorheadProcess,
): Array<{ name: string; specs: DirectSpecs; motorhead: MotorheadProcess }> {
  const workers = Array.from({ length: maxC }, (_, i) => i);
  const connect = (method: string, bodies: unknown[]): Spec => ({
    target: engram,
    method: "",
    requests: bodies.map((b) => b64(JSON.stringify(b))),
    client: "http1",
    http: { verb: "POST", paths: bodies.map(() => SERVICE + method), contentType: "application/json" },
  });
  const message = { messages: [{ role: "user", content: CONTENT_100B }] };
  return [
    {
      name: "append one message",
      motorhead: writer,
      specs: {
        "Engram gRPC": {
          target: engram,
          method: SERVICE + "AddEvent",
          requests: workers.map((i) => b64(addEventRequest(appendSession(i)))),
        },
        "Engram Connect JSON": connect(
          "AddEvent",
          workers.map((i) => ({
            sessionId: appendSession(i),
            event: { eventType: "user_message", content: CONTENT_100B },
          })),
        ),
        Motorhead: {
          target: `127.0.0.1:${writer.port}`,
          method: "",
          requests: workers.map(() => b64(JSON.stringify(message))),
          client: "http1",
          http: {
            verb: "POST",
            paths: workers.map((i) => `/sessions/${appendSession(i)}/memory`),
            contentType: "application/json",
          },
        },
      },
    },
    ...READ_SIZES.map((n) => ({
      name: `read last 20 of ${n >= 1000 ? `${n / 1000}k` : n}`,
      motorhead: reader,
      specs: {
        "Engram gRPC": {
          target: engram,
          method: SERVICE + "GetSessionEvents",
          requests: [
            b64(
              Buffer.from(
                toBinary(
                  GetSessionEventsRequestSchema,
                  create(GetSessionEventsRequestSchema, { sessionId: readSession(n), tail: 20 }),
                ),
              ),
            ),
          ],
        },
        "Engram Connect JSON": connect("GetSessionEvents", [{ sessionId: readSession(n), tail: 20 }]),
        // KAOS' read of a session's newest events: the same tail read in the store (listRecentEvents with a session).
        "Engram REST": {
          target: engram,
          method: "",
          requests: [""],
          client: "http1",
          http: { verb: "GET", paths: [`/memory/events?session_id=${readSession(n)}&limit=20`] },
        },
        Motorhead: {
          target: `127.0.0.1:${reader.port}`,
          method: "",
          requests: [""],
          client: "http1",
          http: { verb: "GET", paths: [`/sessions/${readSession(n)}/memory`] },
        },
      } as DirectSpecs,
    })),
  ];
}

/** Seeds the same sessions in Engram (over gRPC) and in Motorhead (through the writer). */
async function seedBoth(engramAddress: string, writer: MotorheadProcess, maxC: number): Promise<void> {
  const client = new SeedClient(engramAddress);
  try {
    const session = (sessionId: string) =>
      Buffer.from(
        toBinary(
          GetOrCreateSessionRequestSchema,
          create(GetOrCreateSessionRequestSchema, { sessionId, appName: "bench", userId: "bench" }),
        ),
      );
    await client.all("GetOrCreateSession", [
      ...Array.from({ length: maxC }, (_, i) => session(appendSession(i))),
      ...READ_SIZES.map((n) => session(readSession(n))),
    ]);
    for (const n of READ_SIZES) {
      for (let done = 0; done < n; done += 100) {
        const count = Math.min(100, n - done);
        const events = Array.from({ length: count }, () => ({
          eventType: "user_message",
          content: { kind: { case: "stringValue" as const, value: CONTENT_100B } },
        }));
        await client.call(
          "AddEvents",
          Buffer.from(
            toBinary(AddEventsRequestSchema, create(AddEventsRequestSchema, { sessionId: readSession(n), events })),
          ),
        );
        await httpJson(writer.port, "POST", `/sessions/${readSession(n)}/memory`, {
          messages: Array.from({ length: count }, () => ({ role: "user", content: CONTENT_100B })),
        });
      }
    }
  } finally {
    client.close();
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0
    ? Number.NaN
    : s.length % 2
      ? s[(s.length - 1) / 2]
      : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

/** Runs the comparison; undefined (with a note) when ENGRAM_BENCH_MOTORHEAD is unset. */
export async function runMotorhead(
  profile: Profile,
  redis: { url: string; pid?: number },
  loadgen: Worker,
  log: (message: string) => void,
  serverNodeArgs: string[],
): Promise<MotorheadComparison> {
  const binary = process.env[MOTORHEAD_ENV]!;
  const rounds = Math.max(1, profile.targetPairs);
  const concurrencies = profile.concurrencies.filter((c) => c === 1 || c === 16);
  const maxC = Math.max(...concurrencies);
  const engram = await startEngram(
    [
      "--memory-type",
      "redis",
      "--redis-url",
      redis.url,
      "--key-prefix",
      `bench_mh_${Date.now()}`,
      "--max-session-events",
      "1000000",
      "--max-sessions",
      "1000000",
    ],
    {},
    serverNodeArgs,
  );
  const writer = await startMotorhead(binary, redis.url, 1_000_000_000);
  const reader = await startMotorhead(binary, redis.url, 19);
  const floor = forkWorker("transport-floor-server.ts");
  const rows: MotorheadRow[] = [];
  try {
    log(`motorhead: ${binary} (writer pid ${writer.pid}, reader pid ${reader.pid}); engram pid ${engram.pid}; seeding`);
    await seedBoth(engram.address, writer, maxC);
    const check = (await httpJson(reader.port, "GET", `/sessions/${readSession(1000)}/memory`)) as {
      messages: unknown[];
    };
    if (check.messages.length !== 20)
      throw new Error(`motorhead read returned ${check.messages.length} messages, not 20`);
    const restCheck = (await httpJson(
      Number(engram.address.split(":")[1]),
      "GET",
      `/memory/events?session_id=${readSession(1000)}&limit=20`,
    )) as { events: unknown[] };
    if (restCheck.events.length !== 20)
      throw new Error(`Engram's REST read returned ${restCheck.events.length} events, not 20`);
    const measured = workloads(maxC, engram.address, writer, reader);
    const floorPorts = await floor.request<FloorPorts>({
      ...(await engramAnswers(
        engram.address,
        measured.map((w) => w.specs),
      )),
      redisUrl: redis.url,
    });
    for (const workload of measured.map((w) => ({ ...w, specs: withFloors(w.specs, floorPorts) }))) {
      const parties = PARTIES.filter((p) => workload.specs[p] !== undefined);
      const pids: Record<MotorheadParty, Record<string, number[]>> = {
        "Engram gRPC": { server: [engram.pid] },
        "Engram Connect JSON": { server: [engram.pid] },
        "Engram REST": { server: [engram.pid] },
        Motorhead: { server: [workload.motorhead.pid] },
        "Node http2 floor": { server: [floor.pid] },
        "Node HTTP/1.1 floor": { server: [floor.pid] },
        "Node HTTP/1.1 + Redis floor": { server: [floor.pid] },
        "Node http2 + Redis floor": { server: [floor.pid] },
      };
      for (const party of PARTIES) if (redis.pid) pids[party].redis = [redis.pid];
      for (const c of concurrencies) {
        const row: MotorheadRow = {
          workload: workload.name,
          concurrency: c,
          rounds: Object.fromEntries(parties.map((p) => [p, []])),
        };
        // Warm-up of every party at this concurrency (JIT, connection pools), unmeasured.
        for (const party of parties)
          await loadgen.request<LoadResult>({
            ...workload.specs[party]!,
            concurrency: c,
            durationMs: 1000,
            warmupMs: 200,
            cpuPids: {},
          } satisfies LoadSpec);
        for (let round = 0; round < rounds; round++) {
          // Rotate the order each round, so no party always runs first (or right after the same one).
          const order = parties.map((_, i) => parties[(i + round) % parties.length]);
          for (const party of order) {
            const r = await loadgen.request<LoadResult>({
              ...workload.specs[party]!,
              concurrency: c,
              durationMs: profile.pairMs,
              warmupMs: Math.min(300, profile.warmupMs),
              cpuPids: pids[party],
            } satisfies LoadSpec);
            if (r.errors > 0) throw new Error(`${party} ${workload.name} c=${c}: ${r.errors} errors (${r.firstError})`);
            row.rounds[party]!.push({
              throughput: r.throughput,
              p50Us: r.p50Us,
              p99Us: r.p99Us,
              serverCpuUs: r.cpuUsPerCall.server,
              redisCpuUs: r.cpuUsPerCall.redis ?? Number.NaN,
            });
          }
        }
        rows.push(row);
        const m = (party: MotorheadParty, key: "throughput" | "serverCpuUs") =>
          median(row.rounds[party]!.map((x) => x[key]));
        log(
          `motorhead: ${workload.name} c=${c}: ${parties.map((p) => `${p} ${Math.round(m(p, "throughput"))}/s ${Math.round(m(p, "serverCpuUs"))}µs`).join("; ")}`,
        );
      }
    }
  } finally {
    await Promise.all([engram.stop(), writer.stop(), reader.stop(), floor.stop()]);
  }
  return {
    binary,
    commit: process.env[`${MOTORHEAD_ENV}_COMMIT`] ?? "not given",
    rounds,
    pointMs: profile.pairMs,
    rows,
  };
}
