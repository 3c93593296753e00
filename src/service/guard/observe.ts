/**
 * Metrics and logging: every call's latency and status code by method and
 * protocol (a stream's: until it ends), one structured log line per call,
 * and the sessions a removal call removed.
 */
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import type {
  CleanupResponse,
  DeleteSessionResponse,
  DeleteUserDataResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { Logger } from "../../log.js";
import type { Metrics } from "../metrics.js";
import type { RpcName } from "./rules.js";
import type { CallContext } from "../call-context.js";
import type { StepFactory } from "./step.js";

/** Codes that say the server (or its backend) failed, not the client. */
const SERVER_SIDE = new Set(["INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN"]);

/** Times the call from here to its end, then counts its code and logs it. */
export const observeCall: StepFactory = ({ method }, { metrics, log }) => {
  const seriesOf = metrics.rpcSeries(method);
  return (next) => (call) => {
    const start = performance.now();
    const { context } = call;
    const series = seriesOf(context.protocol);
    call.whenEnded.push((code) => {
      const seconds = (performance.now() - start) / 1000;
      series.latency.observe(seconds);
      series.count(code);
      logCall(log, method, context, code, seconds);
    });
    return next(call);
  };
};

/** One structured line per call: warn when the server side failed, debug otherwise. */
function logCall(log: Logger | undefined, method: string, context: CallContext, code: string, seconds: number): void {
  if (!log) return;
  const level = SERVER_SIDE.has(code) ? "warn" : "debug";
  if (!log.isLevelEnabled(level)) return;
  log[level](
    {
      requestId: context.requestId ?? randomUUID(),
      method,
      protocol: context.protocol,
      code,
      ms: Math.round(seconds * 1000),
    },
    "call",
  );
}

/** The methods that remove sessions: how one answer counts in engram_sessions_removed_total. */
const REMOVALS: Partial<Record<RpcName, (metrics: Metrics, result: unknown) => void>> = {
  cleanup: (metrics, result) =>
    metrics.sessionsRemoved.inc({ reason: "cleanup" }, Number((result as CleanupResponse).removedSessions)),
  deleteSession: (metrics, result) => {
    if ((result as DeleteSessionResponse).deleted) metrics.sessionsRemoved.inc({ reason: "delete" });
  },
  deleteUserData: (metrics, result) =>
    metrics.sessionsRemoved.inc({ reason: "erasure" }, Number((result as DeleteUserDataResponse).removedSessions)),
};

/** Counts the sessions a successful removal call removed, by reason. */
export const countRemovals: StepFactory = ({ method }, { metrics }) => {
  const count = REMOVALS[method];
  if (!count) return undefined;
  return (next) => async (call) => {
    const result = await next(call);
    count(metrics, result);
    return result;
  };
};
