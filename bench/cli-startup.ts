/**
 * How long `engram --help` takes to answer in a built checkout, by each way of
 * running it: the bin through node, `npx engram` (npm links the checkout into
 * its npx cache and runs the bin from there) and, as npm's own floor,
 * `npx --version`. Each is called `runs` times one after the other; the first
 * `npx engram` is cold only when npm has not linked this checkout before.
 * Prints the first call, the median and the fastest of each, in milliseconds.
 *
 *   node --import tsx bench/cli-startup.ts [runs=10]
 */
import { execFileSync } from "node:child_process";
import { REPO_ROOT } from "./lib/processes.js";

const runs = Math.min(50, Math.max(1, Number(process.argv[2] ?? 10)));
const WAYS: Array<[string, string, string[]]> = [
  ["node src/cli/bin.mjs --help", process.execPath, ["src/cli/bin.mjs", "--help"]],
  ["npx engram --help", "npx", ["engram", "--help"]],
  ["npx --version", "npx", ["--version"]],
];

/** Wall time of one call, in milliseconds. */
function timeCall(command: string, args: string[]): number {
  const start = performance.now();
  execFileSync(command, args, { cwd: REPO_ROOT, stdio: "ignore", timeout: 120_000 });
  return performance.now() - start;
}

for (const [name, command, args] of WAYS) {
  const times = Array.from({ length: runs }, () => timeCall(command, args));
  const sorted = [...times].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)];
  console.log(
    `${name.padEnd(30)} first ${times[0].toFixed(0).padStart(6)} ms   median ${median.toFixed(0).padStart(6)} ms   fastest ${sorted[0].toFixed(0).padStart(6)} ms   (${runs} calls)`,
  );
}
