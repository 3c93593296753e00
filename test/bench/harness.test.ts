/**
 * The benchmark harness works end to end (no speed is asserted): `npm run
 * bench -- --tiny` starts a server process, seeds it, drives every workload
 * and the echo baseline through the load-generator process, measures memory
 * per event, and writes results.json and results.md of the documented shape.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import type { BenchResults } from "../../bench/types.js";
import { REPO_ROOT } from "../support/engram.js";

const run = promisify(execFile);

describe("benchmark harness (tiny profile)", () => {
  const out = mkdtempSync(path.join(tmpdir(), "engram-bench-"));
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it("measures every workload on the local store against the echo ceiling and writes the report", async () => {
    // The sources, like every suite but test/build (and no build racing test/build's).
    await run(process.execPath, ["--import", "tsx", "bench/run.ts", "--tiny", "--out", out], {
      cwd: REPO_ROOT,
      timeout: 120_000,
      env: { ...process.env, BENCH_SERVER: "tsx" },
    });
    const results = JSON.parse(readFileSync(path.join(out, "results.json"), "utf8")) as BenchResults;
    expect(results.meta.profile).toBe("tiny");
    const server = results.points.filter((p) => p.kind === "server");
    expect(server.map((p) => p.workload)).toEqual([
      "AddEvent",
      "GetSessionEvents last 20 of 10",
      "GetSessionEvents last 20 of 100",
      "BuildConversationContext (20 events)",
      "GetOrCreateSession (existing)",
      "ListSessions page of 100 (paging 300)",
      "WriteMemories 100 (one user per writer)",
      "WriteMemories 100 with 384-d embeddings",
      "WriteMemories 100 facts superseding",
    ]);
    for (const p of [...server, ...results.points.filter((q) => q.kind === "baseline")]) {
      expect(p.concurrency).toBe(1);
      expect(p.errors, `${p.workload}: ${p.firstError}`).toBe(0);
      expect(p.calls).toBeGreaterThan(0);
      expect(p.throughput).toBeGreaterThan(0);
      expect(p.p99Us).toBeGreaterThanOrEqual(p.p50Us);
      expect(Object.keys(p.cpuUsPerCall).sort()).toEqual(["client", "server"]);
    }
    expect(results.points.some((p) => p.backend === "grpc-js echo")).toBe(true);
    expect(results.memory?.events).toBeGreaterThan(0);
    expect(results.memory?.heapBytesPerEvent).toBeGreaterThan(100); // at least the content itself
    const targets = results.meta.targets as Array<{ target: string; ratio: number }>;
    expect(targets.map((t) => t.target)).toContain(
      "local AddEvent ≥ 0.8× grpc-js echo (c=1, median of 1 interleaved pairs)",
    );
    expect(targets.map((t) => t.target)).toContain("local AddEvent ≥ 0.8× grpc-js echo (c=1), single points");
    expect(results.pairs).toEqual([
      { backend: "local", concurrency: 1, echo: [expect.any(Number)], engram: [expect.any(Number)] },
    ]);
    const markdown = readFileSync(path.join(out, "results.md"), "utf8");
    expect(markdown).toContain("## Engram over gRPC (h2c)");
    expect(markdown).toContain("| local | AddEvent | 1 |");
  });
});
