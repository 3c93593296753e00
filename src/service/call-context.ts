/**
 * The one context a call carries besides its request, from the edge through
 * the guard to the service, whose store calls read its StoreCall part (the
 * deadline, the session incarnation the scope was checked on). The edge
 * fills what it read off the wire; a guard step that learns more passes on
 * a copy with it, never writing into the edge's object (one MCP request makes
 * several calls with the same one).
 */
import type { Principal } from "../auth/api-keys.js";
import type { StoreCall } from "../store/types.js";

/** A key's scope (src/service/tenancy.ts): its apps (["*"]: every app) and, when bound to one, its user. */
export type Tenant = Pick<Principal, "apps" | "userId">;

/** What a call carries besides its request, whatever the protocol. */
export interface CallContext extends StoreCall {
  /** grpc, connect, grpc-web, rest or mcp (a metrics label). */
  readonly protocol: string;
  /**
   * Streams: aborted when the client cancels, the deadline passes or the
   * server stops. Unary handlers never read it (a unary call's bound is its
   * deadline), so the gRPC edge gives them none: an AbortController and a
   * listener per call showed in every call's profile (bench/README.md).
   */
  readonly signal?: AbortSignal;
  /** The `authorization` header / metadata value. */
  readonly authorization?: string;
  /** The W3C `traceparent` header, if any. */
  readonly traceparent?: string;
  /** The client's `x-request-id`, if it sent one; otherwise one is made for the logs. */
  readonly requestId?: string;
  /**
   * The calling key's scope, for the RPCs the service holds to it itself
   * (long-term memories, ListEvents without a session); absent while auth is off.
   */
  readonly tenant?: Tenant;
  /**
   * WatchSessions: per session id, the incarnation the key's scope was
   * checked on, or null when the session is absent or outside the key's
   * scope (it ends at once with NOT_FOUND, exactly as an absent one).
   * Absent while auth is off.
   */
  readonly watched?: ReadonlyMap<string, string | null>;
}
