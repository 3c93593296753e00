/**
 * The stream hub: the one place live events flow out of. Per session and per
 * replica it holds a single store subscription, shared by every subscriber.
 * Notices carry only positions; each subscriber reads the durable log from
 * its own cursor, so a lost notice costs latency, never an event. Subscribers
 * at the same cursor share one read. A heartbeat timer doubles as the safety
 * re-read that catches notices lost on the way.
 */
import { LAST_SEQ_TRAILER, MemoryError, sessionNotFound } from "../errors.js";
import type { EventPage, MemoryStore, SessionNotice, StoredEvent } from "../store/types.js";

/** One frame of a subscription. */
export type StreamFrame =
  | { kind: "event"; event: StoredEvent }
  | { kind: "caughtUp"; headSeq: number }
  | { kind: "heartbeat"; headSeq: number };

/** Options of the hub. */
export interface StreamHubOptions {
  /** Idle time before a heartbeat (and a safety re-read). */
  heartbeatMs: number;
  /** Events per store read. */
  pageSize: number;
}

interface SessionChannel {
  refs: number;
  unsubscribe: () => void;
  /** Highest head seq seen in a notice or a read. */
  knownHead: number;
  deleted: boolean;
  wakers: Set<() => void>;
  /** Reads in flight or just done, by cursor, shared by subscribers at that cursor. */
  reads: Map<number, Promise<NextPage>>;
  /** Pages of events carried by the latest notices (SessionNotice.events), by the cursor before them. */
  carried: Map<number, NextPage>;
}

/** Notice-carried pages kept per session: a subscriber this many notices behind still needs no read. */
const CARRIED_PAGES = 64;

/** What a subscriber needs of a read after its cursor: the next events and the head. */
type NextPage = Pick<EventPage, "events" | "headSeq">;

/** Fans a store's session notices out to stream subscribers. */
export class StreamHub {
  private readonly channels = new Map<string, SessionChannel>();
  private readonly shutdownWakers = new Set<() => void>();
  private readonly idleWaiters = new Set<() => void>();
  private subscribers = 0;
  private closing = false;

  constructor(
    private readonly store: MemoryStore,
    private readonly options: StreamHubOptions,
  ) {}

  /** Number of sessions with at least one subscriber on this replica. */
  get activeSessions(): number {
    return this.channels.size;
  }

  /**
   * Replays events after `afterSeq` (from the oldest retained when undefined),
   * yields caughtUp, then follows live. Ends with NOT_FOUND when the session is
   * deleted, OUT_OF_RANGE when the cursor is evicted, UNAVAILABLE on shutdown.
   */
  async *subscribe(
    sessionId: string,
    afterSeq: number | undefined,
    eventTypes: readonly string[],
    signal: AbortSignal,
  ): AsyncGenerator<StreamFrame> {
    if (this.closing) throw new MemoryError("UNAVAILABLE", "server is shutting down");
    const types = eventTypes.length > 0 ? new Set(eventTypes) : undefined;
    const channel = this.acquire(sessionId);
    this.subscribers++;
    // One waiter per subscription, registered once: waking it per event costs no
    // new timer, listener or set entry (with 1000 subscribers, that adds up).
    const waiter = new Waiter(this.options.heartbeatMs);
    channel.wakers.add(waiter.wake);
    this.shutdownWakers.add(waiter.wake);
    signal.addEventListener("abort", waiter.wake, { once: true });
    try {
      // The first read validates the session and the cursor.
      const first = await this.store.readEvents(sessionId, { afterSeq, limit: this.options.pageSize });
      let cursor = afterSeq ?? first.firstSeq - 1;
      let page: NextPage | undefined = first;
      for (;;) {
        if (!page) page = await this.read(channel, sessionId, cursor);
        for (const event of page.events) {
          cursor = event.seq;
          if (!types || types.has(event.eventType)) yield { kind: "event", event };
        }
        channel.knownHead = Math.max(channel.knownHead, page.headSeq);
        if (page.events.length < this.options.pageSize) break;
        page = undefined;
      }
      yield { kind: "caughtUp", headSeq: cursor };

      while (!signal.aborted) {
        const woke = await this.waitForChange(channel, cursor, waiter);
        if (signal.aborted) return;
        if (this.closing) {
          throw new MemoryError("UNAVAILABLE", `server is shutting down; resume after seq ${cursor}`, {
            [LAST_SEQ_TRAILER]: String(cursor),
          });
        }
        if (channel.deleted) throw sessionNotFound(sessionId);
        if (woke === "idle") {
          // Safety re-read: a notice may have been lost.
          const session = await this.store.getSession(sessionId);
          if (!session) throw sessionNotFound(sessionId);
          channel.knownHead = Math.max(channel.knownHead, session.headSeq);
          if (session.headSeq <= cursor) {
            yield { kind: "heartbeat", headSeq: session.headSeq };
            continue;
          }
        }
        for (;;) {
          const next = await this.read(channel, sessionId, cursor);
          for (const event of next.events) {
            cursor = event.seq;
            if (!types || types.has(event.eventType)) yield { kind: "event", event };
          }
          if (next.events.length < this.options.pageSize) break;
        }
      }
    } finally {
      waiter.dispose();
      channel.wakers.delete(waiter.wake);
      this.shutdownWakers.delete(waiter.wake);
      signal.removeEventListener("abort", waiter.wake);
      this.release(sessionId, channel);
      if (--this.subscribers === 0) for (const resolve of this.idleWaiters) resolve();
    }
  }

  /** Resolves once no subscriber is left (their final status is being sent). */
  whenIdle(): Promise<void> {
    if (this.subscribers === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.idleWaiters.delete(done);
        resolve();
      };
      this.idleWaiters.add(done);
    });
  }

  /** Ends every stream with UNAVAILABLE and refuses new ones. */
  shutdown(): void {
    this.closing = true;
    for (const wake of this.shutdownWakers) wake();
    for (const channel of this.channels.values()) for (const wake of channel.wakers) wake();
  }

  private acquire(sessionId: string): SessionChannel {
    let channel = this.channels.get(sessionId);
    if (!channel) {
      const created: SessionChannel = {
        refs: 0,
        unsubscribe: () => {},
        knownHead: 0,
        deleted: false,
        wakers: new Set(),
        reads: new Map(),
        carried: new Map(),
      };
      created.unsubscribe = this.store.subscribe(sessionId, (notice) => this.onNotice(created, notice));
      this.channels.set(sessionId, created);
      channel = created;
    }
    channel.refs++;
    return channel;
  }

  private release(sessionId: string, channel: SessionChannel): void {
    if (--channel.refs > 0) return;
    channel.unsubscribe();
    if (this.channels.get(sessionId) === channel) this.channels.delete(sessionId);
  }

  private onNotice(channel: SessionChannel, notice: SessionNotice): void {
    if (notice.deleted) channel.deleted = true;
    if (notice.headSeq !== undefined && notice.headSeq > channel.knownHead) {
      channel.knownHead = notice.headSeq;
      channel.reads.clear();
      // Events carried by the notice are a page a read after them would return: subscribers at
      // that cursor take it from here instead of reading the store (one read per event per
      // replica saved). Unlike a read, such a page is never empty, so it stays right to hand out
      // after the head moves on, and a subscriber a few notices behind catches up from them too.
      const events = notice.events;
      if (events && events.length > 0 && events.length <= this.options.pageSize && events[events.length - 1].seq === notice.headSeq) {
        channel.carried.set(events[0].seq - 1, { events: [...events], headSeq: notice.headSeq });
        if (channel.carried.size > CARRIED_PAGES) channel.carried.delete(channel.carried.keys().next().value!);
      }
    } else {
      // Deleted, a head that went back (the session was recreated), or no position at all:
      // no carried page can be trusted any more.
      channel.carried.clear();
      if (notice.headSeq === undefined) {
        // A notice without a position: every cached read may be stale.
        channel.knownHead = Number.MAX_SAFE_INTEGER;
        channel.reads.clear();
      }
    }
    for (const wake of channel.wakers) wake();
  }

  /** Resolves "changed" when the head moves past the cursor, "idle" after the heartbeat interval. */
  private waitForChange(channel: SessionChannel, cursor: number, waiter: Waiter): Promise<"changed" | "idle"> {
    if (channel.knownHead > cursor || channel.deleted || this.closing) return Promise.resolve("changed");
    return waiter.wait();
  }

  /** One store read per cursor, shared by every subscriber waiting at it. */
  private read(channel: SessionChannel, sessionId: string, cursor: number): Promise<NextPage> {
    const carried = channel.carried.get(cursor);
    if (carried) return Promise.resolve(carried);
    let pending = channel.reads.get(cursor);
    if (!pending) {
      pending = this.store.readEvents(sessionId, { afterSeq: cursor, limit: this.options.pageSize });
      channel.reads.set(cursor, pending);
      pending.then(
        (page) => {
          // Keep only the newest cursor's read; older ones are done with.
          for (const key of channel.reads.keys()) if (key < cursor) channel.reads.delete(key);
          if (page.headSeq > cursor + page.events.length) channel.reads.delete(cursor);
        },
        () => channel.reads.delete(cursor),
      );
    }
    return pending;
  }
}

/**
 * A subscription's wait for the next change: `wake` resolves the pending
 * wait with "changed" (and does nothing between waits, when the subscriber
 * is busy and will look at the head before waiting again); the heartbeat
 * timer is created once and re-armed per wait.
 */
class Waiter {
  private resolve: ((why: "changed" | "idle") => void) | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly heartbeatMs: number) {}

  wait(): Promise<"changed" | "idle"> {
    return new Promise((resolve) => {
      this.resolve = resolve;
      if (this.timer) this.timer.refresh();
      else this.timer = setTimeout(() => this.settle("idle"), this.heartbeatMs);
    });
  }

  readonly wake = (): void => this.settle("changed");

  dispose(): void {
    clearTimeout(this.timer);
    this.resolve = undefined;
  }

  private settle(why: "changed" | "idle"): void {
    const resolve = this.resolve;
    if (!resolve) return;
    this.resolve = undefined;
    resolve(why);
  }
}
