/**
 * How long `engram --help` takes to answer, by each way of running it:
 * - the bin through node in this checkout: the CLI alone;
 * - `npx engram` in this checkout, where npm runs node_modules/.bin/engram
 *   (the bin of the packages/cli workspace, linked by `npm ci`);
 * - `npx engram` in a fresh npm project with the packed tarballs installed
 *   (npm pack and npm install, as test/packages/artifacts.ts makes them);
 * - npm's own floor: `npx engram` where `engram` is a bin that does nothing,
 *   in an empty project (what any `npx` of a local bin costs before the bin
 *   runs), and `npx --version`.
 * Each way is called `runs` times one after the other, every npx way with a
 * fresh, empty npm cache: its first call is the one a fresh clone or project
 * makes (nothing in the npx cache), the others are warm. Prints the first
 * call, the median and the fastest of the warm ones, in milliseconds of wall
 * time, and the median CPU time (user + system of the call's processes),
 * which a busy machine inflates far less than wall time.
 *
 *   node --import tsx bench/cli-startup.ts [runs=10]
 */
import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import path from "node:path";
import { npmProject, packNpm } from "../test/packages/artifacts.js";
import { REPO_ROOT } from "./lib/processes.js";

const runs = Math.min(50, Math.max(2, Number(process.argv[2] ?? 10)));

interface Call {
  wallMs: number;
  cpuMs: number;
}

/** One call through bash, whose `times` reports the CPU time of the processes it waited for. */
function timeCall(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Call {
  const start = performance.now();
  const out = execFileSync("bash", ["-c", '"$@" >/dev/null || exit $?; times', "bash", command, ...args], {
    cwd,
    env,
    encoding: "utf8",
    timeout: 120_000,
  });
  const wallMs = performance.now() - start;
  // `times` prints the shell's user and system time, then its children's: "0m1.070s 0m0.170s".
  const children = out.trim().split("\n").at(-1)!;
  const cpuMs = [...children.matchAll(/(\d+)m([\d.]+)s/g)].reduce(
    (sum, [, minutes, seconds]) => sum + (Number(minutes) * 60 + Number(seconds)) * 1000,
    0,
  );
  return { wallMs, cpuMs };
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/** Times `runs` calls of one way; an npx way gets an npm cache of its own, empty at the first call. */
function report(name: string, command: string, args: string[], cwd: string, work: string): void {
  const npmCache = mkdtempSync(path.join(work, "npm-cache-"));
  const env = { ...process.env, npm_config_cache: npmCache, npm_config_update_notifier: "false" };
  const calls = Array.from({ length: runs }, () => timeCall(command, args, cwd, env));
  const warm = calls.slice(1).map((call) => call.wallMs);
  const ms = (value: number) => value.toFixed(0).padStart(6);
  console.log(
    `${name.padEnd(44)} first ${ms(calls[0].wallMs)} ms   warm median ${ms(median(warm))} ms   fastest ${ms(Math.min(...warm))} ms   CPU median ${ms(median(calls.map((call) => call.cpuMs)))} ms   (${runs} calls)`,
  );
}

/** An empty project whose node_modules/.bin/engram does nothing: npx's cost before any bin runs. */
function noopProject(dir: string): void {
  mkdirSync(path.join(dir, "node_modules", ".bin"), { recursive: true });
  writeFileSync(
    path.join(dir, "package.json"),
    JSON.stringify({ name: "noop-project", version: "1.0.0", private: true }),
  );
  const bin = path.join(dir, "node_modules", ".bin", "engram");
  writeFileSync(bin, "#!/usr/bin/env node\n");
  chmodSync(bin, 0o755);
}

const work = mkdtempSync(path.join(tmpdir(), "engram-cli-startup-"));
try {
  // packNpm builds dist/ when stale first, so the checkout's bin runs the compiled CLI too.
  const tarballs = await packNpm(work);
  const installed = path.join(work, "npm-app");
  await npmProject(installed, [tarballs.client, tarballs.cli, tarballs.server]);
  const noop = path.join(work, "noop-project");
  noopProject(noop);

  console.log(`engram --help, ${runs} calls each; load average ${loadavg()[0].toFixed(1)}`);
  report("checkout: node src/cli/bin.mjs --help", process.execPath, ["src/cli/bin.mjs", "--help"], REPO_ROOT, work);
  report("checkout: npx engram --help", "npx", ["engram", "--help"], REPO_ROOT, work);
  report("installed tarballs: npx engram --help", "npx", ["engram", "--help"], installed, work);
  report("npm's floor: npx engram (a bin doing nothing)", "npx", ["engram", "--help"], noop, work);
  report("npm's floor: npx --version", "npx", ["--version"], noop, work);
} finally {
  rmSync(work, { recursive: true, force: true });
}
