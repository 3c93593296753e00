/**
 * Every call from every protocol passes through here before it reaches the
 * MemoryService: authentication (API keys), per-key rate and stream quotas,
 * tenant scoping, trace context, and metrics. The edge adapters (grpc-js,
 * connect-node, REST) only pass the call's headers along, so the rules are
 * written once and hold identically on every path.
 *
 * Tenant scoping: a key is bound to one or more apps (or "*") and optionally
 * one user. A session outside the key's scope answers NOT_FOUND exactly as an
 * absent one would; listings only ever show sessions in scope.
 */
import { create } from "@bufbuild/protobuf";
import {
  ListSessionsResponseSchema,
  type AddEventRequest,
  type AddEventsRequest,
  type CreateSessionRequest,
  type GetOrCreateSessionRequest,
  type GetOrCreateSessionResponse,
  type ListEventsRequest,
  type ListEventsResponse,
  type ListSessionsRequest,
  type CleanupRequest,
  type CleanupResponse,
  type DeleteSessionResponse,
  type DeleteUserDataRequest,
  type DeleteUserDataResponse,
} from "../gen/engram/v1/memory_pb.js";
import { ANY_APP, type ApiKeyRole, type Principal } from "../auth/api-keys.js";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import type { Authenticator } from "../auth/index.js";
import type { Logger } from "../log.js";
import { honoursCallDeadline, withDeadline } from "../deadline.js";
import { invalidArgument, MemoryError, sessionNotFound } from "../errors.js";
import { sessionExists } from "../store/rules.js";
import type { JsonObject, SessionRecord } from "../store/types.js";
import type { ListEventsContext, MemoryService, StreamContext } from "./memory-service.js";
import type { Metrics, RpcSeries } from "./metrics.js";
import type { Quotas } from "./quotas.js";
import { requireId } from "./validation.js";

/** What the edge knows of a call, whatever the protocol. */
export interface CallInfo {
  /**
   * Streams: aborted when the client cancels, the deadline passes or the
   * server stops. Unary handlers never read it (a unary call's bound is its
   * deadline), so the gRPC edge gives them none: an AbortController and a
   * listener per call showed in every call's profile (bench/README.md).
   */
  signal?: AbortSignal;
  /** The `authorization` header / metadata value. */
  authorization?: string;
  /** The W3C `traceparent` header, if any. */
  traceparent?: string;
  /** grpc, connect, grpc-web or rest (a metrics label). */
  protocol: string;
  /** Epoch ms by which the client wants its answer (gRPC deadline / Connect timeout), if any. */
  deadline?: number;
  /** The client's `x-request-id`, if it sent one; otherwise one is made for the logs. */
  requestId?: string;
}

/** A guarded RPC handler: unary ones return a promise, streaming ones an async iterable. */
export type GuardedHandler = (req: unknown, call: CallInfo) => Promise<unknown> | AsyncIterable<unknown>;

const ROLE_RANK: Record<ApiKeyRole, number> = { read: 0, write: 1, admin: 2 };

/** Shortest interval between a stream's key re-checks, whatever MEMORY_AUTH_CACHE_MS says. */
const RECHECK_FLOOR_MS = 100;

/** How each RPC is scoped; an RPC missing here is refused when auth is on. */
const RULES: Record<string, { role: ApiKeyRole; scope: "session" | "create" | "listSessions" | "listEvents" | "global" | "cleanup" | "erasure" | "memories" }> = {
  createSession: { role: "write", scope: "create" },
  getOrCreateSession: { role: "write", scope: "create" },
  getSession: { role: "read", scope: "session" },
  listSessions: { role: "read", scope: "listSessions" },
  deleteSession: { role: "write", scope: "session" },
  addEvent: { role: "write", scope: "session" },
  addEvents: { role: "write", scope: "session" },
  getSessionEvents: { role: "read", scope: "session" },
  listEvents: { role: "read", scope: "listEvents" },
  streamSessionEvents: { role: "read", scope: "session" },
  buildConversationContext: { role: "read", scope: "session" },
  // Store-wide totals only: no tenant's data.
  getStats: { role: "read", scope: "global" },
  // Removes any tenant's sessions: admin keys, over every app, or filtered to one of the key's apps (and its user).
  cleanup: { role: "admin", scope: "cleanup" },
  // Erases one user: admin keys over that app, or keys bound to that user (write at least).
  deleteUserData: { role: "write", scope: "erasure" },
  // Long-term memories: the service applies the key's scope itself (src/service/memories/tenancy.ts).
  writeMemories: { role: "write", scope: "memories" },
  getMemory: { role: "read", scope: "memories" },
  searchMemories: { role: "read", scope: "memories" },
  listMemories: { role: "read", scope: "memories" },
  deleteMemories: { role: "write", scope: "memories" },
  watchMemories: { role: "read", scope: "memories" },
  searchEvents: { role: "read", scope: "memories" },
  // Recall reads the session (checked as any session RPC) and the memories its user may see.
  recall: { role: "read", scope: "session" },
};

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;

/** True when the key may see the session. */
export function inScope(principal: Principal, session: Pick<SessionRecord, "appName" | "userId">): boolean {
  const appOk = principal.apps.includes(ANY_APP) || principal.apps.includes(session.appName);
  return appOk && (principal.userId === undefined || principal.userId === session.userId);
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

/** Codes that say the server (or its backend) failed, not the client. */
const SERVER_SIDE = new Set(["INTERNAL", "UNAVAILABLE", "DEADLINE_EXCEEDED", "UNKNOWN"]);

/** Wraps MemoryService methods with auth, quotas, scoping, trace context and metrics. */
export class CallGuard {
  /** Unary calls running now. */
  private unaryInFlight = 0;
  /** Set once shutdown begins: new unary calls are refused, and `settle` runs when the last running one returns. */
  private draining?: { idle: Promise<void>; settle: () => void };

  constructor(
    readonly service: MemoryService,
    private readonly options: CallGuardOptions,
  ) {}

  /** True when every call needs an API key. */
  get authEnabled(): boolean {
    return this.options.authenticator !== undefined;
  }

  /** The guarded handler of a MemoryService method (by its local name, e.g. "addEvent"). */
  handler(method: string, streaming: boolean): GuardedHandler {
    const target = (this.service as unknown as Record<string, (req: unknown, ctx: { signal?: AbortSignal }) => unknown>)[method];
    if (typeof target !== "function") throw new Error(`MemoryService has no method ${method}`);
    // Unary calls only: a store driver may read the deadline (src/deadline.ts) to bound its backend
    // calls. A stream's reads run in the stream hub, shared by every subscriber of the session, so no
    // one caller's deadline may leak into them.
    const store = this.service.store;
    // The call itself is the service's context (it reads only `signal`); a store that ignores the deadline
    // gets no closure per call either.
    const invoke =
      streaming || !honoursCallDeadline(store)
        ? (req: unknown, call: CallInfo) => target.call(this.service, req, call)
        : (req: unknown, call: CallInfo) => withDeadline(store, call.deadline, () => target.call(this.service, req, call));
    const series = this.options.metrics.rpcSeries(method);
    return streaming
      ? (req, call) => this.stream(method, req, call, invoke, series(call.protocol))
      : (req, call) => this.unary(method, req, call, invoke, series(call.protocol));
  }

  /**
   * Graceful shutdown: refuses new unary calls UNAVAILABLE (on connections
   * still open; new connections are no longer accepted) and resolves once
   * every unary call already running has returned its result.
   */
  drainUnary(): Promise<void> {
    if (!this.draining) {
      let settle!: () => void;
      const idle = new Promise<void>((resolve) => (settle = resolve));
      this.draining = { idle, settle };
      if (this.unaryInFlight === 0) settle();
    }
    return this.draining.idle;
  }

  private async unary(method: string, req: unknown, call: CallInfo, invoke: (req: unknown, call: CallInfo) => unknown, series: RpcSeries): Promise<unknown> {
    const start = performance.now();
    let code = "OK";
    this.unaryInFlight++;
    try {
      if (this.draining) throw new MemoryError("UNAVAILABLE", "the server is shutting down; retry on another replica");
      // Without auth there is nothing to wait for: no promise turn per call.
      const principal = this.options.authenticator ? await this.admit(call) : undefined;
      addTraceContext(method, req, call.traceparent);
      const result = principal ? await this.scoped(method, req, call, principal, invoke) : await (invoke(req, call) as Promise<unknown>);
      this.countRemovals(method, result);
      return result;
    } catch (err) {
      code = codeOf(err);
      throw err;
    } finally {
      const seconds = (performance.now() - start) / 1000;
      series.latency.observe(seconds);
      series.count(code);
      this.logCall(method, call, code, seconds);
      if (--this.unaryInFlight === 0) this.draining?.settle();
    }
  }

  /** One structured line per call: warn when the server side failed, debug otherwise. */
  private logCall(method: string, call: CallInfo, code: string, seconds: number): void {
    const log = this.options.log;
    if (!log) return;
    const level = SERVER_SIDE.has(code) ? "warn" : "debug";
    if (!log.isLevelEnabled(level)) return;
    log[level]({ requestId: call.requestId ?? randomUUID(), method, protocol: call.protocol, code, ms: Math.round(seconds * 1000) }, "call");
  }

  private async *stream(method: string, req: unknown, call: CallInfo, invoke: (req: unknown, call: CallInfo) => unknown, series: RpcSeries): AsyncGenerator<unknown> {
    const { metrics, quotas } = this.options;
    const start = performance.now();
    let code = "OK";
    let release: (() => void) | undefined;
    try {
      const principal = await this.admit(call);
      let session: SessionRecord | undefined;
      if (principal) {
        const rule = allowedRule(principal, method);
        if (rule.scope === "memories") call = { ...call, tenant: { apps: principal.apps, userId: principal.userId } } as CallInfo;
        else session = await this.checkSession(principal, (req as { sessionId: string }).sessionId);
      }
      release = quotas.openStream(principal?.keyId);
      metrics.streams.inc();
      if (principal && session) yield* this.whileAuthorized(method, principal, session, call, (ctx) => invoke(req, ctx) as AsyncIterable<unknown>);
      else yield* invoke(req, call) as AsyncIterable<unknown>;
    } catch (err) {
      code = codeOf(err);
      if (code === "RESOURCE_EXHAUSTED") metrics.rateLimited.inc();
      throw err;
    } finally {
      if (release) {
        release();
        metrics.streams.dec();
      }
      const seconds = (performance.now() - start) / 1000;
      series.latency.observe(seconds);
      series.count(code);
      this.logCall(method, call, code, seconds);
    }
  }

  /**
   * A keyed stream's frames for as long as its key stays valid and its
   * session in the key's scope: the key is looked up afresh every half
   * MEMORY_AUTH_CACHE_MS (at least every RECHECK_FLOOR_MS), so a revoked key's
   * stream ends UNAUTHENTICATED within MEMORY_AUTH_CACHE_MS on every replica,
   * as its unary calls do. The stream follows the session incarnation the
   * scope was checked on, never a session created later under its id.
   */
  private async *whileAuthorized(
    method: string,
    principal: Principal,
    session: SessionRecord,
    call: CallInfo,
    open: (ctx: CallInfo & StreamContext) => AsyncIterable<unknown>,
  ): AsyncGenerator<unknown> {
    const authenticator = this.options.authenticator!;
    const period = Math.max(authenticator.cacheMs / 2, RECHECK_FLOOR_MS);
    const ended = new AbortController();
    let refusal: MemoryError | undefined;
    const recheck = async () => {
      try {
        const now = await authenticator.authenticate(call.authorization, period);
        allowedRule(now, method);
        if (!inScope(now, session)) refusal = sessionNotFound(session.sessionId);
      } catch (err) {
        // A backend that cannot answer now leaves the key as trusted as a unary call's cache would.
        if (err instanceof MemoryError && (err.code === "UNAUTHENTICATED" || err.code === "PERMISSION_DENIED")) refusal = err;
      }
      if (refusal) ended.abort();
    };
    const timer = setInterval(() => void recheck(), period);
    const signal = call.signal ? AbortSignal.any([call.signal, ended.signal]) : ended.signal;
    try {
      for await (const frame of open({ ...call, signal, incarnation: session.incarnation })) {
        if (refusal) break;
        yield frame;
      }
      if (refusal) {
        if (refusal.code === "UNAUTHENTICATED") this.options.metrics.authFailures.inc();
        throw refusal;
      }
    } finally {
      clearInterval(timer);
    }
  }

  /** Authenticates and rate-limits the call; undefined when auth is off. */
  private async admit(call: CallInfo): Promise<Principal | undefined> {
    const { authenticator, quotas, metrics } = this.options;
    if (!authenticator) return undefined;
    let principal: Principal;
    try {
      principal = await authenticator.authenticate(call.authorization);
    } catch (err) {
      if (err instanceof MemoryError && err.code === "UNAUTHENTICATED") metrics.authFailures.inc();
      throw err;
    }
    try {
      await quotas.consume(principal.keyId, principal.rateLimit);
    } catch (err) {
      metrics.rateLimited.inc();
      throw err;
    }
    return principal;
  }

  /** Applies the method's tenant rule around the call. */
  private async scoped(method: string, req: unknown, call: CallInfo, principal: Principal, invoke: (req: unknown, call: CallInfo) => unknown): Promise<unknown> {
    const rule = allowedRule(principal, method);
    switch (rule.scope) {
      case "session":
        await this.checkSession(principal, (req as { sessionId: string }).sessionId);
        return invoke(req, call);
      case "create": {
        const r = req as CreateSessionRequest | GetOrCreateSessionRequest;
        fillScope(r, principal);
        if (!principal.apps.includes(ANY_APP) && !principal.apps.includes(r.appName)) {
          throw new MemoryError("PERMISSION_DENIED", `app_name: this API key may not use app ${JSON.stringify(r.appName)}`, {}, { field: "app_name", reason: "APP_NOT_ALLOWED" });
        }
        if (principal.userId !== undefined && r.userId !== principal.userId) {
          throw new MemoryError("PERMISSION_DENIED", `user_id: this API key is bound to another user`, {}, { field: "user_id", reason: "USER_NOT_ALLOWED" });
        }
        const result = await invoke(req, call);
        const session = (result as GetOrCreateSessionResponse).session;
        // GetOrCreate found an existing session of another tenant: its id is taken, nothing more is said.
        if (session && !inScope(principal, session)) {
          throw sessionExists(session.sessionId);
        }
        return result;
      }
      case "listSessions": {
        const r = req as ListSessionsRequest;
        if (!principal.apps.includes(ANY_APP)) {
          if (r.appName === undefined) {
            if (principal.apps.length > 1) throw invalidArgument("app_name", "is required with an API key bound to several apps");
            r.appName = principal.apps[0];
          } else if (!principal.apps.includes(r.appName)) {
            return create(ListSessionsResponseSchema, {});
          }
        }
        if (principal.userId !== undefined) {
          if (r.userId !== undefined && r.userId !== principal.userId) return create(ListSessionsResponseSchema, {});
          r.userId = principal.userId;
        }
        return invoke(req, call);
      }
      case "listEvents":
        return this.listEventsInScope(req as ListEventsRequest, call, principal, invoke);
      case "global":
        return invoke(req, call);
      case "cleanup":
        checkCleanup(req as CleanupRequest, principal);
        return invoke(req, call);
      case "erasure":
        checkErasure(req as DeleteUserDataRequest, principal);
        return invoke(req, call);
      case "memories":
        return invoke(req, { ...call, tenant: { apps: principal.apps, userId: principal.userId } } as CallInfo);
    }
  }

  /** The session; NOT_FOUND, as for an absent one, unless it exists and is in the key's scope. */
  private async checkSession(principal: Principal, sessionId: string): Promise<SessionRecord> {
    const id = requireId("session_id", sessionId);
    const session = await this.service.store.getSession(id);
    if (!session || !inScope(principal, session)) throw sessionNotFound(id);
    return session;
  }

  /**
   * ListEvents for a scoped key: one session (checked), or the newest events
   * of the sessions in the key's scope, read from the store's recent index of
   * that scope (per app, per user, per app and user): no other tenant's
   * writes can crowd them out, and the read costs O(limit) per app of the key.
   */
  private async listEventsInScope(req: ListEventsRequest, call: CallInfo, principal: Principal, invoke: (req: unknown, call: CallInfo) => unknown): Promise<ListEventsResponse> {
    if (req.sessionId !== undefined) {
      await this.checkSession(principal, req.sessionId);
      return invoke(req, call) as Promise<ListEventsResponse>;
    }
    const everyApp = principal.apps.includes(ANY_APP);
    if (everyApp && principal.userId === undefined) return invoke(req, call) as Promise<ListEventsResponse>;
    const context: CallInfo & ListEventsContext = { ...call, scope: { appNames: everyApp ? undefined : principal.apps, userId: principal.userId } };
    return invoke(req, context) as Promise<ListEventsResponse>;
  }

  private countRemovals(method: string, result: unknown): void {
    if (method === "cleanup") this.options.metrics.sessionsRemoved.inc({ reason: "cleanup" }, Number((result as CleanupResponse).removedSessions));
    else if (method === "deleteSession" && (result as DeleteSessionResponse).deleted) this.options.metrics.sessionsRemoved.inc({ reason: "delete" });
    else if (method === "deleteUserData") this.options.metrics.sessionsRemoved.inc({ reason: "erasure" }, Number((result as DeleteUserDataResponse).removedSessions));
  }
}

/** The method's rule, once the key's role is enough for it. */
function allowedRule(principal: Principal, method: string): (typeof RULES)[string] {
  const rule = RULES[method];
  if (!rule) throw new MemoryError("PERMISSION_DENIED", `${method} is not available to API keys`, {}, { reason: "METHOD_NOT_ALLOWED" });
  if (ROLE_RANK[principal.role] < ROLE_RANK[rule.role]) {
    throw new MemoryError("PERMISSION_DENIED", `this API key's role (${principal.role}) may not call ${method}; it needs ${rule.role}`, {}, {
      reason: "ROLE_NOT_ALLOWED",
      info: { role: principal.role, required_role: rule.role },
    });
  }
  return rule;
}

/**
 * Cleanup with a key short of every app (or bound to a user) must name its
 * own app (and user): an omitted filter means every tenant, and a narrower
 * key is never widened to that by default.
 */
function checkCleanup(r: CleanupRequest, principal: Principal): void {
  if (!principal.apps.includes(ANY_APP)) {
    if (r.appName === undefined) throw new MemoryError("PERMISSION_DENIED", "app_name: Cleanup of every app needs an admin API key for every app (app \"*\"); name one of this key's apps", {}, { field: "app_name", reason: "ADMIN_KEY_REQUIRED" });
    if (!principal.apps.includes(r.appName)) throw new MemoryError("PERMISSION_DENIED", `app_name: this API key may not use app ${JSON.stringify(r.appName)}`, {}, { field: "app_name", reason: "APP_NOT_ALLOWED" });
  }
  if (principal.userId !== undefined && r.userId !== principal.userId) {
    throw new MemoryError("PERMISSION_DENIED", "user_id: this API key is bound to one user; Cleanup must name that user", {}, { field: "user_id", reason: "USER_NOT_ALLOWED" });
  }
}

/**
 * DeleteUserData: the key's apps must include app_name, and the key must be
 * bound to that user or be an admin key. A write key bound to no user may
 * not erase anybody: it would reach every user of its apps.
 */
function checkErasure(r: DeleteUserDataRequest, principal: Principal): void {
  if (r.appName !== "" && !principal.apps.includes(ANY_APP) && !principal.apps.includes(r.appName)) {
    throw new MemoryError("PERMISSION_DENIED", `app_name: this API key may not use app ${JSON.stringify(r.appName)}`, {}, { field: "app_name", reason: "APP_NOT_ALLOWED" });
  }
  if (principal.userId !== undefined) {
    if (r.userId !== "" && r.userId !== principal.userId) throw new MemoryError("PERMISSION_DENIED", "user_id: this API key is bound to another user", {}, { field: "user_id", reason: "USER_NOT_ALLOWED" });
  } else if (principal.role !== "admin") {
    throw new MemoryError("PERMISSION_DENIED", "deleteUserData needs an admin API key or a key bound to that user", {}, { reason: "ADMIN_KEY_REQUIRED" });
  }
}

/** A key bound to exactly one app (or user) makes it the default of an omitted app_name (user_id). */
function fillScope(r: { appName: string; userId: string }, principal: Principal): void {
  if (r.appName === "" && principal.apps.length === 1 && principal.apps[0] !== ANY_APP) r.appName = principal.apps[0];
  if (r.userId === "" && principal.userId !== undefined) r.userId = principal.userId;
}

/**
 * KAOS keeps trace_id/span_id in event metadata: fill them from a valid W3C
 * `traceparent` when the client did not set them. They do not count towards
 * an event's idempotency fingerprint (src/store/fingerprint.ts).
 */
function addTraceContext(method: string, req: unknown, traceparent: string | undefined): void {
  if (!traceparent || (method !== "addEvent" && method !== "addEvents")) return;
  const match = TRACEPARENT.exec(traceparent.trim());
  if (!match || /^0+$/.test(match[1]) || /^0+$/.test(match[2])) return;
  const events = method === "addEvent" ? [(req as AddEventRequest).event] : (req as AddEventsRequest).events;
  for (const event of events) {
    if (!event) continue;
    const metadata: JsonObject = (event.metadata ??= {});
    if (metadata.trace_id === undefined && metadata.span_id === undefined) {
      metadata.trace_id = match[1];
      metadata.span_id = match[2];
    }
  }
}

function codeOf(err: unknown): string {
  if (err instanceof MemoryError) return err.code;
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : "INTERNAL";
}
