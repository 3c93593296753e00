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

/** The fragment of one session's view. */
export function sessionHref(sessionId: string): string {
  return `#/session/${encodeURIComponent(sessionId)}`;
}
