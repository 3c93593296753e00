/**
 * Prometheus metrics (prom-client), one registry per server: RPCs by method,
 * code and protocol with latency, live streams, store operation latency and
 * errors (backend failures only), auth failures and rate-limit refusals, open and rejected
 * connections, the store's totals, and
 * the process defaults (CPU, memory, event-loop lag). Labels carry no
 * tenant data: method names, codes and protocols only.
 */
import { performance } from "node:perf_hooks";
import { collectDefaultMetrics, Counter, Gauge, Registry, type Metric } from "prom-client";
import type { MemoryErrorCode } from "../errors.js";
import { ConnectingStore } from "../store/connecting.js";
import { StoreScriptRefusedError } from "../store/incompatible.js";
import type { LongTermMemoryStore, MemoryStore } from "../store/types.js";
import type { ExtractionCounts } from "./memories/extraction.js";
import type { RerankCounts } from "./memories/reranker.js";
import { VERSION } from "../version.js";

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

type Labels = Record<string, string>;

/**
 * Store outcomes that answer the client's request (no such session, a seq
 * conflict, a taken id, an evicted cursor, a bad argument): the backend
 * worked, so they are not counted in engram_store_errors_total.
 */
const CLIENT_OUTCOMES: ReadonlySet<string> = new Set<MemoryErrorCode>([
  "NOT_FOUND",
  "FAILED_PRECONDITION",
  "ALREADY_EXISTS",
  "OUT_OF_RANGE",
  "INVALID_ARGUMENT",
]);

/** One label set of a {@link BoundHistogram}: what a call records into. */
export interface HistogramSeries {
  observe(seconds: number): void;
}

/** One label set of a {@link BoundCounter}. */
export interface CounterSeries {
  inc(by?: number): void;
}

/**
 * Metrics observed on every call, with their label sets resolved once and
 * kept by the caller. prom-client validates and hashes the labels on every
 * observation (~0.6 µs each, three per call: a tenth of an in-process
 * AddEvent), so these keep their own series and hand the registry the same
 * exposition prom-client's Histogram and Counter would (test/service/metrics.test.ts
 * compares the text).
 */
abstract class BoundMetric<S> {
  readonly aggregator = "sum";
  private readonly series = new Map<string, { labels: Labels; state: S; zero: () => S }>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly labelNames: readonly string[],
    registry: Registry,
  ) {
    // The registry reads name, help, type and get() (the shape prom-client's own metrics have).
    registry.registerMetric(this as unknown as Metric);
  }

  protected seriesOf(labels: Labels, make: () => S): S {
    const key = this.labelNames.map((n) => labels[n] ?? "").join("\u0000");
    let entry = this.series.get(key);
    if (!entry) this.series.set(key, (entry = { labels: { ...labels }, state: make(), zero: make }));
    return entry.state;
  }

  protected entries(): Array<{ labels: Labels; state: S }> {
    return [...this.series.values()];
  }

  /** Zeroes every series (prom-client's Registry.resetMetrics); callers keep the series they resolved. */
  reset(): void {
    for (const entry of this.series.values()) Object.assign(entry.state as object, entry.zero());
  }
}

/** A latency histogram whose series are resolved once per label set. */
export class BoundHistogram extends BoundMetric<{ buckets: Float64Array; sum: number; count: number }> {
  readonly type = "histogram";

  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    registry: Registry,
    private readonly upperBounds: readonly number[] = LATENCY_BUCKETS,
  ) {
    super(name, help, labelNames, registry);
  }

  /** The series of one label set; resolve it once and keep it. */
  labels(labels: Labels): HistogramSeries {
    const state = this.seriesOf(labels, () => ({
      buckets: new Float64Array(this.upperBounds.length),
      sum: 0,
      count: 0,
    }));
    const bounds = this.upperBounds;
    return {
      observe(seconds: number): void {
        state.sum += seconds;
        state.count++;
        for (let i = 0; i < bounds.length; i++) {
          if (seconds <= bounds[i]) {
            state.buckets[i]++;
            return;
          }
        }
      },
    };
  }

  async get() {
    const values: Array<{
      labels: Record<string, string | number>;
      value: number;
      metricName: string;
      exemplar?: null;
    }> = [];
    for (const { labels, state } of this.entries()) {
      let cumulative = 0;
      this.upperBounds.forEach((bound, i) => {
        cumulative += state.buckets[i];
        values.push({
          labels: { le: bound, ...labels },
          value: cumulative,
          metricName: `${this.name}_bucket`,
          exemplar: null,
        });
      });
      values.push({
        labels: { le: "+Inf", ...labels },
        value: state.count,
        metricName: `${this.name}_bucket`,
        exemplar: null,
      });
      values.push({ labels, value: state.sum, metricName: `${this.name}_sum` });
      values.push({ labels, value: state.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}

/** A counter whose series are resolved once per label set. */
export class BoundCounter extends BoundMetric<{ value: number }> {
  readonly type = "counter";

  /** The series of one label set; resolve it once and keep it. */
  labels(labels: Labels): CounterSeries {
    const state = this.seriesOf(labels, () => ({ value: 0 }));
    return {
      inc(by = 1): void {
        state.value += by;
      },
    };
  }

  async get() {
    const values = this.entries().map(({ labels, state }) => ({ labels, value: state.value }));
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }
}

/** Every metric of one server. */
export class Metrics {
  readonly registry = new Registry();
  readonly rpcs = new BoundCounter(
    "engram_rpc_requests_total",
    "RPCs by method, status code and protocol.",
    ["method", "code", "protocol"],
    this.registry,
  );
  readonly rpcSeconds = new BoundHistogram(
    "engram_rpc_duration_seconds",
    "Unary RPC latency (streams: until they end).",
    ["method", "protocol"],
    this.registry,
  );
  readonly streams = new Gauge({
    name: "engram_streams_active",
    help: "Live StreamSessionEvents subscribers on this replica.",
    registers: [this.registry],
  });
  readonly storeSeconds = new BoundHistogram(
    "engram_store_operation_duration_seconds",
    "Store operation latency.",
    ["operation", "backend"],
    this.registry,
  );
  readonly storeErrors = new Counter({
    name: "engram_store_errors_total",
    help: "Store operations that failed in the backend (unreachable, timed out, internal), by error code; answers such as NOT_FOUND or FAILED_PRECONDITION are not counted.",
    labelNames: ["operation", "backend", "code"],
    registers: [this.registry],
  });
  readonly authFailures = new Counter({
    name: "engram_auth_failures_total",
    help: "Calls refused for a missing, unknown or revoked API key.",
    registers: [this.registry],
  });
  readonly rateLimited = new Counter({
    name: "engram_rate_limited_total",
    help: "Calls refused by a rate or stream limit.",
    registers: [this.registry],
  });
  readonly connectionsOpen = new Gauge({
    name: "engram_connections_open",
    help: "TCP connections open on this replica's port.",
    registers: [this.registry],
  });
  readonly connectionsRejected = new Counter({
    name: "engram_connections_rejected_total",
    help: "Connections closed by a connection cap (max_connections, max_connections_per_address) or the first-bytes deadline (first_bytes_timeout), or lost to a failed accept (accept_failed).",
    labelNames: ["reason"],
    registers: [this.registry],
  });
  /** Sessions removed by this replica, by reason; `evicted` is read from the store at scrape time. */
  readonly sessionsRemoved: Counter<"reason">;
  /** Events this replica trimmed past the events cap, read from the store at scrape time. */
  readonly eventsTrimmed: Counter;

  constructor(store: MemoryStore) {
    collectDefaultMetrics({ register: this.registry, prefix: "engram_" });
    const registry = this.registry;
    let evictedSeen = 0;
    this.sessionsRemoved = new Counter({
      name: "engram_sessions_removed_total",
      help: "Sessions removed by this replica, by reason: delete (DeleteSession), cleanup (Cleanup), erasure (DeleteUserData, and erasures resumed at start-up), idle (the idle TTL sweep), evicted (past a max_sessions cap).",
      labelNames: ["reason"],
      registers: [registry],
      collect() {
        const evicted = store.sessionsEvicted;
        this.inc({ reason: "evicted" }, evicted - evictedSeen);
        evictedSeen = evicted;
      },
    });
    this.eventsTrimmed = new Counter({
      name: "engram_events_trimmed_total",
      help: "Events this replica trimmed past a max_session_events cap (oldest first).",
      registers: [registry],
      collect() {
        this.reset();
        this.inc(store.eventsTrimmed);
      },
    });
    new Gauge({
      name: "engram_build_info",
      help: "Always 1; its labels say which Engram version runs on which Node.js.",
      labelNames: ["version", "node"],
      registers: [registry],
    }).set({ version: VERSION, node: process.version }, 1);
    // Totals read at scrape time: O(1) on every store.
    new Gauge({
      name: "engram_sessions",
      help: "Sessions held by the store (all replicas).",
      registers: [registry],
      async collect() {
        this.set((await store.stats().catch(() => ({ totalSessions: Number.NaN }))).totalSessions);
      },
    });
    new Counter({
      name: "engram_sessions_evicted_total",
      help: "Sessions this replica evicted past MEMORY_MAX_SESSIONS (least recently updated first).",
      registers: [registry],
      collect() {
        this.reset();
        this.inc(store.sessionsEvicted);
      },
    });
    new Gauge({
      name: "engram_store_script_refused",
      help: "1 for the store script the backend refuses to load (it cannot compile it, or its ACL forbids SCRIPT LOAD), while this replica stays unready for it; no series otherwise.",
      labelNames: ["script"],
      registers: [registry],
      collect() {
        this.reset();
        const failure = store instanceof ConnectingStore ? store.failure : undefined;
        if (failure instanceof StoreScriptRefusedError) this.set({ script: failure.script }, 1);
      },
    });
    new Gauge({
      name: "engram_events",
      help: "Events retained by the store (all replicas).",
      registers: [registry],
      async collect() {
        this.set((await store.stats().catch(() => ({ totalEvents: Number.NaN }))).totalEvents);
      },
    });
  }

  /** A counter that reads its total at scrape time from a count kept elsewhere. */
  private countedAtScrape(name: string, help: string, read: () => number): void {
    new Counter({
      name,
      help,
      registers: [this.registry],
      collect() {
        this.reset();
        this.inc(read());
      },
    });
  }

  /** Exports background fact extraction's counts (MEMORY_EXTRACTION_URL), read at scrape time. */
  watchExtraction(counts: Readonly<ExtractionCounts>): void {
    const counter = this.countedAtScrape.bind(this);
    counter(
      "engram_extraction_facts_total",
      "Facts extracted from appended events and written as long-term memories by this replica.",
      () => counts.facts,
    );
    counter(
      "engram_extraction_failed_requests_total",
      "Extraction requests that failed (endpoint down, timed out, refused) or whose answer was not the JSON asked for.",
      () => counts.failedRequests,
    );
    counter(
      "engram_extraction_skipped_facts_total",
      "Extracted facts skipped for a wrong shape or a value the memory validation refuses.",
      () => counts.skippedFacts,
    );
    counter(
      "engram_extraction_dropped_ranges_total",
      "Event ranges not extracted because the extraction queue was full (MEMORY_EXTRACTION_QUEUE_SIZE).",
      () => counts.droppedRanges,
    );
    counter(
      "engram_extraction_failed_writes_total",
      "Extracted facts' writes the store refused (unreachable, or a re-extracted range answered differently: ALREADY_EXISTS).",
      () => counts.failedWrites,
    );
  }

  /** The reranker's counts (MEMORY_RERANK_URL), read at scrape time. */
  watchReranker(counts: Readonly<RerankCounts>): void {
    const counter = this.countedAtScrape.bind(this);
    counter(
      "engram_memory_reranked_total",
      "Searches whose best memories the reranker reordered.",
      () => counts.reranked,
    );
    counter(
      "engram_memory_rerank_failures_total",
      "Rerank requests that failed (down, timed out, refused, or an answer of another shape): those searches kept the fused order.",
      () => counts.failed,
    );
  }

  /** Every removal so far by reason (sessions by theirs, events_trimmed), for the removal log: counts only. */
  async removalTotals(): Promise<Record<string, number>> {
    const totals: Record<string, number> = {};
    for (const { labels, value } of (await this.sessionsRemoved.get()).values)
      totals[`sessions_${labels.reason}`] = value;
    for (const { value } of (await this.eventsTrimmed.get()).values) totals.events_trimmed = value;
    return totals;
  }

  /** For one RPC method: the series it records into over a given protocol (a lookup by protocol per call). */
  rpcSeries(method: string): (protocol: string) => RpcSeries {
    const byProtocol = new Map<string, RpcSeries>();
    return (protocol) => {
      let series = byProtocol.get(protocol);
      if (!series) {
        const codes = new Map<string, CounterSeries>();
        series = {
          latency: this.rpcSeconds.labels({ method, protocol }),
          count: (code) => {
            let counter = codes.get(code);
            if (!counter) codes.set(code, (counter = this.rpcs.labels({ method, code, protocol })));
            counter.inc();
          },
        };
        byProtocol.set(protocol, series);
      }
      return series;
    };
  }

  /** Wraps a store so every operation's latency and failures are recorded, long-term memory operations included. */
  instrument(store: MemoryStore): MemoryStore {
    const memories = this.timed(store.memories, MEMORY_OPERATIONS, store.backend);
    return this.timed(store, SESSION_OPERATIONS, store.backend, { memories });
  }

  /** A proxy of `target` whose listed operations record their latency and backend failures. */
  private timed<T extends object>(
    target: T,
    operations: Readonly<Record<string, boolean>>,
    backend: string,
    replaced: Readonly<Record<string, unknown>> = {},
  ): T {
    // Each timed method's wrapper is made once, with its series resolved: nothing per call but the clock.
    const wrappers = new Map<string | symbol, unknown>(Object.entries(replaced));
    for (const [operation, isTimed] of Object.entries(operations)) {
      const method = (target as Record<string, unknown>)[operation];
      if (!isTimed || typeof method !== "function") continue;
      const latency = this.storeSeconds.labels({ operation, backend });
      const failed = (start: number, err: unknown) => {
        latency.observe((performance.now() - start) / 1000);
        const code = (err as { code?: unknown } | null)?.code;
        if (typeof code === "string" && CLIENT_OUTCOMES.has(code)) return;
        this.storeErrors.inc({ operation, backend, code: typeof code === "string" ? code : "UNKNOWN" });
      };
      // Four parameters cover every store method (four at most); no rest array per call.
      wrappers.set(operation, (a?: unknown, b?: unknown, c?: unknown, d?: unknown) => {
        const start = performance.now();
        let result: Promise<unknown>;
        try {
          result = (method as (...a: unknown[]) => Promise<unknown>).call(target, a, b, c, d);
        } catch (err) {
          // As from an async method: the caller sees a rejection, never a synchronous throw.
          failed(start, err);
          return Promise.reject(err);
        }
        return result.then(
          (value) => {
            latency.observe((performance.now() - start) / 1000);
            return value;
          },
          (err: unknown) => {
            failed(start, err);
            throw err;
          },
        );
      });
    }
    return new Proxy(target, {
      get: (object, prop, receiver) => {
        const wrapper = wrappers.get(prop);
        if (wrapper) return wrapper;
        const value = Reflect.get(object, prop, receiver);
        return typeof value === "function" ? value.bind(object) : value;
      },
    });
  }
}

/** The methods of T that answer with a promise: the operations a store metric can time. */
type AsyncMethodOf<T> = {
  [K in keyof T]-?: NonNullable<T[K]> extends (...args: never[]) => Promise<unknown> ? K : never;
}[keyof T] &
  string;

/**
 * Whether each session operation is timed. Every asynchronous store method
 * must be named here (a new one fails the type check until it is); only
 * housekeeping that no RPC waits on is left untimed.
 */
const SESSION_OPERATIONS: Readonly<Record<AsyncMethodOf<MemoryStore>, boolean>> = {
  createSession: true,
  getOrCreateSession: true,
  getSession: true,
  listSessions: true,
  updateSession: true,
  sharedState: true,
  deleteSession: true,
  appendEvents: true,
  readEvents: true,
  readTail: true,
  listRecentEvents: true,
  searchEvents: true,
  stats: true,
  cleanup: true,
  deleteUserData: true,
  resumeErasures: false,
  noticesFlowing: false,
  ping: false,
  describeDurability: false,
  close: false,
};

/** Whether each long-term memory operation is timed, held to the store interface as SESSION_OPERATIONS is. */
const MEMORY_OPERATIONS: Readonly<Record<AsyncMethodOf<LongTermMemoryStore>, boolean>> = {
  writeMemories: true,
  getMemory: true,
  searchMemories: true,
  nearestMemories: true,
  listMemories: true,
  deleteMemories: true,
  deleteMemoriesInScope: true,
  memoryChangeWindow: true,
  readMemoryChanges: true,
  listening: false,
};

/** What one RPC method over one protocol records: its latency and its count by status code. */
export interface RpcSeries {
  latency: HistogramSeries;
  count(code: string): void;
}
