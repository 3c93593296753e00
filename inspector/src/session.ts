/**
 * One session as a debugger shows it: its details; its events, opened at the
 * newest (or at the event a search hit names) and followed live through the
 * tabs' shared stream, earlier ones paging in as the reader scrolls up, with
 * "N new events ↓" while scrolled away from the newest; an event-type filter
 * ("only errors"); delegations as a tree with durations; and the context
 * panel; the session's state (state.ts), re-read whenever a live event
 * carries a state_delta, and each event's delta on its row. The URL holds the
 * filter and the event opened at.
 */
import { ConnectError, Code } from "@connectrpc/connect";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { Event as MemoryEvent } from "@engram/gen";
import { memory } from "./api";
import { contextPanel } from "./context";
import { formatTime, h, replaceChildren } from "./dom";
import { ToolPairing, agentOf, eventRow, jsonView, millisOf } from "./events";
import { ERRORS_ONLY, memoriesHref, sessionHref, sessionQueryOf } from "./hrefs";
import { followSession, type LiveMessage } from "./live";
import { renderState, statePanel } from "./state";
import { typesOf } from "./sessions";
import { errorBox, retrying, type Cleanup } from "./views";

/** Events read per page (the newest at first, then each page that scrolling up brings in). */
const WINDOW = 200;
/** Seqs a filtered page steps back at a time: a filter may match few events in a range. */
const FILTERED_STEP = 1000;
/** How far (px) the newest event may reach below the window and still count as in view: live events keep it in view. */
const NEAR_NEWEST_PX = 120;

function dateOf(ts: Timestamp | undefined): Date | undefined {
  return ts ? timestampDate(ts) : undefined;
}

/** A duration for a person: "850 ms", "2.4 s", "3 min 5 s". */
export function formatDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/** One delegation: a request, the response that closed it (if any), and what was delegated inside it. */
interface Delegation {
  agent: string;
  request: MemoryEvent;
  response: MemoryEvent | undefined;
  children: Delegation[];
}

/**
 * Delegations as a tree: a request opens one under the innermost open one;
 * a response closes the innermost open one to its agent (or the innermost
 * open one, when it names no agent).
 */
export function delegationTree(events: readonly MemoryEvent[]): Delegation[] {
  const roots: Delegation[] = [];
  const open: Delegation[] = [];
  for (const e of events) {
    if (e.eventType === "delegation_request") {
      const d: Delegation = { agent: agentOf(e) ?? "agent", request: e, response: undefined, children: [] };
      (open.at(-1)?.children ?? roots).push(d);
      open.push(d);
    } else if (e.eventType === "delegation_response") {
      const agent = agentOf(e);
      let i = open.length - 1;
      if (agent) while (i >= 0 && open[i]!.agent !== agent) i--;
      if (i < 0) i = open.length - 1;
      if (i < 0) continue;
      open[i]!.response = e;
      open.splice(i);
    }
  }
  return roots;
}

function delegationItem(d: Delegation): HTMLElement {
  const started = millisOf(d.request);
  const took = d.response ? formatDuration(millisOf(d.response) - started) : "open";
  return h(
    "li",
    { class: `delegation ${d.response ? "done" : "open"}` },
    h("span", { class: "agent" }, d.agent),
    " ",
    h("a", { href: `#ev-${d.request.seq}`, class: "seq" }, `#${d.request.seq}`),
    d.response
      ? h("span", {}, " → ", h("a", { href: `#ev-${d.response.seq}`, class: "seq" }, `#${d.response.seq}`))
      : null,
    " ",
    h("span", { class: "duration" }, took),
    d.children.length ? h("ol", {}, ...d.children.map(delegationItem)) : null,
  );
}

/** One session: its details, its events following live, its delegations and its context. */
export function sessionView(root: HTMLElement, sessionId: string, params: URLSearchParams): Cleanup {
  const query = sessionQueryOf(params);
  const types = typesOf(query.type ?? "");
  const matches = (e: MemoryEvent) => types.length === 0 || types.includes(e.eventType);
  const controller = new AbortController();
  const signal = controller.signal;
  const info = h("dl", { class: "session-info" });
  const live = h("span", { class: "live connecting" }, "connecting");
  const list = h("div", { class: "events", role: "feed", "aria-busy": "true" });
  const message = h("div");
  const count = h("span", { class: "muted events-count" });
  const typeSelect = h(
    "select",
    {
      name: "event-type",
      "aria-label": "event type",
      onchange: () => (location.hash = sessionHref(sessionId, { type: typeSelect.value })),
    },
    h("option", { value: "" }, "all events"),
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
  typeSelect.value = query.type ?? "";
  const earlierSentinel = h("div", { class: "earlier-sentinel", "aria-hidden": "true" });
  const earlier = h(
    "button",
    { type: "button", class: "earlier", hidden: true, onclick: () => void loadEarlier() },
    "Load earlier events",
  );
  const newest = h(
    "button",
    { type: "button", class: "new-events", hidden: true, onclick: () => jumpToNewest() },
    "Jump to newest",
  );
  const delegations = h("section", { class: "panel delegations", hidden: true });
  const state = statePanel();
  replaceChildren(
    root,
    h("p", {}, h("a", { href: "#/" }, "← Sessions")),
    h("h1", { class: "session-title" }, sessionId),
    message,
    info,
    h(
      "div",
      { class: "columns" },
      h(
        "section",
        { class: "panel events-panel" },
        h(
          "div",
          { class: "events-head" },
          h("h2", {}, "Events ", live, " ", count),
          h("label", {}, "Show ", typeSelect),
        ),
        earlierSentinel,
        earlier,
        list,
        newest,
      ),
      h("div", { class: "side" }, state, delegations, contextPanel(sessionId)),
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
      firstSeq = s.firstSeq;
      renderState(state, s);
      replaceChildren(
        info,
        ...[
          ["App", s.appName],
          ["User", s.userId],
          ["Created", formatTime(dateOf(s.createdAt))],
          ["Updated", formatTime(dateOf(s.updatedAt))],
          ["Retained", `${s.eventCount} events (seq ${s.firstSeq}–${s.headSeq})`],
        ].flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
        ...(Object.keys(s.metadata ?? {}).length
          ? [h("dt", {}, "Metadata"), h("dd", {}, jsonView(s.metadata ?? {}))]
          : []),
        h("dt", {}, "Memories"),
        h(
          "dd",
          {},
          h(
            "a",
            { class: "user-memories", href: memoriesHref({ app: s.appName, user: s.userId }) },
            s.userId ? `${s.userId}'s and app-wide` : "app-wide",
          ),
        ),
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

  // What is shown: a contiguous seq range [lowSeq, highSeq] of the log (filtered by type).
  let shown: MemoryEvent[] = [];
  let pairing = new ToolPairing();
  let lowSeq = 0n; // seqs below are not shown (0: from the first)
  let highSeq = 0n; // the last seq read; live events after it are appended
  let firstSeq = 1n;
  let atHead = true; // the range reaches the session's head: live events join it
  let unseen = 0; // live events that arrived while the reader was away from the newest

  // "At the newest" is about the last event, not the page's end: on a narrow screen the side panels follow the events.
  const newestBox = () => list.lastElementChild?.getBoundingClientRect();
  /** The newest event shown is in view (or nearly): a live event joins it in view. */
  const nearNewest = () => {
    const box = newestBox();
    return !box || (box.bottom >= 0 && box.bottom <= window.innerHeight + NEAR_NEWEST_PX);
  };
  // The button floats over the page's bottom edge, so it shows only while the newest event is wholly
  // below the window: it can never cover that event, and is gone whenever the newest is on screen.
  const newestBelow = () => {
    const box = newestBox();
    return box !== undefined && box.top >= window.innerHeight;
  };
  /** Set when the view was put at the newest event and the reader has not scrolled away since. */
  let pinned = false;
  const scrollToNewest = () => {
    list.lastElementChild?.scrollIntoView({ block: "end" });
    pinned = true;
  };
  const updateCount = () => (count.textContent = `${shown.length} shown`);
  const updateNewest = () => {
    const away = !atHead || newestBelow();
    newest.hidden = !away;
    newest.textContent = unseen > 0 ? `${unseen} new event${unseen === 1 ? "" : "s"} ↓` : "Jump to newest ↓";
    if (!away) unseen = 0;
  };
  const updateDelegations = () => {
    const tree = delegationTree(shown);
    delegations.hidden = tree.length === 0;
    if (tree.length)
      replaceChildren(
        delegations,
        h("h2", {}, "Delegations"),
        h("ol", { class: "delegation-tree" }, ...tree.map(delegationItem)),
      );
  };

  function rowsOf(events: readonly MemoryEvent[], previous: MemoryEvent | undefined): HTMLElement[] {
    let before = previous;
    return events.map((e) => {
      const row = eventRow(e, pairing, before);
      before = e;
      return row;
    });
  }

  // Token counts come from the server's tokenizer (CountEventTokens), for the events shown, a range at a time.
  const tokenCounts = new Map<bigint, number>();
  let countTimer: ReturnType<typeof setTimeout> | undefined;
  const countTokens = () => {
    clearTimeout(countTimer);
    countTimer = setTimeout(() => void fillTokens(), 100);
  };
  async function fillTokens(): Promise<void> {
    const missing = shown.filter((e) => !tokenCounts.has(e.seq)).map((e) => e.seq);
    // At most a few reads per round: the rest is counted when the reader scrolls there and more is shown.
    for (let round = 0; missing.length > 0 && round < 4 && !signal.aborted; round++) {
      const from = missing[0]!;
      try {
        const res = await memory.countEventTokens({ sessionId, afterSeq: from - 1n, limit: 1000 }, { signal });
        for (const t of res.events) tokenCounts.set(t.seq, t.tokens);
        const last = res.events.at(-1)?.seq ?? from;
        while (missing.length && missing[0]! <= last) missing.shift();
        if (res.events.length === 0) break;
        tokenizerName = res.tokenizer;
      } catch {
        return; // counts are a help, not the view: leave them out
      }
    }
    for (const row of list.querySelectorAll<HTMLElement>("article.event")) {
      const slot = row.querySelector(".tokens");
      const n = tokenCounts.get(BigInt(row.dataset.seq!));
      if (slot && n !== undefined && slot.textContent === "") {
        slot.textContent = `${n} tok`;
        slot.setAttribute("title", `${n} tokens in a context (${tokenizerName})`);
      }
    }
  }
  let tokenizerName = "";

  function renderAll(): void {
    pairing = new ToolPairing(); // pairs are found in seq order, so re-pair from the oldest shown
    list.replaceChildren(...rowsOf(shown, undefined));
    list.setAttribute("aria-busy", "false");
    updateCount();
    updateDelegations();
    countTokens();
  }

  function appendEvent(event: MemoryEvent): void {
    const follow = nearNewest();
    highSeq = event.seq;
    if (!matches(event)) return;
    const row = rowsOf([event], shown.at(-1))[0]!;
    shown.push(event);
    list.append(row);
    updateCount();
    countTokens();
    if (event.eventType.startsWith("delegation")) updateDelegations();
    // Watching live: keep the newest event in view, unless the reader has scrolled up.
    if (follow) scrollToNewest();
    else unseen++;
    updateNewest();
    refreshInfo();
  }

  /** The page before the oldest shown event; keeps what the reader looks at in place. */
  let loadingEarlier = false;
  async function loadEarlier(): Promise<void> {
    if (loadingEarlier || lowSeq <= firstSeq) return;
    loadingEarlier = true;
    earlier.disabled = true;
    try {
      const floor = firstSeq - 1n;
      const step = BigInt(types.length ? FILTERED_STEP : WINDOW);
      const afterSeq = lowSeq - 1n - step > floor ? lowSeq - 1n - step : floor;
      const limit = Number(lowSeq - 1n - afterSeq);
      if (limit > 0) {
        const res = await memory.getSessionEvents({ sessionId, afterSeq, limit, eventTypes: types }, { signal });
        const older = res.events.filter((e) => e.seq < lowSeq);
        const anchor = list.firstElementChild;
        const top = anchor?.getBoundingClientRect().top ?? 0;
        shown = [...older, ...shown];
        lowSeq = afterSeq + 1n;
        renderAll();
        // The rows the reader saw stay where they were on screen.
        if (anchor?.id) {
          const again = document.getElementById(anchor.id);
          if (again) window.scrollBy(0, again.getBoundingClientRect().top - top);
        }
      }
      earlier.hidden = afterSeq <= floor;
    } catch (err) {
      if (ConnectError.from(err).code === Code.OutOfRange) {
        earlier.hidden = true; // evicted meanwhile: nothing older is left
      } else if (!signal.aborted) replaceChildren(message, errorBox(err));
    } finally {
      earlier.disabled = false;
      loadingEarlier = false;
    }
  }

  // Earlier events page in as the top of the list comes into view.
  const observer = new IntersectionObserver(
    (entries) => {
      if (entries.some((e) => e.isIntersecting) && !earlier.hidden && shown.length > 0) void loadEarlier();
    },
    { rootMargin: "600px 0px 0px 0px" },
  );
  observer.observe(earlierSentinel);

  /** Reads the newest page (or the page around `at`), then follows live from the head of that read. */
  let unfollow: (() => void) | undefined;
  async function open(at: bigint | undefined): Promise<void> {
    unfollow?.();
    unfollow = undefined;
    list.setAttribute("aria-busy", "true");
    await retrying(signal, { setLive, message }, async () => {
      const { session } = await memory.getSession({ sessionId }, { signal });
      firstSeq = session?.firstSeq ?? 1n;
      if (at === undefined || (session && at > session.headSeq)) {
        const res = await memory.getSessionEvents({ sessionId, tail: WINDOW, eventTypes: types }, { signal });
        shown = [...res.events];
        lowSeq = res.events[0]?.seq ?? res.headSeq + 1n;
        highSeq = res.headSeq;
        atHead = true;
      } else {
        const from = at - BigInt(WINDOW / 2) > firstSeq ? at - BigInt(WINDOW / 2) : firstSeq;
        const res = await memory.getSessionEvents(
          { sessionId, afterSeq: from - 1n, limit: WINDOW, eventTypes: types },
          { signal },
        );
        shown = [...res.events];
        lowSeq = from;
        highSeq = res.events.at(-1)?.seq ?? res.headSeq;
        atHead = res.nextPageToken === "";
        if (atHead) highSeq = res.headSeq;
      }
      earlier.hidden = lowSeq <= firstSeq;
      renderAll();
      if (at === undefined) scrollToNewest();
      else {
        pinned = false;
        const target = document.getElementById(`ev-${at}`);
        target?.scrollIntoView({ block: "center" });
        target?.classList.add("flash", "target");
      }
      updateNewest();
      unfollow = followSession(sessionId, highSeq, onLive);
      return true;
    });
  }

  function jumpToNewest(): void {
    unseen = 0;
    if (atHead) {
      scrollToNewest();
      updateNewest();
    } else {
      // Opened at an older event: show the newest page instead (and say so in the URL).
      history.replaceState(null, "", sessionHref(sessionId, { type: query.type }));
      void open(undefined);
    }
  }

  let isLive = false;
  function onLive(msg: LiveMessage): void {
    if (signal.aborted) return;
    if (msg.kind === "event") {
      if (msg.event.seq <= highSeq) return;
      // The state panel follows every delta, also those of events the filter hides or that are not shown yet.
      if (Object.keys(msg.event.stateDelta ?? {}).length > 0) refreshInfo();
      if (atHead) appendEvent(msg.event);
      else {
        unseen++;
        updateNewest();
      }
    } else if (msg.kind === "live") {
      if (!isLive) refreshInfo();
      isLive = true;
      setLive("live", "live");
    } else if (msg.kind === "reconnecting") {
      isLive = false;
      setLive("reconnecting", "reconnecting…");
    } else if (msg.code === "OUT_OF_RANGE") {
      // The events after our cursor were evicted while we were away: show the newest again.
      replaceChildren(
        message,
        h("p", { class: "notice" }, "Events were evicted while disconnected; showing the newest again."),
      );
      void open(undefined);
    } else {
      setLive("ended", "stopped");
      replaceChildren(message, h("p", { class: "error", role: "alert" }, `${msg.code}: ${msg.message}`));
    }
  }

  // Keyboard: j / k move to the next / previous event, End jumps to the newest.
  const onKey = (ev: KeyboardEvent) => {
    if (
      ev.target instanceof HTMLInputElement ||
      ev.target instanceof HTMLSelectElement ||
      ev.target instanceof HTMLTextAreaElement
    )
      return;
    if (ev.key !== "j" && ev.key !== "k") return;
    const rows = [...list.children] as HTMLElement[];
    const current = rows.indexOf(document.activeElement as HTMLElement);
    const nextIndex = current < 0 ? (ev.key === "j" ? 0 : rows.length - 1) : current + (ev.key === "j" ? 1 : -1);
    rows[Math.max(0, Math.min(rows.length - 1, nextIndex))]?.focus();
    ev.preventDefault();
  };
  const onScroll = () => {
    pinned = pinned && nearNewest();
    updateNewest();
  };
  // Rows are laid out as they come into view (content-visibility) and grow as token counts arrive:
  // while pinned, the newest event is put back in view, so a session opens at its newest on any screen.
  const resized = new ResizeObserver(() => {
    if (pinned && atHead) scrollToNewest();
    updateNewest();
  });
  resized.observe(list);
  addEventListener("keydown", onKey);
  addEventListener("scroll", onScroll, { passive: true });

  void loadInfo();
  void open(query.seq);
  return () => {
    controller.abort();
    unfollow?.();
    observer.disconnect();
    resized.disconnect();
    removeEventListener("keydown", onKey);
    removeEventListener("scroll", onScroll);
    clearTimeout(infoTimer);
    clearTimeout(countTimer);
  };
}
