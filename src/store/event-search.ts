/**
 * Event search (MemoryStore.searchEvents) as the stores share it.
 *
 * LocalEventSearch is the local store's index of event text: per app, an
 * inverted index (src/store/inverted-index.ts) of every retained event's
 * analyzed text, with one scope per user, so a user's search scores against
 * that user's events alone and an app-wide search against the app's.
 *
 * An app's index is built at its first search and kept from then on, so
 * apps that never search pay nothing. Appends only queue their events (the
 * analyzer costs microseconds a word, too much for the append path); the
 * next search, or a queue grown past PENDING_LIMIT, indexes the queued
 * events still retained. Trimmed and deleted events leave the index at once.
 */
import { LRUCache } from "lru-cache";
import { contentText } from "./event-text.js";
import { InvertedIndex } from "./inverted-index.js";
import { analyze, queryTerms } from "./memories/analyzer.js";
import type { EventTextQuery, MemoryStore, ScoredEvent, StoredEvent } from "./types.js";

/**
 * Characters of event text whose analysis searchEventsByReading keeps. The
 * analyzer costs ~3-4 µs a word, and a store without an index hands the
 * same events to every search of a scope: kept by their text, the terms are
 * reused for exactly the same text.
 */
const ANALYZED_CHARS_KEPT = 8 * 1024 * 1024;
const analyzedTexts = new LRUCache<string, string[]>({ maxSize: ANALYZED_CHARS_KEPT });

/** The terms of a text, from analyzedTexts when kept there. */
function termsOf(text: string): string[] {
  let terms = analyzedTexts.get(text);
  if (terms === undefined) {
    terms = analyze(text);
    // A text longer than the whole budget is not kept (lru-cache refuses it).
    analyzedTexts.set(text, terms, { size: Math.max(1, text.length) });
  }
  return terms;
}

/** Sessions read per listSessions page, when a store has no event index. */
const SESSION_PAGE = 1000;
/** Events read per session (its newest), when a store has no event index. */
export const MAX_EVENTS_PER_SESSION = 10_000;

/** Appended events queued for an app's index, at most, before an append indexes them itself. */
const PENDING_LIMIT = 10_000;

/** A session as the index sees it: the store's own object, compared by identity, and its user. */
export interface SessionOfEvents<S> {
  session: S;
  userId: string;
  events: Iterable<StoredEvent>;
}

/** One app's index and the events appended since it was last brought up to date. */
interface AppEventIndex<S> {
  index: InvertedIndex<StoredEvent, StoredEvent>;
  pending: Array<{ session: S; userId: string; event: StoredEvent }>;
}

/** Event search over the local store's sessions of type S. */
export class LocalEventSearch<S> {
  private readonly apps = new Map<string, AppEventIndex<S>>();

  /**
   * `retained` tells whether an event is still retained by that session
   * (and the session still stored); `sessionsOf` lists an app's sessions
   * with their retained events, to build its index.
   */
  constructor(
    private readonly retained: (session: S, event: StoredEvent) => boolean,
    private readonly sessionsOf: (appName: string) => Iterable<SessionOfEvents<S>>,
  ) {}

  /** Events were appended to a session of the app. */
  appended(appName: string, session: S, userId: string, events: readonly StoredEvent[]): void {
    const app = this.apps.get(appName);
    if (!app) return;
    for (const event of events) app.pending.push({ session, userId, event });
    if (app.pending.length > PENDING_LIMIT) this.catchUp(app);
  }

  /** True when the app has an index (it was searched): only then do its events' changes matter here. */
  indexes(appName: string): boolean {
    return this.apps.has(appName);
  }

  /** An event of the app was trimmed or deleted. */
  dropped(appName: string, event: StoredEvent): void {
    this.apps.get(appName)?.index.remove(event);
  }

  /** The app has no session left. */
  forgetApp(appName: string): void {
    this.apps.delete(appName);
  }

  /** The best `limit` events for the query, best first. */
  search(query: EventTextQuery): ScoredEvent[] {
    const terms = queryTerms(query.query);
    if (terms.length === 0 || query.limit <= 0) return [];
    const app = this.apps.get(query.appName) ?? this.build(query.appName);
    if (!app) return [];
    this.catchUp(app);
    const scopes =
      query.userId === undefined
        ? [...app.index.scopes()]
        : [app.index.scope(query.userId)].filter((s) => s !== undefined);
    const types = query.eventTypes.length > 0 ? new Set(query.eventTypes) : undefined;
    return app.index
      .search(scopes, terms, query.limit, (e) => !types || types.has(e.eventType))
      .map(({ value, score }) => ({ event: value, score }));
  }

  /** Indexes every retained event of the app; undefined when it has no session. */
  private build(appName: string): AppEventIndex<S> | undefined {
    const app: AppEventIndex<S> = { index: new InvertedIndex(), pending: [] };
    let sessions = 0;
    for (const { userId, events } of this.sessionsOf(appName)) {
      sessions++;
      for (const event of events) indexEvent(app.index, userId, event);
    }
    if (sessions === 0) return undefined;
    this.apps.set(appName, app);
    return app;
  }

  private catchUp(app: AppEventIndex<S>): void {
    const pending = app.pending;
    app.pending = [];
    for (const { session, userId, event } of pending)
      if (this.retained(session, event)) indexEvent(app.index, userId, event);
  }
}

function indexEvent(index: InvertedIndex<StoredEvent, StoredEvent>, userId: string, event: StoredEvent): void {
  index.add(event, userId, event, analyze(contentText(event.content)));
}

/**
 * The best `limit` of these events for the query, ranked as LocalEventSearch
 * ranks, with these events as the corpus.
 */
export function rankEvents(events: Iterable<StoredEvent>, query: EventTextQuery): ScoredEvent[] {
  const terms = queryTerms(query.query);
  if (terms.length === 0 || query.limit <= 0) return [];
  const index = new InvertedIndex<StoredEvent, StoredEvent>();
  for (const event of events) index.add(event, "", event, termsOf(contentText(event.content)));
  const types = query.eventTypes.length > 0 ? new Set(query.eventTypes) : undefined;
  return index
    .search([...index.scopes()], terms, query.limit, (e) => !types || types.has(e.eventType))
    .map(({ value, score }) => ({ event: value, score }));
}

/**
 * searchEvents for a store without an event index (Redis): reads every
 * retained event of the scope through the session contract (listSessions,
 * readTail; the newest MAX_EVENTS_PER_SESSION of each session) and ranks
 * them with rankEvents, so its cost grows with the events of the scope.
 */
export async function searchEventsByReading(store: MemoryStore, query: EventTextQuery): Promise<ScoredEvent[]> {
  if (queryTerms(query.query).length === 0) return [];
  const events: StoredEvent[] = [];
  let after: string | undefined;
  for (;;) {
    const sessions = await store.listSessions({
      appName: query.appName,
      userId: query.userId,
      afterSessionId: after,
      limit: SESSION_PAGE,
    });
    for (const session of sessions) {
      // A session removed since it was listed simply has nothing to offer; so has one created again under its id
      // meanwhile (another tenant's, perhaps): the read expects the listed incarnation.
      const listed = { expectedIncarnation: session.incarnation };
      const page = await store
        .readTail(session.sessionId, MAX_EVENTS_PER_SESSION, undefined, listed)
        .catch(() => undefined);
      for (const event of page?.events ?? []) events.push(event);
    }
    if (sessions.length < SESSION_PAGE) break;
    after = sessions[sessions.length - 1].sessionId;
  }
  return rankEvents(events, query);
}
