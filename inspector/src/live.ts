/**
 * How a view follows a session live: through the SharedWorker all tabs of
 * this origin share (live-worker.ts), so that any number of session tabs
 * hold one connection; in a browser without SharedWorker, in the page itself
 * (then each tab holds one stream for all the sessions it shows).
 */
import { apiKey, memoryClient } from "./api";
import { LiveFollowers, type LiveMessage } from "./live-follow";
import type { WorkerReply, WorkerRequest } from "./live-worker";

export type { LiveMessage } from "./live-follow";

type Follow = (sessionId: string, afterSeq: bigint, deliver: (message: LiveMessage) => void) => () => void;

function sharedWorkerFollow(): Follow | undefined {
  if (typeof SharedWorker === "undefined") return undefined;
  let worker: SharedWorker;
  try {
    worker = new SharedWorker(new URL("./live-worker.ts", import.meta.url), { type: "module", name: "engram-live" });
  } catch {
    return undefined; // refused (a sandboxed or private context): follow in the page
  }
  const port = worker.port;
  const listeners = new Map<number, (message: LiveMessage) => void>();
  let nextId = 1;
  port.onmessage = (ev: MessageEvent<WorkerReply>) => listeners.get(ev.data.id)?.(ev.data.message);
  port.start();
  const send = (req: WorkerRequest) => port.postMessage(req);
  // The worker cannot see a tab close: say so, or its follows would outlive the tab.
  addEventListener("pagehide", () => send({ op: "bye" }));
  // A page brought back from the back/forward cache said bye already: start again.
  addEventListener("pageshow", (ev) => {
    if (ev.persisted) location.reload();
  });
  return (sessionId, afterSeq, deliver) => {
    const id = nextId++;
    listeners.set(id, deliver);
    send({ op: "follow", id, key: apiKey(), sessionId, afterSeq });
    return () => {
      listeners.delete(id);
      send({ op: "unfollow", id });
    };
  };
}

function inPageFollow(): Follow {
  const followers = new LiveFollowers((key) => memoryClient(() => key));
  return (sessionId, afterSeq, deliver) => followers.follow(apiKey(), sessionId, afterSeq, deliver);
}

/** Follows `sessionId` after `afterSeq` with this tab's API key; returns what stops following. */
export const followSession: Follow = sharedWorkerFollow() ?? inPageFollow();
