/**
 * Peer memory servers on the same box and backend. Google ADK's
 * DatabaseSessionService (PyPI google-adk[db], in bench/.venv) is driven by
 * bench/peers/adk_load.py over the same PostgreSQL; peers that cannot be
 * installed from a registry here are reported as such, with the reason. Motorhead, built from its source outside
 * the checkout, is compared in bench/peers/motorhead.ts.
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { REPO_ROOT } from "../lib/processes.js";
import type { PeerPoint, Profile } from "../types.js";

/** Version pins of what bench/.venv holds. */
export const ADK_REQUIREMENTS = ["google-adk[db]==2.13.0", "asyncpg==0.32.0"];

const VENV = path.join(REPO_ROOT, "bench/.venv");
/** The python of bench/.venv, once ensureVenv said it is ready. */
export const PYTHON = path.join(VENV, "bin/python");

/** Creates bench/.venv with google-adk when missing (PyPI through pip); returns false when that is impossible. */
export function ensureVenv(log: (message: string) => void): boolean {
  const ready = () => {
    try {
      execFileSync(PYTHON, ["-c", "import google.adk.sessions.database_session_service, asyncpg"], { stdio: "ignore" });
      return true;
    } catch {
      return false;
    }
  };
  if (existsSync(PYTHON) && ready()) return true;
  log("peers: installing google-adk into bench/.venv (pip, PyPI)");
  try {
    if (!existsSync(PYTHON)) execFileSync("python3", ["-m", "venv", VENV], { stdio: "ignore" });
    execFileSync(path.join(VENV, "bin/pip"), ["install", "-q", ...ADK_REQUIREMENTS], {
      stdio: "ignore",
      timeout: 600_000,
    });
  } catch (err) {
    log(`peers: could not install google-adk: ${err instanceof Error ? err.message : String(err)}`);
    return false;
  }
  return ready();
}

/** Version pins of the mem0 peer's environment (.tmp/mem0-venv): mem0ai without extras, and the qdrant-client it resolved. */
export const MEM0_REQUIREMENTS = ["mem0ai==2.2.1", "qdrant-client==1.20.0"];

// Its own venv, not bench/.venv: mem0 and google-adk pin openai, pydantic and protobuf
// independently, and a resolver conflict in one must not cost the other peer its figures.
const MEM0_VENV = path.join(REPO_ROOT, ".tmp/mem0-venv");
/** The python of .tmp/mem0-venv, once ensureMem0Venv said it is ready. */
export const MEM0_PYTHON = path.join(MEM0_VENV, "bin/python");

/** Creates .tmp/mem0-venv with mem0ai when missing (PyPI through pip); returns false when that is impossible. */
export function ensureMem0Venv(log: (message: string) => void): boolean {
  const ready = () => {
    try {
      execFileSync(MEM0_PYTHON, ["-c", "import mem0, qdrant_client"], {
        stdio: "ignore",
        env: { ...process.env, MEM0_TELEMETRY: "False" },
      });
      return true;
    } catch {
      return false;
    }
  };
  if (existsSync(MEM0_PYTHON) && ready()) return true;
  log("peers: installing mem0ai into .tmp/mem0-venv (pip, PyPI)");
  try {
    if (!existsSync(MEM0_PYTHON)) execFileSync("python3", ["-m", "venv", MEM0_VENV], { stdio: "ignore" });
    execFileSync(path.join(MEM0_VENV, "bin/pip"), ["install", "-q", ...MEM0_REQUIREMENTS], {
      stdio: "ignore",
      timeout: 600_000,
    });
  } catch (err) {
    log(`peers: could not install mem0ai: ${err instanceof Error ? err.message : String(err)}`);
    return false;
  }
  return ready();
}

/** Runs every peer that can run here; returns its points and notes on those that cannot. */
export async function runPeers(
  profile: Profile,
  backing: { postgres?: { url: string } },
  log: (message: string) => void,
): Promise<{ points: PeerPoint[]; notes: string[] }> {
  const points: PeerPoint[] = [];
  const notes = [
    "Redis agent-memory-server (PyPI agent-memory-server 0.15.2): not run. It requires the Redis Query Engine (RediSearch, Redis Stack or Redis 8) for its indexes, and Debian's redis-server here is 7.0 without modules.",
  ];
  if (!backing.postgres) return { points, notes };
  if (!ensureVenv(log)) {
    notes.push("Google ADK: bench/.venv could not be created (pip install failed); no ADK figures.");
    return { points, notes };
  }
  // ADK gets a database of its own on the same PostgreSQL server.
  const { default: pg } = await import("pg");
  const admin = new pg.Client({ connectionString: backing.postgres.url });
  await admin.connect();
  const database = `adkbench_${Date.now()}`;
  await admin.query(`CREATE DATABASE ${database}`);
  await admin.end();
  const url = new URL(backing.postgres.url);
  const dbUrl = `postgresql+asyncpg://${url.username}@${url.host}/${database}`;
  const args = [
    path.join(REPO_ROOT, "bench/peers/adk_load.py"),
    "--db-url",
    dbUrl,
    "--concurrency",
    profile.concurrencies.join(","),
    "--duration",
    String(profile.durationMs / 1000),
    "--warmup",
    String(profile.warmupMs / 1000),
    "--read-events",
    "1000",
  ];
  log(`peers: google-adk DatabaseSessionService on ${dbUrl}`);
  const output = await new Promise<string>((resolve, reject) => {
    const child = spawn(PYTHON, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => {
      stdout += d;
      for (const line of String(d).trim().split("\n")) if (line) log(`peers: adk ${line}`);
    });
    child.stderr.on("data", (d) => (stderr = (stderr + d).slice(-4000)));
    const timer = setTimeout(() => child.kill("SIGKILL"), 600_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      if (code === 0) resolve(stdout);
      else reject(new Error(`adk_load.py exited ${code}: ${stderr}`));
    });
  });
  for (const line of output.trim().split("\n")) {
    const r = JSON.parse(line) as {
      workload: string;
      concurrency: number;
      throughput: number;
      p50Us: number;
      p99Us: number;
      calls: number;
      errors: number;
    };
    points.push({ peer: "google-adk DatabaseSessionService", backend: "postgres", ...r });
  }
  return { points, notes };
}
