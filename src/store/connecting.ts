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
import { StoreIncompatibleError } from "./incompatible.js";
import { memoriesOf } from "./memories/available.js";
import type {
  LongTermMemoryStore,
  MemoryChangeListener,
  MemoryCursor,
  MemoryFilter,
  MemoryRecord,
  MemoryScopeFilter,
  MemoryWriteResult,
  RankedMemory,
  AppendResult,
  CleanupScope,
  ErasureResult,
  EventPage,
  EventQuery,
  MemoryStore,
  NewEvent,
  NewSession,
  NoticeListener,
  RecentEventsFilter,
  ResumedErasures,
  SessionQuery,
  SessionRecord,
  StoreCapabilities,
  StoreDurability,
  StoreStats,
  StoredEvent,
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
export function openWithRetry<T>(open: () => Promise<T>, failed: (err: unknown, attempt: number) => void, stopped: () => boolean, schedule: RetrySchedule = {}): Promise<T> {
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
  private closed = false;
  private readonly pending = new Set<PendingSubscription>();
  /** Resolves with the opened store; rejects when closed before it opened, or with the StoreIncompatibleError that stopped the retries. */
  readonly opened: Promise<MemoryStore>;

  constructor(
    readonly backend: string,
    open: () => Promise<MemoryStore>,
    observer: OpenObserver,
    schedule: RetrySchedule = {},
  ) {
    let attempts = 0;
    const attempt = () => {
      attempts++;
      return open();
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
  readonly memories: LongTermMemoryStore = new ConnectingMemories(() => memoriesOf(this.open));

  /** True once the store is open. */
  get connected(): boolean {
    return this.store !== undefined;
  }

  /** The opened store's, or what a shared network store offers. */
  get capabilities(): StoreCapabilities {
    return this.store?.capabilities ?? { persistent: true, shared: true, retains: true };
  }

  /** Passed through so the opened driver still receives call deadlines (src/deadline.ts). */
  get honoursCallDeadline(): boolean {
    return (this.store as { honoursCallDeadline?: boolean } | undefined)?.honoursCallDeadline === true;
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

  async createSession(input: NewSession): Promise<SessionRecord> {
    return this.open.createSession(input);
  }

  async getOrCreateSession(input: NewSession): Promise<{ session: SessionRecord; created: boolean }> {
    return this.open.getOrCreateSession(input);
  }

  async getSession(sessionId: string): Promise<SessionRecord | undefined> {
    return this.open.getSession(sessionId);
  }

  async listSessions(query: SessionQuery): Promise<SessionRecord[]> {
    return this.open.listSessions(query);
  }

  async deleteSession(sessionId: string): Promise<boolean> {
    return this.open.deleteSession(sessionId);
  }

  async appendEvents(sessionId: string, events: readonly NewEvent[], expectedSeq?: number): Promise<AppendResult> {
    return this.open.appendEvents(sessionId, events, expectedSeq);
  }

  async readEvents(sessionId: string, query: EventQuery): Promise<EventPage> {
    return this.open.readEvents(sessionId, query);
  }

  async readTail(sessionId: string, limit: number, eventTypes?: readonly string[]): Promise<EventPage> {
    return this.open.readTail(sessionId, limit, eventTypes);
  }

  async listRecentEvents(limit: number, filter?: RecentEventsFilter): Promise<StoredEvent[]> {
    return this.open.listRecentEvents(limit, filter);
  }

  async stats(): Promise<StoreStats> {
    return this.open.stats();
  }

  async cleanup(cutoff: number, scope?: CleanupScope): Promise<number> {
    return this.open.cleanup(cutoff, scope);
  }

  async deleteUserData(appName: string, userId: string): Promise<ErasureResult> {
    return this.open.deleteUserData(appName, userId);
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

  async ping(): Promise<void> {
    return this.open.ping();
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

/** Forwards every long-term memory call to the store once it is open (see ConnectingStore.memories). */
class ConnectingMemories implements LongTermMemoryStore {
  constructor(private readonly target: () => LongTermMemoryStore) {}

  async writeMemories(memories: readonly MemoryRecord[]): Promise<MemoryWriteResult> {
    return this.target().writeMemories(memories);
  }

  async getMemory(appName: string, memoryId: string): Promise<MemoryRecord | undefined> {
    return this.target().getMemory(appName, memoryId);
  }

  async searchMemories(filter: MemoryFilter, query: string, limit: number): Promise<RankedMemory[]> {
    return this.target().searchMemories(filter, query, limit);
  }

  /** The opened store's vector search; none (lexical ranking only) when its driver has none. */
  async nearestMemories(filter: MemoryFilter, embedding: readonly number[], limit: number): Promise<RankedMemory[]> {
    const target = this.target();
    return target.nearestMemories ? target.nearestMemories(filter, embedding, limit) : [];
  }

  async listMemories(filter: MemoryFilter, limit: number, after?: MemoryCursor): Promise<MemoryRecord[]> {
    return this.target().listMemories(filter, limit, after);
  }

  async deleteMemories(appName: string, memoryIds: readonly string[]): Promise<MemoryRecord[]> {
    return this.target().deleteMemories(appName, memoryIds);
  }

  async deleteMemoriesInScope(scope: MemoryScopeFilter): Promise<MemoryRecord[]> {
    return this.target().deleteMemoriesInScope(scope);
  }

  /** Throws UNAVAILABLE while the store is not open: a watch opened then fails rather than hearing nothing. */
  subscribeMemories(appName: string, listener: MemoryChangeListener): () => void {
    return this.target().subscribeMemories(appName, listener);
  }
}
