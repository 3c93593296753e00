/**
 * Following sessions live over one WatchSessions stream per API key, however
 * many sessions (and browser tabs) follow. A browser allows 6 HTTP/1.1
 * connections per host and each open stream holds one, so one stream per
 * session tab left the 7th tab waiting forever; this is shared by every tab
 * through the SharedWorker in live-worker.ts (live.ts falls back to running
 * it in the page where SharedWorker is missing).
 *
 * Each follower asks for a session after a seq; the stream starts each
 * session at the lowest seq its followers need and gives each follower only
 * the events after its own. When the set of sessions changes, the stream is
 * opened again (a moment later, so that tabs opening together share one
 * restart) from where each follower is.
 */
import { ConnectError, Code, type Client } from "@connectrpc/connect";
import type { Event as MemoryEvent, MemoryService } from "@engram/gen";

/** What a follower hears about its session. */
export type LiveMessage =
  | { kind: "event"; event: MemoryEvent }
  /** Caught up, or a heartbeat: the session is followed live. */
  | { kind: "live" }
  /** The connection was lost; it is being opened again (events resume after the last one given). */
  | { kind: "reconnecting" }
  /** No more messages: the session is gone (NOT_FOUND), its cursor was evicted (OUT_OF_RANGE), or the key was refused. */
  | { kind: "ended"; code: string; message: string };

/** Sessions per WatchSessions call (the server's limit). */
const SESSIONS_PER_STREAM = 100;
/** How long a change of the followed sessions waits for others before the stream is opened again. */
const RESTART_DELAY_MS = 30;
/** Errors that following again will not cure. */
const FINAL_CODES = new Set([Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument, Code.Unimplemented]);

interface Follower {
  sessionId: string;
  after: bigint;
  deliver: (message: LiveMessage) => void;
}

/** The followers of one API key and the stream(s) that serve them. */
class KeyStreams {
  private readonly followers = new Set<Follower>();
  private generation = new AbortController();
  private restartTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(private readonly client: Client<typeof MemoryService>) {}

  get idle(): boolean {
    return this.followers.size === 0;
  }

  add(follower: Follower): () => void {
    this.followers.add(follower);
    this.scheduleRestart();
    return () => {
      if (this.followers.delete(follower)) this.scheduleRestart();
    };
  }

  private scheduleRestart(): void {
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => this.restart(), RESTART_DELAY_MS);
  }

  private restart(): void {
    this.generation.abort();
    this.generation = new AbortController();
    const sessionIds = [...new Set([...this.followers].map((f) => f.sessionId))];
    for (let i = 0; i < sessionIds.length; i += SESSIONS_PER_STREAM) {
      void this.run(sessionIds.slice(i, i + SESSIONS_PER_STREAM), this.generation.signal);
    }
  }

  private followersOf(sessionId: string): Follower[] {
    return [...this.followers].filter((f) => f.sessionId === sessionId);
  }

  /** The lowest seq any follower of `sessionId` has seen: where a (re)opened stream starts it. */
  private cursorOf(sessionId: string): bigint {
    return this.followersOf(sessionId).reduce(
      (min, f) => (f.after < min ? f.after : min),
      BigInt(Number.MAX_SAFE_INTEGER),
    );
  }

  private async run(sessionIds: string[], signal: AbortSignal): Promise<void> {
    for (let failures = 0; !signal.aborted; ) {
      const open = sessionIds.filter((id) => this.followersOf(id).length > 0);
      if (open.length === 0) return;
      try {
        const stream = this.client.watchSessions(
          { sessions: open.map((sessionId) => ({ sessionId, afterSeq: this.cursorOf(sessionId) })) },
          { signal },
        );
        for await (const res of stream) {
          if (signal.aborted) return;
          failures = 0;
          const frame = res.frame;
          for (const f of this.followersOf(res.sessionId)) {
            if (frame.case === "event") {
              if (frame.value.seq <= f.after) continue;
              f.after = frame.value.seq;
              f.deliver({ kind: "event", event: frame.value });
            } else if (frame.case === "caughtUp" || frame.case === "heartbeat") {
              f.deliver({ kind: "live" });
            } else if (frame.case === "ended") {
              this.followers.delete(f);
              f.deliver({ kind: "ended", code: frame.value.code, message: frame.value.message });
            }
          }
        }
        return; // every session of this stream ended
      } catch (err) {
        if (signal.aborted) return;
        const ce = ConnectError.from(err);
        if (FINAL_CODES.has(ce.code)) {
          for (const id of open) {
            for (const f of this.followersOf(id)) {
              this.followers.delete(f);
              f.deliver({ kind: "ended", code: Code[ce.code] ?? String(ce.code), message: ce.rawMessage });
            }
          }
          return;
        }
      }
      failures++;
      for (const id of open) for (const f of this.followersOf(id)) f.deliver({ kind: "reconnecting" });
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.min(5000, 200 * 2 ** Math.min(failures, 5)));
        signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
      });
    }
  }
}

/** Every follower of this page (or of every tab, in the shared worker), one set of streams per API key. */
export class LiveFollowers {
  private readonly byKey = new Map<string, KeyStreams>();

  constructor(private readonly clientFor: (key: string) => Client<typeof MemoryService>) {}

  /** Follows `sessionId` after `afterSeq` with `key`; returns what stops following. */
  follow(key: string, sessionId: string, afterSeq: bigint, deliver: (message: LiveMessage) => void): () => void {
    let streams = this.byKey.get(key);
    if (!streams) {
      streams = new KeyStreams(this.clientFor(key));
      this.byKey.set(key, streams);
    }
    const stop = streams.add({ sessionId, after: afterSeq, deliver });
    return () => {
      stop();
      if (streams.idle) this.byKey.delete(key);
    };
  }
}
