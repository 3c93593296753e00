/**
 * Every call from every protocol passes through the guard before it reaches
 * the MemoryService: authentication (API keys), per-key rate and stream
 * quotas, tenant scoping, trace context, metrics and logging. The edge
 * adapters (grpc-js, connect-node, REST) only pass the call's headers along,
 * so the rules are written once and hold identically on every path.
 *
 * The guard is a chain of small steps, one file each in this folder (see
 * step.ts for what a step is). Unary calls and streams run the same chain;
 * what only one kind needs is a step that leaves itself out for the other.
 */
import type { MemoryService } from "../memory-service.js";
import type { Principal } from "../../auth/api-keys.js";
import { authenticate, principalOf } from "./auth.js";
import { UnaryDrain } from "./drain.js";
import { countRemovals, observeCall } from "./observe.js";
import { holdStreamSlot, rateLimit } from "./quota.js";
import { isStreaming, type RpcName } from "./rules.js";
import { scope } from "./scope.js";
import {
  composeSteps,
  type CallGuardOptions,
  type GuardedHandler,
  type MethodPlan,
  type Next,
  type StepFactory,
  type StepParts,
} from "./step.js";
import { whileAuthorized } from "./stream.js";
import { traceContext } from "./trace.js";

export type { CallContext } from "../call-context.js";
export type { CallGuardOptions, GuardedHandler } from "./step.js";
export { isStreaming, rpcName, type RpcName } from "./rules.js";

/** Wraps MemoryService methods in the guard's steps. */
export class CallGuard {
  private readonly unaryDrain = new UnaryDrain();
  private readonly parts: StepParts;
  /**
   * The steps in the order a call meets them. Order matters: a call is timed
   * and counted whatever refuses it; the key is known before its quota is
   * spent and its scope checked; a stream's slot is taken only once the
   * session is found in scope.
   */
  private readonly steps: readonly StepFactory[] = [
    observeCall, // metrics and logging, every call
    countRemovals, // removal calls
    this.unaryDrain.step, // unary calls: refused once shutdown begins
    authenticate, // with auth on
    rateLimit, // with auth on
    traceContext, // appends
    scope, // with auth on
    holdStreamSlot, // streams
    whileAuthorized, // streams, with auth on
  ];

  constructor(
    readonly service: MemoryService,
    options: CallGuardOptions,
  ) {
    this.parts = { ...options, store: service.store };
  }

  /** True when every call needs an API key. */
  get authEnabled(): boolean {
    return this.parts.authenticator !== undefined;
  }

  /**
   * The key's principal, checked as every call's key is (a refusal counted
   * the same way); undefined while auth is off. For an edge whose protocol
   * must refuse a bad key before any RPC is named: MCP answers HTTP 401 on
   * connect. Each RPC it then makes still runs every step.
   */
  async authenticate(authorization: string | undefined): Promise<Principal | undefined> {
    const { authenticator, metrics } = this.parts;
    return authenticator ? principalOf(authenticator, metrics, authorization) : undefined;
  }

  /** The guarded handler of a MemoryService method (by its local name, e.g. "addEvent"). */
  handler(method: RpcName): GuardedHandler {
    const target = (this.service as unknown as Record<RpcName, (req: unknown, ctx: unknown) => ReturnType<Next>>)[
      method
    ];
    if (typeof target !== "function") throw new Error(`MemoryService implements no method ${method}`);
    // Streams read the context's `signal`, unary methods pass its `deadline` down to the store
    // (StoreCall), and every method reads what the steps add.
    const invoke: Next = (call) => target.call(this.service, call.req, call.context);
    const plan: MethodPlan = { method, streaming: isStreaming(method) };
    return composeSteps(
      plan,
      this.steps.map((step) => step(plan, this.parts)),
      invoke,
    );
  }

  /**
   * Graceful shutdown: refuses new unary calls UNAVAILABLE (on connections
   * still open; new connections are no longer accepted) and resolves once
   * every unary call already running has returned its result.
   */
  drainUnary(): Promise<void> {
    return this.unaryDrain.drain();
  }
}
