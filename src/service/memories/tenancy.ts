/**
 * Scoped API keys over long-term memories, applied exactly as for sessions: a
 * key bound to apps (or "*") and optionally to one user. The call guard
 * (src/service/call-guard.ts) hands the key's scope to the service as
 * `tenant`; the rules live here, next to the memories they guard.
 *
 * - Reading (GetMemory, SearchMemories, ListMemories, WatchMemories): a key
 *   bound to user u sees u's memories and the shared ones (no user_id), never
 *   another user's: GetMemory answers NOT_FOUND, word for word as for an
 *   absent memory; a filter naming another user finds nothing; an omitted
 *   user_id is filled in with u.
 * - Writing and forgetting: a key bound to u writes and forgets only u's
 *   memories (an omitted user_id is filled in with u; another user is
 *   PERMISSION_DENIED), and never the shared ones.
 * - Apps: a key's apps only. Listings of another app find nothing; writes,
 *   watches and forgetting there are PERMISSION_DENIED.
 */
import { ANY_APP } from "../../auth/api-keys.js";
import { MemoryError } from "../../errors.js";
import type { MemoryRecord } from "../../store/types.js";

/** The calling key's scope; absent when auth is off. */
export interface MemoryTenant {
  /** Apps in scope; ["*"] means every app. */
  apps: readonly string[];
  /** Set when the key is bound to one user. */
  userId?: string;
}

/** What a memory handler may be told beyond its request. */
export interface MemoryCallContext {
  tenant?: MemoryTenant;
  /** Epoch ms by which the client wants its answer: bounds the embeddings endpoint's requests too. */
  deadline?: number;
  /** Aborted when the client cancels (streams and Connect calls): abandons the embeddings endpoint's requests. */
  signal?: AbortSignal;
}

/** True when the key may use the app. */
export function appAllowed(tenant: MemoryTenant | undefined, appName: string): boolean {
  return !tenant || tenant.apps.includes(ANY_APP) || tenant.apps.includes(appName);
}

/** True when the key may read the memory: its app, and its user's or a shared one. */
export function mayRead(tenant: MemoryTenant | undefined, m: MemoryRecord): boolean {
  return (
    appAllowed(tenant, m.appName) &&
    (tenant?.userId === undefined || m.userId === undefined || m.userId === tenant.userId)
  );
}

/** True when the key may forget the memory: its app, and (for a user-bound key) its own user's. */
export function mayForget(tenant: MemoryTenant | undefined, m: MemoryRecord): boolean {
  return appAllowed(tenant, m.appName) && (tenant?.userId === undefined || m.userId === tenant.userId);
}

/** PERMISSION_DENIED unless the key may use the app. */
export function requireApp(tenant: MemoryTenant | undefined, field: string, appName: string): void {
  if (!appAllowed(tenant, appName)) {
    throw new MemoryError(
      "PERMISSION_DENIED",
      `${field}: this API key may not use app ${JSON.stringify(appName)}`,
      {},
      { field, reason: "APP_NOT_ALLOWED" },
    );
  }
}

/**
 * The user_id a user-bound key writes or forgets under: an omitted one becomes
 * the key's user; another is PERMISSION_DENIED. Unchanged for other keys.
 */
export function ownUser(
  tenant: MemoryTenant | undefined,
  field: string,
  userId: string | undefined,
): string | undefined {
  if (tenant?.userId === undefined) return userId;
  if (userId !== undefined && userId !== tenant.userId) {
    throw new MemoryError(
      "PERMISSION_DENIED",
      `${field}: this API key is bound to another user`,
      {},
      { field, reason: "USER_NOT_ALLOWED" },
    );
  }
  return tenant.userId;
}

/** NOT_FOUND for a memory id, the same words whether it is absent or another tenant's. */
export function memoryNotFound(memoryId: string): MemoryError {
  return new MemoryError(
    "NOT_FOUND",
    `memory_id: memory ${JSON.stringify(memoryId)} not found`,
    {},
    {
      field: "memory_id",
      fieldProblem: "memory not found",
      reason: "MEMORY_NOT_FOUND",
    },
  );
}
