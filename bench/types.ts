/**
 * The shapes the benchmark's modules pass between them: the profile a run
 * follows (bench/run.ts) and the results it measures, which the sections
 * (fan-out, references, peers, memory) return and bench/report.ts writes.
 * They live here, apart from run.ts and report.ts, so that the sections import
 * neither and the import graph stays acyclic.
 */
import type { LoadResult } from "./lib/closed-loop.js";
import type { SeedSizes } from "./workloads.js";

/** Durations and sizes of a run. */
export interface Profile {
  name: string;
  concurrencies: number[];
  durationMs: number;
  warmupMs: number;
  backends: string[];
  sizes: SeedSizes;
  /** Events stored by the memory measurement. */
  memoryEvents: number;
  /** Subscriber counts of the fan-out measurement. */
  fanoutSubscribers: number[];
  fanoutMs: number;
  sections: Set<string>;
  /** PostgreSQL 18 with pgvector (the tests' build) instead of the system's. */
  pgvector?: boolean;
  /** Name prefixes of the server workloads to run; undefined runs all. */
  workloads?: string[];
  /** Alternating echo / AddEvent measurements per backend for the target ratios, and the length of each. */
  targetPairs: number;
  pairMs: number;
  /** Conversations of bench/memories-eval/ the memories section writes and asks about (the first n); undefined: all. */
  memoriesEvalConversations?: number;
  /** Synthetic memories per app for the memories section's SearchMemories / Recall speed points. */
  memoriesPerApp: number;
  /** Memories per app at which the memories section measures each shared store (PostgreSQL, Redis) the run has. */
  memoriesBackendCounts: number[];
  /** Memories per app at which it measures the local store (lexical, and hybrid where every memory has a vector). */
  memoriesLocalCounts: number[];
  /** Memories in one user's scope for the needle bench (section `needles`, bench/memories-needles.ts). */
  needlesCount?: number;
  /** Length of each of those points: a call there takes tens of ms, so c=16 needs longer than the transport points. */
  memoriesPointMs: number;
}

/** One measured point: a workload on a backend at a concurrency. */
export interface Point extends LoadResult {
  /** "server" (Engram over gRPC) or "baseline" (echo, store drivers). */
  kind: "server" | "baseline";
  backend: string;
  workload: string;
  concurrency: number;
}

/** A reference tool's figure (redis-benchmark, pgbench). */
export interface Reference {
  tool: string;
  test: string;
  concurrency: number;
  throughput: number;
  p50Us?: number;
  p99Us?: number;
  command: string;
}

/** One fan-out configuration, Engram against the pre-serialized baseline. */
export interface FanoutResult {
  subscribers: number;
  replicas: number;
  engram: FanoutFigures;
  preSerialized: FanoutFigures;
  ratio: number;
}

/** Delivered events per second and append-to-delivery latency. */
export interface FanoutFigures {
  appended: number;
  delivered: number;
  expected: number;
  deliveredPerSecond: number;
  p50Us: number;
  p99Us: number;
  /** Server CPU microseconds per delivered event (all replicas). */
  serverCpuUsPerDelivery: number;
}

/** The memory measurement. */
export interface MemoryResult {
  events: number;
  contentBytes: number;
  heapBytesPerEvent: number;
  rssBytesPerEvent: number;
  externalBytesPerEvent: number;
  method: string;
}

/** A peer's point: the same workload shape on the same backend. */
export interface PeerPoint {
  peer: string;
  backend: string;
  workload: string;
  concurrency: number;
  throughput: number;
  p50Us: number;
  p99Us: number;
  calls: number;
  errors: number;
}

/** Alternating echo and AddEvent measurements of one backend (calls/s, in the order taken). */
export interface TargetPairs {
  backend: string;
  concurrency: number;
  echo: number[];
  engram: number[];
}

/** recall@5 of one ranking over the long-term memory evaluation set (bench/memories-eval/README.md). */
export interface MemoriesRecall {
  /** "lexical": no embeddings; "hybrid": MEMORY_EMBEDDINGS_URL set, memories and queries embedded by the server. */
  ranking: "lexical" | "hybrid";
  /** recall@5 over every question ("all") and per category. */
  recall: Record<string, number>;
  /** recall@5 over the questions of the odd-numbered conversations (c01, c03…: the half fusion weights may be tuned on)… */
  oddConversations: number;
  /** …and of the even-numbered ones (held out). App-wide questions count in neither half. */
  evenConversations: number;
  /** Questions with not_valid_ids whose answer returned none of them. */
  notValidAvoided: { ok: number; of: number };
  /** Memories the writes closed at the instant invalidAtOf() predicts, of those it predicts; `unexpected`: closed though not predicted. */
  supersededAsPredicted: { ok: number; of: number; unexpected: number };
  /** Memories the server stored with a vector (the endpoint's): all of them for hybrid, none for lexical. */
  embeddedMemories: number;
  writeSeconds: number;
  askSeconds: number;
}

/** The long-term memory section: quality on the evaluation set, speed on synthetic memories. */
export interface MemoriesResult {
  conversations: number;
  memories: number;
  questions: number;
  /** The embeddings model of the hybrid runs. */
  embeddingModel: string;
  recall: MemoriesRecall[];
  /** Synthetic memories per app behind the speed points. */
  memoriesPerApp: number;
  /** SearchMemories and Recall on the local store at memoriesPerApp, then on each shared store at each of memoriesBackendCounts (kind "server"). */
  speed: Point[];
  /** Peers asked the same questions (the whole set only), or why one could not run. */
  peers: MemoriesPeer[];
}

/** A peer's recall@5 by category ("all" included) and its search latency on the evaluation set, or why it did not run. */
export interface MemoriesPeer {
  peer: string;
  recall_at_5?: Record<string, number>;
  search_p50_us?: number;
  search_p99_us?: number;
  note?: string;
}

/**
 * The parties of the Motorhead comparison (bench/peers/motorhead.ts): Engram
 * over each protocol (REST is KAOS' GET /memory/events, reads only), Motorhead,
 * and the Node.js transport floors, bare servers answering Engram's bytes and
 * doing nothing else (bench/transport-floor-server.ts).
 */
export type MotorheadParty =
  | "Engram gRPC"
  | "Engram Connect JSON"
  | "Engram REST"
  | "Motorhead"
  | "Node http2 floor"
  | "Node HTTP/1.1 floor"
  | "Node HTTP/1.1 + Redis floor"
  | "Node http2 + Redis floor";

/** One party's figures in one round. */
export interface MotorheadFigures {
  throughput: number;
  p50Us: number;
  p99Us: number;
  /** CPU µs per call of the server process (Engram's node, or the Motorhead process serving the workload). */
  serverCpuUs: number;
  /** CPU µs per call of redis-server. */
  redisCpuUs: number;
}

/** One workload at one concurrency: every party's figures, round by round (same index = same round); a party with no such call (REST has no append) is absent. */
export interface MotorheadRow {
  workload: string;
  concurrency: number;
  rounds: Partial<Record<MotorheadParty, MotorheadFigures[]>>;
}

/** Engram against Motorhead on the same redis-server. */
export interface MotorheadComparison {
  binary: string;
  /** The Motorhead commit built (ENGRAM_BENCH_MOTORHEAD_COMMIT). */
  commit: string;
  rounds: number;
  pointMs: number;
  rows: MotorheadRow[];
}

/** The Redis setups of the cluster section: one redis-server, a 3-master cluster, and that cluster with MEMORY_REDIS_WAIT_REPLICAS=1. */
export type ClusterSetup = "one node" | "cluster" | "cluster, WAIT 1";

/** AddEvent on a Redis Cluster next to one redis-server (bench/cluster.ts). */
export interface ClusterBench {
  masters: number;
  replicasPerMaster: number;
  /** AddEvent at every concurrency of the profile, backend "redis <setup>". */
  points: Point[];
  /** Rounds at one concurrency, each measuring every setup in rotating order (calls/s, same index = same round). */
  rounds: { concurrency: number; throughput: Record<ClusterSetup, number[]> };
}

/** Everything a run measured. */
export interface BenchResults {
  meta: Record<string, unknown>;
  points: Point[];
  pairs: TargetPairs[];
  references: Reference[];
  fanout: FanoutResult[];
  memory?: MemoryResult;
  peers: PeerPoint[];
  motorhead?: MotorheadComparison;
  context?: unknown;
  memories?: MemoriesResult;
  cluster?: ClusterBench;
  notes: string[];
}
