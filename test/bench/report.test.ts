/**
 * The report's target checks: the arithmetic behind each row, on figures
 * shaped like a run's (no server is started here; harness.test.ts runs one).
 */
import { describe, expect, it } from "vitest";
import { checkTargets, renderMarkdown } from "../../bench/report.js";
import type { BenchResults, Point } from "../../bench/types.js";

function point(backend: string, workload: string, throughput: number, cpuUsPerCall: Record<string, number>): Point {
  return {
    kind: backend === "grpc-js echo" ? "baseline" : "server",
    backend,
    workload,
    concurrency: 16,
    calls: Math.round(throughput * 2.5),
    errors: 0,
    seconds: 2.5,
    throughput,
    p50Us: 1000,
    p99Us: 5000,
    meanUs: 1200,
    cpuUsPerCall,
  };
}

function results(points: Point[], pairs: BenchResults["pairs"] = []): BenchResults {
  return { meta: { cpus: 2, concurrencies: [16] }, points, pairs, references: [], fanout: [], peers: [], notes: [] };
}

describe("report target checks", () => {
  it("checks PostgreSQL against the group-commit goal (0.8×) as well as the plain one (0.5×)", () => {
    const checks = checkTargets(
      results(
        [],
        [{ backend: "postgres", concurrency: 16, echo: [10_000, 10_000, 10_000], engram: [6_000, 5_000, 4_000] }],
      ),
    );
    const rows = checks.filter((c) => c.target.startsWith("postgres AddEvent ≥"));
    expect(rows.map((c) => [c.goal, c.ratio, c.met])).toEqual([
      [0.5, 0.5, true],
      [0.8, 0.5, false],
    ]);
    expect(rows[1].target).toContain("with group commit");
  });

  it("says how many cores the goal's rate needs at the run's CPU per call, summed over every process charged", () => {
    const checks = checkTargets(
      results([
        point("grpc-js echo", "echo (AddEvent-sized, before redis)", 10_000, { server: 50, client: 60 }),
        point("redis", "AddEvent", 6_000, { server: 120, redis: 60, client: 80 }),
        point("grpc-js echo", "echo (AddEvent-sized, before local)", 10_000, { server: 50, client: 60 }),
        point("local", "AddEvent", 8_000, { server: 70, client: 50 }),
      ]),
    );
    const redis = checks.find((c) => c.target.startsWith("redis AddEvent at 0.7× echo's rate"))!;
    // 0.7 × 10,000/s × (120 + 60 + 80) µs = 1.82 cores of 2.
    expect(redis.measured).toBe("7,000/s × 260 µs (server 120 + redis 60 + client 80) = 1.82 cores");
    expect(redis.ratio).toBeCloseTo(2 / 1.82, 6);
    expect(redis.met).toBe(true);
    const local = checks.find((c) => c.target.startsWith("local AddEvent at 0.8× echo's rate"))!;
    expect(local.measured).toBe("8,000/s × 120 µs (server 70 + client 50) = 0.96 cores");
  });

  it("uses the group-commit goal for PostgreSQL's CPU budget and fails it when the cores are not there", () => {
    const checks = checkTargets(
      results([
        point("grpc-js echo", "echo (AddEvent-sized, before postgres)", 11_000, { server: 55, client: 65 }),
        point("postgres", "AddEvent", 4_000, { server: 136, postgres: 112, client: 81 }),
      ]),
    );
    const budget = checks.find((c) => c.target.startsWith("postgres AddEvent at 0.8× echo's rate"))!;
    // 0.8 × 11,000/s × 329 µs = 2.90 cores of 2.
    expect(budget.measured).toBe("8,800/s × 329 µs (server 136 + postgres 112 + client 81) = 2.90 cores");
    expect(budget.met).toBe(false);
  });
});

describe("report: the Redis Cluster section", () => {
  it("gives each setup's ratio to one node at the same concurrency, and the median of the rounds' ratios", () => {
    const at = (backend: string, throughput: number, cpu: Record<string, number>) => ({
      ...point(backend, "AddEvent", throughput, cpu),
      concurrency: 16,
    });
    const run: BenchResults = {
      ...results([]),
      meta: { cpus: 2, concurrencies: [16], loadAverageAtStart: [1, 1, 1] },
      cluster: {
        masters: 3,
        replicasPerMaster: 1,
        points: [
          at("redis one node", 1000, { server: 400, redis: 50 }),
          at("redis cluster", 1500, { server: 420, "redis masters": 60, "redis replicas": 30 }),
          at("redis cluster, WAIT 1", 500, { server: 600, "redis masters": 90, "redis replicas": 40 }),
        ],
        rounds: {
          concurrency: 16,
          throughput: {
            "one node": [1000, 1000, 1000],
            cluster: [1200, 1500, 2000],
            "cluster, WAIT 1": [400, 500, 900],
          },
        },
      },
    };
    const md = renderMarkdown(run);
    expect(md).toContain("| cluster | 16 | 1,500 | 1.00 | 5.00 | 420 | 60 + 30 | 1.50 |");
    expect(md).toContain("| cluster, WAIT 1 | 16 | 500 | 1.00 | 5.00 | 600 | 90 + 40 | 0.50 |");
    expect(md).toContain("cluster ÷ one node **1.50** (1.20–2.00)");
    expect(md).toContain("cluster, WAIT 1 ÷ one node **0.50** (0.40–0.90)");
  });
});
