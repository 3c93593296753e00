/**
 * Starts Engram for tests: in-process (real sockets, fast) or as a child
 * process (for signals, kills and several replicas). Every address is 127.0.0.1.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { pino, type Logger } from "pino";
import { loadConfig, type Config } from "../../src/config.js";
import { MemoryService } from "../../src/service/memory-service.js";
import { rerankerFromConfig } from "../../src/service/memories/reranker.js";
import { embeddingsClientFromConfig } from "../../src/service/memories/embeddings.js";
import { extractionSettingsFromConfig } from "../../src/service/memories/extraction.js";
import { DEFAULT_SERVICE_LIMITS } from "../../src/service/limits.js";
import { startServer, type RunningServer } from "../../src/server/server.js";
import type { MemoryStore } from "../../src/store/types.js";
import { LocalStore } from "../../src/store/local.js";
import { storeLimits } from "../../src/store/index.js";

/** Repository root. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** An in-process server and its parts. */
export interface TestServer {
  port: number;
  address: string;
  baseUrl: string;
  service: MemoryService;
  store: MemoryStore;
  server: RunningServer;
  stop(): Promise<void>;
}

/** Starts an in-process server on a free loopback port. */
export async function startTestServer(
  opts: { store?: MemoryStore; config?: Partial<Config>; log?: Logger } = {},
): Promise<TestServer> {
  const config: Config = {
    ...loadConfig([], {}),
    host: "127.0.0.1",
    port: 0,
    heartbeatMs: 200,
    shutdownGraceMs: 2000,
    ...opts.config,
  };
  const store = opts.store ?? new LocalStore(storeLimits(config));
  const service = new MemoryService(store, {
    limits: { ...DEFAULT_SERVICE_LIMITS, maxEventBytes: config.maxEventBytes, maxBatchEvents: config.maxBatchEvents },
    contextLimit: config.contextLimit,
    heartbeatMs: config.heartbeatMs,
    embeddings: embeddingsClientFromConfig(config),
    reranker: rerankerFromConfig(config),
    extraction: extractionSettingsFromConfig(config),
  });
  const server = await startServer(service, config, opts.log ?? pino({ level: "silent" }));
  return {
    port: server.port,
    address: `127.0.0.1:${server.port}`,
    baseUrl: `http://127.0.0.1:${server.port}`,
    service,
    store,
    server,
    stop: async () => {
      await server.close();
      await store.close();
    },
  };
}

/** A server running as a child process. */
export interface ServerProcess {
  port: number;
  address: string;
  baseUrl: string;
  child: ChildProcess;
  /** Every stdout line so far (JSON logs). */
  lines: string[];
  /** Resolves with the exit code (or signal) once the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Spawns the server from its TypeScript sources (`node --import tsx
 * src/main.ts`, one process, so signals reach the server itself, not tsx's
 * relay) or, with `compiled`, the build (`node dist/main.js`, made by
 * `npm run build`), on port 0, and waits for its "listening" log line.
 * `openFiles` runs it under `prlimit --nofile` (soft and hard), as `ulimit -n` would.
 * `entry` runs another script instead (an installed package's bin), from `cwd`.
 * `startTimeoutMs` (30 s) bounds the wait for "listening": longer for sources
 * tsx has not compiled before (a copy of src/).
 */
export async function spawnServer(
  env: Record<string, string> = {},
  args: string[] = [],
  opts: { openFiles?: number; compiled?: boolean; entry?: string[]; cwd?: string; startTimeoutMs?: number } = {},
): Promise<ServerProcess> {
  const entry = opts.entry ?? (opts.compiled ? ["dist/main.js"] : ["--import", "tsx", "src/main.ts"]);
  const command = [process.execPath, ...entry, "--host", "127.0.0.1", "--port", "0", ...args];
  if (opts.openFiles !== undefined) command.unshift("prlimit", `--nofile=${opts.openFiles}:${opts.openFiles}`);
  const child = spawn(command[0], command.slice(1), {
    cwd: opts.cwd ?? REPO_ROOT,
    env: { ...process.env, MEMORY_STREAM_HEARTBEAT_MS: "200", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: string[] = [];
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  const port = await new Promise<number>((resolve, reject) => {
    const startTimeoutMs = opts.startTimeoutMs ?? 30_000;
    const timer = setTimeout(
      () => reject(new Error(`server did not start in ${startTimeoutMs / 1000} s: ${stderr}${lines.join("\n")}`)),
      startTimeoutMs,
    );
    createInterface({ input: child.stdout! }).on("line", (line) => {
      lines.push(line);
      try {
        const entry = JSON.parse(line);
        if (entry.msg === "listening") {
          clearTimeout(timer);
          resolve(entry.port);
        }
      } catch {
        // not a log line
      }
    });
    void exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening: ${stderr}${lines.join("\n")}`));
    });
  });
  return {
    port,
    address: `127.0.0.1:${port}`,
    baseUrl: `http://127.0.0.1:${port}`,
    child,
    lines,
    exited,
    kill: (signal = "SIGTERM") => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      return exited;
    },
  };
}
