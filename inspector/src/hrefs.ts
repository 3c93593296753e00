/**
 * The fragments views link to, built in one place so that a link and the
 * route that reads it (routes.ts) agree. Views import this, never each other.
 */

/** How the memories view selects by user: what the user's agents may recall, or everything filed under the user. */
export type MemoryScope = "visible" | "within";

/** What the memories view shows; it lives in the URL as "#/memories?app=&user=&agent=&scope=&superseded=1&q=". */
export interface MemoriesQuery {
  /** The app (required before anything is listed). */
  app: string;
  /** The user; "" for none (then only app-wide memories are visible). */
  user: string;
  /** The agent; "" for none. */
  agent: string;
  /** "visible": the user's memories and the app-wide ones (ScopeMatch VISIBLE); "within": every memory of the user (WITHIN). */
  scope: MemoryScope;
  /** Also memories whose validity is closed (superseded or expired). */
  showSuperseded: boolean;
  /** Text to search by; "" lists newest first instead. */
  search: string;
}

/** The memories query a fragment's parameters describe (missing ones take their defaults). */
export function memoriesQueryOf(params: URLSearchParams): MemoriesQuery {
  return {
    app: params.get("app") ?? "",
    user: params.get("user") ?? "",
    agent: params.get("agent") ?? "",
    scope: params.get("scope") === "within" ? "within" : "visible",
    showSuperseded: params.get("superseded") === "1",
    search: params.get("q") ?? "",
  };
}

/** The fragment of the memories view for a query; defaults are left out to keep links short. */
export function memoriesHref(query: Partial<MemoriesQuery>): string {
  const params = new URLSearchParams();
  if (query.app) params.set("app", query.app);
  if (query.user) params.set("user", query.user);
  if (query.agent) params.set("agent", query.agent);
  if (query.scope === "within") params.set("scope", "within");
  if (query.showSuperseded) params.set("superseded", "1");
  if (query.search) params.set("q", query.search);
  return `#/memories${params.size ? `?${params}` : ""}`;
}

/** The event-type filter value that selects error events. */
export const ERRORS_ONLY = "errors";

/** What the sessions list shows; it lives in the URL as "#/?app=&user=&type=&q=&page=". */
export interface SessionsQuery {
  /** App names starting with this ("" for any). */
  app: string;
  /** User ids starting with this ("" for any). */
  user: string;
  /** Only sessions (and search hits) with events of this type; ERRORS_ONLY for errors; "" for any. */
  type: string;
  /** Text to search events for with SearchEvents; "" for no search. */
  search: string;
  /** Page of the list, from 0. */
  page: number;
}

/** The sessions query a fragment's parameters describe (missing ones take their defaults). */
export function sessionsQueryOf(params: URLSearchParams): SessionsQuery {
  const page = Number(params.get("page") ?? "1");
  return {
    app: params.get("app") ?? "",
    user: params.get("user") ?? "",
    type: params.get("type") ?? "",
    search: params.get("q") ?? "",
    page: Number.isInteger(page) && page > 1 ? page - 1 : 0,
  };
}

/** The fragment of the sessions list for a query; defaults are left out to keep links short. */
export function sessionsHref(query: Partial<SessionsQuery>): string {
  const params = new URLSearchParams();
  if (query.app) params.set("app", query.app);
  if (query.user) params.set("user", query.user);
  if (query.type) params.set("type", query.type);
  if (query.search) params.set("q", query.search);
  if (query.page) params.set("page", String(query.page + 1));
  return `#/${params.size ? `?${params}` : ""}`;
}

/** What a session's view shows beyond the session: "#/session/<id>?type=&seq=". */
export interface SessionQuery {
  /** Only events of this type (ERRORS_ONLY for errors); "" for all. */
  type?: string;
  /** The event to open at (a search hit); the newest when absent. */
  seq?: bigint;
}

/** The session query a fragment's parameters describe. */
export function sessionQueryOf(params: URLSearchParams): SessionQuery {
  const seq = params.get("seq");
  return { type: params.get("type") ?? "", seq: seq && /^\d+$/.test(seq) ? BigInt(seq) : undefined };
}

/** The fragment of one session's view. */
export function sessionHref(sessionId: string, query: SessionQuery = {}): string {
  const params = new URLSearchParams();
  if (query.type) params.set("type", query.type);
  if (query.seq !== undefined) params.set("seq", String(query.seq));
  return `#/session/${encodeURIComponent(sessionId)}${params.size ? `?${params}` : ""}`;
}
