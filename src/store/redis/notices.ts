/**
 * Session notices over Redis pub/sub (sharded pub/sub on a cluster, one
 * channel per bucket: keys.ts): what the append and delete scripts
 * publish, read back into SessionNotices for this replica's listeners, and
 * the catch-up after the notice connection was down.
 *
 * A notice is a JSON header, {"s": id, "h": head, "i": incarnation} or
 * {"s": id, "d": 1, "i": incarnation}; an append's header may add "k": <count>
 * and be followed by a newline and the last `k` events up to the head, each
 * one frame of its stored encoding (codec.ts), so replicas deliver them
 * without reading them back (append-12.lua says when).
 */
import type { NoticeListeners } from "../notices.js";
import type { SessionNotice } from "../types.js";
import { frameAt, type DecodedEvents, type EncodedEvent } from "./codec.js";
import type { NoticeHandler, RedisConnection } from "./connection.js";
import type { RedisKeys } from "./keys.js";

/** Hands the notices of the channel to the store's listeners. */
export class RedisNotices implements NoticeHandler {
  constructor(
    private readonly connection: RedisConnection,
    private readonly keys: RedisKeys,
    private readonly listeners: NoticeListeners,
    private readonly decoded: DecodedEvents,
  ) {}

  /** One message of the notice channel. */
  message(message: Buffer): void {
    // Every replica hears every append; most have no stream on its session. Nothing to parse then:
    // decoding each notice's events was ~10% of a replica's CPU under appends nobody streamed.
    if (this.listeners.size === 0) return;
    const notice = parseNotice(message, (sessionId) => this.listeners.has(sessionId), this.decoded);
    if (notice) this.listeners.notify(notice);
  }

  /**
   * Notices published while the notice connection was down are lost: tell
   * every subscribed session's listeners its current head (or that it is
   * gone), read now. The head is sent on purpose: a notice without one makes
   * readers treat the head as unknown for good (StreamHub).
   */
  resubscribed(): void {
    void this.renotify();
  }

  private async renotify(): Promise<void> {
    const ids = this.listeners.sessionIds();
    if (ids.length === 0) return;
    // One read per session (on a cluster they live in different slots); the heartbeat re-reads of the streams catch up on any that fails.
    const results = await Promise.allSettled(
      ids.map((id) => this.connection.commands.hmget(this.keys.session(id), "head", "inc")),
    );
    for (const [i, id] of ids.entries()) {
      const result = results[i];
      if (result.status === "rejected") continue;
      const [head, incarnation] = result.value;
      this.listeners.notify(
        head === null
          ? { sessionId: id, deleted: true }
          : { sessionId: id, headSeq: Number(head), incarnation: incarnation ?? "" },
      );
    }
  }
}

/**
 * The notice in `message`, its events decoded through `decoded` (the cache
 * reads use too, so both share one object per event) only when `wanted`
 * says someone here listens to the session. Undefined for a notice of an
 * unwanted session, and for anything malformed (it cannot come from our scripts).
 */
export function parseNotice(
  message: Buffer,
  wanted: (sessionId: string) => boolean,
  decoded: DecodedEvents,
): SessionNotice | undefined {
  const newline = message.indexOf(0x0a);
  let header: { s: string; h?: number; d?: number; k?: number; i?: string };
  try {
    header = JSON.parse(message.toString("utf8", 0, newline < 0 ? message.length : newline));
  } catch {
    return undefined;
  }
  const incarnation = typeof header.i === "string" ? header.i : undefined;
  if (header.d) return { sessionId: header.s, deleted: true, incarnation };
  if (!wanted(header.s)) return undefined;
  const headOnly: SessionNotice = { sessionId: header.s, headSeq: header.h, incarnation };
  if (!header.k || newline < 0 || header.h === undefined || incarnation === undefined) return headOnly;
  const run: EncodedEvent[] = [];
  let pos = newline + 1;
  for (let seq = header.h - header.k + 1; seq <= header.h; seq++) {
    const event = frameAt(message, pos);
    if (!event) return headOnly;
    run.push({ seq, encoded: message.subarray(event.start, event.end) });
    pos = event.end;
  }
  return { ...headOnly, events: decoded.decodeRun(header.s, run) };
}
