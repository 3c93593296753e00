/**
 * SearchEvents: full-text search over the retained events of an app's (or a
 * user's) sessions, for episodic recall. Text is matched through the shared
 * analyzer (src/store/memories/analyzer.ts) and ranked by relevance to any
 * query term, with scores that depend only on the events of the searched
 * scope. A store that keeps an event index answers it (the local store's
 * inverted index); for the others (Redis) searchEventsByReading reads every
 * retained event of the scope and ranks them the same way.
 */
import { contentText } from "../../store/event-text.js";
import { searchEventsByReading } from "../../store/event-search.js";
import { foldText, queryTerms } from "../../store/memories/analyzer.js";
import type { EventTextQuery, MemoryStore, StoredEvent } from "../../store/types.js";

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

/**
 * About SNIPPET_LENGTH characters of `text` around the first place one of
 * the query's terms starts (a stem starts its words: "seat" in "seats"),
 * else from its start.
 */
function snippet(text: string, terms: readonly string[]): string {
  const folded = foldText(text);
  // Folding may change the length (NFKC, "ß"): positions then only approximate the original's.
  const found = terms.map((t) => folded.indexOf(t)).filter((i) => i >= 0);
  const at = found.length > 0 ? Math.min(...found) : 0;
  const start = Math.max(0, Math.min(at - SNIPPET_LENGTH / 4, text.length - SNIPPET_LENGTH));
  const cut = text.slice(start, start + SNIPPET_LENGTH);
  return `${start > 0 ? "…" : ""}${cut}${start + SNIPPET_LENGTH < text.length ? "…" : ""}`;
}

/** The best `topK` events of the scope for the query, best first. */
export async function searchEvents(store: MemoryStore, search: EventSearch): Promise<EventSearchHit[]> {
  const terms = queryTerms(search.query);
  if (terms.length === 0) return [];
  const query: EventTextQuery = {
    appName: search.appName,
    userId: search.userId,
    query: search.query,
    eventTypes: search.eventTypes,
    limit: search.topK,
  };
  const found = store.searchEvents ? await store.searchEvents(query) : await searchEventsByReading(store, query);
  return found.map(({ event, score }) => ({ event, score, snippet: snippet(contentText(event.content), terms) }));
}
