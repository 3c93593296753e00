/**
 * The stream hub: the one place live events flow out of. Per session and per
 * replica it holds a single store subscription, shared by every subscriber.
 * Notices carry only positions; each subscriber reads the durable log from
 * its own cursor, so a lost notice costs latency, never an event. Subscribers
 * at the same cursor share one read. A heartbeat timer doubles as the safety
 * re-read that catches notices lost on the way.
 *
 * A stream belongs to one incarnation of its session (SessionRecord.incarnation),
 * not to its id: every page it delivers, whether read, shared or carried by a
 * notice, and every heartbeat re-read is checked against the incarnation it
 * opened, so a session deleted and created again under the same id (by
 * another tenant, through another replica, with every notice lost) ends the
 * stream NOT_FOUND instead of feeding it the new session's events.
 */
import { MemoryError, sessionNotFound, shuttingDown } from "../errors.js";
import type { EventPage, MemoryStore, SessionNotice, SessionRecord, StoredEvent } from "../store/types.js";

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
  /** Highest head seq seen in a notice or a read of `headOf`. */
  knownHead: number;
  /** The incarnation `knownHead` is of (undefined until a read or notice shows one; notices that name none count as its). */
  headOf?: string;
  /** Incarnations a deletion notice named: their streams end NOT_FOUND. */
  gone: Set<string>;
  /**
   * Bumped when something hints that the id may hold another session now: a
   * deletion notice naming no incarnation (a re-sync after a notice gap found
   * the id absent), or a notice naming another incarnation than the last.
   * Reads and notices can arrive out of order, so a hint is never taken as
   * proof: each subscriber asks the store whether its incarnation is current.
   */
  hints: number;
  /** The incarnation the latest notice named. */
  noticed?: string;
  wakers: Set<() => void>;
  /** Reads in flight or just done, by cursor, shared by subscribers at that cursor. */
  reads: Map<number, Promise<NextPage>>;
  /** Pages of events carried by the latest notices (SessionNotice.events), by the cursor before them. */
  carried: Map<number, NextPage>;
}

/** Notice-carried pages kept per session: a subscriber this many notices behind still needs no read. */
const CARRIED_PAGES = 64;

/** What a subscriber needs of a read after its cursor: the next events, the head and whose they are. */
type NextPage = Pick<EventPage, "events" | "headSeq" | "incarnation">;

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
   * deleted or replaced, OUT_OF_RANGE when the cursor is evicted, UNAVAILABLE
   * on shutdown. `incarnation` is the one the caller checked the session's
   * scope on (the first read's when undefined): the stream is that session's.
   */
  async *subscribe(
    sessionId: string,
    afterSeq: number | undefined,
    eventTypes: readonly string[],
    signal: AbortSignal,
    incarnation?: string,
  ): AsyncGenerator<StreamFrame> {
    if (this.closing) throw shuttingDown();
    const types = eventTypes.length > 0 ? new Set(eventTypes) : undefined;
    const channel = this.acquire(sessionId);
    this.subscribers++;
    // One waiter per subscription, registered once: waking it per event costs no
    // new timer, listener or set entry (with 1000 subscribers, that adds up).
    const waiter = new Waiter(this.options.heartbeatMs);
    channel.wakers.add(waiter.wake);
    this.shutdownWakers.add(waiter.wake);
    signal.addEventListener("abort", waiter.wake, { once: true });
    let seenHints = channel.hints;
    try {
      // Changes made from here on reach the channel (a store may subscribe on demand).
      if (this.store.noticesFlowing) await this.store.noticesFlowing();
      // The first read validates the session and the cursor.
      const first = await this.store.readEvents(sessionId, { afterSeq, limit: this.options.pageSize });
      const ours = incarnation ?? first.incarnation;
      /** NOT_FOUND unless the store's session under this id is still the stream's own. */
      const checkCurrent = async (): Promise<SessionRecord> => {
        const session = await this.store.getSession(sessionId);
        if (!session || session.incarnation !== ours) throw sessionNotFound(sessionId);
        return session;
      };
      /**
       * The next page after `cursor`, of the stream's own session. A shared or
       * carried page of another incarnation may be stale (reads and notices
       * race): the store decides, and a page of our own is then read directly.
       */
      const nextPage = async (): Promise<NextPage> => {
        let page: NextPage;
        try {
          page = await this.read(channel, sessionId, cursor);
        } catch (err) {
          // A cursor outside the session's range may only mean that the id holds another session now.
          if (err instanceof MemoryError && err.code === "OUT_OF_RANGE") await checkCurrent();
          throw err;
        }
        this.observeHead(channel, page.incarnation, page.headSeq);
        if (page.incarnation === ours) return page;
        await checkCurrent();
        const direct = await this.store.readEvents(sessionId, { afterSeq: cursor, limit: this.options.pageSize });
        if (direct.incarnation !== ours) throw sessionNotFound(sessionId);
        this.observeHead(channel, direct.incarnation, direct.headSeq);
        return direct;
      };
      let cursor = afterSeq ?? first.firstSeq - 1;
      if (first.incarnation !== ours) throw sessionNotFound(sessionId);
      this.observeHead(channel, first.incarnation, first.headSeq);
      let page: NextPage | undefined = first;
      for (;;) {
        if (!page) page = await nextPage();
        for (const event of page.events) {
          cursor = event.seq;
          if (!types || types.has(event.eventType)) yield { kind: "event", event };
        }
        if (page.events.length < this.options.pageSize) break;
        page = undefined;
      }
      yield { kind: "caughtUp", headSeq: cursor };

      while (!signal.aborted) {
        const woke = await this.waitForChange(channel, cursor, ours, seenHints, waiter);
        if (signal.aborted) return;
        if (this.closing) {
          throw shuttingDown(cursor);
        }
        if (channel.gone.has(ours)) throw sessionNotFound(sessionId);
        if (woke === "idle" || seenHints !== channel.hints) {
          // Safety re-read: a notice may have been lost, or the id may hold another session now.
          seenHints = channel.hints;
          const session = await checkCurrent();
          this.observeHead(channel, session.incarnation, session.headSeq);
          if (session.headSeq <= cursor) {
            if (woke === "idle") yield { kind: "heartbeat", headSeq: session.headSeq };
            continue;
          }
        }
        for (;;) {
          const announced = channel.knownHead;
          const next = await nextPage();
          for (const event of next.events) {
            cursor = event.seq;
            if (!types || types.has(event.eventType)) yield { kind: "event", event };
          }
          if (
            next.events.length === 0 &&
            channel.headOf === ours &&
            channel.knownHead === announced &&
            announced > next.headSeq
          ) {
            // The store has nothing past a head a notice announced, and no notice came meanwhile: that
            // head was another incarnation's (a late notice naming none). Waiting on it would spin.
            channel.knownHead = next.headSeq;
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
        gone: new Set(),
        hints: 0,
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
    if (notice.incarnation !== undefined) {
      if (channel.noticed !== undefined && channel.noticed !== notice.incarnation) channel.hints++;
      channel.noticed = notice.incarnation;
    }
    if (notice.deleted) {
      // A deletion naming its incarnation is proof (that incarnation can never come back); one
      // naming none only says the id was absent at some point.
      if (notice.incarnation === undefined) channel.hints++;
      else channel.gone.add(notice.incarnation);
      channel.carried.clear();
    } else if (notice.headSeq === undefined) {
      // A notice without a position: every cached read may be stale.
      channel.carried.clear();
      channel.knownHead = Number.MAX_SAFE_INTEGER;
      channel.reads.clear();
    } else if (this.observeHead(channel, notice.incarnation ?? channel.headOf ?? "", notice.headSeq)) {
      // Events carried by the notice are a page a read after them would return: subscribers at
      // that cursor take it from here instead of reading the store (one read per event per
      // replica saved). Unlike a read, such a page is never empty, so it stays right to hand out
      // after the head moves on, and a subscriber a few notices behind catches up from them too.
      // Only a notice that names its incarnation carries a page: each subscriber checks it is its own.
      const events = notice.events;
      if (
        notice.incarnation !== undefined &&
        events &&
        events.length > 0 &&
        events.length <= this.options.pageSize &&
        events[events.length - 1].seq === notice.headSeq
      ) {
        channel.carried.set(events[0].seq - 1, {
          events: [...events],
          headSeq: notice.headSeq,
          incarnation: notice.incarnation,
        });
        if (channel.carried.size > CARRIED_PAGES) channel.carried.delete(channel.carried.keys().next().value!);
      }
    } else {
      // A head that went back or another incarnation: no carried page can be trusted any more.
      channel.carried.clear();
    }
    for (const wake of channel.wakers) wake();
  }

  /**
   * Records a head seen in a read or a notice; true when it moved the known
   * head forward. A head of another incarnation than the known one replaces
   * it (and drops the cached reads): subscribers only wait on a head of their
   * own incarnation, so none spins on a head its session never had.
   */
  private observeHead(channel: SessionChannel, incarnation: string, headSeq: number): boolean {
    if (channel.headOf !== undefined && channel.headOf !== incarnation) {
      channel.headOf = incarnation;
      channel.knownHead = headSeq;
      channel.reads.clear();
      return false;
    }
    channel.headOf = incarnation;
    if (headSeq <= channel.knownHead) return false;
    channel.knownHead = headSeq;
    channel.reads.clear();
    return true;
  }

  /**
   * Resolves "changed" when the head moves past the cursor or something
   * happened to the stream's incarnation, "idle" after the heartbeat interval.
   */
  private waitForChange(
    channel: SessionChannel,
    cursor: number,
    incarnation: string,
    seenHints: number,
    waiter: Waiter,
  ): Promise<"changed" | "idle"> {
    const changed =
      (channel.headOf === incarnation && channel.knownHead > cursor) ||
      channel.gone.has(incarnation) ||
      channel.hints !== seenHints ||
      this.closing;
    return changed ? Promise.resolve("changed") : waiter.wait();
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
