/**
 * The inspector's pages. Each view renders into the container it is given and
 * returns a function that stops its timers and streams when the page changes.
 */
import { ConnectError, Code } from "@connectrpc/connect";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Event as MemoryEvent, Session } from "@engram/gen";
import { memory } from "./api";
import { formatTime, h, replaceChildren } from "./dom";
import { ToolPairing, eventRow, jsonView } from "./events";
import { memoriesHref } from "./hrefs";
import { followSession, type LiveMessage } from "./live";

/** Stops a view. */
export type Cleanup = () => void;

/** How often the sessions list and the stats are re-read (no stream exists for them). */
const POLL_MS = 2000;
const PAGE_SIZE = 25;
/** Events a session view shows at first; "Load earlier events" adds as many again. */
const WINDOW = 200;

/** A readable message for a failed call, with a hint for the errors a person can fix. */
export function errorText(err: unknown): string {
  const ce = ConnectError.from(err);
  if (ce.code === Code.Unauthenticated) return `${ce.rawMessage} — enter an API key above.`;
  if (ce.code === Code.PermissionDenied) return `${ce.rawMessage} — this API key may not do that.`;
  return `${Code[ce.code] ?? ce.code}: ${ce.rawMessage}`;
}

/** A failed call as an alert paragraph. */
export function errorBox(err: unknown): HTMLElement {
  return h("p", { class: "error", role: "alert" }, errorText(err));
}

function dateOf(ts: Session["updatedAt"]): Date | undefined {
  return ts ? timestampDate(ts) : undefined;
}

/** The sessions list: filters by app and user, pages by token, re-read every few seconds. */
export function sessionsView(root: HTMLElement, params: URLSearchParams): Cleanup {
  const app = params.get("app") ?? "";
  const user = params.get("user") ?? "";
  const tokens: string[] = [""]; // page tokens of the pages seen, to go back
  let page = 0;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;

  const appInput = h("input", { name: "app", placeholder: "any app", value: app, "aria-label": "app name" });
  const userInput = h("input", { name: "user", placeholder: "any user", value: user, "aria-label": "user id" });
  const filters = h(
    "form",
    {
      class: "filters",
      onsubmit: (ev: Event) => {
        ev.preventDefault();
        const q = new URLSearchParams();
        if (appInput.value.trim()) q.set("app", appInput.value.trim());
        if (userInput.value.trim()) q.set("user", userInput.value.trim());
        location.hash = `#/${q.size ? `?${q}` : ""}`;
      },
    },
    h("label", {}, "App ", appInput),
    h("label", {}, "User ", userInput),
    h("button", { type: "submit" }, "Filter"),
  );
  const body = h("tbody");
  const status = h("span", { class: "muted" });
  const prev = h("button", { type: "button", disabled: true, onclick: () => go(page - 1) }, "← Previous");
  const next = h("button", { type: "button", disabled: true, onclick: () => go(page + 1) }, "Next →");
  const message = h("div");
  replaceChildren(
    root,
    h("h1", {}, "Sessions"),
    filters,
    message,
    h(
      "table",
      { class: "sessions" },
      h("thead", {}, h("tr", {}, ...["Session", "App", "User", "Events", "Head seq", "Updated"].map((t) => h("th", { class: t === "Events" || t === "Head seq" ? "num" : undefined }, t)))),
      body,
    ),
    h("div", { class: "pager" }, prev, h("span", { class: "page" }, ""), next, status),
  );

  async function load(): Promise<void> {
    clearTimeout(timer);
    // A hidden tab keeps its timer but does not ask the server.
    if (document.hidden && body.childElementCount > 0) {
      timer = setTimeout(() => void load(), POLL_MS);
      return;
    }
    try {
      const res = await memory.listSessions({ appName: app || undefined, userId: user || undefined, pageSize: PAGE_SIZE, pageToken: tokens[page] });
      if (stopped) return;
      replaceChildren(message);
      const rows = res.sessions.map((s) =>
        h(
          "tr",
          { "data-session": s.sessionId },
          h("td", {}, h("a", { href: `#/session/${encodeURIComponent(s.sessionId)}` }, s.sessionId)),
          h("td", {}, s.appName),
          h("td", {}, s.userId),
          h("td", { class: "num" }, String(s.eventCount)),
          h("td", { class: "num" }, String(s.headSeq)),
          h("td", {}, formatTime(dateOf(s.updatedAt))),
        ),
      );
      replaceChildren(body, ...(rows.length ? rows : [h("tr", {}, h("td", { colspan: 6, class: "muted" }, "No sessions."))]));
      tokens[page + 1] = res.nextPageToken;
      prev.disabled = page === 0;
      next.disabled = !res.nextPageToken;
      root.querySelector(".page")!.textContent = `page ${page + 1}`;
      status.textContent = `refreshed ${formatTime(new Date())}`;
    } catch (err) {
      if (!stopped) replaceChildren(message, errorBox(err));
    }
    if (!stopped) timer = setTimeout(() => void load(), POLL_MS);
  }
  function go(to: number): void {
    page = Math.max(0, to);
    void load();
  }
  void load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** Totals over the store, re-read every few seconds. */
export function statsView(root: HTMLElement): Cleanup {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const grid = h("dl", { class: "stats" });
  const message = h("div");
  replaceChildren(root, h("h1", {}, "Stats"), message, grid);
  async function load(): Promise<void> {
    try {
      const s = await memory.getStats({});
      if (stopped) return;
      replaceChildren(message);
      replaceChildren(
        grid,
        ...[
          ["Sessions", String(s.totalSessions)],
          ["Events", String(s.totalEvents)],
          ["Events per session", s.avgEventsPerSession.toFixed(1)],
          ["Backend", s.backend],
        ].flatMap(([k, v]) => [h("dt", {}, k), h("dd", { "data-stat": k }, v)]),
      );
    } catch (err) {
      if (!stopped) replaceChildren(message, errorBox(err));
    }
    if (!stopped) timer = setTimeout(() => void load(), POLL_MS);
  }
  void load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** Waits `ms`, or less when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(t), resolve()), { once: true });
  });
}

/** The context panel: what BuildConversationContext returns for a token budget. */
function contextPanel(sessionId: string): HTMLElement {
  const budget = h("input", { type: "number", min: 0, step: 1, value: 2000, name: "budget", "aria-label": "token budget" });
  const maxEvents = h("input", { type: "number", min: 0, step: 1, value: 0, name: "max-events", "aria-label": "max events" });
  const out = h("div", { class: "context-out" });
  const form = h(
    "form",
    {
      class: "context-form",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        replaceChildren(out, h("p", { class: "muted" }, "Building…"));
        try {
          const res = await memory.buildConversationContext({
            sessionId,
            tokenBudget: Number(budget.value) || 0,
            maxEvents: Number(maxEvents.value) || 0,
          });
          replaceChildren(
            out,
            h(
              "p",
              { class: "context-summary" },
              `${res.eventsIncluded} events included, ${res.eventsDropped} dropped` +
                (res.tokenizer ? `, ${res.tokensUsed} tokens (${res.tokenizer})` : ""),
            ),
            h("h3", {}, "Text"),
            h("pre", { class: "context-text" }, res.text || "(empty)"),
            h("h3", {}, `Messages (${res.messages.length})`),
            h(
              "ol",
              { class: "messages" },
              ...res.messages.map((m) =>
                h(
                  "li",
                  { class: `msg role-${m.role.replace(/[^a-z]/g, "")}` },
                  h("span", { class: "role" }, m.role + (m.name ? ` (${m.name})` : "")),
                  m.content ? h("div", { class: "text" }, m.content) : null,
                  m.toolCalls.length
                    ? jsonView(m.toolCalls.map((c) => ({ id: c.id, name: c.function?.name ?? "", arguments: c.function?.arguments ?? "" })), "tool_calls")
                    : null,
                  m.toolCallId ? h("span", { class: "muted" }, ` answers ${m.toolCallId}`) : null,
                ),
              ),
            ),
          );
        } catch (err) {
          replaceChildren(out, errorBox(err));
        }
      },
    },
    h("label", {}, "Token budget ", budget),
    h("label", {}, "Max events ", maxEvents),
    h("button", { type: "submit" }, "Build context"),
  );
  return h("section", { class: "panel context" }, h("h2", {}, "Context for the next model call"), form, out);
}

/** One session: its details, its events following live, and its context. */
export function sessionView(root: HTMLElement, sessionId: string): Cleanup {
  const controller = new AbortController();
  const signal = controller.signal;
  const info = h("dl", { class: "session-info" });
  const live = h("span", { class: "live connecting" }, "connecting");
  const list = h("div", { class: "events" });
  const message = h("div");
  const count = h("span", { class: "muted events-count" });
  replaceChildren(
    root,
    h("p", {}, h("a", { href: "#/" }, "← Sessions")),
    h("h1", { class: "session-title" }, sessionId),
    message,
    info,
    h("div", { class: "columns" },
      h("section", { class: "panel" }, h("h2", {}, "Events ", live, " ", count), list),
      contextPanel(sessionId),
    ),
  );

  const setLive = (state: "connecting" | "live" | "reconnecting" | "ended", text: string) => {
    live.className = `live ${state}`;
    live.textContent = text;
  };

  async function loadInfo(): Promise<void> {
    try {
      const { session: s } = await memory.getSession({ sessionId }, { signal });
      if (!s) return;
      replaceChildren(
        info,
        ...[
          ["App", s.appName],
          ["User", s.userId],
          ["Created", formatTime(dateOf(s.createdAt))],
          ["Updated", formatTime(dateOf(s.updatedAt))],
          ["Retained", `${s.eventCount} events (seq ${s.firstSeq}–${s.headSeq})`],
        ].flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
        ...(Object.keys(s.metadata ?? {}).length ? [h("dt", {}, "Metadata"), h("dd", {}, jsonView(s.metadata ?? {}))] : []),
        h("dt", {}, "Memories"),
        h("dd", {}, h("a", { class: "user-memories", href: memoriesHref({ app: s.appName, user: s.userId }) }, s.userId ? `${s.userId}'s and app-wide` : "app-wide")),
      );
    } catch (err) {
      if (!signal.aborted) replaceChildren(message, errorBox(err));
    }
  }

  // The counts in the header follow the events, re-read at most twice a second.
  let infoTimer: ReturnType<typeof setTimeout> | undefined;
  const refreshInfo = () => {
    infoTimer ??= setTimeout(() => {
      infoTimer = undefined;
      if (!signal.aborted) void loadInfo();
    }, 500);
  };

  // The newest WINDOW events first (a session may retain many thousands), older ones on request.
  let shownEvents: MemoryEvent[] = [];
  let pairing = new ToolPairing();
  const earlier = h("button", { type: "button", class: "earlier", hidden: true, onclick: () => void loadEarlier() }, "Load earlier events");
  list.before(earlier);

  function renderAll(): void {
    pairing = new ToolPairing(); // pairs are found in seq order, so re-pair from the oldest shown
    list.replaceChildren(...shownEvents.map((e) => eventRow(e, pairing)));
    count.textContent = `${shownEvents.length} shown`;
  }

  function appendEvent(event: MemoryEvent): void {
    const atBottom = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 80;
    shownEvents.push(event);
    const row = eventRow(event, pairing);
    list.append(row);
    count.textContent = `${shownEvents.length} shown`;
    // Watching live: keep the newest event in view, unless the reader has scrolled up.
    if (atBottom) row.scrollIntoView({ block: "end" });
    refreshInfo();
  }

  async function loadEarlier(): Promise<void> {
    const oldest = shownEvents[0]?.seq;
    if (oldest === undefined) return;
    earlier.disabled = true;
    try {
      const { session } = await memory.getSession({ sessionId }, { signal });
      const floor = (session?.firstSeq ?? 1n) - 1n;
      const afterSeq = oldest - 1n - BigInt(WINDOW) > floor ? oldest - 1n - BigInt(WINDOW) : floor;
      const limit = Number(oldest - 1n - afterSeq);
      if (limit > 0) {
        const res = await memory.getSessionEvents({ sessionId, afterSeq, limit }, { signal });
        shownEvents = [...res.events.filter((e) => e.seq < oldest), ...shownEvents];
        renderAll();
      }
      earlier.hidden = afterSeq <= floor;
    } catch (err) {
      if (!signal.aborted) replaceChildren(message, errorBox(err));
    } finally {
      earlier.disabled = false;
    }
  }

  // Shows the newest events, then follows the session from the head seq of that same read,
  // over the one stream this browser's tabs share (live.ts); the stream resumes by itself
  // after a lost connection, after the last seq it gave this view.
  let unfollow: (() => void) | undefined;
  async function follow(): Promise<void> {
    unfollow?.();
    for (let failures = 0; !signal.aborted; ) {
      try {
        const res = await memory.getSessionEvents({ sessionId, tail: WINDOW }, { signal });
        shownEvents = [...res.events];
        renderAll();
        earlier.hidden = res.events.length < WINDOW;
        unfollow = followSession(sessionId, res.headSeq, onLive);
        return;
      } catch (err) {
        if (signal.aborted) return;
        const ce = ConnectError.from(err);
        if ([Code.NotFound, Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument].includes(ce.code)) {
          setLive("ended", "stopped");
          replaceChildren(message, errorBox(ce));
          return;
        }
      }
      failures++;
      setLive("reconnecting", "reconnecting…");
      await sleep(Math.min(5000, 200 * 2 ** Math.min(failures, 5)), signal);
    }
  }

  function onLive(live: LiveMessage): void {
    if (signal.aborted) return;
    if (live.kind === "event") {
      const last = shownEvents[shownEvents.length - 1]?.seq ?? 0n;
      if (live.event.seq > last) appendEvent(live.event);
    } else if (live.kind === "live") {
      if (!live_) refreshInfo();
      live_ = true;
      setLive("live", "live");
    } else if (live.kind === "reconnecting") {
      live_ = false;
      setLive("reconnecting", "reconnecting…");
    } else if (live.code === "OUT_OF_RANGE") {
      // The events after our cursor were evicted while we were away: show the newest again.
      replaceChildren(message, h("p", { class: "notice" }, "Events were evicted while disconnected; showing the newest again."));
      void follow();
    } else {
      setLive("ended", "stopped");
      replaceChildren(message, h("p", { class: "error", role: "alert" }, `${live.code}: ${live.message}`));
    }
  }
  let live_ = false;

  void loadInfo();
  void follow();
  return () => {
    controller.abort();
    unfollow?.();
    clearTimeout(infoTimer);
  };
}
