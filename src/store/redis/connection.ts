/**
 * The Redis store's two connections and their lifecycle: one for commands,
 * one subscribed to the notice channel (a subscribed connection can run no
 * other command), opened, watched and closed together.
 *
 * Outages: the command connection has no offline queue and a command timeout,
 * so calls fail UNAVAILABLE quickly instead of hanging. Commands in flight
 * when the connection drops are re-sent by ioredis after reconnecting; an
 * append is harmless to re-send because every event id (generated ones too)
 * goes through the idempotency index.
 */
import { Redis, type RedisOptions } from "ioredis";
import { MemoryError } from "../../errors.js";
import type { StoreDurability } from "../types.js";

/** Redis errors that mean "try again later" rather than "bug". */
const TRANSIENT_REPLY = /^(LOADING|BUSY|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|NOREPLICAS|NOSCRIPT)/;

/** How to reach Redis. */
export interface ConnectionOptions {
  /** redis:// or rediss:// URL. */
  url: string;
  /** Names the connections (CLIENT LIST) after the store's key prefix. */
  keyPrefix: string;
  /** A command not answered within this many ms fails UNAVAILABLE (default 4000). */
  commandTimeoutMs?: number;
}

/** What the notice connection hands on. */
export interface NoticeHandler {
  /** A message on the notice channel. */
  message(message: Buffer): void;
  /** The subscription is back after a reconnect: notices published meanwhile are lost. */
  resubscribed(): void;
}

/** The URL with its password masked, for messages. */
const maskUrl = (url: string) => url.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:***@");

/** Maps anything a Redis call throws to a MemoryError: connection trouble is UNAVAILABLE. */
export function storeError(err: unknown): MemoryError {
  if (err instanceof MemoryError) return err;
  const e = err instanceof Error ? err : new Error(String(err));
  if (e.name === "ReplyError") {
    if (TRANSIENT_REPLY.test(e.message)) return new MemoryError("UNAVAILABLE", `redis unavailable: ${e.message}`, {}, { cause: e });
    if (e.message.startsWith("OOM")) return new MemoryError("RESOURCE_EXHAUSTED", `redis is out of memory: ${e.message}`, {}, { cause: e });
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
  readonly commands: Redis;
  private readonly subscriber: Redis;
  private closed = false;
  /** The command connection's last error: connect() only says "Connection is closed.", this has the reason. */
  private lastError: Error | undefined;

  constructor(private readonly options: ConnectionOptions) {
    const common: RedisOptions = {
      lazyConnect: true,
      // Fail fast while disconnected instead of queueing: callers see UNAVAILABLE, not a hang.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 2,
      commandTimeout: options.commandTimeoutMs ?? 4000,
      connectTimeout: 3000,
      retryStrategy: (attempt) => Math.min(50 * 2 ** attempt, 1000),
    };
    this.commands = new Redis(options.url, { ...common, connectionName: `${options.keyPrefix}:commands` });
    // The subscriber's only commands are (re)subscriptions; no command timeout needed beyond connecting.
    this.subscriber = new Redis(options.url, { ...common, commandTimeout: undefined, connectionName: `${options.keyPrefix}:notices` });
    // Without listeners ioredis reports every failed reconnect as an unhandled error event.
    this.commands.on("error", (err: Error) => (this.lastError = err));
    this.subscriber.on("error", () => {});
  }

  /**
   * Connects both and subscribes to `channel`, handing its messages to
   * `handler`; UNAVAILABLE naming the URL (password masked) and the reason
   * when Redis cannot be reached.
   */
  async connect(channel: string, handler: NoticeHandler): Promise<void> {
    try {
      await Promise.all([this.commands.connect(), this.subscriber.connect()]);
      await this.listen(channel, handler);
    } catch (err) {
      this.commands.disconnect();
      this.subscriber.disconnect();
      const cause = this.lastError?.message ?? (err instanceof Error ? err.message : String(err));
      throw new MemoryError("UNAVAILABLE", `cannot connect to Redis at ${maskUrl(this.options.url)}: ${cause}`, {}, { cause: err });
    }
  }

  /** Runs one call on the command connection; UNAVAILABLE once closed, and whatever it throws as a MemoryError. */
  async call<T>(run: (commands: Redis) => Promise<T>): Promise<T> {
    if (this.closed) throw new MemoryError("UNAVAILABLE", "redis store is closed");
    try {
      return await run(this.commands);
    } catch (err) {
      throw storeError(err);
    }
  }

  /** UNAVAILABLE unless both connections work. */
  async ping(): Promise<void> {
    await this.call((redis) => redis.ping());
    // Without the notice connection live streams fall back to heartbeat re-reads: report it.
    if (this.subscriber.status !== "ready") throw new MemoryError("UNAVAILABLE", `redis unavailable: notice connection is ${this.subscriber.status}`);
  }

  /** What the server's AOF and RDB settings mean for an acknowledged append. */
  async describeDurability(): Promise<StoreDurability> {
    let settings: Record<string, string>;
    try {
      settings = {};
      for (const name of ["appendonly", "appendfsync", "save"]) {
        const pair = (await this.commands.config("GET", name)) as string[];
        if (pair.length >= 2) settings[pair[0]] = pair[1];
      }
    } catch (err) {
      const mapped = storeError(err);
      if (mapped.code === "UNAVAILABLE") throw mapped;
      // CONFIG is often disabled or renamed on managed Redis.
      return {
        summary: "unknown: CONFIG GET is not allowed on this Redis; ask its operator whether appendonly (AOF) is on and how often it fsyncs",
        settings: { appendonly: "unknown", appendfsync: "unknown" },
      };
    }
    return { summary: durabilitySummary(settings), settings };
  }

  /** Closes both connections; later calls fail UNAVAILABLE. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled([this.commands.quit(), this.subscriber.quit()]);
    // quit() fails while disconnected; disconnect() also stops the reconnect loop.
    this.commands.disconnect();
    this.subscriber.disconnect();
  }

  /** Subscribes the notice connection; after every reconnect, tells the handler once notices flow again. */
  private async listen(channel: string, handler: NoticeHandler): Promise<void> {
    const channelBytes = Buffer.from(channel);
    this.subscriber.on("messageBuffer", (from: Buffer, message: Buffer) => {
      if (from.equals(channelBytes)) handler.message(message);
    });
    await this.subscriber.subscribe(channel);
    this.subscriber.on("ready", () => {
      if (this.closed) return;
      // ioredis re-subscribes by itself; subscribing again makes the ack tell us when notices flow again.
      this.subscriber.subscribe(channel).then(
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
