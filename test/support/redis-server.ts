/**
 * Starts a throw-away redis-server for tests: loopback only, a free port, a
 * temp dir, AOF with fsync every second, no RDB snapshots. It can be
 * stopped, restarted on the same port and dir (the AOF is kept) or killed,
 * which is what the fault tests need.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { debianBinary, freePort, onPath } from "./host.js";
import type { RedisBuild } from "./redis-builds.js";

/** A running (or stopped) test redis-server. */
export interface RedisServer {
  url: string;
  port: number;
  /** Its working dir: AOF files live here. */
  dir: string;
  /** The running process's pid (undefined when stopped); it changes on restart. */
  readonly pid: number | undefined;
  /** SIGTERM (Redis flushes the AOF), waits for exit. */
  stop(): Promise<void>;
  /** Stops it if running, then starts it again on the same port and dir, and waits until it answers. */
  restart(): Promise<void>;
  /** SIGKILL, waits for exit. */
  kill(): Promise<void>;
  /** Stops it and removes its dir. */
  destroy(): Promise<void>;
}

/** Finds redis-server, installing the Debian package once when running as root. */
function redisServerBinary(): Promise<string> {
  return debianBinary({
    packageName: "redis-server",
    candidates: onPath("redis-server"),
    timeoutMs: 300_000,
    hint: "or set MEMORY_TEST_REDIS_URL",
  });
}

export { freePort };

/** True when a PING on the port gets +PONG. */
function pingOnce(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = createConnection({ host: "127.0.0.1", port });
    let data = "";
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.once("error", () => done(false));
    socket.once("connect", () => socket.write("PING\r\n"));
    socket.on("data", (d) => {
      data += d;
      if (data.includes("\r\n")) done(data.startsWith("+PONG"));
    });
  });
}

/** Waits (bounded) until Redis on `port` answers PING. */
export async function waitForRedis(port: number, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await pingOnce(port))) {
    if (Date.now() > deadline)
      throw new Error(`redis-server on port ${port} did not answer PING within ${timeoutMs} ms`);
    await sleep(50);
  }
}

/**
 * Starts a dedicated redis-server in a temp dir, on a free loopback port or on
 * `port` (a server already told to use that port, started before Redis).
 * `extraArgs` are appended to the command line (e.g. cluster mode), and kept
 * across restarts. `build` runs another Redis than Debian's redis-server (one
 * built from Redis' source: test/support/redis-builds.ts; Valkey with the
 * Query Engine: test/support/redis-search-server.ts).
 */
export async function startRedisServer(
  opts: { appendonly?: boolean; port?: number; extraArgs?: readonly string[]; build?: RedisBuild } = {},
): Promise<RedisServer> {
  const binary = opts.build?.binary ?? (await redisServerBinary());
  const dir = mkdtempSync(path.join(tmpdir(), "engram-redis-"));
  let port = 0;
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  let log = "";

  const launch = async () => {
    const args = [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--dir",
      dir,
      "--appendonly",
      opts.appendonly === false ? "no" : "yes",
      "--appendfsync",
      "everysec",
      "--save",
      "",
      "--daemonize",
      "no",
      "--protected-mode",
      "yes",
      ...(opts.build?.args ?? []),
      ...(opts.extraArgs ?? []),
    ];
    log = "";
    const proc = spawn(binary, args, {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...opts.build?.env },
    });
    proc.stdout!.on("data", (d) => (log = (log + d).slice(-4000)));
    proc.stderr!.on("data", (d) => (log = (log + d).slice(-4000)));
    child = proc;
    exited = new Promise((resolve) => proc.once("exit", () => resolve()));
    const died = exited.then(() => {
      throw new Error(`redis-server exited during start-up: ${log}`);
    });
    await Promise.race([waitForRedis(port), died]);
    void died.catch(() => {});
  };

  const signal = async (sig: NodeJS.Signals) => {
    const proc = child;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill(sig);
    if (sig !== "SIGTERM") return exited;
    // Redis refuses a SIGTERM while it writes its initial AOF (a replica right after a full
    // sync logs "Writing initial AOF, can't exit." and runs on): ask again, bounded, then SIGKILL.
    for (let attempt = 0; attempt < 100; attempt++) {
      const gone = await Promise.race([exited.then(() => true), sleep(200).then(() => false)]);
      if (gone) return;
      proc.kill("SIGTERM");
    }
    proc.kill("SIGKILL");
    await exited;
  };

  // A port the kernel just handed out may be taken by another process before we bind it: retry.
  for (let attempt = 0; ; attempt++) {
    port = opts.port ?? (await freePort());
    try {
      await launch();
      break;
    } catch (err) {
      await signal("SIGKILL");
      if (attempt >= 2) {
        rmSync(dir, { recursive: true, force: true });
        throw err;
      }
    }
  }
  // Never leave a server behind a crashed test process.
  const onExit = () => child?.kill("SIGKILL");
  process.once("exit", onExit);

  const server: RedisServer = {
    url: `redis://127.0.0.1:${port}`,
    port,
    dir,
    get pid() {
      return child && child.exitCode === null && child.signalCode === null ? child.pid : undefined;
    },
    stop: () => signal("SIGTERM"),
    kill: () => signal("SIGKILL"),
    restart: async () => {
      await signal("SIGTERM");
      await launch();
    },
    destroy: async () => {
      await signal("SIGTERM");
      process.removeListener("exit", onExit);
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return server;
}
