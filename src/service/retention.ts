/**
 * Retention the operator chose, made visible and enforced over time: the
 * start-up sentence saying what gets deleted, the idle sweep (sessions not
 * updated for their idle TTL), and a rate-limited log line counting every
 * removal by reason. Caps on sessions and events are enforced by the stores
 * themselves at each write (src/store/*.ts); this file is store-agnostic.
 */
import type { Logger } from "../log.js";
import { dedupeWindow } from "../store/rules.js";
import type { MemoryStore, StoreLimits } from "../store/types.js";
import type { Metrics } from "./metrics.js";

/** Slowest sweep: an idle session outlives its TTL by at most about this. */
const MAX_SWEEP_INTERVAL_MS = 60_000;
/** Fastest sweep, whatever the TTL. */
const MIN_SWEEP_INTERVAL_MS = 250;
/** How often the removal log looks at the counters. */
const REMOVAL_POLL_MS = 1000;
/** At most one removal line per this long (the first one at once). */
const REMOVAL_LOG_INTERVAL_MS = 60_000;

const cap = (n: number, what: string) => (n > 0 ? `at most ${n} ${what}` : `no cap on ${what}`);
const idle = (ms: number | undefined) =>
  ms && ms > 0 ? `sessions idle ${ms} ms are removed` : "idle sessions are kept";

/**
 * One sentence for the start-up log: what the store deletes, when, and why;
 * on the local store, that its caps are the in-memory defaults when unset.
 */
export function describeRetention(limits: StoreLimits, backend: string, capsFromDefaults = false): string {
  if (backend === "null") return "nothing is kept";
  const parts = [
    `${cap(limits.maxSessions, "sessions")}${limits.maxSessions > 0 ? " (past it the least recently updated 10% are evicted)" : ""}`,
    `${cap(limits.maxSessionEvents, "events per session")}${limits.maxSessionEvents > 0 ? " (the oldest are trimmed)" : ""}`,
    idle(limits.sessionIdleMs),
  ];
  for (const [app, r] of limits.apps ?? []) {
    const own: string[] = [];
    if (r.maxSessions !== undefined) own.push(cap(r.maxSessions, "sessions"));
    if (r.maxSessionEvents !== undefined) own.push(cap(r.maxSessionEvents, "events per session"));
    if (r.sessionIdleMs !== undefined) own.push(idle(r.sessionIdleMs));
    parts.push(`app ${JSON.stringify(app)}: ${own.join(", ") || "as above"}`);
  }
  const { windowMs, maxIds } = dedupeWindow(limits);
  parts.push(
    windowMs > 0
      ? `a trimmed event's id dedupes retries for ${windowMs} ms (at most ${maxIds} ids per session)`
      : "a trimmed event's id is forgotten at once",
  );
  const sentence = parts.join("; ");
  if (capsFromDefaults)
    return `${sentence}; these caps are the local store's in-memory defaults (MEMORY_MAX_SESSIONS, MEMORY_MAX_SESSION_EVENTS; 0: no cap)`;
  return sentence;
}

/**
 * Removes sessions past their idle TTL, every half of the shortest TTL
 * (between 250 ms and 60 s). Each replica sweeps; the store re-checks each
 * session under its own lock or script, so concurrent sweeps remove a session
 * once and never one updated meanwhile.
 */
export class RetentionSweeper {
  private timer?: NodeJS.Timeout;
  private stopped = false;

  constructor(
    private readonly store: MemoryStore,
    private readonly limits: StoreLimits,
    private readonly metrics: Metrics | undefined,
    private readonly log: Logger,
  ) {}

  /** Ms between sweeps; undefined when no idle TTL is set. */
  get intervalMs(): number | undefined {
    const ttls = [
      this.limits.sessionIdleMs ?? 0,
      ...[...(this.limits.apps?.values() ?? [])].map((r) => r.sessionIdleMs ?? 0),
    ].filter((ms) => ms > 0);
    if (ttls.length === 0) return undefined;
    return Math.min(MAX_SWEEP_INTERVAL_MS, Math.max(MIN_SWEEP_INTERVAL_MS, Math.floor(Math.min(...ttls) / 2)));
  }

  /** One sweep: the global TTL over apps without their own, then each app's; returns sessions removed. */
  async sweep(now = Date.now()): Promise<number> {
    const ownTtl = [...(this.limits.apps ?? [])].filter(([, r]) => r.sessionIdleMs !== undefined);
    let removed = 0;
    const global = this.limits.sessionIdleMs ?? 0;
    if (global > 0) removed += await this.store.cleanup(now - global, { exceptAppNames: ownTtl.map(([app]) => app) });
    for (const [appName, r] of ownTtl) {
      if (r.sessionIdleMs! > 0) removed += await this.store.cleanup(now - r.sessionIdleMs!, { appName });
    }
    if (removed > 0) this.metrics?.sessionsRemoved.inc({ reason: "idle" }, removed);
    return removed;
  }

  /** Sweeps on a timer until stop(); a no-op without idle TTLs. */
  start(): void {
    const interval = this.intervalMs;
    if (interval === undefined || this.stopped) return;
    this.timer = setTimeout(() => {
      this.sweep().then(
        () => this.start(),
        (err: unknown) => {
          // A backend outage: try again next time (no tenant data in the log).
          this.log.warn({ err: err instanceof Error ? err.message : String(err) }, "idle session sweep failed");
          this.start();
        },
      );
    }, interval);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}

/** Removals by reason, as the log line counts them. */
export type RemovalCounts = Record<string, number>;

/**
 * Logs what retention and clients removed: counts by reason only (never an
 * id or an app), the first removal at once, then at most one line per minute
 * with everything removed since the last one.
 */
export class RemovalLog {
  private timer?: NodeJS.Timeout;
  private logged: RemovalCounts = {};
  private lastLineAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly metrics: Metrics,
    private readonly log: Logger,
    private readonly intervalMs = REMOVAL_LOG_INTERVAL_MS,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.flush().catch(() => {}), REMOVAL_POLL_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Logs the removals since the last line, if any and if the last line is old enough. */
  async flush(now = Date.now()): Promise<void> {
    if (now - this.lastLineAt < this.intervalMs) return;
    const totals = await this.metrics.removalTotals();
    const removed: RemovalCounts = {};
    for (const [reason, total] of Object.entries(totals)) {
      const delta = total - (this.logged[reason] ?? 0);
      if (delta > 0) removed[reason] = delta;
    }
    if (Object.keys(removed).length === 0) return;
    this.logged = totals;
    this.lastLineAt = now;
    this.log.info({ removed }, "retention: data removed");
  }
}
