/**
 * Tenancy: holds each call to its key's scope (src/service/guard/rules.ts)
 * before the service runs it. Listings only ever show sessions in scope; a
 * session outside it is NOT_FOUND; a key bound to one app (or user) makes it
 * the default of an omitted one.
 */
import { create } from "@bufbuild/protobuf";
import { ANY_APP, type Principal } from "../../auth/api-keys.js";
import {
  ListSessionsResponseSchema,
  type CleanupRequest,
  type CreateSessionRequest,
  type DeleteUserDataRequest,
  type GetOrCreateSessionRequest,
  type GetOrCreateSessionResponse,
  type ListEventsRequest,
  type ListSessionsRequest,
  type WatchSessionsRequest,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { invalidArgument, MemoryError } from "../../errors.js";
import { sessionExists } from "../../store/rules.js";
import type { MemoryStore, SessionRecord, StoreCall } from "../../store/types.js";
import type { ListEventsContext } from "../memory-service.js";
import type { MemoryCallContext } from "../memories/tenancy.js";
import { refuseAppStateForUserKey } from "../state/tenancy.js";
import { watchedCursors, type WatchSessionsContext } from "../watch-sessions.js";
import { allowedRule, inScope, sessionInScope, type ScopeKind } from "./rules.js";
import type { CallInfo, GuardedCall, Next, StepFactory } from "./step.js";

/** One scope check: runs the rest of the chain (or answers for it) once the request is within the key's scope. */
type ScopeCheck = (call: GuardedCall, principal: Principal, next: Next, store: MemoryStore) => ReturnType<Next>;

const CHECKS: Record<ScopeKind, ScopeCheck> = {
  async session(call, principal, next, store) {
    call.session = await sessionInScope(store, principal, (call.req as { sessionId: string }).sessionId, call.info);
    expectIncarnation(call, principal, call.session);
    return next(call);
  },
  /**
   * WatchSessions: each session is looked up and held to the key's scope on
   * its own. One that is absent or out of scope is not an error of the whole
   * call (the other sessions' tabs stay live): the service ends it alone
   * with NOT_FOUND, the answer an absent session gets.
   */
  async sessions(call, principal, next, store) {
    const cursors = watchedCursors(call.req as WatchSessionsRequest);
    const scoped = new Map<string, string | null>();
    const sessions: SessionRecord[] = [];
    for (const { sessionId } of cursors) {
      const session = await store.getSession(sessionId, call.info);
      if (session && inScope(principal, session)) {
        scoped.set(sessionId, session.incarnation);
        sessions.push(session);
      } else {
        scoped.set(sessionId, null);
      }
    }
    const context: GuardedCall["info"] & WatchSessionsContext = { ...call.info, scoped };
    call.info = context;
    call.sessions = sessions;
    return next(call);
  },
  async sessionState(call, principal, next, store) {
    call.session = await sessionInScope(store, principal, (call.req as { sessionId: string }).sessionId, call.info);
    expectIncarnation(call, principal, call.session);
    if (principal.userId !== undefined)
      refuseAppStateForUserKey(call.req as Parameters<typeof refuseAppStateForUserKey>[0]);
    return next(call);
  },
  async create(call, principal, next) {
    const r = call.req as CreateSessionRequest | GetOrCreateSessionRequest;
    fillScope(r, principal);
    if (!principal.apps.includes(ANY_APP) && !principal.apps.includes(r.appName)) {
      throw new MemoryError(
        "PERMISSION_DENIED",
        `app_name: this API key may not use app ${JSON.stringify(r.appName)}`,
        {},
        { field: "app_name", reason: "APP_NOT_ALLOWED" },
      );
    }
    if (principal.userId !== undefined && r.userId !== principal.userId) {
      throw new MemoryError(
        "PERMISSION_DENIED",
        `user_id: this API key is bound to another user`,
        {},
        { field: "user_id", reason: "USER_NOT_ALLOWED" },
      );
    }
    const result = await next(call);
    const session = (result as GetOrCreateSessionResponse).session;
    // GetOrCreate found an existing session of another tenant: its id is taken, nothing more is said.
    if (session && !inScope(principal, session)) throw sessionExists(session.sessionId);
    return result;
  },
  listSessions(call, principal, next) {
    const r = call.req as ListSessionsRequest;
    if (!principal.apps.includes(ANY_APP)) {
      if (r.appName === undefined) {
        if (principal.apps.length > 1)
          throw invalidArgument("app_name", "is required with an API key bound to several apps");
        r.appName = principal.apps[0];
      } else if (!principal.apps.includes(r.appName)) {
        return Promise.resolve(create(ListSessionsResponseSchema, {}));
      }
    }
    if (principal.userId !== undefined) {
      if (r.userId !== undefined && r.userId !== principal.userId)
        return Promise.resolve(create(ListSessionsResponseSchema, {}));
      r.userId = principal.userId;
    }
    return next(call);
  },
  /**
   * One session (checked), or the newest events of the sessions in the key's
   * scope, read from the store's recent index of that scope (per app, per
   * user, per app and user): no other tenant's writes can crowd them out, and
   * the read costs O(limit) per app of the key.
   */
  async listEvents(call, principal, next, store) {
    const r = call.req as ListEventsRequest;
    if (r.sessionId !== undefined) {
      expectIncarnation(call, principal, await sessionInScope(store, principal, r.sessionId, call.info));
      return next(call);
    }
    const everyApp = principal.apps.includes(ANY_APP);
    if (everyApp && principal.userId === undefined) return next(call);
    const context: GuardedCall["info"] & ListEventsContext = {
      ...call.info,
      scope: { appNames: everyApp ? undefined : principal.apps, userId: principal.userId },
    };
    call.info = context;
    return next(call);
  },
  global: (call, _principal, next) => next(call),
  cleanup(call, principal, next) {
    checkCleanup(call.req as CleanupRequest, principal);
    return next(call);
  },
  erasure(call, principal, next) {
    checkErasure(call.req as DeleteUserDataRequest, principal);
    return next(call);
  },
  memories(call, principal, next) {
    const context: GuardedCall["info"] & MemoryCallContext = {
      ...call.info,
      tenant: { apps: principal.apps, userId: principal.userId },
    };
    call.info = context;
    return next(call);
  },
};

/** The key's role must be enough for the method, and the request within the key's apps and user; absent while auth is off. */
export const scope: StepFactory = ({ method }, { authenticator, store }) => {
  if (!authenticator) return undefined;
  return (next) => (call) => {
    const principal = call.principal!;
    return CHECKS[allowedRule(principal, method).scope](call, principal, next, store);
  };
};

/**
 * Holds the rest of a scoped key's call to the session incarnation its scope
 * was checked on (StoreCall.expectedIncarnation): session ids are the
 * client's, so between this check and the service's store calls the session
 * can be deleted and created again under its id by another tenant, whose
 * session each store then refuses NOT_FOUND, as one out of scope. A key for
 * every app and user may use any session of the id: it passes nothing, and
 * its calls cost what they did.
 */
function expectIncarnation(call: GuardedCall, principal: Principal, session: SessionRecord): void {
  if (principal.apps.includes(ANY_APP) && principal.userId === undefined) return;
  const info: CallInfo & StoreCall = { ...call.info, expectedIncarnation: session.incarnation };
  call.info = info;
}

/**
 * Cleanup with a key short of every app (or bound to a user) must name its
 * own app (and user): an omitted filter means every tenant, and a narrower
 * key is never widened to that by default.
 */
function checkCleanup(r: CleanupRequest, principal: Principal): void {
  if (!principal.apps.includes(ANY_APP)) {
    if (r.appName === undefined)
      throw new MemoryError(
        "PERMISSION_DENIED",
        'app_name: Cleanup of every app needs an admin API key for every app (app "*"); name one of this key\'s apps',
        {},
        { field: "app_name", reason: "ADMIN_KEY_REQUIRED" },
      );
    if (!principal.apps.includes(r.appName))
      throw new MemoryError(
        "PERMISSION_DENIED",
        `app_name: this API key may not use app ${JSON.stringify(r.appName)}`,
        {},
        { field: "app_name", reason: "APP_NOT_ALLOWED" },
      );
  }
  if (principal.userId !== undefined && r.userId !== principal.userId) {
    throw new MemoryError(
      "PERMISSION_DENIED",
      "user_id: this API key is bound to one user; Cleanup must name that user",
      {},
      { field: "user_id", reason: "USER_NOT_ALLOWED" },
    );
  }
}

/**
 * DeleteUserData: the key's apps must include app_name, and the key must be
 * bound to that user or be an admin key. A write key bound to no user may
 * not erase anybody: it would reach every user of its apps.
 */
function checkErasure(r: DeleteUserDataRequest, principal: Principal): void {
  if (r.appName !== "" && !principal.apps.includes(ANY_APP) && !principal.apps.includes(r.appName)) {
    throw new MemoryError(
      "PERMISSION_DENIED",
      `app_name: this API key may not use app ${JSON.stringify(r.appName)}`,
      {},
      { field: "app_name", reason: "APP_NOT_ALLOWED" },
    );
  }
  if (principal.userId !== undefined) {
    if (r.userId !== "" && r.userId !== principal.userId)
      throw new MemoryError(
        "PERMISSION_DENIED",
        "user_id: this API key is bound to another user",
        {},
        { field: "user_id", reason: "USER_NOT_ALLOWED" },
      );
  } else if (principal.role !== "admin") {
    throw new MemoryError(
      "PERMISSION_DENIED",
      "deleteUserData needs an admin API key or a key bound to that user",
      {},
      { reason: "ADMIN_KEY_REQUIRED" },
    );
  }
}

/** A key bound to exactly one app (or user) makes it the default of an omitted app_name (user_id). */
function fillScope(r: { appName: string; userId: string }, principal: Principal): void {
  if (r.appName === "" && principal.apps.length === 1 && principal.apps[0] !== ANY_APP) r.appName = principal.apps[0];
  if (r.userId === "" && principal.userId !== undefined) r.userId = principal.userId;
}
