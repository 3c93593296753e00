/**
 * The SharedWorker every inspector tab of this origin shares: it holds the
 * one WatchSessions stream (per API key) that follows the sessions all the
 * tabs show, and passes each tab the messages of the sessions it follows.
 *
 * A tab talks to it over its port: {op: "follow", id, key, sessionId,
 * afterSeq}, {op: "unfollow", id}, and {op: "bye"} when the tab goes away;
 * it answers {id, message}. The key comes with each follow, since a worker
 * cannot read a tab's sessionStorage.
 */
import { memoryClient } from "./api";
import { LiveFollowers, type LiveMessage } from "./live-follow";

/** What a tab sends. */
export type WorkerRequest =
  | { op: "follow"; id: number; key: string; sessionId: string; afterSeq: bigint }
  | { op: "unfollow"; id: number }
  | { op: "bye" };

/** What the worker sends a tab: a message for one of its follows. */
export interface WorkerReply {
  id: number;
  message: LiveMessage;
}

const followers = new LiveFollowers((key) => memoryClient(() => key));

// The DOM library has no SharedWorkerGlobalScope; this is all of it the worker uses.
const scope = self as unknown as { onconnect: ((ev: MessageEvent) => void) | null };
scope.onconnect = (connected) => {
  const port = connected.ports[0]!;
  const stops = new Map<number, () => void>();
  port.onmessage = (ev: MessageEvent<WorkerRequest>) => {
    const req = ev.data;
    if (req.op === "follow") {
      stops.set(
        req.id,
        followers.follow(req.key, req.sessionId, req.afterSeq, (message) =>
          port.postMessage({ id: req.id, message } satisfies WorkerReply),
        ),
      );
    } else if (req.op === "unfollow") {
      stops.get(req.id)?.();
      stops.delete(req.id);
    } else {
      for (const stop of stops.values()) stop();
      stops.clear();
      port.close();
    }
  };
  port.start();
};
