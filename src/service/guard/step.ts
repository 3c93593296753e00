/**
 * What a guard step is. Every call from every protocol runs through a chain
 * of small steps before it reaches the MemoryService (src/service/guard/index.ts
 * lists them in order), the way connect-es runs interceptors: a step gets
 * the rest of the chain (`next`) and returns what runs in its place, so it
 * can refuse the call, add to it, or look at its answer. Unary calls and
 * streams run the same steps; a step that must act when the call ends (a
 * latency, a stream slot's release) leaves a hook in `whenEnded` instead of
 * wrapping the answer, so a stream's frames pass through no extra layer.
 */
import type { Principal } from "../../auth/api-keys.js";
import type { Authenticator } from "../../auth/index.js";
import { MemoryError } from "../../errors.js";
import type { Logger } from "../../log.js";
import type { MemoryStore, SessionRecord } from "../../store/types.js";
import type { CallContext } from "../call-context.js";
import type { Metrics } from "../metrics.js";
import type { Quotas } from "../quotas.js";
import type { RpcName } from "./rules.js";

/** A guarded RPC handler: unary ones return a promise, streaming ones an async iterable. */
export type GuardedHandler = (req: unknown, context: CallContext) => Promise<unknown> | AsyncIterable<unknown>;

/** A call on its way through the steps: what the edge said, and what the steps have found out so far. */
export interface GuardedCall {
  /** The MemoryService method's local name, e.g. "addEvent". */
  readonly method: RpcName;
  /** The parsed request, never written into: the scope step may pass on a new one naming the key's app and user. */
  req: unknown;
  /** The service method's context: the edge's, or a copy a step added to (the key's scope, a stream's signal). */
  context: CallContext;
  /** The caller's key once the auth step admitted it; undefined while auth is off. */
  principal: Principal | undefined;
  /** The session the scope step found in the key's scope, for a method on one session. */
  session: SessionRecord | undefined;
  /** The sessions the scope step found in the key's scope, for a method on several (WatchSessions). */
  sessions?: readonly SessionRecord[];
  /** Run once the call has ended (a unary answer settled, a stream's frames ended, failed or were abandoned), last added first, with its status code. */
  whenEnded: Array<(code: string) => void>;
}

/** The rest of the chain after a step: a unary call's answer, or a stream's frames. */
export type Next = (call: GuardedCall) => Promise<unknown> | AsyncIterable<unknown>;

/** One guard step: given the rest of the chain, what runs in its place. */
export type Step = (next: Next) => Next;

/** What a step factory is told about the method it guards. */
export interface MethodPlan {
  /** The MemoryService method's local name. */
  readonly method: RpcName;
  /** True for a server stream. */
  readonly streaming: boolean;
}

/** Options of the guard. */
export interface CallGuardOptions {
  /** Present when auth is on. */
  authenticator?: Authenticator;
  quotas: Quotas;
  metrics: Metrics;
  /** Calls ending in a server-side code are logged at warn, every call at debug. */
  log?: Logger;
}

/** What the steps are built from: the guard's options and the store the service reads. */
export interface StepParts extends CallGuardOptions {
  store: MemoryStore;
}

/**
 * Builds a method's step once, when its handler is made; undefined when the
 * step has nothing to do for that method (or with auth off), so a call pays
 * only for the steps that apply to it.
 */
export type StepFactory = (plan: MethodPlan, parts: StepParts) => Step | undefined;

/** The handler that runs `steps`, outermost first, around `service`. */
export function composeSteps(plan: MethodPlan, steps: ReadonlyArray<Step | undefined>, service: Next): GuardedHandler {
  let chain = service;
  for (let i = steps.length - 1; i >= 0; i--) chain = steps[i]?.(chain) ?? chain;
  return plan.streaming ? streamHandler(plan.method, chain) : unaryHandler(plan.method, chain);
}

// The one place unary calls and streams differ in the guard: when a call has ended (its answer settled, or its
// last frame sent, its failure thrown or the consumer gone), which is when the `whenEnded` hooks run.
function unaryHandler(method: RpcName, chain: Next): GuardedHandler {
  return async (req, context) => {
    const call = startCall(method, req, context);
    let code = "OK";
    try {
      return await chain(call);
    } catch (err) {
      code = codeOf(err);
      throw err;
    } finally {
      endCall(call, code);
    }
  };
}

/**
 * How long after its client went away a stream still suspended at a frame
 * is taken as ended. connect-node can leave the write of a frame pending
 * after an HTTP/1.1 client's cancel and then never ask this generator for
 * the next frame nor close it: without this, its stream slot would be held
 * for good (seen with the inspector's WatchSessions, re-opened as tabs come).
 */
const ABANDONED_STREAM_GRACE_MS = 1000;

function streamHandler(method: RpcName, chain: Next): GuardedHandler {
  return async function* (req, context) {
    const call = startCall(method, req, context);
    let ended = false;
    let abandoned: ReturnType<typeof setTimeout> | undefined;
    const end = (code: string) => {
      if (ended) return;
      ended = true;
      clearTimeout(abandoned);
      context.signal?.removeEventListener("abort", onAbort);
      endCall(call, code);
    };
    const onAbort = () => {
      abandoned = setTimeout(() => end("CANCELLED"), ABANDONED_STREAM_GRACE_MS);
      abandoned.unref?.();
    };
    context.signal?.addEventListener("abort", onAbort, { once: true });
    let code = "OK";
    try {
      // The steps admit the stream before its first frame; its frames then flow straight from the service.
      yield* (await chain(call)) as AsyncIterable<unknown>;
    } catch (err) {
      code = codeOf(err);
      throw err;
    } finally {
      end(code);
    }
  };
}

function startCall(method: RpcName, req: unknown, context: CallContext): GuardedCall {
  return { method, req, context, principal: undefined, session: undefined, whenEnded: [] };
}

function endCall(call: GuardedCall, code: string): void {
  for (let i = call.whenEnded.length - 1; i >= 0; i--) call.whenEnded[i](code);
}

/** The status code a call ended with: a MemoryError's, a ConnectError-like string code, or INTERNAL. */
export function codeOf(err: unknown): string {
  if (err instanceof MemoryError) return err.code;
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : "INTERNAL";
}
