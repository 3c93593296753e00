/**
 * Child processes of the benchmark: Engram servers and helper scripts run as
 * separate node processes, so the load generator and the server never share a
 * CPU-time account, and their CPU is read from /proc per process.
 */
import { fork, spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** Repository root. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ; 100 on every Linux we run on). */
const CLOCK_TICKS = 100;

/**
 * CPU seconds from /proc/<pid>/stat: the process's own (user + system) and
 * its reaped children's (cutime + cstime); undefined when unreadable.
 */
function statCpuSeconds(pid: number): { own: number; reapedChildren: number } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // The command name (field 2) may hold spaces: fields are counted after its closing parenthesis.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return {
      own: (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS,
      reapedChildren: (Number(fields[13]) + Number(fields[14])) / CLOCK_TICKS,
    };
  } catch {
    return undefined;
  }
}

/** User + system CPU seconds consumed so far by a process, or NaN when unreadable. */
export function processCpuSeconds(pid: number): number {
  return statCpuSeconds(pid)?.own ?? Number.NaN;
}

/**
 * CPU seconds of a process and its children so far: its own time, the time
 * of its children that exited and were reaped (cutime/cstime), and that of
 * the children still running. Charged this way, a PostgreSQL postmaster
 * covers every backend, also one the pool opened or closed inside the
 * measured window, and redis-server covers its AOF-rewrite forks. NaN when
 * the process is unreadable.
 */
export function processTreeCpuSeconds(pid: number): number {
  const times = statCpuSeconds(pid);
  if (times === undefined) return Number.NaN;
  let total = times.own + times.reapedChildren;
  // A child that exits between the two reads is missed by this reading only (its time moves to cutime).
  for (const child of childPids(pid)) {
    const seconds = processCpuSeconds(child);
    if (Number.isFinite(seconds)) total += seconds;
  }
  return total;
}

/** Ids of a process's direct children (PostgreSQL backends are children of the postmaster). */
export function childPids(pid: number): number[] {
  try {
    const tasks = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim();
    return tasks ? tasks.split(/\s+/).map(Number) : [];
  } catch {
    return [];
  }
}

/** Every child still running; killed if the runner exits without stopping them (one exit listener for all). */
const running = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

function track(child: ChildProcess): void {
  running.add(child);
  child.once("exit", () => running.delete(child));
}

/** Node arguments that run TypeScript through tsx in the same process (no wrapper process). */
export const TSX_NODE_ARGS = ["--import", "tsx"];

/** An Engram server running as a child process. */
export interface EngramProcess {
  pid: number;
  port: number;
  address: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

/**
 * How the bench runs the server: "compiled" (default: `node dist/main.js`,
 * what `npm start` runs; the runner builds dist/ when stale) or "tsx" (the
 * sources through tsx in the same process), from BENCH_SERVER.
 */
export const SERVER_BUILD: "compiled" | "tsx" = process.env.BENCH_SERVER === "tsx" ? "tsx" : "compiled";

/** Starts the server under node (so `pid` is the server itself), as SERVER_BUILD says, and waits for its "listening" line. */
export async function startEngram(
  args: string[],
  env: Record<string, string> = {},
  nodeArgs: string[] = [],
): Promise<EngramProcess> {
  const entry = SERVER_BUILD === "tsx" ? [...TSX_NODE_ARGS, ...nodeArgs, "src/main.ts"] : [...nodeArgs, "dist/main.js"];
  const child = spawn(process.execPath, [...entry, "--host", "127.0.0.1", "--port", "0", ...args], {
    cwd: REPO_ROOT,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stderr!.on("data", (d) => (output = (output + d).slice(-4000)));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`engram did not start in 60 s: ${output}`)), 60_000);
    createInterface({ input: child.stdout! }).on("line", (line) => {
      output = (output + line + "\n").slice(-4000);
      try {
        const entry = JSON.parse(line) as { msg?: string; port?: number };
        if (entry.msg === "listening" && entry.port) {
          clearTimeout(timer);
          resolve(entry.port);
        }
      } catch {
        // not a log line
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`engram exited before listening: ${output}`));
    });
  });
  track(child);
  return {
    pid: child.pid!,
    port,
    address: `127.0.0.1:${port}`,
    child,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** A forked TypeScript worker that answers one request message with one reply message at a time. */
export interface Worker {
  pid: number;
  request<T>(message: unknown, timeoutMs?: number): Promise<T>;
  stop(): Promise<void>;
}

/** Forks `bench/<script>` under tsx with an IPC channel. */
export function forkWorker(script: string, nodeArgs: string[] = []): Worker {
  const child = fork(path.join(REPO_ROOT, "bench", script), [], {
    cwd: REPO_ROOT,
    execArgv: [...TSX_NODE_ARGS, ...nodeArgs],
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  track(child);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  let queue: Promise<unknown> = Promise.resolve();
  return {
    pid: child.pid!,
    request<T>(message: unknown, timeoutMs = 600_000): Promise<T> {
      const run = () =>
        new Promise<T>((resolve, reject) => {
          const timer = setTimeout(() => {
            cleanup();
            reject(new Error(`${script}: no reply in ${timeoutMs} ms`));
          }, timeoutMs);
          const onMessage = (reply: { ok: boolean; value?: T; error?: string }) => {
            cleanup();
            if (reply.ok) resolve(reply.value as T);
            else reject(new Error(`${script}: ${reply.error}`));
          };
          const onExit = () => {
            cleanup();
            reject(new Error(`${script} exited`));
          };
          const cleanup = () => {
            clearTimeout(timer);
            child.off("message", onMessage);
            child.off("exit", onExit);
          };
          child.on("message", onMessage);
          child.once("exit", onExit);
          child.send(message as object);
        });
      const next = queue.then(run, run);
      queue = next.catch(() => {});
      return next;
    },
    stop: async () => {
      if (child.connected) child.disconnect();
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Runs a handler for every IPC request of a forked worker; replies with its value or error. */
export function serveRequests(handler: (message: never) => Promise<unknown>): void {
  process.on("message", (message) => {
    handler(message as never).then(
      (value) => process.send!({ ok: true, value }),
      (err: unknown) =>
        process.send!({ ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
    );
  });
  process.on("disconnect", () => process.exit(0));
}

/** The id of the first process whose command line holds every needle (e.g. "postgres", "-p", port), or undefined. */
export function findPid(...needles: string[]): number | undefined {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8").replaceAll("\0", " ");
      if (needles.every((n) => cmdline.includes(n))) return Number(entry);
    } catch {
      // gone
    }
  }
  return undefined;
}
