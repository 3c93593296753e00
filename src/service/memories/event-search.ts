/**
 * SearchEvents: full-text search over the retained events of an app's (or a
 * user's) sessions, for episodic recall. It reads the sessions through the
 * session contract (listSessions, readTail), keeps the events whose text
 * holds a query term, and ranks those by BM25 (MiniSearch) with the
 * candidates as the corpus, as context retrieval does. Its cost grows with
 * the events of the scope (every retained event is read and matched once per
 * call), which the local store bounds with its session and event caps; stores
 * with their own text index (PostgreSQL's GIN) will answer it themselves.
 */
import MiniSearch from "minisearch";
import type { MemoryStore, StoredEvent } from "../../store/types.js";
import { contentText } from "../context/index.js";

/** Sessions read per listSessions page. */
const SESSION_PAGE = 1000;
/** Events read per session (its newest). */
export const MAX_EVENTS_PER_SESSION = 10_000;
/** Characters of a snippet. */
const SNIPPET_LENGTH = 160;

/** One matching event. */
export interface EventSearchHit {
  event: StoredEvent;
  score: number;
  snippet: string;
}

/** What to search. */
export interface EventSearch {
  appName: string;
  userId?: string;
  eventTypes: readonly string[];
  query: string;
  topK: number;
}

/** The words of a text, lowercased (what a match must contain). */
function terms(text: string): string[] {
  return [...new Set(text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [])];
}

/** About SNIPPET_LENGTH characters of `text` around the first of `words` it contains. */
function snippet(text: string, words: readonly string[]): string {
  const lower = text.toLowerCase();
  const at = Math.min(...words.map((w) => lower.indexOf(w)).filter((i) => i >= 0));
  const start = Math.max(0, Math.min(at - SNIPPET_LENGTH / 4, text.length - SNIPPET_LENGTH));
  const cut = text.slice(start, start + SNIPPET_LENGTH);
  return `${start > 0 ? "…" : ""}${cut}${start + SNIPPET_LENGTH < text.length ? "…" : ""}`;
}

/** The best `topK` events of the scope for the query, best first. */
export async function searchEvents(store: MemoryStore, search: EventSearch): Promise<EventSearchHit[]> {
  const words = terms(search.query);
  if (words.length === 0) return [];
  const candidates: Array<{ event: StoredEvent; text: string }> = [];
  let after: string | undefined;
  for (;;) {
    const sessions = await store.listSessions({ appName: search.appName, userId: search.userId, afterSessionId: after, limit: SESSION_PAGE });
    for (const session of sessions) {
      // A session removed since it was listed simply has nothing to offer; so has one created again under its id
      // meanwhile (another tenant's, perhaps): the read expects the listed incarnation.
      const listed = { expectedIncarnation: session.incarnation };
      const page = await store.readTail(session.sessionId, MAX_EVENTS_PER_SESSION, search.eventTypes, listed).catch(() => undefined);
      for (const event of page?.events ?? []) {
        const text = contentText(event.content);
        const lower = text.toLowerCase();
        if (words.some((w) => lower.includes(w))) candidates.push({ event, text });
      }
    }
    if (sessions.length < SESSION_PAGE) break;
    after = sessions[sessions.length - 1].sessionId;
  }
  if (candidates.length === 0) return [];
  const index = new MiniSearch<{ id: number; text: string }>({ fields: ["text"], storeFields: [], idField: "id" });
  index.addAll(candidates.map((c, id) => ({ id, text: c.text })));
  return index
    .search(search.query, { prefix: false, fuzzy: false, combineWith: "OR" })
    .slice(0, search.topK)
    .map((hit) => {
      const { event, text } = candidates[hit.id as number];
      return { event, score: hit.score, snippet: snippet(text, words) };
    });
}
