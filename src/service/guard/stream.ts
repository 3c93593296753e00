/**
 * What only a keyed stream needs beyond the shared steps: it outlives the
 * key check it was admitted by, so the key is looked up again while it runs;
 * a session's stream also follows the session incarnation its scope was
 * checked on.
 */
import { MemoryError, sessionNotFound } from "../../errors.js";
import type { SessionRecord } from "../../store/types.js";
import type { Authenticator } from "../../auth/index.js";
import type { Metrics } from "../metrics.js";
import { inScope } from "../tenancy.js";
import { allowedRule, type RpcName } from "./rules.js";
import type { GuardedCall, Next, StepFactory } from "./step.js";

/** Shortest interval between a stream's key re-checks, whatever MEMORY_AUTH_CACHE_MS says. */
const RECHECK_FLOOR_MS = 100;

/**
 * A keyed stream's frames for as long as its key stays valid and its
 * session in the key's scope: the key is looked up afresh every half
 * MEMORY_AUTH_CACHE_MS (at least every RECHECK_FLOOR_MS), so a revoked key's
 * stream ends UNAUTHENTICATED within MEMORY_AUTH_CACHE_MS on every replica,
 * as its unary calls do. A session's stream follows the session
 * incarnation the scope was checked on, never a session created later under
 * its id (WatchSessions: each of its sessions, the incarnation the scope
 * step saw); a stream of no session (WatchMemories) is held to the key alone,
 * its scope being applied to each change by the service.
 * Absent for unary methods and while auth is off.
 */
export const whileAuthorized: StepFactory = ({ method, streaming }, { authenticator, metrics }) => {
  if (!streaming || !authenticator) return undefined;
  const period = Math.max(authenticator.cacheMs / 2, RECHECK_FLOOR_MS);
  return (next) => (call) => {
    if (!call.principal) return next(call);
    return framesWhileAuthorized(
      { method, session: call.session, sessions: call.sessions ?? [], authenticator, metrics, period },
      call,
      next,
    );
  };
};

async function* framesWhileAuthorized(
  stream: {
    method: RpcName;
    session: SessionRecord | undefined;
    sessions: readonly SessionRecord[];
    authenticator: Authenticator;
    metrics: Metrics;
    period: number;
  },
  call: GuardedCall,
  next: Next,
): AsyncGenerator<unknown> {
  const { method, session, sessions, authenticator, metrics, period } = stream;
  const { authorization } = call.context;
  const ended = new AbortController();
  let refusal: MemoryError | undefined;
  const recheck = async () => {
    try {
      const now = await authenticator.authenticate(authorization, period);
      allowedRule(now, method);
      if (session && !inScope(now, session)) refusal = sessionNotFound(session.sessionId);
      // A multi-session stream whose key no longer covers one of its sessions ends whole: the client opens it again, and that session then ends alone.
      const lost = sessions.find((s) => !inScope(now, s));
      if (lost) refusal = sessionNotFound(lost.sessionId);
    } catch (err) {
      // A backend that cannot answer now leaves the key as trusted as a unary call's cache would.
      if (err instanceof MemoryError && (err.code === "UNAUTHENTICATED" || err.code === "PERMISSION_DENIED"))
        refusal = err;
    }
    if (refusal) ended.abort();
  };
  const timer = setInterval(() => void recheck(), period);
  try {
    const signal = call.context.signal ? AbortSignal.any([call.context.signal, ended.signal]) : ended.signal;
    // The stream follows the session incarnation its scope was checked on, whatever the key's reach.
    call.context = { ...call.context, signal, expectedIncarnation: session?.incarnation };
    for await (const frame of (await next(call)) as AsyncIterable<unknown>) {
      if (refusal) break;
      yield frame;
    }
    if (refusal) {
      if (refusal.code === "UNAUTHENTICATED") metrics.authFailures.inc();
      throw refusal;
    }
  } finally {
    clearInterval(timer);
  }
}
