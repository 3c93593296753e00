/**
 * The `cluster` section: AddEvent on a Redis Cluster of 3 masters + 3
 * replicas (test/support/redis-cluster.ts) next to one redis-server, in the
 * same run, each behind its own Engram process driven by the same load
 * generator: one node, the cluster, and the cluster with
 * MEMORY_REDIS_WAIT_REPLICAS=1 (WAIT after each write script).
 *
 * Points at every concurrency of the profile, then rounds at the target
 * concurrency in rotating order (one node, cluster, cluster+WAIT; then
 * cluster, cluster+WAIT, one node; ...): the ratios to one node are taken
 * within a round, and the median over rounds is reported, as for the echo
 * pairs (a shared 2-core box drifts between points; bench/README.md).
 * CPU per call is charged to the Engram process and, separately, to the
 * masters and the replicas, which is what a 2-core box can show about
 * scaling (bench/README.md, "Redis Cluster").
 */
import { create, toBinary } from "@bufbuild/protobuf";
import { GetOrCreateSessionRequestSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { LoadResult } from "./lib/closed-loop.js";
import { startEngram, type EngramProcess } from "./lib/processes.js";
import type { LoadSpec } from "./loadgen.js";
import type { ClusterBench, ClusterSetup, Profile } from "./types.js";
import { appendSessionId, SeedClient, serverWorkloads } from "./workloads.js";

/** What the section needs from the runner. */
export interface ClusterDeps {
  /** A load point at `concurrency`, as long as the profile's points. */
  load(spec: Omit<LoadSpec, "durationMs" | "warmupMs">, durationMs?: number): Promise<LoadResult>;
  log(message: string): void;
  serverNodeArgs: string[];
  /** The run's one-node redis-server (AOF, fsync every second), started by the runner. */
  single: { url: string; pid?: number };
}

const SETUPS: ClusterSetup[] = ["one node", "cluster", "cluster, WAIT 1"];

/** Runs the section; see the file header. */
export async function runCluster(profile: Profile, deps: ClusterDeps): Promise<ClusterBench> {
  const { startRedisCluster } = await import("../test/support/redis-cluster.js");
  const cluster = await startRedisCluster();
  const engrams = new Map<ClusterSetup, EngramProcess>();
  try {
    const masters = new Set<number>();
    for (const slot of [0, 8192, 16_383]) masters.add((await cluster.masterOf(slot)).index);
    const pidsOf = (master: boolean) =>
      cluster.nodes.filter((node) => masters.has(node.index) === master).map((node) => node.server.pid!);
    deps.log(`cluster: ${cluster.url} (masters ${[...masters].map((i) => cluster.nodes[i].port).join(",")})`);

    const prefix = `bench_cluster_${Date.now()}`;
    for (const setup of SETUPS) {
      const url = setup === "one node" ? deps.single.url : cluster.url;
      const env: Record<string, string> = setup === "cluster, WAIT 1" ? { MEMORY_REDIS_WAIT_REPLICAS: "1" } : {};
      const args = [
        "--memory-type",
        "redis",
        "--redis-url",
        url,
        "--key-prefix",
        `${prefix}_${engrams.size}`,
        "--max-session-events",
        "1000000",
        "--max-sessions",
        "1000000",
      ];
      engrams.set(setup, await startEngram(args, env, deps.serverNodeArgs));
    }
    const maxC = Math.max(...profile.concurrencies);
    const addEvent = serverWorkloads(profile.sizes, maxC).find((workload) => workload.name === "AddEvent")!;
    for (const engram of engrams.values()) {
      const seeder = new SeedClient(engram.address);
      try {
        const session = (i: number) =>
          Buffer.from(
            toBinary(
              GetOrCreateSessionRequestSchema,
              create(GetOrCreateSessionRequestSchema, {
                sessionId: appendSessionId(i),
                appName: "bench",
                userId: "bench",
              }),
            ),
          );
        await seeder.all(
          "GetOrCreateSession",
          Array.from({ length: maxC }, (_, i) => session(i)),
        );
        // One call first, as for every workload: what the first call loads is not what we measure.
        await seeder.call("AddEvent", Buffer.from(addEvent.requests[0], "base64"));
      } finally {
        seeder.close();
      }
    }
    const cpuPids = (setup: ClusterSetup): Record<string, number[]> => {
      const server = [engrams.get(setup)!.pid];
      if (setup === "one node") return { server, redis: deps.single.pid ? [deps.single.pid] : [] };
      return { server, "redis masters": pidsOf(true), "redis replicas": pidsOf(false) };
    };
    const measure = (setup: ClusterSetup, concurrency: number, durationMs?: number) =>
      deps.load(
        {
          target: engrams.get(setup)!.address,
          method: addEvent.method,
          requests: addEvent.requests,
          cpuPids: cpuPids(setup),
          concurrency,
        },
        durationMs,
      );

    const result: ClusterBench = {
      masters: masters.size,
      replicasPerMaster: 1,
      points: [],
      rounds: { concurrency: 0, throughput: { "one node": [], cluster: [], "cluster, WAIT 1": [] } },
    };
    for (const concurrency of profile.concurrencies) {
      for (const setup of SETUPS) {
        const r = await measure(setup, concurrency);
        if (r.errors > 0)
          throw new Error(`cluster bench, ${setup} c=${concurrency}: ${r.errors} errors (${r.firstError})`);
        result.points.push({ kind: "server", backend: `redis ${setup}`, workload: "AddEvent", concurrency, ...r });
        deps.log(
          `${`redis ${setup}`.padEnd(24)} AddEvent c=${String(concurrency).padEnd(3)} ${String(r.throughput).padStart(9)}/s p50 ${r.p50Us}µs p99 ${r.p99Us}µs cpu ${JSON.stringify(r.cpuUsPerCall)}`,
        );
      }
    }
    const c = profile.concurrencies.includes(16) ? 16 : Math.max(...profile.concurrencies);
    result.rounds.concurrency = c;
    for (let round = 0; round < profile.targetPairs; round++) {
      const order = SETUPS.map((_, i) => SETUPS[(i + round) % SETUPS.length]);
      for (const setup of order) {
        const r = await measure(setup, c, profile.pairMs);
        if (r.errors > 0)
          throw new Error(`cluster bench round ${round}, ${setup}: ${r.errors} errors (${r.firstError})`);
        result.rounds.throughput[setup].push(r.throughput);
      }
    }
    const ratios = (setup: ClusterSetup) =>
      result.rounds.throughput[setup].map((t, i) => (t / result.rounds.throughput["one node"][i]).toFixed(2)).join(" ");
    deps.log(
      `cluster ÷ one node, ${profile.targetPairs} rounds at c=${c}: ${ratios("cluster")}; with WAIT 1: ${ratios("cluster, WAIT 1")}`,
    );
    return result;
  } finally {
    for (const engram of engrams.values()) await engram.stop().catch(() => {});
    await cluster.stop();
  }
}
