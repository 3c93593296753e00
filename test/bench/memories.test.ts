/**
 * The bench's long-term memory section works end to end on a tiny subset (no
 * quality or speed is asserted): `npm run bench -- --tiny --only memories`
 * starts the test model server and fresh Engram processes, writes the first
 * three conversations of the evaluation set, asks their questions lexically
 * and hybrid, measures SearchMemories and Recall over synthetic memories, and
 * reports every field in results.json and results.md.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { evalSubset } from "../../bench/memories.js";
import { loadMemoriesEval, QUESTION_CATEGORIES } from "../../bench/memories-eval/dataset.js";
import type { BenchResults } from "../../bench/types.js";
import { REPO_ROOT } from "../support/engram.js";

const run = promisify(execFile);

/** Runs of the bench at most, and how long each may take (about 2 minutes at a load of 12 on 2 cores; the first also installs the model). */
const BENCH_RUNS = 3;
const BENCH_RUN_MS = 600_000;
const outs: string[] = [];

describe("benchmark memories section (tiny profile)", () => {
  afterAll(() => {
    for (const out of outs) rmSync(out, { recursive: true, force: true });
  });

  it("keeps only the questions whose labels name memories of the chosen conversations", () => {
    const subset = evalSubset(loadMemoriesEval(), 3);
    expect(subset.set.conversations).toHaveLength(3);
    const written = new Set(subset.memories.map((m) => m.memory_id));
    expect(subset.questions.length).toBeGreaterThan(0);
    for (const q of subset.questions)
      for (const id of [...q.gold.memory_ids, ...(q.gold.not_valid_ids ?? [])]) expect(written.has(id)).toBe(true);
  });

  it(
    "reports recall@5 per category for lexical and hybrid ranking, supersession checks and SearchMemories / Recall points",
    async () => {
      // A first run installs the model's Python environment (test/support/embeddings-venv.sh).
      const { results, out } = await benchUntilEveryPointMeasured();
      const memories = results.memories!;
      expect(memories.conversations).toBe(3);
      expect(memories.questions).toBe(evalSubset(loadMemoriesEval(), 3).questions.length);
      expect(memories.recall.map((r) => r.ranking)).toEqual(["lexical", "hybrid"]);
      // Hybrid means the server embedded every memory through MEMORY_EMBEDDINGS_URL; lexical, none.
      expect(memories.recall.map((r) => r.embeddedMemories)).toEqual([0, memories.memories]);
      for (const r of memories.recall) {
        expect(Object.keys(r.recall).sort()).toEqual(["all", ...QUESTION_CATEGORIES].sort());
        for (const value of [...Object.values(r.recall), r.oddConversations, r.evenConversations]) {
          expect(value).toBeGreaterThanOrEqual(0);
          expect(value).toBeLessThanOrEqual(1);
        }
        // The first three conversations supersede memories and ask about it: both counts are exercised.
        expect(r.supersededAsPredicted.of).toBeGreaterThan(0);
        expect(r.notValidAvoided.of).toBeGreaterThan(0);
      }
      expect(memories.memoriesPerApp).toBe(300);
      const workloads = memories.speed.map((p) => p.workload);
      expect(workloads).toEqual([
        "SearchMemories lexical (300 memories)",
        "SearchMemories hybrid, client query vector (300 memories)",
        "Recall 4k budget lexical (300 memories)",
        "Recall 4k budget hybrid, client query vector (300 memories)",
        "SearchMemories hybrid, query embedded by the endpoint (300 memories)",
        "Recall 4k budget hybrid, query embedded by the endpoint (300 memories)",
      ]);
      for (const p of memories.speed) {
        expect(p.errors, `${p.workload}: ${p.firstError}`).toBe(0);
        expect(p.calls).toBeGreaterThan(0);
        expect(p.p99Us).toBeGreaterThanOrEqual(p.p50Us);
        expect(p.cpuUsPerCall.server).toBeGreaterThan(0);
      }
      const markdown = readFileSync(path.join(out, "results.md"), "utf8");
      expect(markdown).toContain("## Long-term memory (local store)");
      expect(markdown).toMatch(/\| lexical \| [\d.]+ \|/);
      expect(markdown).toMatch(/\| hybrid \| [\d.]+ \|/);
      expect(markdown).toContain("| local | Recall 4k budget lexical (300 memories) | 1 |");
    },
    BENCH_RUNS * BENCH_RUN_MS + 60_000,
  );
});

/**
 * A tiny point measures calls that finish within its 300 ms: on a loaded box
 * a point may close before its first call returns, with no error. Such a run
 * proves nothing either way and is repeated; every check holds for the run
 * kept, and a point that never measures a call in BENCH_RUNS runs fails.
 */
async function benchUntilEveryPointMeasured(): Promise<{ results: BenchResults; out: string }> {
  for (let attempt = 1; ; attempt++) {
    const out = mkdtempSync(path.join(tmpdir(), "engram-bench-memories-"));
    outs.push(out);
    await run(
      process.execPath,
      ["--import", "tsx", "bench/run.ts", "--tiny", "--only", "memories", "--workloads", "none", "--out", out],
      { cwd: REPO_ROOT, timeout: BENCH_RUN_MS, env: { ...process.env, BENCH_SERVER: "tsx" } },
    );
    const results = JSON.parse(readFileSync(path.join(out, "results.json"), "utf8")) as BenchResults;
    const unmeasured = (results.memories?.speed ?? []).filter((p) => p.calls === 0 && p.errors === 0);
    if (unmeasured.length === 0 || attempt === BENCH_RUNS) return { results, out };
    console.warn(
      `bench run ${attempt}: no call finished inside ${unmeasured.map((p) => p.workload).join("; ")}; running again`,
    );
  }
}
