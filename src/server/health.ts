/**
 * Health: the standard grpc.health.v1 service and the /readyz probe share one
 * status, set from periodic pings of the store and from shutdown.
 */
import { HealthImplementation, type ServingStatus } from "grpc-health-check";
import type { MemoryStore } from "../store/types.js";
import type { Logger } from "../log.js";

/** How long a health ping may take before the store counts as unreachable. */
const PING_DEADLINE_MS = 3000;

const SERVICE_NAMES = ["", "engram.v1.MemoryService"];

/** Tracks whether this replica can serve. */
export class HealthMonitor {
  readonly grpc = new HealthImplementation(
    Object.fromEntries(SERVICE_NAMES.map((n) => [n, "SERVING" as ServingStatus])),
  );
  private current: ServingStatus = "SERVING";
  private notServingReason?: string;
  private timer?: NodeJS.Timeout;
  private stopping = false;

  constructor(
    private readonly store: MemoryStore,
    private readonly log: Logger,
    private readonly intervalMs = 2000,
  ) {}

  /** SERVING or NOT_SERVING. */
  get status(): ServingStatus {
    return this.current;
  }

  /** Why it is NOT_SERVING (the failed ping's message, or shutting down); undefined while SERVING. */
  get reason(): string | undefined {
    return this.current === "SERVING" ? undefined : this.notServingReason;
  }

  /**
   * Pings the store once, so the first answer on the port is already true
   * (a store still connecting starts NOT_SERVING), then every interval.
   */
  async start(): Promise<void> {
    const tick = async () => {
      await this.check();
      if (!this.stopping) this.timer = setTimeout(tick, this.intervalMs).unref();
    };
    await this.check();
    if (!this.stopping) this.timer = setTimeout(tick, this.intervalMs).unref();
  }

  /** Pings the store once and updates the status. */
  async check(): Promise<void> {
    let ok = true;
    let reason: string | undefined;
    try {
      // A blackholed backend must not hold the status at SERVING: the ping has a deadline of its own,
      // passed down to the driver (StoreCall) and enforced here for any driver that ignores it.
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`store ping took longer than ${PING_DEADLINE_MS} ms`)),
          PING_DEADLINE_MS,
        );
      });
      try {
        await Promise.race([this.store.ping({ deadline: Date.now() + PING_DEADLINE_MS }), timeout]);
      } finally {
        clearTimeout(timer);
      }
    } catch (err) {
      ok = false;
      reason = err instanceof Error ? err.message : String(err);
      if (this.current === "SERVING") this.log.warn({ err }, "store unreachable; reporting NOT_SERVING");
    }
    if (this.stopping) return;
    this.notServingReason = reason;
    if (ok && this.current !== "SERVING") this.log.info("store reachable again; reporting SERVING");
    this.set(ok ? "SERVING" : "NOT_SERVING");
  }

  /** Reports NOT_SERVING for good (graceful shutdown). */
  shutdown(): void {
    this.stopping = true;
    this.notServingReason = "shutting down";
    clearTimeout(this.timer);
    this.set("NOT_SERVING");
  }

  private set(status: ServingStatus): void {
    if (status === this.current) return;
    this.current = status;
    for (const name of SERVICE_NAMES) this.grpc.setStatus(name, status);
  }
}
