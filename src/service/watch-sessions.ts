/**
 * WatchSessions: several sessions followed on one stream. Each session is
 * one StreamHub subscription, exactly as StreamSessionEvents would hold it;
 * their frames are merged as they come, tagged with the session. A session
 * that ends the way a single stream would end for a client's reason
 * (NOT_FOUND, OUT_OF_RANGE) ends alone with a SessionEnded frame; anything
 * else (shutdown, a store failure) ends the whole stream with that status.
 */
import { create } from "@bufbuild/protobuf";
import {
  CaughtUpSchema,
  HeartbeatSchema,
  SessionEndedSchema,
  WatchSessionsResponseSchema,
  type Event,
  type WatchSessionsRequest,
  type WatchSessionsResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { invalidArgument, MemoryError, sessionNotFound } from "../errors.js";
import type { StoredEvent } from "../store/types.js";
import type { StreamHub } from "./stream-hub.js";
import { requireId, seqNumber } from "./validation.js";

/** Most sessions one WatchSessions call may follow. */
export const MAX_WATCHED_SESSIONS = 100;

/** One followed session as the request names it. */
export interface WatchedCursor {
  sessionId: string;
  afterSeq: number | undefined;
}

/** The request's cursors, validated: 1..MAX_WATCHED_SESSIONS sessions, each once. */
export function watchedCursors(req: WatchSessionsRequest): WatchedCursor[] {
  if (req.sessions.length === 0) throw invalidArgument("sessions", "must name at least one session");
  if (req.sessions.length > MAX_WATCHED_SESSIONS)
    throw invalidArgument("sessions", `at most ${MAX_WATCHED_SESSIONS} sessions per call, got ${req.sessions.length}`);
  const seen = new Set<string>();
  return req.sessions.map((c, i) => {
    const sessionId = requireId(`sessions[${i}].session_id`, c.sessionId);
    if (seen.has(sessionId))
      throw invalidArgument(`sessions[${i}].session_id`, `session ${JSON.stringify(sessionId)} is named twice`);
    seen.add(sessionId);
    return {
      sessionId,
      afterSeq: c.afterSeq === undefined ? undefined : seqNumber(`sessions[${i}].after_seq`, c.afterSeq),
    };
  });
}

/** A frame waiting for the reader, and how to tell its session's pump that it was taken. */
interface Pending {
  frame: WatchSessionsResponse;
  taken: () => void;
}

/**
 * The merged frames of `cursors`. Each session's pump waits until its frame
 * is taken before reading on, so a slow reader holds at most one frame per
 * session here (the hub bounds what each subscription reads ahead).
 */
export async function* watchSessions(
  hub: StreamHub,
  wire: (e: StoredEvent) => Event,
  cursors: readonly WatchedCursor[],
  signal: AbortSignal,
  /** CallContext.watched: the key's verdict on each session; undefined while auth is off. */
  watched?: ReadonlyMap<string, string | null>,
): AsyncGenerator<WatchSessionsResponse> {
  const stop = new AbortController();
  const subscriptionSignal = AbortSignal.any([signal, stop.signal]);
  const queue: Pending[] = [];
  let wake: (() => void) | undefined;
  let running = cursors.length;
  let failure: unknown;
  let closed = false;

  const deliver = (frame: WatchSessionsResponse) =>
    new Promise<void>((taken) => {
      if (closed) return taken();
      queue.push({ frame, taken });
      wake?.();
    });
  const pump = async ({ sessionId, afterSeq }: WatchedCursor) => {
    const tagged = (frame: WatchSessionsResponse["frame"]) => create(WatchSessionsResponseSchema, { sessionId, frame });
    try {
      const incarnation = watched?.get(sessionId);
      if (incarnation === null) throw sessionNotFound(sessionId);
      for await (const f of hub.subscribe(sessionId, afterSeq, [], subscriptionSignal, incarnation)) {
        if (f.kind === "event") await deliver(tagged({ case: "event", value: wire(f.event) }));
        else if (f.kind === "caughtUp")
          await deliver(tagged({ case: "caughtUp", value: create(CaughtUpSchema, { headSeq: BigInt(f.headSeq) }) }));
        else
          await deliver(tagged({ case: "heartbeat", value: create(HeartbeatSchema, { headSeq: BigInt(f.headSeq) }) }));
      }
    } catch (err) {
      if (err instanceof MemoryError && (err.code === "NOT_FOUND" || err.code === "OUT_OF_RANGE")) {
        await deliver(
          tagged({ case: "ended", value: create(SessionEndedSchema, { code: err.code, message: err.message }) }),
        );
      } else if (!subscriptionSignal.aborted) {
        failure ??= err;
        stop.abort();
      }
    } finally {
      running--;
      wake?.();
    }
  };
  for (const cursor of cursors) void pump(cursor);
  // On a cancel, every pump is freed at once: the reader may never come back for (or close) a frame it was given.
  let given: Pending | undefined; // yielded, not yet taken back
  const release = () => {
    closed = true;
    given?.taken();
    for (const pending of queue.splice(0)) pending.taken();
  };
  const wakeOnAbort = () => {
    if (signal.aborted) release();
    wake?.();
  };
  subscriptionSignal.addEventListener("abort", wakeOnAbort, { once: true });
  try {
    for (;;) {
      if (failure !== undefined) throw failure;
      // A cancelled call yields nothing more: the edge may never ask for (or close) a frame yielded after its cancel.
      if (signal.aborted) return;
      const next = queue.shift();
      if (next) {
        given = next;
        yield next.frame;
        given = undefined;
        next.taken();
        continue;
      }
      if (running === 0 || subscriptionSignal.aborted) return;
      await new Promise<void>((resolve) => (wake = resolve));
      wake = undefined;
    }
  } finally {
    // Frees every pump still waiting on the reader, so each subscription sees the abort and leaves the hub.
    subscriptionSignal.removeEventListener("abort", wakeOnAbort);
    stop.abort();
    release();
  }
}
