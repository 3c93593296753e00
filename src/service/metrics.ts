/**
 * Prometheus metrics (prom-client), one registry per server: RPCs by method,
 * code and protocol with latency, live streams, store operation latency and
 * errors, auth failures and rate-limit refusals, the store's totals, and
 * the process defaults (CPU, memory, event-loop lag). Labels carry no
 * tenant data: method names, codes and protocols only.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from "prom-client";
import type { MemoryStore } from "../store/types.js";

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

/** Every metric of one server. */
export class Metrics {
  readonly registry = new Registry();
  readonly rpcs = new Counter({ name: "engram_rpc_requests_total", help: "RPCs by method, status code and protocol.", labelNames: ["method", "code", "protocol"], registers: [this.registry] });
  readonly rpcSeconds = new Histogram({ name: "engram_rpc_duration_seconds", help: "Unary RPC latency (streams: until they end).", labelNames: ["method", "protocol"], buckets: LATENCY_BUCKETS, registers: [this.registry] });
  readonly streams = new Gauge({ name: "engram_streams_active", help: "Live StreamSessionEvents subscribers on this replica.", registers: [this.registry] });
  readonly storeSeconds = new Histogram({ name: "engram_store_operation_duration_seconds", help: "Store operation latency.", labelNames: ["operation", "backend"], buckets: LATENCY_BUCKETS, registers: [this.registry] });
  readonly storeErrors = new Counter({ name: "engram_store_errors_total", help: "Store operations that failed, by error code.", labelNames: ["operation", "backend", "code"], registers: [this.registry] });
  readonly authFailures = new Counter({ name: "engram_auth_failures_total", help: "Calls refused for a missing, unknown or revoked API key.", registers: [this.registry] });
  readonly rateLimited = new Counter({ name: "engram_rate_limited_total", help: "Calls refused by a rate or stream limit.", registers: [this.registry] });
  readonly sessionsRemoved = new Counter({ name: "engram_sessions_removed_total", help: "Sessions removed through this replica, by DeleteSession (reason=delete) or Cleanup (reason=cleanup).", labelNames: ["reason"], registers: [this.registry] });

  constructor(store: MemoryStore) {
    collectDefaultMetrics({ register: this.registry, prefix: "engram_" });
    const registry = this.registry;
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
      name: "engram_events",
      help: "Events retained by the store (all replicas).",
      registers: [registry],
      async collect() {
        this.set((await store.stats().catch(() => ({ totalEvents: Number.NaN }))).totalEvents);
      },
    });
  }

  /** Wraps a store so every operation's latency and failures are recorded. */
  instrument(store: MemoryStore): MemoryStore {
    const timed = new Set(["createSession", "getOrCreateSession", "getSession", "listSessions", "deleteSession", "appendEvents", "readEvents", "readTail", "listRecentEvents", "stats", "cleanup"]);
    return new Proxy(store, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver);
        if (typeof prop !== "string" || !timed.has(prop) || typeof value !== "function") {
          return typeof value === "function" ? value.bind(target) : value;
        }
        return async (...args: unknown[]) => {
          const end = this.storeSeconds.startTimer({ operation: prop, backend: target.backend });
          try {
            return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          } catch (err) {
            this.storeErrors.inc({ operation: prop, backend: target.backend, code: (err as { code?: string }).code ?? "UNKNOWN" });
            throw err;
          } finally {
            end();
          }
        };
      },
    });
  }
}
