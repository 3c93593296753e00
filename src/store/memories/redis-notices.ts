/**
 * Change notices of the Redis memories: the scripts publish each write's and
 * deletion's records; this replica hands them to its watchers (its own
 * changes at once, others' from the channel).
 *
 * Notices go, on one node, to one channel, `<prefix>:memories`, for every
 * app; on a cluster, to a channel per app in the app's slot,
 * `<prefix>:memories:{<hex app>}`, by SPUBLISH
 * from the script itself (sharded pub/sub: each shard carries its own apps'
 * notices, instead of every node relaying all of them); a replica
 * SSUBSCRIBEs to the channels of the apps it has watchers for, and once a
 * subscription is acknowledged (or renewed after a failover or a slot move)
 * tells those watchers to catch up from the change log, so nothing committed
 * before it counts is missed.
 */
import type { Cluster } from "ioredis";
import { KeyedListeners } from "../notices.js";
import { openRedisSubscriber, type RedisClient } from "../../backends/redis.js";
import type { MemoryChange, MemoryChangeListener, MemoryRecord } from "../types.js";
import { decode, type MemoryRedis } from "./redis-layout.js";

/** The watchers of one store's memories and the subscription that feeds them. */
export class MemoryNotices {
  private readonly listeners = new KeyedListeners<MemoryChange>();
  /** A connection of its own for the channel: subscribed while the store is open. */
  private subscriber?: RedisClient;
  /** A cluster: the apps whose channels are subscribed (or being subscribed), each settled once Redis answered. */
  private readonly following = new Map<string, Promise<void>>();

  constructor(
    private readonly db: MemoryRedis,
    /** Tells this replica's notices from others': its own changes are delivered at once, not again from the channel. */
    private readonly origin: string,
    /** The number of an app's newest change (catching up after a renewed subscription). */
    private readonly head: (appName: string) => Promise<number>,
  ) {}

  /** Subscribes to the changes other replicas publish; rejects when Redis cannot be reached. */
  async listen(): Promise<void> {
    const subscriber = openRedisSubscriber(this.db.redis, this.db.prefix, "memories");
    if (this.db.clustered) {
      subscriber.on("smessage", (channel: string, message: string) => {
        if (channel.startsWith(`${this.db.prefix}:memories:{`) && this.listeners.size > 0) this.deliver(message, false);
      });
      // After a failover or a slot move ioredis subscribes again; what was published meanwhile is in the change log.
      subscriber.on("subscribersReady", () => void this.catchUp());
    } else {
      const channel = this.db.channelOf("");
      subscriber.on("message", (from: string, message: string) => {
        if (from === channel && this.listeners.size > 0) this.deliver(message, false);
      });
    }
    this.subscriber = subscriber;
    // ioredis subscribes again by itself after a reconnect; changes published meanwhile are lost, as WatchMemories says.
    try {
      await subscriber.connect();
      // On a cluster each app's channel is subscribed while it has watchers (subscribeMemories).
      if (!this.db.clustered) await subscriber.subscribe(this.db.channelOf(""));
    } catch (err) {
      subscriber.disconnect();
      throw err;
    }
  }

  /** Drops the subscription and every listener (the store is closing). */
  close(): void {
    this.listeners.clear();
    this.following.clear();
    this.subscriber?.disconnect();
  }

  /** Calls `listener` on every change to the app's memories; on a cluster, follows the app's channel while it has listeners. */
  subscribe(appName: string, listener: MemoryChangeListener): () => void {
    const unsubscribe = this.listeners.subscribe(appName, listener);
    if (!this.db.clustered) return unsubscribe;
    if (!this.following.has(appName)) this.follow(appName);
    return () => {
      unsubscribe();
      if (!this.listeners.has(appName)) this.unfollow(appName);
    };
  }

  /**
   * On a cluster, resolves once the app's channel is subscribed (UNAVAILABLE
   * when its shard cannot be reached); at once on one node, where one channel
   * carries every app from the start.
   */
  async listening(appName: string): Promise<void> {
    await this.following.get(appName);
  }

  /** Decodes a notice of the scripts and hands its changes to this replica's listeners; the records it removed. */
  deliver(notice: string, own: boolean): MemoryRecord[] {
    let parsed: {
      o: string;
      q?: number;
      c?: Array<[string, object, string, number[] | null, number]>;
      d?: Array<[object, string, number[] | null]>;
    };
    try {
      parsed = JSON.parse(notice);
    } catch {
      return [];
    }
    // Our own changes were delivered when the script returned.
    const emit = own || parsed.o !== this.origin;
    for (const [kind, record, validity, embedding, seq] of parsed.c ?? []) {
      const memory = decode(record, validity, embedding);
      if (emit) this.emit(memory.appName, { seq, kind: kind === "s" ? "superseded" : "written", memory });
    }
    const removed = (parsed.d ?? []).map(([record, validity, embedding]) => decode(record, validity, embedding));
    if (emit && removed.length > 0)
      this.emit(removed[0].appName, { seq: parsed.q ?? 0, kind: "deleted", memories: removed });
    return removed;
  }

  private emit(appName: string, change: MemoryChange): void {
    this.listeners.emit(appName, change);
  }

  /**
   * A cluster: SSUBSCRIBEs to the app's channel; once Redis acknowledges,
   * the app's watchers catch up from the log (what was committed before the
   * subscription counted). ioredis keeps the channel and subscribes again
   * after failovers and slot moves ("subscribersReady" in listen()).
   */
  private follow(appName: string): void {
    const subscriber = this.subscriber as Cluster | undefined;
    if (!subscriber) return;
    const subscribed = this.db.call(async () => void (await subscriber.ssubscribe(this.db.channelOf(appName))));
    // Failed (its shard is unreachable): forgotten, so that the next watcher of the app tries again.
    subscribed.catch(() => this.following.get(appName) === subscribed && this.following.delete(appName));
    this.following.set(appName, subscribed);
  }

  /** A cluster: the app's last watcher left, so its channel is dropped. */
  private unfollow(appName: string): void {
    this.following.delete(appName);
    (this.subscriber as Cluster | undefined)?.sunsubscribe(this.db.channelOf(appName)).catch(() => {});
  }

  /**
   * A cluster's subscriptions were renewed (a failover, a slot move): the
   * notices published meanwhile are lost, so each watched app's watchers hear
   * how far its log has grown and read what they missed from it.
   */
  private async catchUp(): Promise<void> {
    for (const appName of this.listeners.keys()) {
      const head = await this.head(appName).catch(() => 0);
      if (head > 0) this.emit(appName, { seq: head, kind: "remote" });
    }
  }
}
