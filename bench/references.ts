/**
 * Reference figures from the backends' own benchmark tools, in the same run:
 * redis-benchmark (SET/GET of 100 bytes, and EVALSHA-free LPUSH/LRANGE) and
 * pgbench (select-only and simple-update). They show what the backing
 * servers do on this machine with a client written in C.
 */
import { execFileSync } from "node:child_process";
import path from "node:path";
import type { Profile, Reference } from "./types.js";

function redisBenchmark(url: string, profile: Profile): Reference[] {
  const { hostname, port } = new URL(url);
  const out: Reference[] = [];
  const requests = Math.max(2000, Math.round(profile.durationMs * 20));
  for (const c of profile.concurrencies) {
    const args = [
      "-h",
      hostname,
      "-p",
      port,
      "-c",
      String(c),
      "-n",
      String(requests),
      "-d",
      "100",
      "-t",
      "set,get,lpush,lrange_100",
      "--csv",
    ];
    const csv = execFileSync("redis-benchmark", args, { encoding: "utf8", timeout: 120_000 });
    for (const line of csv.trim().split("\n").slice(1)) {
      const cells = line.split(",").map((c) => c.replaceAll('"', ""));
      out.push({
        tool: "redis-benchmark",
        test: cells[0],
        concurrency: c,
        throughput: Number(cells[1]),
        p50Us: Number(cells[4]) * 1000,
        p99Us: Number(cells[6]) * 1000,
        command: `redis-benchmark ${args.join(" ")}`,
      });
    }
  }
  return out;
}

function pgbench(port: number, profile: Profile): Reference[] {
  const bin = path.join(
    path.dirname(
      execFileSync("sh", ["-c", "ls -d /usr/lib/postgresql/*/bin/pgbench | sort -V | tail -1"], {
        encoding: "utf8",
      }).trim(),
    ),
  );
  const pgbenchPath = path.join(bin, "pgbench");
  const common = ["-h", "127.0.0.1", "-p", String(port), "-U", "postgres"];
  execFileSync(path.join(bin, "createdb"), [...common, "pgbench"], { stdio: "ignore" });
  execFileSync(pgbenchPath, [...common, "-i", "-s", "1", "-q", "pgbench"], { stdio: "ignore", timeout: 120_000 });
  const out: Reference[] = [];
  const seconds = Math.max(1, Math.round(profile.durationMs / 1000));
  for (const c of profile.concurrencies) {
    for (const [test, flag] of [
      ["select-only", "-S"],
      ["simple-update", "-N"],
    ] as const) {
      const args = [...common, "-c", String(c), "-j", "2", "-T", String(seconds), flag, "pgbench"];
      const text = execFileSync(pgbenchPath, args, {
        encoding: "utf8",
        timeout: 120_000,
        stdio: ["ignore", "pipe", "pipe"],
      });
      const tps = /tps = ([\d.]+)/.exec(text);
      out.push({
        tool: "pgbench",
        test,
        concurrency: c,
        throughput: tps ? Number(tps[1]) : Number.NaN,
        command: `pgbench ${args.join(" ")}`,
      });
    }
  }
  return out;
}

/** Runs the reference tools against the run's redis-server and PostgreSQL. */
export async function runReferences(
  profile: Profile,
  backing: { redis?: { url: string }; postgres?: { url: string; port: number } },
  log: (message: string) => void,
): Promise<Reference[]> {
  const out: Reference[] = [];
  try {
    if (backing.redis) out.push(...redisBenchmark(backing.redis.url, profile));
  } catch (err) {
    log(`references: redis-benchmark failed: ${err instanceof Error ? err.message : String(err)}`);
  }
  try {
    if (backing.postgres) out.push(...pgbench(backing.postgres.port, profile));
  } catch (err) {
    log(`references: pgbench failed: ${err instanceof Error ? err.message : String(err)}`);
  }
  for (const r of out) log(`reference ${r.tool} ${r.test} c=${r.concurrency}: ${r.throughput}/s`);
  return out;
}
