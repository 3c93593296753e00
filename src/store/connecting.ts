/**
 * A network store that is still being opened. When Redis or PostgreSQL is
 * unreachable at start-up the server still listens, unready, and this keeps
 * trying to open the store with capped exponential back-off and full jitter
 * (so replicas restarted together do not hit a recovering backend in step).
 * Until the store is open every operation fails UNAVAILABLE saying so, and
 * ping() fails, which keeps /readyz at 503 and gRPC health at NOT_SERVING;
 * from then on every operation goes straight to the opened store.
 */
import { backOff } from "exponential-backoff";
import { MemoryError } from "../errors.js";
import { searchEventsByReading } from "./event-search.js";
import { StoreIncompatibleError } from "./incompatible.js";
import type {
  LongTermMemoryStore,
  MemoryStore,
  NoticeListener,
  ResumedErasures,
  ScoredEvent,
  StoreCapabilities,
  StoreDurability,
} from "./types.js";

/** First wait between attempts to open the store. */
export const OPEN_RETRY_INITIAL_MS = 250;
/** Longest wait between attempts to open the store (before jitter draws it down). */
export const OPEN_RETRY_MAX_MS = 5000;

/** How often and how long to retry; defaults OPEN_RETRY_INITIAL_MS and OPEN_RETRY_MAX_MS. */
export interface RetrySchedule {
  initialMs?: number;
  maxMs?: number;
}

/**
 * Calls `open` until it succeeds, waiting before each attempt with capped
 * exponential back-off and full jitter; reports each failure to `failed` and
 * gives up (rejecting with the last error) once `stopped()` is true, or at
 * once on a StoreIncompatibleError, which no retry cures.
 */
export function openWithRetry<T>(
  open: () => Promise<T>,
  failed: (err: unknown, attempt: number) => void,
  stopped: () => boolean,
  schedule: RetrySchedule = {},
): Promise<T> {
  return backOff(
    async () => {
      if (stopped()) throw new MemoryError("UNAVAILABLE", "closed before it was opened");
      return open();
    },
    {
      numOfAttempts: Number.POSITIVE_INFINITY,
      startingDelay: schedule.initialMs ?? OPEN_RETRY_INITIAL_MS,
      maxDelay: schedule.maxMs ?? OPEN_RETRY_MAX_MS,
      timeMultiple: 2,
      jitter: "full",
      // Callers make the first attempt themselves (and only come here when it failed).
      delayFirstAttempt: true,
      retry: (err, attempt) => {
        if (stopped() || err instanceof StoreIncompatibleError) return false;
        failed(err, attempt);
        return true;
      },
    },
  );
}

/** How the opening goes, for the log. */
export interface OpenObserver {
  /** One attempt failed; the next comes after a back-off. */
  failed(err: unknown, attempt: number): void;
  /** The store is open and serving. */
  opened(store: MemoryStore, attempts: number): void;
}

/** A subscription taken before the store opened, attached to it once it has. */
interface PendingSubscription {
  sessionId: string;
  listener: NoticeListener;
  unsubscribe?: () => void;
}

/** Wraps a network store being opened in the background, after a first attempt failed; see the file comment. */
export class ConnectingStore implements MemoryStore {
  private store?: MemoryStore;
  private lastFailure: unknown;
  private closed = false;
  private readonly pending = new Set<PendingSubscription>();
  /** Resolves with the opened store; rejects when closed before it opened, or with the StoreIncompatibleError that stopped the retries. */
  readonly opened: Promise<MemoryStore>;

  constructor(
    readonly backend: string,
    open: () => Promise<MemoryStore>,
    observer: OpenObserver,
    schedule: RetrySchedule = {},
    /** Why the caller's own first attempt failed, reported by ping() until an attempt here fails too. */
    firstFailure?: unknown,
  ) {
    this.lastFailure = firstFailure;
    let attempts = 0;
    const attempt = () => {
      attempts++;
      return open().catch((err: unknown) => {
        this.lastFailure = err;
        throw err;
      });
    };
    this.opened = openWithRetry(attempt, observer.failed, () => this.closed, schedule).then(async (store) => {
      if (this.closed) {
        await store.close();
        throw new MemoryError("UNAVAILABLE", "closed before the store was opened");
      }
      this.store = store;
      for (const sub of this.pending) sub.unsubscribe = store.subscribe(sub.sessionId, sub.listener);
      this.pending.clear();
      observer.opened(store, attempts);
      return store;
    });
    // Callers that never wait for it (a server stopped before the backend came) must not see an unhandled rejection.
    this.opened.catch(() => {});
  }

  /**
   * The opened store's long-term memories: UNAVAILABLE until it is open,
   * then FAILED_PRECONDITION naming the store if its driver keeps none.
   */
  readonly memories: LongTermMemoryStore = new ConnectingMemories(() => this.open.memories);

  /** Why the last attempt to open the store failed (undefined once it is open, or before any attempt failed). */
  get failure(): unknown {
    return this.store ? undefined : this.lastFailure;
  }

  /** True once the store is open. */
  get connected(): boolean {
    return this.store !== undefined;
  }

  /** The opened store's, or what a shared network store offers. */
  get capabilities(): StoreCapabilities {
    return this.store?.capabilities ?? { persistent: true, shared: true, retains: true };
  }

  get sessionsEvicted(): number {
    return this.store?.sessionsEvicted ?? 0;
  }

  get eventsTrimmed(): number {
    return this.store?.eventsTrimmed ?? 0;
  }

  private get open(): MemoryStore {
    if (this.store) return this.store;
    throw new MemoryError("UNAVAILABLE", `the ${this.backend} store is not connected yet; the server keeps retrying`);
  }

  // Every operation goes to the opened store as it is, whatever its parameters: the MemoryStore
  // contract, not this file, says what they are. Async, so that a store not yet open rejects
  // UNAVAILABLE like any other failed call instead of throwing at the call site.
  async createSession(...args: Parameters<MemoryStore["createSession"]>): ReturnType<MemoryStore["createSession"]> {
    return this.open.createSession(...args);
  }

  async getOrCreateSession(
    ...args: Parameters<MemoryStore["getOrCreateSession"]>
  ): ReturnType<MemoryStore["getOrCreateSession"]> {
    return this.open.getOrCreateSession(...args);
  }

  async getSession(...args: Parameters<MemoryStore["getSession"]>): ReturnType<MemoryStore["getSession"]> {
    return this.open.getSession(...args);
  }

  async listSessions(...args: Parameters<MemoryStore["listSessions"]>): ReturnType<MemoryStore["listSessions"]> {
    return this.open.listSessions(...args);
  }

  async updateSession(...args: Parameters<MemoryStore["updateSession"]>): ReturnType<MemoryStore["updateSession"]> {
    return this.open.updateSession(...args);
  }

  async sharedState(...args: Parameters<MemoryStore["sharedState"]>): ReturnType<MemoryStore["sharedState"]> {
    return this.open.sharedState(...args);
  }

  async deleteSession(...args: Parameters<MemoryStore["deleteSession"]>): ReturnType<MemoryStore["deleteSession"]> {
    return this.open.deleteSession(...args);
  }

  async appendEvents(...args: Parameters<MemoryStore["appendEvents"]>): ReturnType<MemoryStore["appendEvents"]> {
    return this.open.appendEvents(...args);
  }

  async readEvents(...args: Parameters<MemoryStore["readEvents"]>): ReturnType<MemoryStore["readEvents"]> {
    return this.open.readEvents(...args);
  }

  async readTail(...args: Parameters<MemoryStore["readTail"]>): ReturnType<MemoryStore["readTail"]> {
    return this.open.readTail(...args);
  }

  async listRecentEvents(
    ...args: Parameters<MemoryStore["listRecentEvents"]>
  ): ReturnType<MemoryStore["listRecentEvents"]> {
    return this.open.listRecentEvents(...args);
  }

  /** The opened store's searchEvents, else its events read and ranked here. */
  async searchEvents(...args: Parameters<NonNullable<MemoryStore["searchEvents"]>>): Promise<ScoredEvent[]> {
    const store = this.open;
    return store.searchEvents ? store.searchEvents(...args) : searchEventsByReading(store, args[0]);
  }

  async stats(...args: Parameters<MemoryStore["stats"]>): ReturnType<MemoryStore["stats"]> {
    return this.open.stats(...args);
  }

  async cleanup(...args: Parameters<MemoryStore["cleanup"]>): ReturnType<MemoryStore["cleanup"]> {
    return this.open.cleanup(...args);
  }

  async deleteUserData(...args: Parameters<MemoryStore["deleteUserData"]>): ReturnType<MemoryStore["deleteUserData"]> {
    return this.open.deleteUserData(...args);
  }

  /** The opened store's resumeErasures; nothing to resume when its driver records none. */
  async resumeErasures(): Promise<ResumedErasures> {
    const store = this.open;
    return store.resumeErasures ? store.resumeErasures() : { users: 0, sessions: 0, events: 0 };
  }

  subscribe(sessionId: string, listener: NoticeListener): () => void {
    if (this.store) return this.store.subscribe(sessionId, listener);
    // Kept until the store opens, so a subscriber from before then still hears of changes after.
    const sub: PendingSubscription = { sessionId, listener };
    this.pending.add(sub);
    return () => {
      this.pending.delete(sub);
      sub.unsubscribe?.();
    };
  }

  /** Waits for the opened store's notice subscription, when it subscribes on demand; nothing to wait for before it opened. */
  async noticesFlowing(): Promise<void> {
    await this.store?.noticesFlowing?.();
  }

  /** The opened store's ping; until it is open, UNAVAILABLE with the last attempt's reason (shown on /readyz). */
  async ping(...args: Parameters<MemoryStore["ping"]>): ReturnType<MemoryStore["ping"]> {
    const failure = this.failure;
    if (!this.store && failure !== undefined) {
      const reason = failure instanceof Error ? failure.message : String(failure);
      throw new MemoryError(
        "UNAVAILABLE",
        `the ${this.backend} store is not connected yet (${reason}); the server keeps retrying`,
      );
    }
    return this.open.ping(...args);
  }

  async describeDurability(): Promise<StoreDurability> {
    return this.open.describeDurability();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.pending.clear();
    await this.store?.close();
  }
}

/** Forwards every long-term memory call to the store once it is open (see ConnectingStore.memories), by the contract's own parameter types. */
class ConnectingMemories implements LongTermMemoryStore {
  constructor(private readonly target: () => LongTermMemoryStore) {}

  async writeMemories(
    ...args: Parameters<LongTermMemoryStore["writeMemories"]>
  ): ReturnType<LongTermMemoryStore["writeMemories"]> {
    return this.target().writeMemories(...args);
  }

  async getMemory(...args: Parameters<LongTermMemoryStore["getMemory"]>): ReturnType<LongTermMemoryStore["getMemory"]> {
    return this.target().getMemory(...args);
  }

  async searchMemories(
    ...args: Parameters<LongTermMemoryStore["searchMemories"]>
  ): ReturnType<LongTermMemoryStore["searchMemories"]> {
    return this.target().searchMemories(...args);
  }

  /** The opened store's vector search; none (lexical ranking only) when its driver has none. */
  async nearestMemories(
    ...args: Parameters<NonNullable<LongTermMemoryStore["nearestMemories"]>>
  ): ReturnType<NonNullable<LongTermMemoryStore["nearestMemories"]>> {
    const target = this.target();
    return target.nearestMemories ? target.nearestMemories(...args) : [];
  }

  async listMemories(
    ...args: Parameters<LongTermMemoryStore["listMemories"]>
  ): ReturnType<LongTermMemoryStore["listMemories"]> {
    return this.target().listMemories(...args);
  }

  async deleteMemories(
    ...args: Parameters<LongTermMemoryStore["deleteMemories"]>
  ): ReturnType<LongTermMemoryStore["deleteMemories"]> {
    return this.target().deleteMemories(...args);
  }

  async deleteMemoriesInScope(
    ...args: Parameters<LongTermMemoryStore["deleteMemoriesInScope"]>
  ): ReturnType<LongTermMemoryStore["deleteMemoriesInScope"]> {
    return this.target().deleteMemoriesInScope(...args);
  }

  /** Throws UNAVAILABLE while the store is not open: a watch opened then fails rather than hearing nothing. */
  subscribeMemories(
    ...args: Parameters<LongTermMemoryStore["subscribeMemories"]>
  ): ReturnType<LongTermMemoryStore["subscribeMemories"]> {
    return this.target().subscribeMemories(...args);
  }

  /** Waits for the opened store's subscription to the app, when it subscribes per app. */
  async listening(appName: string): Promise<void> {
    await this.target().listening?.(appName);
  }

  async memoryChangeWindow(
    ...args: Parameters<LongTermMemoryStore["memoryChangeWindow"]>
  ): ReturnType<LongTermMemoryStore["memoryChangeWindow"]> {
    return this.target().memoryChangeWindow(...args);
  }

  async readMemoryChanges(
    ...args: Parameters<LongTermMemoryStore["readMemoryChanges"]>
  ): ReturnType<LongTermMemoryStore["readMemoryChanges"]> {
    return this.target().readMemoryChanges(...args);
  }
}
