/**
 * Tenancy: what an API key may see and change, for sessions, state and
 * long-term memories alike. A key is bound to apps (or "*", every app) and
 * optionally to one user. Every RPC of every protocol passes through
 * `holdToScope` (the guard's scope step; src/service/guard/rules.ts names
 * each RPC's kind) before the service runs it; the long-term memory service
 * holds each memory it reads or changes to the same key with the helpers
 * below. Whatever is out of scope answers as if absent: a session or memory
 * NOT_FOUND, word for word as an absent one; a listing or search empty.
 * A request is never written into: an app or user filled in from the key
 * makes a new request (or a narrower filter inside the service).
 *
 * - Sessions: a key bound to exactly one app (or a user) makes it the
 *   default of an omitted app_name (user_id); another app or user is
 *   PERMISSION_DENIED for a write and finds nothing for a listing.
 * - State: a key bound to a user changes its user's sessions and user state,
 *   never the app-wide state ("app:" keys) every other user's sessions read.
 * - Memories: a key bound to user u reads u's memories and the shared ones
 *   (no user_id), writes and forgets only u's (an omitted user_id is u;
 *   another user is PERMISSION_DENIED), never the shared ones.
 */
import { create } from "@bufbuild/protobuf";
import {
  ListSessionsResponseSchema,
  type AddEventRequest,
  type AddEventsRequest,
  type CleanupRequest,
  type CreateSessionRequest,
  type DeleteUserDataRequest,
  type GetOrCreateSessionRequest,
  type GetOrCreateSessionResponse,
  type ListEventsRequest,
  type ListSessionsRequest,
  type UpdateSessionRequest,
  type WatchSessionsRequest,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { ANY_APP, type Principal } from "../auth/api-keys.js";
import { invalidArgument, MemoryError, sessionNotFound } from "../errors.js";
import { sessionExists } from "../store/rules.js";
import { APP_PREFIX } from "../store/state.js";
import type { MemoryRecord, MemoryStore, RecentEventsFilter, SessionRecord } from "../store/types.js";
import type { CallContext, Tenant } from "./call-context.js";
import { requireId } from "./validation.js";
import { watchedCursors } from "./watch-sessions.js";

/** How an RPC's request is held to the key's scope: one check each below. */
export type ScopeKind =
  | "session"
  | "sessions"
  | "sessionState"
  | "create"
  | "listSessions"
  | "listEvents"
  | "global"
  | "cleanup"
  | "erasure"
  | "memories";

/** A call as its scope check sees it: what the service will be given, and the sessions found in scope. */
export interface ScopedCall {
  req: unknown;
  context: CallContext;
  session?: SessionRecord;
  sessions?: readonly SessionRecord[];
}

type Answer = Promise<unknown> | AsyncIterable<unknown>;
type ScopeCheck = (call: ScopedCall, principal: Principal, next: () => Answer, store: MemoryStore) => Answer;

const CHECKS: Record<ScopeKind, ScopeCheck> = {
  async session(call, principal, next, store) {
    await holdToSession(call, principal, (call.req as { sessionId: string }).sessionId, store);
    return next();
  },
  /**
   * WatchSessions: each session is looked up and held to the key's scope on
   * its own. One that is absent or out of scope is not an error of the whole
   * call (the other sessions' tabs stay live): the service ends it alone
   * with NOT_FOUND, the answer an absent session gets.
   */
  async sessions(call, principal, next, store) {
    const watched = new Map<string, string | null>();
    const sessions: SessionRecord[] = [];
    for (const { sessionId } of watchedCursors(call.req as WatchSessionsRequest)) {
      const found = await store.getSession(sessionId, call.context);
      const session = found && inScope(principal, found) ? found : undefined;
      watched.set(sessionId, session ? session.incarnation : null);
      if (session) sessions.push(session);
    }
    call.context = { ...call.context, watched };
    call.sessions = sessions;
    return next();
  },
  async sessionState(call, principal, next, store) {
    await holdToSession(call, principal, (call.req as { sessionId: string }).sessionId, store);
    if (principal.userId !== undefined)
      refuseAppState(call.req as AddEventRequest | AddEventsRequest | UpdateSessionRequest);
    return next();
  },
  async create(call, principal, next) {
    const r = call.req as CreateSessionRequest | GetOrCreateSessionRequest;
    const soleApp = principal.apps.length === 1 && principal.apps[0] !== ANY_APP ? principal.apps[0] : "";
    const appName = r.appName || soleApp;
    requireApp(principal, "app_name", appName);
    const userId = ownUser(principal, "user_id", r.userId || undefined) ?? r.userId;
    if (appName !== r.appName || userId !== r.userId) call.req = { ...r, appName, userId };
    const result = await next();
    const session = (result as GetOrCreateSessionResponse).session;
    // GetOrCreate found an existing session of another tenant: its id is taken, nothing more is said.
    if (session && !inScope(principal, session)) throw sessionExists(session.sessionId);
    return result;
  },
  listSessions(call, principal, next) {
    const r = call.req as ListSessionsRequest;
    let appName = r.appName;
    if (!principal.apps.includes(ANY_APP)) {
      if (appName === undefined) {
        if (principal.apps.length > 1)
          throw invalidArgument("app_name", "is required with an API key bound to several apps");
        appName = principal.apps[0];
      } else if (!principal.apps.includes(appName)) return Promise.resolve(create(ListSessionsResponseSchema, {}));
    }
    const userId = readableUser(principal, r.userId);
    if (userId === null) return Promise.resolve(create(ListSessionsResponseSchema, {}));
    if (appName !== r.appName || userId !== r.userId) call.req = { ...r, appName, userId };
    return next();
  },
  /**
   * One session (checked), or the newest events of the sessions in the key's
   * scope, which the service reads from the store's recent index of that
   * scope (recentEventsScope).
   */
  async listEvents(call, principal, next, store) {
    const { sessionId } = call.req as ListEventsRequest;
    if (sessionId !== undefined) await holdToSession(call, principal, sessionId, store);
    else call.context = { ...call.context, tenant: principal };
    return next();
  },
  global: (_call, _principal, next) => next(),
  cleanup(call, principal, next) {
    checkCleanup(call.req as CleanupRequest, principal);
    return next();
  },
  erasure(call, principal, next) {
    checkErasure(call.req as DeleteUserDataRequest, principal);
    return next();
  },
  // The service holds each memory to the key itself, with the helpers below.
  memories(call, principal, next) {
    call.context = { ...call.context, tenant: principal };
    return next();
  },
};

/** Runs `next` (or answers for it) once the call is within the key's scope, as its RPC's kind says. */
export function holdToScope(
  kind: ScopeKind,
  call: ScopedCall,
  principal: Principal,
  next: () => Answer,
  store: MemoryStore,
): Answer {
  return CHECKS[kind](call, principal, next, store);
}

/** True when the key may see the session. */
export function inScope(tenant: Tenant, session: Pick<SessionRecord, "appName" | "userId">): boolean {
  return appAllowed(tenant, session.appName) && (tenant.userId === undefined || tenant.userId === session.userId);
}

/**
 * Holds a call on one session to the key's scope, and the rest of the call
 * to the session incarnation it was checked on (StoreCall.expectedIncarnation):
 * session ids are the client's, so between this check and the service's
 * store calls the session can be deleted and created again under its id by
 * another tenant, whose session each store then refuses NOT_FOUND, as one out
 * of scope. A key for every app and user may use any session of the id: it
 * passes nothing, and its calls cost what they did.
 */
async function holdToSession(call: ScopedCall, principal: Principal, sessionId: string, store: MemoryStore) {
  const id = requireId("session_id", sessionId);
  const session = await store.getSession(id, call.context);
  // Absent or another tenant's: the same words.
  if (!session || !inScope(principal, session)) throw sessionNotFound(id);
  call.session = session;
  if (!principal.apps.includes(ANY_APP) || principal.userId !== undefined)
    call.context = { ...call.context, expectedIncarnation: session.incarnation };
}

/** The scope of ListEvents without a session: the key's apps and user; every session for a key to all (or none). */
export function recentEventsScope(tenant: Tenant | undefined): Pick<RecentEventsFilter, "appNames" | "userId"> {
  if (!tenant) return {};
  const everyApp = tenant.apps.includes(ANY_APP);
  if (everyApp && tenant.userId === undefined) return {};
  return { appNames: everyApp ? undefined : tenant.apps, userId: tenant.userId };
}

/** PERMISSION_DENIED when a key bound to a user would change app-wide state. */
function refuseAppState(req: AddEventRequest | AddEventsRequest | UpdateSessionRequest): void {
  type Change = { stateDelta?: Record<string, unknown>; stateRemovals: string[] } | undefined;
  const changes: Array<[string, Change]> =
    req.$typeName === "engram.v1.AddEventRequest"
      ? [["event.", req.event]]
      : req.$typeName === "engram.v1.AddEventsRequest"
        ? req.events.map((e, i) => [`events[${i}].`, e])
        : [["", req]];
  for (const [prefix, change] of changes) {
    const keyLists: Array<[string, string[]]> = [
      [`${prefix}state_delta`, Object.keys(change?.stateDelta ?? {})],
      [`${prefix}state_removals`, change?.stateRemovals ?? []],
    ];
    for (const [field, keys] of keyLists) {
      const key = keys.find((k) => k.startsWith(APP_PREFIX));
      if (key !== undefined)
        throw new MemoryError(
          "PERMISSION_DENIED",
          `${field}: an API key bound to one user may not change app-wide state (key ${JSON.stringify(key)})`,
          {},
          { field, reason: "APP_STATE_NOT_ALLOWED" },
        );
    }
  }
}

/**
 * Cleanup with a key short of every app (or bound to a user) must name its
 * own app (and user): an omitted filter means every tenant, and a narrower
 * key is never widened to that by default.
 */
function checkCleanup(r: CleanupRequest, principal: Principal): void {
  if (!principal.apps.includes(ANY_APP) && r.appName === undefined)
    throw new MemoryError(
      "PERMISSION_DENIED",
      'app_name: Cleanup of every app needs an admin API key for every app (app "*"); name one of this key\'s apps',
      {},
      { field: "app_name", reason: "ADMIN_KEY_REQUIRED" },
    );
  if (r.appName !== undefined) requireApp(principal, "app_name", r.appName);
  if (principal.userId !== undefined && r.userId !== principal.userId)
    throw new MemoryError(
      "PERMISSION_DENIED",
      "user_id: this API key is bound to one user; Cleanup must name that user",
      {},
      { field: "user_id", reason: "USER_NOT_ALLOWED" },
    );
}

/**
 * DeleteUserData: the key's apps must include app_name, and the key must be
 * bound to that user or be an admin key. A write key bound to no user may
 * not erase anybody: it would reach every user of its apps.
 */
function checkErasure(r: DeleteUserDataRequest, principal: Principal): void {
  if (r.appName !== "") requireApp(principal, "app_name", r.appName);
  if (principal.userId !== undefined) ownUser(principal, "user_id", r.userId || undefined);
  else if (principal.role !== "admin")
    throw new MemoryError(
      "PERMISSION_DENIED",
      "deleteUserData needs an admin API key or a key bound to that user",
      {},
      { reason: "ADMIN_KEY_REQUIRED" },
    );
}

/** True when the key may use the app; every app while auth is off. */
export function appAllowed(tenant: Tenant | undefined, appName: string): boolean {
  return !tenant || tenant.apps.includes(ANY_APP) || tenant.apps.includes(appName);
}

/** True when the key may read the memory: its app, and its user's or a shared one. */
export function mayRead(tenant: Tenant | undefined, m: MemoryRecord): boolean {
  return (
    appAllowed(tenant, m.appName) &&
    (tenant?.userId === undefined || m.userId === undefined || m.userId === tenant.userId)
  );
}

/** True when the key may forget the memory: its app, and (for a user-bound key) its own user's. */
export function mayForget(tenant: Tenant | undefined, m: MemoryRecord): boolean {
  return appAllowed(tenant, m.appName) && (tenant?.userId === undefined || m.userId === tenant.userId);
}

/** PERMISSION_DENIED unless the key may use the app. */
export function requireApp(tenant: Tenant | undefined, field: string, appName: string): void {
  if (!appAllowed(tenant, appName))
    throw new MemoryError(
      "PERMISSION_DENIED",
      `${field}: this API key may not use app ${JSON.stringify(appName)}`,
      {},
      { field, reason: "APP_NOT_ALLOWED" },
    );
}

/**
 * The user_id a user-bound key writes or forgets under: an omitted one becomes
 * the key's user; another is PERMISSION_DENIED. Unchanged for other keys.
 */
export function ownUser(tenant: Tenant | undefined, field: string, userId: string | undefined): string | undefined {
  if (tenant?.userId === undefined) return userId;
  if (userId !== undefined && userId !== tenant.userId)
    throw new MemoryError(
      "PERMISSION_DENIED",
      `${field}: this API key is bound to another user`,
      {},
      { field, reason: "USER_NOT_ALLOWED" },
    );
  return tenant.userId;
}

/**
 * The user_id filter a read under the key uses: an omitted one becomes a
 * user-bound key's user; null when the filter names another user, whose
 * data the key may not see (the read answers empty).
 */
export function readableUser(tenant: Tenant | undefined, userId: string | undefined): string | undefined | null {
  if (tenant?.userId === undefined) return userId;
  return userId === undefined || userId === tenant.userId ? tenant.userId : null;
}

/** NOT_FOUND for a memory id, the same words whether it is absent or another tenant's. */
export function memoryNotFound(memoryId: string): MemoryError {
  return new MemoryError(
    "NOT_FOUND",
    `memory_id: memory ${JSON.stringify(memoryId)} not found`,
    {},
    { field: "memory_id", fieldProblem: "memory not found", reason: "MEMORY_NOT_FOUND" },
  );
}
