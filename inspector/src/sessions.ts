/**
 * The sessions list, as a debugger needs it: most recently active first,
 * with each session's error count and last event; app and user filters that
 * match by prefix; an event-type filter ("only errors"); and full-text search
 * over the events with SearchEvents. Every filter lives in the URL
 * ("#/?app=&user=&type=&q=&page="), so a view can be shared and reloaded.
 *
 * ListSessions orders by id and filters by exact app and user, so the list
 * reads up to MAX_LISTED sessions and sorts and filters them here; the
 * per-row facts (errors, last event) are read for the shown page only, and
 * again only for sessions whose head seq moved.
 */
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Event as MemoryEvent, Session } from "@engram/gen";
import { memory } from "./api";
import { formatTime, h, replaceChildren } from "./dom";
import { eventPreview } from "./events";
import { sessionHref, sessionsHref, sessionsQueryOf, ERRORS_ONLY, type SessionsQuery } from "./hrefs";
import { errorBox, type Cleanup } from "./views";

/** How often the list is re-read (no stream exists for it). */
const POLL_MS = 2000;
const PAGE_SIZE = 25;
/** Sessions the list reads (ListSessions pages of 1000) before sorting them by activity. */
export const MAX_LISTED = 2000;
/** Sessions (most recent first) checked for events of the filtered type. */
const MAX_TYPE_CHECKED = 200;
/** Search hits shown (SearchEvents allows up to 100 per app). */
const SEARCH_TOP_K = 50;
/** Apps a search covers when the app filter is a prefix of several. */
const MAX_SEARCHED_APPS = 10;

/** The event types that count as errors ("only errors"). */
export const ERROR_TYPES = ["error"];

/** The event types a type filter selects. */
export function typesOf(filter: string): string[] {
  if (!filter) return [];
  return filter === ERRORS_ONLY ? ERROR_TYPES : [filter];
}

/** What a row shows beyond the session record, read at one head seq. */
interface RowFacts {
  headSeq: bigint;
  errors: number;
  /** More errors than one read counts. */
  errorsCapped: boolean;
  last: MemoryEvent | undefined;
}

function dateOf(ts: Session["updatedAt"]): Date | undefined {
  return ts ? timestampDate(ts) : undefined;
}

function millis(s: Session): number {
  return dateOf(s.updatedAt)?.getTime() ?? 0;
}

/** The sessions list with its filters and search. */
export function sessionsView(root: HTMLElement, params: URLSearchParams): Cleanup {
  const query = sessionsQueryOf(params);
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const facts = new Map<string, RowFacts>();
  const hasType = new Map<string, { headSeq: bigint; has: boolean }>();

  const go = (change: Partial<SessionsQuery>) => {
    location.hash = sessionsHref({ ...query, page: 0, ...change });
  };
  const appInput = h("input", {
    name: "app",
    placeholder: "any app",
    value: query.app,
    "aria-label": "app name starts with",
    spellcheck: "false",
  });
  const userInput = h("input", {
    name: "user",
    placeholder: "any user",
    value: query.user,
    "aria-label": "user id starts with",
    spellcheck: "false",
  });
  const typeSelect = h(
    "select",
    { name: "type", "aria-label": "event type" },
    h("option", { value: "" }, "any events"),
    h("option", { value: ERRORS_ONLY }, "only errors"),
    ...[
      "user_message",
      "agent_response",
      "tool_call",
      "tool_result",
      "delegation_request",
      "delegation_response",
      "system",
      "summary",
    ].map((t) => h("option", { value: t }, t)),
  );
  typeSelect.value = query.type;
  const searchInput = h("input", {
    type: "search",
    name: "q",
    placeholder: "search events",
    value: query.search,
    "aria-label": "search events",
  });
  const filters = h(
    "form",
    {
      class: "filters",
      role: "search",
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        go({
          app: appInput.value.trim(),
          user: userInput.value.trim(),
          type: typeSelect.value,
          search: searchInput.value.trim(),
        });
      },
    },
    h("label", {}, "App ", appInput),
    h("label", {}, "User ", userInput),
    h("label", {}, "Type ", typeSelect),
    h("label", { class: "grow" }, "Search ", searchInput),
    h("button", { type: "submit" }, "Filter"),
  );
  const body = h("tbody");
  const status = h("span", { class: "muted" });
  const pageLabel = h("span", { class: "page" });
  const prev = h(
    "button",
    { type: "button", disabled: true, onclick: () => go({ page: query.page - 1 }) },
    "← Previous",
  );
  const next = h("button", { type: "button", disabled: true, onclick: () => go({ page: query.page + 1 }) }, "Next →");
  const message = h("div");
  const hits = h("section", { class: "search-results", hidden: !query.search });
  const headers = ["Session", "App", "User", "Events", "Errors", "Last event", "Last activity"];
  replaceChildren(
    root,
    h("h1", {}, "Sessions"),
    filters,
    message,
    hits,
    h(
      "div",
      { class: "table-scroll" },
      h(
        "table",
        { class: "sessions" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ...headers.map((t) =>
              h("th", { class: t === "Events" || t === "Errors" ? "num" : undefined, scope: "col" }, t),
            ),
          ),
        ),
        body,
      ),
    ),
    h("div", { class: "pager" }, prev, pageLabel, next, status),
  );

  async function listAll(): Promise<Session[]> {
    const all: Session[] = [];
    let pageToken = "";
    // An exact app or user narrows the read on the server; a prefix is applied here.
    do {
      const res = await memory.listSessions({ pageSize: 1000, pageToken });
      all.push(...res.sessions);
      pageToken = res.nextPageToken;
    } while (pageToken && all.length < MAX_LISTED && !stopped);
    return all;
  }

  async function factsOf(s: Session): Promise<RowFacts> {
    const known = facts.get(s.sessionId);
    if (known && known.headSeq === s.headSeq) return known;
    const [errs, last] = await Promise.all([
      memory.getSessionEvents({ sessionId: s.sessionId, eventTypes: ERROR_TYPES, limit: 1000 }),
      memory.getSessionEvents({ sessionId: s.sessionId, tail: 1 }),
    ]);
    const fresh = {
      headSeq: s.headSeq,
      errors: errs.events.length,
      errorsCapped: errs.nextPageToken !== "",
      last: last.events[0],
    };
    facts.set(s.sessionId, fresh);
    return fresh;
  }

  async function hasEventsOfType(s: Session, types: string[]): Promise<boolean> {
    const known = hasType.get(s.sessionId);
    if (known && known.headSeq === s.headSeq) return known.has;
    const res = await memory.getSessionEvents({ sessionId: s.sessionId, eventTypes: types, tail: 1 });
    hasType.set(s.sessionId, { headSeq: s.headSeq, has: res.events.length > 0 });
    return res.events.length > 0;
  }

  function row(s: Session, f: RowFacts): HTMLElement {
    const last = f.last;
    return h(
      "tr",
      { "data-session": s.sessionId, class: f.errors > 0 ? "has-errors" : undefined },
      // data-label names each cell where a phone shows the row as a card (style.css); title holds an id cut short there.
      h("td", { class: "session-id" }, h("a", { href: sessionHref(s.sessionId), title: s.sessionId }, s.sessionId)),
      h("td", { class: "app", "data-label": "app", title: s.appName }, s.appName),
      h("td", { class: "user", "data-label": "user", title: s.userId }, s.userId),
      h("td", { class: "num events", "data-label": "events" }, String(s.eventCount)),
      h(
        "td",
        { class: "num errors", "data-label": "errors" },
        f.errors ? `${f.errors}${f.errorsCapped ? "+" : ""}` : "0",
      ),
      h(
        "td",
        { class: "last-event", title: last ? `${last.eventType}: ${eventPreview(last, 300)}` : undefined },
        last
          ? h("span", { class: `badge type-${last.eventType}` }, last.eventType)
          : h("span", { class: "muted" }, "none"),
        last ? " " : null,
        last ? h("span", { class: "muted" }, eventPreview(last, 60)) : null,
      ),
      h("td", { class: "when" }, formatTime(dateOf(s.updatedAt))),
    );
  }

  async function load(): Promise<void> {
    clearTimeout(timer);
    // A hidden tab keeps its timer but does not ask the server.
    if (document.hidden && body.childElementCount > 0) {
      timer = setTimeout(() => void load(), POLL_MS);
      return;
    }
    try {
      const all = await listAll();
      if (stopped) return;
      let matching = all
        .filter((s) => s.appName.startsWith(query.app) && s.userId.startsWith(query.user))
        .sort((a, b) => millis(b) - millis(a) || (a.sessionId < b.sessionId ? -1 : 1));
      const types = typesOf(query.type);
      if (types.length) {
        const checked = matching.slice(0, MAX_TYPE_CHECKED);
        const flags = await Promise.all(checked.map((s) => hasEventsOfType(s, types)));
        matching = checked.filter((_, i) => flags[i]);
      }
      const pages = Math.max(1, Math.ceil(matching.length / PAGE_SIZE));
      const page = Math.min(query.page, pages - 1);
      const shown = matching.slice(page * PAGE_SIZE, (page + 1) * PAGE_SIZE);
      const rowFacts = await Promise.all(shown.map((s) => factsOf(s)));
      if (stopped) return;
      replaceChildren(message);
      const rows = shown.map((s, i) => row(s, rowFacts[i]!));
      replaceChildren(
        body,
        ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, "No sessions."))]),
      );
      prev.disabled = page === 0;
      next.disabled = page >= pages - 1;
      pageLabel.textContent = `page ${page + 1} of ${pages}`;
      status.textContent = `${matching.length} sessions${all.length >= MAX_LISTED ? ` (of the first ${MAX_LISTED} listed)` : ""} · refreshed ${formatTime(new Date())}`;
      if (query.search && !hits.dataset.done) await search(all);
    } catch (err) {
      if (!stopped) replaceChildren(message, errorBox(err));
    }
    if (!stopped) timer = setTimeout(() => void load(), POLL_MS);
  }

  /** SearchEvents over the apps the app filter selects (it needs an app), hits kept to the filtered users. */
  async function search(all: Session[]): Promise<void> {
    const apps = [...new Set(all.filter((s) => s.appName.startsWith(query.app)).map((s) => s.appName))].slice(
      0,
      MAX_SEARCHED_APPS,
    );
    const exactUser = all.some((s) => s.userId === query.user) ? query.user : undefined;
    const results = await Promise.all(
      apps.map((appName) =>
        memory.searchEvents({
          appName,
          userId: exactUser,
          query: query.search,
          topK: SEARCH_TOP_K,
          eventTypes: typesOf(query.type),
        }),
      ),
    );
    const found = results
      .flatMap((r) => r.hits)
      .filter(
        (hit) =>
          (hit.event?.sessionId ?? hit.sessionId) !== "" &&
          all.some((s) => s.sessionId === hit.sessionId && s.userId.startsWith(query.user)),
      )
      .sort((a, b) => b.score - a.score)
      .slice(0, SEARCH_TOP_K);
    hits.dataset.done = "1";
    replaceChildren(
      hits,
      h(
        "h2",
        {},
        `Events matching “${query.search}”`,
        h("span", { class: "muted" }, ` — ${found.length} hit${found.length === 1 ? "" : "s"}`),
      ),
      found.length
        ? h(
            "ol",
            { class: "hits" },
            ...found.map((hit) =>
              h(
                "li",
                { class: "hit", "data-session": hit.sessionId, "data-seq": String(hit.seq) },
                h("a", { href: sessionHref(hit.sessionId, { seq: hit.seq }) }, `${hit.sessionId} #${hit.seq}`),
                " ",
                hit.event ? h("span", { class: `badge type-${hit.event.eventType}` }, hit.event.eventType) : null,
                " ",
                h("span", { class: "snippet" }, hit.snippet),
                h("span", { class: "muted score" }, ` ${hit.score.toFixed(2)}`),
              ),
            ),
          )
        : h("p", { class: "muted" }, apps.length ? "No event matches." : "No app matches the app filter."),
    );
  }

  void load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
