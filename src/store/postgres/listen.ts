/**
 * Live notices across replicas: every write NOTIFYs the store's channel
 * inside its transaction (so at commit), and each store LISTENs on one
 * connection of its own, reconnected with backoff when it drops.
 */
import { createHash } from "node:crypto";
import pg from "pg";
import { openPostgresClient } from "../../backends/postgres.js";
import type { SessionNotice } from "../types.js";
import { toMemoryError } from "./error-mapping.js";

const LISTEN_BACKOFF_MIN_MS = 100;
const LISTEN_BACKOFF_MAX_MS = 5000;

/** The LISTEN/NOTIFY channel of a schema: readable when it fits in an identifier, hashed when not. */
export function channelName(schema: string): string {
  const plain = `${schema}_events`;
  if (Buffer.byteLength(plain) <= 63) return plain;
  return `engram_events_${createHash("sha256").update(schema).digest("hex").slice(0, 32)}`;
}

/** Where the channel's notices go. */
export interface NoticeHandlers {
  /** A session's new head, or its deletion. */
  session(notice: SessionNotice): void;
  /** A notice of long-term memories (one carrying `m`), as parsed. */
  memories(payload: object): void;
  /** After a gap in listening (reconnected): notices sent meanwhile were lost. */
  resync(): Promise<void>;
}

/** The store's LISTEN connection. */
export class NoticeChannel {
  private client?: pg.Client;
  private reconnectTimer?: NodeJS.Timeout;
  private reconnectAttempt = 0;
  private closed = false;

  constructor(
    private readonly options: { url: string; schema: string; connectTimeoutMs?: number },
    private readonly channel: string,
    private readonly handlers: NoticeHandlers,
  ) {}

  /** Opens the LISTEN connection; notices from every replica arrive on it. */
  async listen(): Promise<void> {
    const client = openPostgresClient(
      {
        connectionString: this.options.url,
        connectionTimeoutMillis: this.options.connectTimeoutMs ?? 5000,
        keepAlive: true,
      },
      this.options.schema,
      "listen",
    );
    client.on("error", () => this.listenerLost(client));
    client.on("end", () => this.listenerLost(client));
    client.on("notification", (msg) => this.onNotification(msg.payload));
    try {
      await client.connect();
      await client.query(`LISTEN ${pg.escapeIdentifier(this.channel)}`);
    } catch (err) {
      void client.end().catch(() => {});
      throw toMemoryError(err);
    }
    if (this.closed) {
      void client.end().catch(() => {});
      return;
    }
    this.client = client;
  }

  /** Stops listening and reconnecting. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end();
  }

  private listenerLost(client: pg.Client): void {
    if (this.closed || client !== this.client) return;
    this.client = undefined;
    void client.end().catch(() => {});
    this.scheduleListen();
  }

  /** Reconnects with capped exponential backoff and jitter, forever, until close(). */
  private scheduleListen(): void {
    if (this.closed || this.reconnectTimer) return;
    const delay =
      Math.min(LISTEN_BACKOFF_MAX_MS, LISTEN_BACKOFF_MIN_MS * 2 ** this.reconnectAttempt++) * (0.5 + Math.random() / 2);
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = undefined;
      this.listen().then(
        () => {
          this.reconnectAttempt = 0;
          return this.handlers.resync();
        },
        () => this.scheduleListen(),
      );
    }, delay);
    this.reconnectTimer.unref();
  }

  private onNotification(payload: string | undefined): void {
    let parsed: { s?: unknown; h?: unknown; d?: unknown; i?: unknown; m?: unknown };
    try {
      parsed = JSON.parse(payload ?? "");
    } catch {
      return;
    }
    if (parsed.m !== undefined) return this.handlers.memories(parsed);
    if (typeof parsed.s !== "string") return;
    if (parsed.d)
      this.handlers.session({
        sessionId: parsed.s,
        deleted: true,
        incarnation: typeof parsed.i === "string" ? parsed.i : undefined,
      });
    else if (typeof parsed.h === "number") this.handlers.session({ sessionId: parsed.s, headSeq: parsed.h });
  }
}
