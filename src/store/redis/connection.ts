/**
 * The Redis store's two connections and their lifecycle: one for commands,
 * one subscribed to the notice channels (a subscribed connection can run no
 * other command), opened (src/backends/redis.ts), watched and closed
 * together.
 *
 * Outages: the command connection has no offline queue (one node) and a
 * command timeout, so calls fail UNAVAILABLE quickly instead of hanging.
 * Commands in flight when the connection drops are re-sent by ioredis after
 * reconnecting; an append is harmless to re-send because every event id
 * (generated ones too) goes through the idempotency index.
 */
import { isCluster, openRedisClient, type RedisClient, type RedisClientOptions } from "../../backends/redis.js";
import { maskUrl } from "../../backends/redis-url.js";
import { MemoryError } from "../../errors.js";
import type { StoreDurability } from "../types.js";

/** Redis errors that mean "try again later" rather than "bug". */
const TRANSIENT_REPLY = /^(LOADING|BUSY|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|NOREPLICAS|NOSCRIPT|MOVED|ASK)/;

/** Cluster: resubscriptions within this many ms count as one (the handler re-reads every listened session's head). */
const RESUBSCRIBED_BURST_MS = 100;

/**
 * One node: how long the notice channels stay subscribed after this
 * replica's last listener left (RedisConnection.followNotices), so that
 * streams opened one after another do not re-subscribe each time.
 */
export const NOTICES_IDLE_MS = 1000;

/** A command not answered within this many ms fails UNAVAILABLE, unless MEMORY_STORE_TIMEOUT_MS says otherwise. */
export const DEFAULT_COMMAND_TIMEOUT_MS = 4000;

/** How to reach Redis. */
export interface ConnectionOptions {
  /** redis://, rediss://, redis+cluster:// or rediss+cluster:// URL. */
  url: string;
  /** Names the connections (CLIENT LIST) after the store's key prefix. */
  keyPrefix: string;
  /** A command not answered within this many ms fails UNAVAILABLE (default 4000). */
  commandTimeoutMs?: number;
}

/** What the notice connection hands on. */
export interface NoticeHandler {
  /** A message on a notice channel. */
  message(message: Buffer): void;
  /** The subscription is back after a reconnect: notices published meanwhile are lost. */
  resubscribed(): void;
}

/** Maps anything a Redis call throws to a MemoryError: connection trouble is UNAVAILABLE. */
export function storeError(err: unknown): MemoryError {
  if (err instanceof MemoryError) return err;
  const e = err instanceof Error ? err : new Error(String(err));
  if (e.name === "ReplyError") {
    if (TRANSIENT_REPLY.test(e.message))
      return new MemoryError("UNAVAILABLE", `redis unavailable: ${e.message}`, {}, { cause: e });
    if (e.message.startsWith("OOM"))
      return new MemoryError("RESOURCE_EXHAUSTED", `redis is out of memory: ${e.message}`, {}, { cause: e });
    return new MemoryError("INTERNAL", "internal error", {}, { cause: e });
  }
  if (e instanceof TypeError || e instanceof RangeError || e instanceof SyntaxError) {
    return new MemoryError("INTERNAL", "internal error", {}, { cause: e });
  }
  // Connection closed, not writeable (no offline queue), command timed out, retries exhausted.
  return new MemoryError("UNAVAILABLE", `redis unavailable: ${e.message}`, {}, { cause: e });
}

/** The command and notice connections of one store. */
export class RedisConnection {
  /** The command connection (not connected until connect()). */
  readonly commands: RedisClient;
  /** True on a Redis Cluster: keys carry bucket tags, notices go over sharded pub/sub. */
  readonly cluster: boolean;
  private readonly subscriber: RedisClient;
  private closed = false;
  /** Cluster: how to fail each call in flight, should the client lose the whole cluster. */
  private readonly inFlight = new Set<(err: MemoryError) => void>();
  /** The command connection's last error: connect() only says "Connection is closed.", this has the reason. */
  private lastError: Error | undefined;
  /** One node: the notice channels, their handler, whether they are subscribed (or being), the pending unsubscription. */
  private notices?: {
    channels: string[];
    handler: NoticeHandler;
    subscribed: boolean;
    ready: Promise<void>;
    idle?: NodeJS.Timeout;
  };

  constructor(private readonly options: ConnectionOptions) {
    const common: RedisClientOptions = {
      lazyConnect: true,
      maxRetriesPerRequest: 2,
      commandTimeout: options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS,
      connectTimeout: 3000,
    };
    this.commands = openRedisClient(options.url, options.keyPrefix, "commands", common);
    this.cluster = isCluster(this.commands);
    // The subscriber's only commands are (re)subscriptions; no command timeout needed beyond connecting.
    this.subscriber = openRedisClient(options.url, options.keyPrefix, "notices", {
      ...common,
      commandTimeout: undefined,
      shardedSubscribers: this.cluster,
    });
    this.commands.on("error", (err: Error) => (this.lastError = err));
    // A cluster client that lost every node: the calls waiting on it answer now (call()).
    if (this.cluster) {
      this.commands.on("close", () => {
        const lost = new MemoryError("UNAVAILABLE", "redis cluster unavailable: the connection to every node was lost");
        for (const giveUp of this.inFlight) giveUp(lost);
      });
    }
  }

  /** Connects both; UNAVAILABLE naming the URL (password masked) and the reason when Redis cannot be reached. */
  async connect(): Promise<void> {
    try {
      await Promise.all([this.commands.connect(), this.subscriber.connect()]);
    } catch (err) {
      throw this.connectError(err);
    }
  }

  /**
   * Hands the messages of `channels` to `handler`. On a cluster they are
   * subscribed now (SSUBSCRIBE), for good; UNAVAILABLE as connect() when
   * that fails. On one node only while followNotices says someone listens.
   */
  async subscribe(channels: readonly string[], handler: NoticeHandler): Promise<void> {
    try {
      await this.listen(channels, handler);
    } catch (err) {
      throw this.connectError(err);
    }
  }

  /**
   * One node: whether this replica has listeners for notices. The channels
   * are subscribed while it has, and NOTICES_IDLE_MS after the last one
   * left they are unsubscribed: a replica with no stream then no longer
   * reads and discards a message for every append of every replica (nor
   * does Redis write one). Notices published before a subscription took
   * effect do not reach the listeners: a stream waits for noticesFlowing()
   * before its first read. A cluster stays subscribed.
   */
  followNotices(wanted: boolean): void {
    const notices = this.notices;
    if (!notices || this.closed || isCluster(this.subscriber)) return;
    const node = this.subscriber;
    if (wanted) {
      clearTimeout(notices.idle);
      notices.idle = undefined;
      if (notices.subscribed) return;
      notices.subscribed = true;
      notices.ready = node.subscribe(...notices.channels).then(
        () => {},
        // Not connected: the "ready" handler subscribes once it is, and re-reads the listened heads (resubscribed()).
        () => {},
      );
      return;
    }
    if (!notices.subscribed || notices.idle) return;
    notices.idle = setTimeout(() => {
      notices.idle = undefined;
      if (this.closed || !notices.subscribed) return;
      notices.subscribed = false;
      node.unsubscribe(...notices.channels).catch(() => {
        // Not connected: should ioredis subscribe them again on reconnecting, the handler ignores what comes unwanted.
      });
    }, NOTICES_IDLE_MS);
    notices.idle.unref();
  }

  /** Resolves once the notice channels are subscribed (or failed to be: see followNotices); at once on a cluster. */
  noticesFlowing(): Promise<void> {
    return this.notices?.subscribed ? this.notices.ready : Promise.resolve();
  }

  /** Disconnects both (they stop reconnecting) and says why connecting failed. */
  private connectError(err: unknown): MemoryError {
    this.commands.disconnect();
    this.subscriber.disconnect();
    const cause = this.lastError?.message ?? (err instanceof Error ? err.message : String(err));
    return new MemoryError(
      "UNAVAILABLE",
      `cannot connect to Redis at ${maskUrl(this.options.url)}: ${cause}`,
      {},
      { cause: err },
    );
  }

  /**
   * Runs one call on the command connection; UNAVAILABLE once closed, and
   * whatever it throws as a MemoryError. On a cluster, UNAVAILABLE at once
   * while the client is not connected, and the whole call is also bounded by
   * the command timeout: ioredis' Cluster keeps its offline queue
   * (it holds commands while the client re-learns the slots), and a command
   * waiting there has no timeout of its own, so with every node down a call
   * would otherwise hang until the cluster came back. Calls in flight when
   * the client loses the whole cluster (its "close") fail UNAVAILABLE then.
   * A call given up this way may still run later, as one whose reply timed
   * out may have: a write retried with the same ids is idempotent.
   */
  async call<T>(run: (commands: RedisClient) => Promise<T>): Promise<T> {
    if (this.closed) throw new MemoryError("UNAVAILABLE", "redis store is closed");
    try {
      if (!this.cluster) return await run(this.commands);
      // Not connected to the cluster at all (every node down, or not yet reached): fail now, as one node's client does.
      if (this.commands.status !== "ready")
        throw new MemoryError("UNAVAILABLE", `redis cluster unavailable: the client is ${this.commands.status}`);
      return await this.givenUpInTime(run(this.commands));
    } catch (err) {
      throw storeError(err);
    }
  }

  /** Cluster: `work`'s outcome, or UNAVAILABLE once the command timeout passes or the client loses every node, whichever comes first. */
  private async givenUpInTime<T>(work: Promise<T>): Promise<T> {
    const ms = this.options.commandTimeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    let giveUp!: (err: MemoryError) => void;
    const givenUp = new Promise<never>((_, reject) => (giveUp = reject));
    const timer = setTimeout(
      () =>
        giveUp(
          new MemoryError(
            "UNAVAILABLE",
            `redis cluster unavailable: no answer within ${ms} ms (MEMORY_STORE_TIMEOUT_MS)`,
          ),
        ),
      ms,
    );
    this.inFlight.add(giveUp);
    try {
      return await Promise.race([work, givenUp]);
    } finally {
      clearTimeout(timer);
      this.inFlight.delete(giveUp);
    }
  }

  /** UNAVAILABLE unless both connections work. */
  async ping(): Promise<void> {
    await this.call((redis) => redis.ping());
    // Without the notice connection live streams fall back to heartbeat re-reads: report it.
    if (this.subscriber.status !== "ready")
      throw new MemoryError("UNAVAILABLE", `redis unavailable: notice connection is ${this.subscriber.status}`);
  }

  /** What the server's AOF and RDB settings mean for an acknowledged append (on a cluster: the node that answers CONFIG GET). */
  async describeDurability(): Promise<StoreDurability> {
    let settings: Record<string, string>;
    try {
      settings = {};
      // Every master of a cluster is configured alike (an operator's job); the first one known speaks for them.
      const node = (isCluster(this.commands) ? this.commands.nodes("master")[0] : undefined) ?? this.commands;
      for (const name of ["appendonly", "appendfsync", "save"]) {
        const pair = (await node.config("GET", name)) as string[];
        if (pair.length >= 2) settings[pair[0]] = pair[1];
      }
    } catch (err) {
      const mapped = storeError(err);
      if (mapped.code === "UNAVAILABLE") throw mapped;
      // CONFIG is often disabled or renamed on managed Redis.
      return {
        summary:
          "unknown: CONFIG GET is not allowed on this Redis; ask its operator whether appendonly (AOF) is on and how often it fsyncs",
        settings: { appendonly: "unknown", appendfsync: "unknown" },
      };
    }
    return { summary: durabilitySummary(settings), settings };
  }

  /** Closes both connections; later calls fail UNAVAILABLE. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.notices?.idle);
    await Promise.allSettled([this.commands.quit(), this.subscriber.quit()]);
    // quit() fails while disconnected; disconnect() also stops the reconnect loop.
    this.commands.disconnect();
    this.subscriber.disconnect();
  }

  /** Subscribes the notice connection; after every reconnect, tells the handler once notices flow again. */
  private async listen(channels: readonly string[], handler: NoticeHandler): Promise<void> {
    const wanted = new Set(channels);
    const onMessage = (from: Buffer, message: Buffer) => {
      if (wanted.has(from.toString())) handler.message(message);
    };
    if (isCluster(this.subscriber)) {
      const cluster = this.subscriber;
      cluster.on("smessageBuffer", onMessage);
      // One SSUBSCRIBE per channel: each is in a slot of its own (a bucket's), and ioredis sends it to that slot's master.
      await Promise.all(channels.map((channel) => cluster.ssubscribe(channel)));
      // After a topology change (failover, slot moved) ioredis replaces the sharded subscribers and subscribes
      // them again ("subscribersReady"); notices published meanwhile are lost. A burst of changes is told once.
      let burst: NodeJS.Timeout | undefined;
      cluster.on("subscribersReady", () => {
        if (this.closed || burst) return;
        burst = setTimeout(() => {
          burst = undefined;
          if (!this.closed) handler.resubscribed();
        }, RESUBSCRIBED_BURST_MS);
        burst.unref();
      });
      return;
    }
    const node = this.subscriber;
    node.on("messageBuffer", onMessage);
    // Subscribed on demand (followNotices).
    const notices = (this.notices = { channels: [...channels], handler, subscribed: false, ready: Promise.resolve() });
    node.on("ready", () => {
      if (this.closed || !notices.subscribed) return;
      // ioredis re-subscribes by itself; subscribing again makes the ack tell us when notices flow again.
      node.subscribe(...channels).then(
        () => handler.resubscribed(),
        () => {},
      );
    });
  }
}

/** One line an operator can act on, from appendonly / appendfsync / save. */
export function durabilitySummary(settings: Record<string, string>): string {
  const raw = `(appendonly ${settings.appendonly ?? "?"}, appendfsync ${settings.appendfsync ?? "?"})`;
  if (settings.appendonly === "yes") {
    switch (settings.appendfsync) {
      case "always":
        return `AOF, fsync on every write: an acknowledged append survives a Redis restart and a power failure ${raw}`;
      case "everysec":
        return `AOF, fsync every second: an acknowledged append survives a Redis restart; up to ~1 s may be lost on power failure ${raw}`;
      default:
        return `AOF, fsync left to the OS: an acknowledged append survives a Redis restart; up to ~30 s may be lost on power failure ${raw}`;
    }
  }
  if (!settings.save) {
    return `no AOF and no RDB snapshots: every append is lost when Redis restarts ${raw}`;
  }
  return `no AOF: only RDB snapshots (save "${settings.save}"); appends since the last snapshot are lost when Redis restarts ${raw}`;
}
