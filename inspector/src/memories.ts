/**
 * The memories of a user: what the agents of an app remember across sessions
 * about that user, with the app-wide memories beside them — newest first and
 * paged, or ranked by a search — followed live over WatchMemories: new
 * memories appear, superseded ones are marked (or leave, when superseded ones
 * are hidden), forgotten ones vanish.
 */
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { ScopeMatch, type Memory, type ScoredMemory, type WatchMemoriesResponse } from "@engram/gen/memories";
import { memory } from "./api";
import { formatTime, h, replaceChildren } from "./dom";
import { jsonView } from "./events";
import { memoriesHref, memoriesQueryOf, sessionHref, type MemoriesQuery } from "./hrefs";
import { errorBox, retrying, type Cleanup } from "./views";

const PAGE_SIZE = 25;
/** Results a search shows (SearchMemories allows up to 100). */
const SEARCH_TOP_K = 50;
/** A search re-runs this long after the last change it saw, not once per change of a burst. */
const RESEARCH_DELAY_MS = 300;

function dateOf(ts: Timestamp | undefined): Date | undefined {
  return ts ? timestampDate(ts) : undefined;
}

function timeEl(ts: Timestamp | undefined): HTMLElement {
  const date = dateOf(ts);
  return h("time", { datetime: date?.toISOString() ?? "" }, formatTime(date));
}

/** Where a memory stands now: "valid", or why it is not. */
type Validity = "valid" | "superseded" | "expired" | "future";

function validityOf(m: Memory, now = Date.now()): Validity {
  if (m.supersededBy !== "") return "superseded";
  const invalidAt = dateOf(m.invalidAt);
  if (invalidAt && invalidAt.getTime() <= now) return "expired";
  const validFrom = dateOf(m.validFrom);
  if (validFrom && validFrom.getTime() > now) return "future";
  return "valid";
}

const VALIDITY_LABEL: Record<Exclude<Validity, "valid">, string> = {
  superseded: "superseded",
  expired: "no longer valid",
  future: "not yet valid",
};

/** The card of one memory, with its search scores when it is a search result. */
export function memoryCard(m: Memory, scored?: ScoredMemory): HTMLElement {
  const validity = validityOf(m);
  const scope = [
    m.userId !== undefined ? h("span", { class: "chip scope", title: "user_id" }, `user ${m.userId}`) : null,
    m.agentId !== undefined ? h("span", { class: "chip scope", title: "agent_id" }, `agent ${m.agentId}`) : null,
    m.sessionId !== undefined
      ? h("span", { class: "chip scope", title: "session_id" }, `session ${m.sessionId}`)
      : null,
  ].filter((c) => c !== null);
  const source = m.source;
  const seqs =
    source && source.fromSeq > 0n
      ? ` #${source.fromSeq}${source.toSeq > source.fromSeq ? `–#${source.toSeq}` : ""}`
      : "";
  const metadata = m.metadata ?? {};
  return h(
    "article",
    {
      class: `memory validity-${validity}${m.pinned ? " pinned" : ""}`,
      "data-memory": m.memoryId,
      "data-validity": validity,
    },
    h(
      "div",
      { class: "memory-meta" },
      m.pinned ? h("span", { class: "chip chip-pinned" }, "pinned") : null,
      validity !== "valid" ? h("span", { class: `chip chip-${validity}` }, VALIDITY_LABEL[validity]) : null,
      ...(scope.length
        ? scope
        : [
            h(
              "span",
              { class: "chip scope app-wide", title: "no user, agent or session: shared by the whole app" },
              "app-wide",
            ),
          ]),
      h("span", { class: "importance", title: "importance (0–1)" }, `importance ${m.importance.toFixed(2)}`),
      scored
        ? h(
            "span",
            { class: "score", title: "fused score; lexical (BM25) and vector (cosine) parts" },
            `score ${scored.score.toFixed(4)} · lexical ${scored.lexicalScore.toFixed(2)} · vector ${scored.vectorScore.toFixed(2)}`,
          )
        : null,
      h("span", { class: "created", title: "created_at" }, timeEl(m.createdAt)),
      h("span", { class: "memory-id", title: "memory_id" }, m.memoryId),
    ),
    h("div", { class: "text memory-text" }, m.text),
    m.fact
      ? h(
          "div",
          { class: "fact", title: "fact: subject – predicate – object" },
          h("span", { class: "subject" }, m.fact.subject),
          " – ",
          h("span", { class: "predicate" }, m.fact.predicate),
          " – ",
          h("span", { class: "object" }, m.fact.object),
        )
      : null,
    m.topics.length
      ? h("div", { class: "topics" }, ...m.topics.map((t) => h("span", { class: "chip topic" }, t)))
      : null,
    h(
      "div",
      { class: "validity" },
      "valid ",
      timeEl(m.validFrom),
      " → ",
      m.invalidAt ? timeEl(m.invalidAt) : "now",
      m.supersededBy ? " · superseded by " : null,
      m.supersededBy ? h("span", { class: "superseded-by" }, m.supersededBy) : null,
    ),
    source && source.sessionId
      ? h(
          "div",
          { class: "source" },
          "from session ",
          h("a", { href: sessionHref(source.sessionId) }, source.sessionId),
          seqs,
        )
      : null,
    Object.keys(metadata).length > 0 ? jsonView(metadata, "metadata") : null,
  );
}

/** The scope part of every request this view makes. */
function scopeOf(q: MemoriesQuery) {
  return {
    appName: q.app,
    userId: q.user || undefined,
    agentId: q.agent || undefined,
    scopeMatch: q.scope === "within" ? ScopeMatch.WITHIN : ScopeMatch.VISIBLE,
  };
}

/** The memories view for the fragment's parameters. */
export function memoriesView(root: HTMLElement, params: URLSearchParams): Cleanup {
  const q = memoriesQueryOf(params);
  const controller = new AbortController();
  const signal = controller.signal;

  const appInput = h("input", {
    name: "app",
    placeholder: "app name",
    value: q.app,
    required: true,
    list: "memory-apps",
    "aria-label": "app name",
  });
  const userInput = h("input", {
    name: "user",
    placeholder: "none: app-wide only",
    value: q.user,
    list: "memory-users",
    "aria-label": "user id",
  });
  const agentInput = h("input", { name: "agent", placeholder: "none", value: q.agent, "aria-label": "agent id" });
  const scopeSelect = h(
    "select",
    { name: "scope", "aria-label": "scope", onchange: () => navigate() },
    h("option", { value: "visible" }, "the user's and app-wide"),
    h("option", { value: "within" }, "everything under the user"),
  );
  scopeSelect.value = q.scope;
  const supersededBox = h("input", {
    type: "checkbox",
    name: "superseded",
    checked: q.showSuperseded,
    onchange: () => navigate(),
  });
  const searchInput = h("input", {
    type: "search",
    name: "q",
    placeholder: "words to search for",
    value: q.search,
    "aria-label": "search memories",
  });
  const apps = h("datalist", { id: "memory-apps" });
  const users = h("datalist", { id: "memory-users" });

  // Both forms keep everything in the URL, so that a view can be linked and survives a reload.
  function navigate(): void {
    location.hash = memoriesHref({
      app: appInput.value.trim(),
      user: userInput.value.trim(),
      agent: agentInput.value.trim(),
      scope: scopeSelect.value === "within" ? "within" : "visible",
      showSuperseded: supersededBox.checked,
      search: searchInput.value.trim(),
    });
  }
  const submit = (ev: Event) => {
    ev.preventDefault();
    navigate();
  };

  const live = h("span", { class: "live connecting" }, "connecting");
  const count = h("span", { class: "muted memories-count" });
  const list = h("div", { class: "memories" });
  const message = h("div");
  const prev = h("button", { type: "button", disabled: true, onclick: () => go(page - 1) }, "← Previous");
  const next = h("button", { type: "button", disabled: true, onclick: () => go(page + 1) }, "Next →");
  const pageLabel = h("span", { class: "page" });
  replaceChildren(
    root,
    h("h1", {}, "Memories"),
    h(
      "form",
      { class: "filters memory-filters", onsubmit: submit },
      h("label", {}, "App ", appInput),
      h("label", {}, "User ", userInput),
      h("label", {}, "Agent ", agentInput),
      h("label", {}, "Show ", scopeSelect),
      h("label", { class: "check" }, supersededBox, " show superseded"),
      h("button", { type: "submit" }, "Show"),
      apps,
      users,
    ),
    h(
      "form",
      { class: "filters memory-search", role: "search", onsubmit: submit },
      searchInput,
      h("button", { type: "submit" }, "Search"),
      q.search ? h("a", { href: memoriesHref({ ...q, search: "" }), class: "clear-search" }, "clear search") : null,
    ),
    message,
    h("p", { class: "memories-status" }, live, " ", count),
    list,
    q.search ? null : h("div", { class: "pager" }, prev, pageLabel, next),
  );
  void suggest(q.app, apps, users, signal);

  if (!q.app) {
    live.hidden = true;
    replaceChildren(
      list,
      h("p", { class: "muted" }, "Enter an app name, and a user to see their memories beside the app-wide ones."),
    );
    return () => controller.abort();
  }

  const setLive = (state: "connecting" | "live" | "reconnecting" | "ended", text: string) => {
    live.className = `live ${state}`;
    live.textContent = text;
  };
  const cards = new Map<string, HTMLElement>();
  const tokens: string[] = [""]; // page tokens of the pages seen, to go back
  let page = 0;
  let generation = 0; // a newer load makes an older one's late answer moot
  // The latest load: a change waits for it, so a list read before the change cannot hide it.
  let loading: Promise<void> = Promise.resolve();
  let researchTimer: ReturnType<typeof setTimeout> | undefined;

  function show(rows: { memory: Memory; scored?: ScoredMemory }[]): void {
    cards.clear();
    for (const row of rows) cards.set(row.memory.memoryId, memoryCard(row.memory, row.scored));
    replaceChildren(list, ...cards.values());
    updateCount();
  }
  function updateCount(): void {
    list.querySelector(".empty")?.remove();
    if (cards.size === 0 && !list.firstChild)
      list.append(h("p", { class: "muted empty" }, q.search ? "Nothing matches." : "No memories."));
    count.textContent = q.search ? `${cards.size} results for “${q.search}”` : `${cards.size} shown`;
  }

  async function load(): Promise<void> {
    const mine = ++generation;
    try {
      if (q.search) {
        const res = await memory.searchMemories(
          { ...scopeOf(q), query: q.search, topK: SEARCH_TOP_K, includeInvalid: q.showSuperseded },
          { signal },
        );
        if (mine !== generation) return;
        show(res.results.flatMap((r) => (r.memory ? [{ memory: r.memory, scored: r }] : [])));
      } else {
        const res = await memory.listMemories(
          { ...scopeOf(q), includeInvalid: q.showSuperseded, pageSize: PAGE_SIZE, pageToken: tokens[page] },
          { signal },
        );
        if (mine !== generation) return;
        show(res.memories.map((m) => ({ memory: m })));
        tokens[page + 1] = res.nextPageToken;
        prev.disabled = page === 0;
        next.disabled = !res.nextPageToken;
        pageLabel.textContent = `page ${page + 1}`;
      }
      replaceChildren(message);
    } catch (err) {
      if (!signal.aborted && mine === generation) replaceChildren(message, errorBox(err));
    }
  }
  function reload(): Promise<void> {
    loading = load();
    return loading;
  }
  function go(to: number): void {
    page = Math.max(0, to);
    void reload();
  }

  /** Applies one change of the watch to what is shown. */
  function apply(frame: WatchMemoriesResponse["frame"]): void {
    if (frame.case === "deleted") {
      for (const id of frame.value.memoryIds) {
        cards.get(id)?.remove();
        cards.delete(id);
      }
      updateCount();
      return;
    }
    if (frame.case !== "written" && frame.case !== "superseded") return;
    if (q.search) {
      // A change can move any result: rank again once the burst settles.
      clearTimeout(researchTimer);
      researchTimer = setTimeout(() => void reload(), RESEARCH_DELAY_MS);
      return;
    }
    const m = frame.value;
    const shown = cards.get(m.memoryId);
    if (!q.showSuperseded && validityOf(m) !== "valid") {
      shown?.remove();
      cards.delete(m.memoryId);
    } else if (shown) {
      const card = memoryCard(m);
      shown.replaceWith(card);
      cards.set(m.memoryId, card);
    } else if (frame.case === "written" && page === 0) {
      // Newest first: a new memory goes on top of the first page (later pages keep their cursor).
      const card = memoryCard(m);
      list.prepend(card);
      cards.set(m.memoryId, card);
    }
    updateCount();
  }

  // Watches first and lists once the watch is live, so no change falls between the two.
  // The client resumes a lost connection from its cursor by itself; a watch that still
  // ends (its retries spent) is opened again and lists again.
  async function follow(): Promise<void> {
    await retrying(signal, { setLive, message }, async (connected) => {
      for await (const res of memory.watchMemories(scopeOf(q), { signal })) {
        connected();
        if (res.frame.case === "started") {
          setLive("live", "live");
          await reload();
        } else if (res.frame.case === "heartbeat") {
          setLive("live", "live");
        } else {
          await loading;
          apply(res.frame);
        }
      }
      return false; // the watch ended: watch again
    });
  }

  void follow();
  return () => {
    controller.abort();
    clearTimeout(researchTimer);
  };
}

/** Offers the apps (and that app's users) of existing sessions as suggestions; memories may name others too. */
async function suggest(
  app: string,
  apps: HTMLDataListElement,
  users: HTMLDataListElement,
  signal: AbortSignal,
): Promise<void> {
  try {
    const res = await memory.listSessions({ pageSize: 1000 }, { signal });
    const names = new Set(res.sessions.map((s) => s.appName));
    const userIds = new Set(res.sessions.filter((s) => s.appName === app && s.userId).map((s) => s.userId));
    replaceChildren(apps, ...[...names].sort().map((n) => h("option", { value: n })));
    replaceChildren(users, ...[...userIds].sort().map((u) => h("option", { value: u })));
  } catch {
    // Suggestions only: without them the fields still take any name.
  }
}
