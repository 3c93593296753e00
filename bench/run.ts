/**
 * `npm run bench`: the benchmark runner. It starts its own redis-server and
 * PostgreSQL (the test helpers), runs Engram as a separate process per
 * backend, drives it from a separate load-generator process, and measures in
 * the same run the baselines it is judged against: a bare grpc-js echo (the
 * transport ceiling), the store drivers without the server, redis-benchmark
 * and pgbench, stream fan-out against pre-serialized writes, memory per
 * event, and peer memory servers. Writes bench/results/results.{json,md} and
 * throughput.png.
 *
 * Profiles: default (~8 min), --quick (~2 min), --full (8 s points),
 * --tiny (the harness test: local only, one concurrency, 0.3 s points).
 * Other flags: --out DIR, --backends local,redis,postgres, --skip SECTION,...
 * (sections: baselines, references, fanout, memory, peers, motorhead, context, memories, cluster, plot;
 * and, only when named with --only, needles: bench/memories-needles.ts on each backend at --needles-count, 100k by default),
 * --only SECTION,..., --workloads NAME,... (server workloads whose names
 * start with one of these, e.g. AddEvent: to rerun one point while profiling),
 * --memories-counts 10k,100k,1m (the memories section's speed points at these
 * counts on every store, local included, instead of local at 10k and the
 * shared stores at 10k and 100k; only the first memoriesPerApp memories
 * carry a vector, so above that the points are lexical),
 * --pgvector (PostgreSQL 18 with pgvector, the tests' build, instead of the
 * system's PostgreSQL without it: vectors in HNSW indexes).
 * BENCH_SERVER_NODE_ARGS (e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof") is
 * passed to node for every Engram server the run starts; BENCH_SERVER=tsx
 * runs the servers from the TypeScript sources instead of dist/.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { AddEventResponseSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { LoadResult } from "./lib/closed-loop.js";
import { findPid, forkWorker, REPO_ROOT, SERVER_BUILD, startEngram, type EngramProcess } from "./lib/processes.js";
import type { LoadSpec } from "./loadgen.js";
import type { RawSpec } from "./raw-store.js";
import { ECHO_METHOD } from "./echo-server.js";
import { addEventRequest, CONTENT_100B, prime, seed, serverWorkloads, type SeedSizes } from "./workloads.js";
import { writeReport } from "./report.js";
import type { BenchResults, Point, Profile, TargetPairs } from "./types.js";

/** Extra node flags for the Engram servers, for profiling them under the benchmark's load. */
const SERVER_NODE_ARGS = process.env.BENCH_SERVER_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
/** CPU the calibration echo spends per call on top of the bare echo's. */
const CALIBRATION_BURN_US = 50;
const ALL_SECTIONS = [
  "baselines",
  "references",
  "fanout",
  "memory",
  "peers",
  "motorhead",
  "context",
  "memories",
  "cluster",
  "plot",
];
const FULL_SIZES: SeedSizes = { readSessions: [10, 1000, 10_000], listSessions: 10_000, contextEvents: 200 };

const PROFILES: Record<string, Omit<Profile, "backends" | "sections"> & { sections: string[] }> = {
  tiny: {
    name: "tiny",
    concurrencies: [1],
    durationMs: 300,
    warmupMs: 100,
    sizes: { readSessions: [10, 100], listSessions: 300, contextEvents: 40 },
    memoryEvents: 5000,
    fanoutSubscribers: [],
    fanoutMs: 0,
    sections: ["memory"],
    targetPairs: 1,
    pairMs: 200,
    memoriesEvalConversations: 3,
    memoriesPerApp: 300,
    memoriesBackendCounts: [300],
    memoriesLocalCounts: [300],
    memoriesPointMs: 300,
  },
  quick: {
    name: "quick",
    concurrencies: [1, 16, 64],
    durationMs: 400,
    warmupMs: 100,
    sizes: FULL_SIZES,
    memoryEvents: 100_000,
    fanoutSubscribers: [100, 1000],
    fanoutMs: 1000,
    sections: ALL_SECTIONS,
    targetPairs: 3,
    pairMs: 400,
    memoriesPerApp: 10_000,
    memoriesBackendCounts: [10_000, 100_000],
    memoriesLocalCounts: [10_000],
    memoriesPointMs: 2000,
  },
  default: {
    name: "default",
    concurrencies: [1, 16, 64],
    durationMs: 2500,
    warmupMs: 500,
    sizes: FULL_SIZES,
    memoryEvents: 500_000,
    fanoutSubscribers: [100, 1000],
    fanoutMs: 4000,
    sections: ALL_SECTIONS,
    targetPairs: 7,
    pairMs: 1500,
    memoriesPerApp: 10_000,
    memoriesBackendCounts: [10_000, 100_000],
    memoriesLocalCounts: [10_000],
    memoriesPointMs: 5000,
  },
  full: {
    name: "full",
    concurrencies: [1, 16, 64],
    durationMs: 8000,
    warmupMs: 1000,
    sizes: FULL_SIZES,
    memoryEvents: 500_000,
    fanoutSubscribers: [100, 1000],
    fanoutMs: 10_000,
    sections: ALL_SECTIONS,
    targetPairs: 9,
    pairMs: 3000,
    memoriesPerApp: 10_000,
    memoriesBackendCounts: [10_000, 100_000],
    memoriesLocalCounts: [10_000],
    memoriesPointMs: 10_000,
  },
};

function parseProfile(argv: string[]): { profile: Profile; out: string } {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: "boolean" },
      full: { type: "boolean" },
      tiny: { type: "boolean" },
      out: { type: "string" },
      backends: { type: "string" },
      skip: { type: "string" },
      only: { type: "string" },
      workloads: { type: "string" },
      "memories-counts": { type: "string" },
      "needles-count": { type: "string" },
      pgvector: { type: "boolean" },
    },
    strict: true,
  });
  const base = PROFILES[values.tiny ? "tiny" : values.quick ? "quick" : values.full ? "full" : "default"];
  const sections = new Set(values.only ? values.only.split(",") : base.sections);
  for (const s of values.skip?.split(",") ?? []) sections.delete(s);
  // --backends "" runs no backend's server workloads (e.g. only the Motorhead comparison, which starts its own Engram).
  const backends =
    values.backends?.split(",").filter(Boolean) ?? (base.name === "tiny" ? ["local"] : ["local", "redis", "postgres"]);
  const workloads = values.workloads?.split(",");
  const counts = values["memories-counts"]?.split(",").map((c) => {
    const n = Number(c.replace(/k$/i, "000").replace(/m$/i, "000000"));
    if (!Number.isInteger(n) || n < 1)
      throw new Error(`--memories-counts: ${JSON.stringify(c)} is not a count (e.g. 10k,100k,1m)`);
    return n;
  });
  const memoriesCounts = counts ? { memoriesBackendCounts: counts, memoriesLocalCounts: counts } : {};
  const needlesCount =
    values["needles-count"] === undefined
      ? 100_000
      : Number(values["needles-count"].replace(/k$/i, "000").replace(/m$/i, "000000"));
  if (!Number.isInteger(needlesCount) || needlesCount < 1)
    throw new Error(`--needles-count: ${JSON.stringify(values["needles-count"])} is not a count (e.g. 100k, 1m)`);
  return {
    profile: {
      ...base,
      backends,
      sections,
      workloads,
      needlesCount,
      pgvector: values.pgvector ?? false,
      ...memoriesCounts,
    },
    out: path.resolve(values.out ?? path.join(REPO_ROOT, "bench/results")),
  };
}

/** Finds the pid of a process whose command line contains every needle. */
function log(message: string): void {
  process.stderr.write(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}\n`);
}

/** Size of an AddEvent response for the benchmark's event, so the echo answers as many bytes. */
function addEventResponseBytes(): number {
  return toBinary(
    AddEventResponseSchema,
    create(AddEventResponseSchema, {
      event: {
        eventId: "0b6a5f0e-4a7c-4a57-9d1f-0c3c5e2d9a11",
        eventType: "user_message",
        content: { kind: { case: "stringValue", value: CONTENT_100B } },
        timestamp: timestampFromMs(Date.now()),
        seq: 12345n,
        sessionId: "bench-append-15",
      },
    }),
  ).length;
}

interface Backing {
  redis?: { url: string; pid?: number; destroy(): Promise<void> };
  postgres?: { url: string; port: number; pid?: number; stop(): Promise<void> };
}

async function startBacking(profile: Profile): Promise<Backing> {
  const backing: Backing = {};
  const needRedis =
    ["fanout", "peers", "motorhead", "cluster"].some((section) => profile.sections.has(section)) ||
    profile.backends.includes("redis");
  const needPostgres = profile.backends.includes("postgres") || profile.sections.has("peers");
  if (needRedis) {
    const { startRedisServer } = await import("../test/support/redis-server.js");
    const redis = await startRedisServer({ appendonly: true });
    backing.redis = {
      url: redis.url,
      pid: findPid("redis-server", `127.0.0.1:${redis.port}`),
      destroy: () => redis.destroy(),
    };
    log(`redis-server ${redis.url} (AOF, appendfsync everysec)`);
  }
  if (needPostgres) {
    const { startPostgresServer, pgvectorBin } = await import("../test/support/postgres-server.js");
    // PostgreSQL's durable defaults, not the tests' fsync=off; logged as the server reports them.
    const pgServer = await startPostgresServer({
      durable: true,
      ...(profile.pgvector ? { bin: await pgvectorBin() } : {}),
    });
    const { default: pg } = await import("pg");
    const client = new pg.Client({ connectionString: pgServer.url });
    await client.connect();
    const { rows } = await client.query<Record<string, string>>(
      "SELECT current_setting('server_version') AS version, current_setting('fsync') AS fsync, current_setting('synchronous_commit') AS synchronous_commit, current_setting('full_page_writes') AS full_page_writes",
    );
    await client.end();
    backing.postgres = {
      url: pgServer.url,
      port: pgServer.port,
      pid: findPid("postgres", "-p", String(pgServer.port)),
      stop: () => pgServer.stop(),
    };
    log(
      `postgres ${pgServer.url} (${Object.entries(rows[0])
        .map(([k, v]) => `${k}=${v}`)
        .join(", ")})`,
    );
  }
  return backing;
}

/** Processes charged per call when Engram runs on `backend`. */
function cpuPidsFor(backend: string, engram: EngramProcess | undefined, backing: Backing): Record<string, number[]> {
  const pids: Record<string, number[]> = {};
  if (engram) pids.server = [engram.pid];
  if (backend === "redis" && backing.redis?.pid) pids.redis = [backing.redis.pid];
  // The postmaster's tree: every backend, including those the pool opens and closes during a point.
  if (backend === "postgres" && backing.postgres?.pid) pids.postgres = [backing.postgres.pid];
  return pids;
}

/** The shortest point of vector writes: a batch of 100 into an HNSW index takes seconds at c=16 on 2 cores. */
const VECTOR_WRITE_MS = 20_000;

/** The baseline rows of the raw-store ops. */
const RAW_WORKLOADS: Record<Exclude<RawSpec["op"], "open">, string> = {
  append: "AddEvent (store driver, no server)",
  tail: "last 20 of 1k (store driver, no server)",
  "write-memories": "WriteMemories 100 (store driver, no server)",
  "hnsw-insert": "100 vectors into pgvector HNSW (plain SQL, no Engram)",
};

async function main(): Promise<void> {
  const { profile, out } = parseProfile(process.argv.slice(2));
  // The compiled server is what npm start and the image run; build it first when a source is newer.
  if (SERVER_BUILD === "compiled")
    execFileSync(process.execPath, ["scripts/build.mjs", "--if-stale"], { cwd: REPO_ROOT, stdio: "inherit" });
  const started = Date.now();
  log(
    `profile ${profile.name}: backends ${profile.backends.join(",")}; sections ${[...profile.sections].join(",") || "none"}; out ${out}`,
  );
  const results: BenchResults = {
    meta: {
      profile: profile.name,
      startedAt: new Date(started).toISOString(),
      node: process.version,
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model ?? "",
      loadAverageAtStart: os.loadavg().map((v) => Math.round(v * 100) / 100),
      durationMs: profile.durationMs,
      warmupMs: profile.warmupMs,
      concurrencies: profile.concurrencies,
      client:
        "gRPC framed on node:http2 (one h2c connection), pre-serialized requests, undecoded responses, in a separate process",
      server:
        SERVER_BUILD === "tsx"
          ? "node --import tsx src/main.ts (BENCH_SERVER=tsx)"
          : "node dist/main.js (compiled, as npm start runs it)",
    },
    points: [],
    references: [],
    fanout: [],
    peers: [],
    pairs: [],
    notes: [],
  };
  const backing = await startBacking(profile);
  const loadgen = forkWorker("loadgen.ts");
  const echo = forkWorker("echo-server.ts");
  const cleanups: Array<() => Promise<void>> = [() => loadgen.stop(), () => echo.stop()];
  try {
    const echoPort = await echo.request<number>({ responseBytes: addEventResponseBytes() });
    const echoRequest = addEventRequest("bench-append-15").toString("base64");
    const point = async (p: Omit<Point, keyof LoadResult>, run: () => Promise<LoadResult>) => {
      const result = await run();
      results.points.push({ ...p, ...result });
      log(
        `${p.backend.padEnd(18)} ${p.workload.padEnd(42)} c=${String(p.concurrency).padEnd(3)} ${String(result.throughput).padStart(9)}/s p50 ${result.p50Us}µs p99 ${result.p99Us}µs cpu ${JSON.stringify(result.cpuUsPerCall)}${result.errors ? ` errors ${result.errors}: ${result.firstError}` : ""}`,
      );
    };
    const load = (
      spec: Omit<LoadSpec, "durationMs" | "warmupMs" | "concurrency">,
      concurrency: number,
      minDurationMs = 0,
    ) =>
      loadgen.request<LoadResult>({
        ...spec,
        concurrency,
        durationMs: profile.name === "tiny" ? profile.durationMs : Math.max(profile.durationMs, minDurationMs),
        warmupMs: profile.warmupMs,
      } satisfies LoadSpec);
    // Warm up the echo server and the load generator (JIT) before anything is measured.
    await load({ target: `127.0.0.1:${echoPort}`, method: ECHO_METHOD, requests: [echoRequest], cpuPids: {} }, 16);
    const echoPoints = async (label: string) => {
      for (const c of profile.concurrencies) {
        await point(
          {
            kind: "baseline",
            backend: "grpc-js echo",
            workload: `echo (AddEvent-sized, before ${label})`,
            concurrency: c,
          },
          () =>
            load(
              {
                target: `127.0.0.1:${echoPort}`,
                method: ECHO_METHOD,
                requests: [echoRequest],
                cpuPids: { server: [echo.pid] },
              },
              c,
            ),
        );
      }
    };

    /**
     * The target ratios, measured as alternating pairs (echo, then AddEvent, then AddEvent, then
     * echo...) at the target concurrency: a single echo point before a backend moves its ratio by
     * up to a quarter on this shared box; the median of pair ratios moves less (bench/README.md).
     */
    const interleavedPairs = async (
      backend: string,
      workload: { method: string; requests: string[] },
      engram: EngramProcess,
      cpuPids: Record<string, number[]>,
    ) => {
      const c = profile.concurrencies.includes(16) ? 16 : Math.max(...profile.concurrencies);
      const pairLoad = (spec: Omit<LoadSpec, "durationMs" | "warmupMs" | "concurrency">) =>
        loadgen.request<LoadResult>({
          ...spec,
          concurrency: c,
          durationMs: profile.pairMs,
          warmupMs: Math.min(300, profile.warmupMs),
        } satisfies LoadSpec);
      const echoOnce = () =>
        pairLoad({
          target: `127.0.0.1:${echoPort}`,
          method: ECHO_METHOD,
          requests: [echoRequest],
          cpuPids: { server: [echo.pid] },
        });
      const engramOnce = () =>
        pairLoad({ target: engram.address, method: workload.method, requests: workload.requests, cpuPids });
      const pairs: TargetPairs = { backend, concurrency: c, echo: [], engram: [] };
      for (let i = 0; i < profile.targetPairs; i++) {
        const order = i % 2 === 0 ? [echoOnce, engramOnce] : [engramOnce, echoOnce];
        for (const measure of order) {
          const r = await measure();
          if (r.errors > 0) throw new Error(`${backend} pair ${i}: ${r.errors} errors (${r.firstError})`);
          (measure === echoOnce ? pairs.echo : pairs.engram).push(r.throughput);
        }
      }
      const ratios = pairs.engram.map((t, i) => t / pairs.echo[i]);
      log(
        `${backend.padEnd(18)} AddEvent ÷ echo, ${profile.targetPairs} interleaved pairs at c=${c}: ${ratios.map((r) => r.toFixed(2)).join(" ")}`,
      );
      return pairs;
    };

    if (profile.sections.has("baselines")) {
      // Calibration: how far throughput at c=16 falls when a call costs the server 50 µs of CPU
      // more than the bare echo, and nothing else changes (bench/README.md, "What the ratio targets leave").
      const burning = forkWorker("echo-server.ts");
      cleanups.push(() => burning.stop());
      const burningPort = await burning.request<number>({
        responseBytes: addEventResponseBytes(),
        burnUs: CALIBRATION_BURN_US,
      });
      await load({ target: `127.0.0.1:${burningPort}`, method: ECHO_METHOD, requests: [echoRequest], cpuPids: {} }, 16);
      await point(
        {
          kind: "baseline",
          backend: "grpc-js echo",
          workload: "echo (AddEvent-sized, before calibration)",
          concurrency: 16,
        },
        () =>
          load(
            {
              target: `127.0.0.1:${echoPort}`,
              method: ECHO_METHOD,
              requests: [echoRequest],
              cpuPids: { server: [echo.pid] },
            },
            16,
          ),
      );
      await point(
        {
          kind: "baseline",
          backend: "grpc-js echo",
          workload: `echo spinning ${CALIBRATION_BURN_US} µs per call (calibration)`,
          concurrency: 16,
        },
        () =>
          load(
            {
              target: `127.0.0.1:${burningPort}`,
              method: ECHO_METHOD,
              requests: [echoRequest],
              cpuPids: { server: [burning.pid] },
            },
            16,
          ),
      );
      await burning.stop();
    }

    for (const backend of profile.backends) {
      const url = backend === "redis" ? backing.redis!.url : backend === "postgres" ? backing.postgres!.url : undefined;
      const args = [
        "--memory-type",
        backend,
        "--max-session-events",
        "1000000",
        "--max-sessions",
        "1000000",
        ...(backend === "redis" ? ["--redis-url", url!] : backend === "postgres" ? ["--postgres-url", url!] : []),
        "--key-prefix",
        `bench_${Date.now()}`,
      ];
      const engram = await startEngram(args, {}, SERVER_NODE_ARGS);
      cleanups.push(() => engram.stop());
      try {
        log(`${backend}: engram pid ${engram.pid} on ${engram.address}; seeding`);
        const maxC = Math.max(...profile.concurrencies);
        await seed(engram.address, profile.sizes, maxC);
        if (backend === "postgres") {
          // As after any bulk load: otherwise autovacuum's one-off pass over the seed lands in whichever point runs next.
          const { default: pg } = await import("pg");
          const client = new pg.Client({ connectionString: url });
          await client.connect();
          await client.query("VACUUM ANALYZE");
          await client.end();
        }
        // The transport ceiling is measured right before each backend's AddEvent, so drift on a shared box cancels out of the ratio.
        await echoPoints(backend);
        for (const workload of serverWorkloads(profile.sizes, maxC)) {
          if (profile.workloads && !profile.workloads.some((w) => workload.name.startsWith(w))) continue;
          // One call first: what a method loads on first use (e.g. a tokenizer) is not what we measure.
          await prime(engram.address, workload);
          for (const c of profile.concurrencies) {
            await point({ kind: "server", backend, workload: workload.name, concurrency: c }, () =>
              load(
                {
                  target: engram.address,
                  method: workload.method,
                  requests: workload.requests,
                  cycle: workload.cycle,
                  paging: workload.paging,
                  cpuPids: cpuPidsFor(backend, engram, backing),
                },
                c,
                workload.minDurationMs,
              ),
            );
          }
          if (workload.name === "AddEvent" && profile.targetPairs > 0) {
            results.pairs.push(await interleavedPairs(backend, workload, engram, cpuPidsFor(backend, engram, backing)));
          }
        }
      } finally {
        await engram.stop();
      }
      if (profile.sections.has("baselines") && (backend === "redis" || backend === "postgres")) {
        const raw = forkWorker("raw-store.ts");
        try {
          const rawSpec = {
            backend: backend as "redis" | "postgres",
            url: url!,
            tailSessionEvents: 1000,
            durationMs: profile.durationMs,
            warmupMs: profile.warmupMs,
          };
          await raw.request<LoadResult>({ ...rawSpec, op: "open", concurrency: 1, cpuPids: {} } satisfies RawSpec);
          const memoryOps = [
            "write-memories",
            ...(backend === "postgres" && profile.pgvector ? ["hnsw-insert" as const] : []),
          ] as const;
          for (const op of ["append", "tail", ...memoryOps] as const) {
            for (const c of profile.concurrencies) {
              const workload = RAW_WORKLOADS[op];
              await point({ kind: "baseline", backend: `${backend} driver`, workload, concurrency: c }, () =>
                raw.request<LoadResult>({
                  ...rawSpec,
                  op,
                  concurrency: c,
                  cpuPids: cpuPidsFor(backend, undefined, backing),
                  ...(op === "hnsw-insert" ? { durationMs: Math.max(rawSpec.durationMs, VECTOR_WRITE_MS) } : {}),
                } satisfies RawSpec),
              );
            }
          }
        } finally {
          await raw.stop();
        }
      }
    }

    if (profile.sections.has("references")) {
      const { runReferences } = await import("./references.js");
      results.references = await runReferences(profile, backing, log);
    }
    if (profile.sections.has("memory")) {
      const { measureMemory } = await import("./memory.js");
      results.memory = await measureMemory(profile.memoryEvents, log);
    }
    if (profile.sections.has("fanout") && backing.redis) {
      const { runFanout } = await import("./fanout.js");
      results.fanout = await runFanout(profile, backing.redis.url, log, SERVER_NODE_ARGS);
    }
    if (profile.sections.has("peers")) {
      const { runPeers } = await import("./peers/peers.js");
      const peers = await runPeers(profile, backing, log);
      results.peers = peers.points;
      results.notes.push(...peers.notes);
    }
    if (profile.sections.has("motorhead") && backing.redis) {
      const { MOTORHEAD_ENV, runMotorhead } = await import("./peers/motorhead.js");
      if (process.env[MOTORHEAD_ENV])
        results.motorhead = await runMotorhead(profile, backing.redis, loadgen, log, SERVER_NODE_ARGS);
      else
        results.notes.push(
          `Motorhead: not run (${MOTORHEAD_ENV} names no binary; bench/README.md says how to build one).`,
        );
    }
    if (profile.sections.has("context") && existsSync(path.join(REPO_ROOT, "bench/context.bench.ts"))) {
      try {
        const mod = (await import(path.join(REPO_ROOT, "bench/context.bench.ts"))) as {
          runContextBench?: () => Promise<unknown>;
        };
        if (mod.runContextBench) results.context = await mod.runContextBench();
      } catch (err) {
        results.notes.push(`bench/context.bench.ts failed: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
    if (profile.sections.has("memories")) {
      const { runMemoriesBench } = await import("./memories.js");
      results.memories = await runMemoriesBench(profile, {
        load: (spec) =>
          loadgen.request<LoadResult>({
            ...spec,
            durationMs: profile.memoriesPointMs,
            warmupMs: profile.warmupMs,
          } satisfies LoadSpec),
        log,
        serverNodeArgs: SERVER_NODE_ARGS,
        stores: profile.backends.flatMap((backend) => {
          if (backend !== "postgres" && backend !== "redis") return [];
          const url = backend === "redis" ? backing.redis!.url : backing.postgres!.url;
          const args = [
            "--memory-type",
            backend,
            backend === "redis" ? "--redis-url" : "--postgres-url",
            url,
            "--key-prefix",
            `bench_memories_${Date.now()}`,
          ];
          return [{ backend, args, cpuPids: cpuPidsFor(backend, undefined, backing) }];
        }),
      });
    }
    if (profile.sections.has("needles")) {
      // One process per store: 1M memories want the heap of their own.
      for (const backend of profile.backends) {
        const url =
          backend === "redis" ? backing.redis?.url : backend === "postgres" ? backing.postgres?.url : undefined;
        const storeArgs = [
          "--memory-type",
          backend,
          ...(url ? [backend === "redis" ? "--redis-url" : "--postgres-url", url] : []),
          "--key-prefix",
          `bench_needles_${Date.now()}`,
        ];
        const output = execFileSync(
          process.execPath,
          [
            "--max-old-space-size=8000",
            "--import",
            "tsx",
            "bench/memories-needles.ts",
            "--count",
            String(profile.needlesCount),
            ...storeArgs,
          ],
          { cwd: REPO_ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] },
        );
        log(output.trim());
        results.notes.push(...output.split("\n").filter((line) => line.startsWith("needles ")));
      }
    }
    if (profile.sections.has("cluster") && backing.redis) {
      const { runCluster } = await import("./cluster.js");
      results.cluster = await runCluster(profile, {
        load: (spec, durationMs) =>
          loadgen.request<LoadResult>({
            ...spec,
            durationMs: durationMs ?? profile.durationMs,
            warmupMs: profile.warmupMs,
          } satisfies LoadSpec),
        log,
        serverNodeArgs: SERVER_NODE_ARGS,
        single: backing.redis,
      });
    }
  } finally {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    await backing.redis?.destroy().catch(() => {});
    await backing.postgres?.stop().catch(() => {});
  }
  results.meta.seconds = Math.round((Date.now() - started) / 1000);
  results.meta.loadAverageAtEnd = os.loadavg().map((v) => Math.round(v * 100) / 100);
  mkdirSync(out, { recursive: true });
  await writeReport(results, out, profile.sections.has("plot"));
  log(`done in ${results.meta.seconds} s: ${path.join(out, "results.md")}`);
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);
