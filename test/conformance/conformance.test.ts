/**
 * The Connect protocol's own conformance suite (connectrpc/conformance, its
 * server cases) against Engram's edge: the runner's reference clients call
 * ConformanceService served by test/conformance/server.ts through the same
 * port sharing, HTTP/1.1 handler, grpc-js options and status mapping as
 * MemoryService, over every protocol Engram serves (config.yaml). Every case
 * must pass, except those in known-failing.txt (each must still fail, so a
 * fix shows up as a list to shorten) and known-flaky.txt (either outcome).
 */
import { execFile } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const HERE = "test/conformance";

/** The runner's report of each case that did not go as listed: its name and reasons. */
function unexpectedFailures(output: string): string[] {
  return output
    .split(/\n(?=FAILED: |INFO: |Total cases:)/)
    .filter((block) => block.startsWith("FAILED: "))
    .map((block) => block.trim());
}

describe("the Connect conformance suite's server cases, against Engram's edge", () => {
  it("passes every case of Connect, gRPC-Web (HTTP/1.1) and gRPC (h2c) that Engram serves, but the known failures", async () => {
    // The runner and the descriptors of its protos, built once into .tmp (minutes on a fresh clone, then cached).
    const prepared = await run(path.join(REPO_ROOT, HERE, "prepare.sh"), { encoding: "utf8", timeout: 600_000 });
    const [runner, descriptors] = prepared.stdout.trim().split("\n");
    const args = [
      "--mode",
      "server",
      "--conf",
      `${HERE}/config.yaml`,
      "--known-failing",
      `@${HERE}/known-failing.txt`,
      "--known-flaky",
      `@${HERE}/known-flaky.txt`,
      // Two servers, four calls each at a time: enough to keep a shared 2-core box busy, not to starve it.
      "--max-servers",
      "2",
      "--parallel",
      "4",
      "--",
      process.execPath,
      "--import",
      "tsx",
      `${HERE}/server.ts`,
      descriptors!,
    ];
    const outcome = await run(runner!, args, {
      cwd: REPO_ROOT,
      encoding: "utf8",
      timeout: 600_000,
      maxBuffer: 64 * 1024 * 1024,
    }).then(
      (done) => ({ code: 0, output: done.stdout + done.stderr }),
      (err: { code?: number; stdout?: string; stderr?: string }) => ({
        code: err.code ?? -1,
        output: `${err.stdout ?? ""}${err.stderr ?? ""}`,
      }),
    );
    const summary = /Total cases: \d+\n\d+ passed, \d+ failed(\n\(Another \d+ failed as expected[^)]*\))?/.exec(
      outcome.output,
    )?.[0];
    console.log(`connectconformance: ${summary?.replace(/\n/g, "; ") ?? "no summary"}`);
    expect(
      unexpectedFailures(outcome.output),
      "cases that did not go as known-failing.txt and known-flaky.txt say",
    ).toEqual([]);
    expect(summary, outcome.output.slice(-4000)).toBeDefined();
    expect(outcome.code, outcome.output.slice(-4000)).toBe(0);
  }, 900_000);
});
