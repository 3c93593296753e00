/**
 * The inspector as a debugger of agent runs, in a real browser (Debian's
 * chromium, headless, driven by playwright-core) against a real server on
 * 127.0.0.1: twenty session tabs stay live on one stream; sessions are found
 * by recency, prefix, event type and full-text search, with every filter in
 * the URL; a long session opens at its newest events and says how many new
 * ones arrived below; a run reads as a debugger shows it (images, stack
 * traces, milliseconds, tokens, delegations); the context panel breaks the
 * window down by section as the RPC does; and nothing overflows a 360 px
 * screen. Screenshots go to .tmp/inspector/ for a person to look at.
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MemoryClient } from "@engram-memory/client";
import { REPO_ROOT, type TestServer } from "../support/engram.js";
import { openInspector, type InspectorHarness } from "./harness.js";

const SHOTS = path.join(REPO_ROOT, ".tmp", "inspector");
/** Session tabs open at once: more than a browser's 6 HTTP/1.1 connections per host. */
const TABS = 20;

/** What the page functions below use of the browser's globals (this project's tests compile without the DOM library). */
interface BrowserGlobals {
  scrollBy(x: number, y: number): void;
  requestAnimationFrame(callback: () => void): number;
  document: { activeElement: { id: string } | null; documentElement: { scrollWidth: number } };
}

/** A 1×1 PNG. */
const PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/** The value of a gauge in the server's /metrics. */
async function gauge(baseUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const line = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
  if (!line) throw new Error(`${name} not in /metrics`);
  return Number(line[1]);
}

describe("the inspector as a debugger", () => {
  let server: TestServer;
  let browser: Browser;
  let page: Page;
  let memory: MemoryClient;
  let inspector: InspectorHarness;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    inspector = await openInspector({ pageTimeoutMs: 15_000 });
    ({ server, browser, page, memory } = inspector);
  }, 600_000);

  afterAll(() => inspector?.close());

  it(`keeps ${TABS} session tabs live, all on one stream`, async () => {
    const context = await browser.newContext({ viewport: { width: 900, height: 700 } });
    try {
      const ids = Array.from({ length: TABS }, (_, i) => `tab-${String(i).padStart(2, "0")}`);
      for (const id of ids) await memory.createSession("tabs-bot", "t", id);
      const tabs: Page[] = [];
      for (const id of ids) {
        const tab = await context.newPage();
        tab.setDefaultTimeout(20_000);
        await tab.goto(`${server.baseUrl}/#/session/${id}`);
        tabs.push(tab);
      }
      for (const tab of tabs) await tab.locator(".live.live").waitFor();
      // One stream for the whole browser, however many tabs: the streams it replaced as tabs
      // opened end once the server sees their cancel (bounded wait).
      let streams = await gauge(server.baseUrl, "engram_streams_active");
      for (let i = 0; i < 100 && streams > 1; i++) {
        await new Promise((r) => setTimeout(r, 100));
        streams = await gauge(server.baseUrl, "engram_streams_active");
      }
      expect(streams).toBe(1);
      for (const [i, id] of ids.entries()) await memory.addEvent(id, "user_message", `hello tab ${i}`);
      for (const [i, tab] of tabs.entries()) {
        await tab.locator("#ev-1").waitFor();
        expect(await tab.textContent("#ev-1 .event-content")).toContain(`hello tab ${i}`);
      }
      // Closing tabs leaves the others live.
      for (const tab of tabs.slice(0, TABS - 2)) await tab.close();
      await memory.addEvent(ids[TABS - 1]!, "agent_response", "still here");
      await tabs[TABS - 1]!.locator("#ev-2").waitFor();
    } finally {
      await context.close();
    }
  }, 300_000);

  it("finds sessions by app and user prefix, by 'only errors' and by full-text search, every filter in the URL", async () => {
    await memory.createSession("shop-eu", "anna-1", "find-a");
    await memory.addEvents("find-a", [
      { eventType: "user_message", content: "where is my order?" },
      { eventType: "error", content: { message: "order service timed out" } },
    ]);
    await memory.createSession("shop-us", "ben", "find-b");
    await memory.addEvent("find-b", "user_message", "please track the quokka parcel");
    await memory.createSession("blog", "anna-2", "find-c");
    await page.goto(`${server.baseUrl}/#/?app=shop`);
    await page.locator('tr[data-session="find-b"]').waitFor();
    await page.locator('tr[data-session="find-a"]').waitFor();
    expect(await page.locator('tr[data-session="find-c"]').count()).toBe(0);
    expect(await page.textContent('tr[data-session="find-a"] td.errors')).toBe("1");
    expect(await page.textContent('tr[data-session="find-b"] td.errors')).toBe("0");
    expect(await page.textContent('tr[data-session="find-a"] td.last-event')).toContain("error");
    expect(await page.textContent('tr[data-session="find-b"] td.last-event')).toContain("quokka");
    // The user filter is a prefix too.
    await page.fill('input[name="app"]', "");
    await page.fill('input[name="user"]', "anna");
    await page.click('.filters button[type="submit"]');
    await page.locator('tr[data-session="find-c"]').waitFor();
    await page.locator('tr[data-session="find-b"]').waitFor({ state: "detached" });
    expect(page.url()).toContain("user=anna");
    // Only sessions with errors.
    await page.selectOption('select[name="type"]', "errors");
    await page.click('.filters button[type="submit"]');
    await page.locator('tr[data-session="find-c"]').waitFor({ state: "detached" });
    // find-c is gone as soon as the filtered view starts with an empty table: wait for its rows.
    await page.locator('tr[data-session="find-a"]').waitFor();
    expect(
      await page.locator("tr[data-session]").evaluateAll((rows) => rows.map((r) => r.getAttribute("data-session"))),
    ).toEqual(["find-a"]);
    expect(page.url()).toContain("type=errors");
    // Full-text search over the events, from a URL someone shared.
    await page.goto(`${server.baseUrl}/#/?app=shop&q=quokka`);
    const hit = page.locator('.hit[data-session="find-b"]');
    await hit.waitFor();
    expect(await page.locator(".hit").count()).toBe(1);
    expect(await hit.textContent()).toContain("quokka");
    await page.screenshot({ path: path.join(SHOTS, "sessions-search.png") });
    await hit.locator("a").click();
    await page.locator("#ev-1.target").waitFor();
    expect(page.url()).toContain("#/session/find-b?seq=1");
  });

  it("opens a 10,000-event session at its newest events, pages earlier ones in on scroll, and counts new ones while scrolled up", async () => {
    await memory.createSession("long-bot", "l", "long-10k");
    for (let batch = 0; batch < 20; batch++) {
      await memory.addEvents(
        "long-10k",
        Array.from({ length: 500 }, (_, i) => ({
          eventType: i % 50 === 49 ? "tool_call" : "user_message",
          content: `message ${batch * 500 + i + 1}`,
        })),
      );
    }
    const started = Date.now();
    await page.goto(`${server.baseUrl}/#/session/long-10k`);
    await page.locator("#ev-10000").waitFor();
    const shownAfterMs = Date.now() - started;
    const paint = await page.evaluate(() => performance.getEntriesByName("first-contentful-paint")[0]?.startTime ?? -1);
    // Opened at the newest: the last event is on screen once rows laid out late (content-visibility,
    // token counts) have been put back in view by the page's resize observer.
    const newestInView = async () => {
      const box = await page.locator("#ev-10000").boundingBox();
      return box !== null && box.y >= 0 && box.y + box.height <= 900 + 1;
    };
    await expect.poll(newestInView, { timeout: 10_000 }).toBe(true);
    await page.locator(".live.live").waitFor();
    // Scroll up frame by frame, measuring the frame times, until earlier pages have come in.
    const frames = await page.evaluate(async () => {
      const browser = globalThis as unknown as BrowserGlobals;
      const gaps: number[] = [];
      let last = performance.now();
      for (let i = 0; i < 120; i++) {
        browser.scrollBy(0, -600);
        await new Promise((r) => browser.requestAnimationFrame(() => r(undefined)));
        const now = performance.now();
        gaps.push(now - last);
        last = now;
      }
      gaps.sort((a, b) => a - b);
      return {
        median: gaps[Math.floor(gaps.length / 2)]!,
        p95: gaps[Math.floor(gaps.length * 0.95)]!,
        max: gaps[gaps.length - 1]!,
      };
    });
    // Earlier pages came in while scrolling (bounded wait for the last one).
    let shownCount = 0;
    for (let i = 0; i < 100 && shownCount <= 200; i++) {
      shownCount = Number((await page.textContent(".events-count"))?.split(" ")[0]);
      if (shownCount <= 200) await page.waitForTimeout(100);
    }
    expect(shownCount).toBeGreaterThan(200);
    console.log(
      `10,000-event session: first contentful paint ${paint.toFixed(0)} ms, newest event shown ${shownAfterMs} ms after navigation; scroll frame time median ${frames.median.toFixed(1)} ms, p95 ${frames.p95.toFixed(1)} ms, max ${frames.max.toFixed(1)} ms`,
    );
    // Scrolled up: new events are counted, and the button brings the reader down to them.
    await memory.addEvents(
      "long-10k",
      [1, 2, 3].map((i) => ({ eventType: "agent_response", content: `late ${i}` })),
    );
    await page.locator(".new-events", { hasText: "3 new events ↓" }).waitFor();
    await page.screenshot({ path: path.join(SHOTS, "session-new-events.png") });
    await page.click(".new-events");
    await page.locator(".new-events").waitFor({ state: "hidden" });
    const newest = (await page.locator("#ev-10003").boundingBox())!;
    expect(newest.y + newest.height).toBeLessThanOrEqual(900 + 1);
  }, 180_000);

  it("reads an agent's run: images as images, stack traces as lines, millisecond times and gaps, delegations as a tree", async () => {
    const t0 = new Date("2026-03-04T05:06:07.000Z").getTime();
    const at = (ms: number) => new Date(t0 + ms);
    await memory.createSession("run-bot", "r", "run-1");
    await memory.addEvents("run-1", [
      {
        eventType: "user_message",
        content: [
          { type: "text", text: "What is in this picture?" },
          { type: "image_url", image_url: { url: `data:image/png;base64,${PIXEL_PNG}` } },
        ],
        timestamp: at(0),
      },
      { eventType: "delegation_request", content: { agent: "researcher", task: "look it up" }, timestamp: at(250) },
      { eventType: "delegation_request", content: { agent: "searcher", task: "search the web" }, timestamp: at(400) },
      { eventType: "delegation_response", content: { agent: "searcher", result: "3 pages" }, timestamp: at(1600) },
      {
        eventType: "error",
        content: {
          message: "vision model failed",
          stack: "Error: vision model failed\n    at describe (vision.js:12:7)\n    at run (agent.js:40:3)",
        },
        timestamp: at(1650),
      },
      { eventType: "delegation_response", content: { agent: "researcher", result: "a cat" }, timestamp: at(2250) },
      { eventType: "agent_response", content: "It is a cat.", timestamp: at(2300) },
    ]);
    await page.goto(`${server.baseUrl}/#/session/run-1`);
    await page.locator("#ev-7").waitFor();
    // The image is decoded and drawn, not shown as base64.
    const image = page.locator("#ev-1 .images img");
    await image.waitFor();
    expect(
      await image.evaluate(
        (img) =>
          (img as unknown as { complete: boolean }).complete &&
          (img as unknown as { naturalWidth: number }).naturalWidth,
      ),
    ).toBe(1);
    expect(await page.textContent("#ev-1 .event-content")).not.toContain(PIXEL_PNG);
    // The stack trace keeps its lines.
    const stack = await page
      .locator("#ev-5 pre.stack")
      .evaluate((el) => (el as unknown as { innerText: string }).innerText);
    expect(stack.split("\n")).toEqual([
      "Error: vision model failed",
      "    at describe (vision.js:12:7)",
      "    at run (agent.js:40:3)",
    ]);
    expect(await page.textContent("#ev-5 .error-message")).toBe("vision model failed");
    // Milliseconds, and the time since the previous event.
    expect(await page.textContent("#ev-2 time")).toMatch(/^\d\d:\d\d:\d\d\.250$/);
    expect(await page.textContent("#ev-2 .since")).toBe("+250 ms");
    expect(await page.textContent("#ev-4 .since")).toBe("+1.2 s");
    // Each event's tokens, as the server's tokenizer counts them for a context.
    const counts = await memory.rpc.countEventTokens({ sessionId: "run-1" });
    await page.locator("#ev-7 .tokens:not(:empty)").waitFor();
    for (const { seq, tokens } of counts.events)
      expect(await page.textContent(`#ev-${seq} .tokens`)).toBe(`${tokens} tok`);
    // Delegations: researcher, then searcher inside it, each with its duration.
    const researcher = page.locator(".delegation-tree > li.delegation");
    expect(await researcher.count()).toBe(1);
    expect(await researcher.locator("> .agent").textContent()).toBe("researcher");
    expect(await researcher.locator("> .duration").textContent()).toBe("2.0 s");
    expect(await researcher.locator("ol > li.delegation > .agent").textContent()).toBe("searcher");
    expect(await researcher.locator("ol > li.delegation > .duration").textContent()).toBe("1.2 s");
    // Keyboard: j and k move between events.
    await page.locator("body").click({ position: { x: 5, y: 5 } });
    await page.keyboard.press("j");
    expect(await page.evaluate(() => (globalThis as unknown as BrowserGlobals).document.activeElement?.id)).toBe(
      "ev-1",
    );
    await page.keyboard.press("j");
    await page.keyboard.press("j");
    await page.keyboard.press("k");
    expect(await page.evaluate(() => (globalThis as unknown as BrowserGlobals).document.activeElement?.id)).toBe(
      "ev-2",
    );
    await page.screenshot({ path: path.join(SHOTS, "session-run.png"), fullPage: true });
  });

  it("breaks the context window down by section with the token counts BuildConversationContext returns", async () => {
    await memory.createSession("ctx-bot", "c", "ctx-1");
    await memory.addEvents("ctx-1", [
      { eventType: "system", content: "You are a careful travel agent." },
      ...Array.from({ length: 12 }, (_, i) => ({
        eventType: "agent_response",
        content: `finding ${i}: trains to Lyon leave hourly from Gare de Lyon, ticket ${i}`,
        metadata: { section: "findings" },
      })),
      { eventType: "user_message", content: "Book me a train to Lyon tomorrow morning." },
      { eventType: "agent_response", content: "Looking at the morning trains now." },
    ]);
    await page.goto(`${server.baseUrl}/#/session/ctx-1`);
    await page.locator("#ev-15").waitFor();
    await page.fill('input[name="budget"]', "400");
    await page.fill('input[name="query"]', "train Lyon");
    await page.fill('input[name="section-budgets"]', "findings=120");
    await page.selectOption('select[name="tokenizer"]', "cl100k_base");
    await page.click(".context-form button");
    await page.locator("table.sections tbody tr").first().waitFor();
    const shown = await page
      .locator("table.sections tbody tr")
      .evaluateAll((rows) =>
        rows.map((r) => [r.getAttribute("data-section"), r.querySelector("td.tokens")!.textContent]),
      );
    const rpc = await memory.rpc.buildConversationContext({
      sessionId: "ctx-1",
      tokenBudget: 400,
      query: "train Lyon",
      sectionBudgets: { findings: 120 },
      tokenizer: "cl100k_base",
    });
    expect(shown).toEqual(rpc.sections.map((s) => [s.name, String(s.tokensUsed)]));
    expect(rpc.sections.find((s) => s.name === "findings")!.eventsDropped).toBeGreaterThan(0);
    expect(await page.textContent(".context-summary")).toContain(`${rpc.tokensUsed} tokens (cl100k_base) of 400`);
    expect(await page.textContent(".context-reasons")).toMatch(
      /findings: \d+ events? dropped — its budget of 120 tokens is spent/,
    );
    await page.locator(".panel.context").screenshot({ path: path.join(SHOTS, "context.png") });
  });

  it("shows the session's state by group with its version, follows new deltas live, and each event's delta on its row", async () => {
    await memory.createSession("state-bot", "stella", "state-1");
    await memory.addEvents("state-1", [
      {
        eventType: "user_message",
        content: "I live in Lyon, plan in French please.",
        stateDelta: { city: "Lyon", draft: "v1", "user:language": "fr", "app:model": "planner-2" },
      },
      {
        eventType: "tool_result",
        content: { tool: "search", result: "3 trains" },
        stateDelta: { trains: ["08:04", "09:04", "10:04"] },
      },
    ]);
    await memory.addEvent("state-1", {
      eventType: "agent_response",
      content: "Draft done.",
      stateDelta: { draft: null, "user:home_station": "Part-Dieu" },
    });
    // What the panel must show: GetSession's merged state and version.
    const before = await memory.rpc.getSession({ sessionId: "state-1" });
    await page.goto(`${server.baseUrl}/#/session/state-1`);
    await page.locator("#ev-3").waitFor();
    const panel = page.locator(".panel.state");
    await panel.locator(".state-version", { hasText: `version ${before.session!.version}` }).waitFor();
    const groupKeys = (group: string) =>
      panel.locator(`.state-${group} dt`).evaluateAll((dts) => dts.map((dt) => dt.getAttribute("data-key")));
    expect(await groupKeys("session")).toEqual(["city", "trains"]);
    expect(await groupKeys("user")).toEqual(["user:home_station", "user:language"]);
    expect(await groupKeys("app")).toEqual(["app:model"]);
    expect(await panel.locator('dd[data-key="city"]').textContent()).toBe("Lyon");
    expect(await panel.locator('dd[data-key="trains"]').textContent()).toContain('"08:04"');
    // The deleted key is gone from the state, and marked deleted on the event that deleted it.
    expect(await panel.locator('[data-key="draft"]').count()).toBe(0);
    expect(await page.textContent('#ev-3 .state-delta li.deleted[data-key="draft"]')).toContain("deleted");
    expect(await page.textContent('#ev-3 .state-delta li.set[data-key="user:home_station"]')).toBe(
      'user:home_station = "Part-Dieu"',
    );
    expect(
      await page.locator("#ev-1 .state-delta li").evaluateAll((lis) => lis.map((li) => li.getAttribute("data-key"))),
    ).toEqual(["app:model", "city", "draft", "user:language"]);
    await page.locator(".live.live").waitFor();
    // Live: a new delta changes the panel without a reload, also when the filter hides its event.
    await page.selectOption('select[name="event-type"]', "errors");
    await page.locator("#ev-1").waitFor({ state: "detached" });
    await page.locator(".live.live").waitFor();
    // The view re-reads the session once on going live (within half a second): let that pass,
    // so that only the delta can bring the change below (waiting longer never makes this fail).
    await page.waitForTimeout(1500);
    await memory.addEvent("state-1", {
      eventType: "agent_response",
      content: "Moving you to Paris.",
      stateDelta: { city: "Paris", "app:model": null, "user:language": "en" },
    });
    const after = await memory.rpc.getSession({ sessionId: "state-1" });
    await panel.locator(".state-version", { hasText: `version ${after.session!.version}` }).waitFor();
    await panel.locator('dd[data-key="city"]', { hasText: "Paris" }).waitFor();
    expect(await panel.locator('dd[data-key="user:language"]').textContent()).toBe("en");
    expect(await panel.locator(".state-app").count()).toBe(0);
    // And a delta streamed in on a shown event is on its row.
    await page.selectOption('select[name="event-type"]', "");
    await page.locator("#ev-4").waitFor();
    await page.locator(".live.live").waitFor();
    await memory.addEvent("state-1", {
      eventType: "tool_call",
      content: { tool: "book", arguments: { to: "Paris" } },
      stateDelta: { booking: { status: "pending" }, trains: null },
    });
    await page.locator('#ev-5 .state-delta li.set[data-key="booking"]').waitFor();
    expect(await page.textContent('#ev-5 .state-delta li.deleted[data-key="trains"]')).toContain("deleted");
    await panel.locator('dd[data-key="booking"]').waitFor();
    await panel.locator('[data-key="trains"]').waitFor({ state: "detached" });
    // ADK's meaning: a null kept as a value shows as set to null; a removal as deleted.
    await memory.addEvent("state-1", {
      eventType: "agent_response",
      content: "Booked.",
      stateDelta: { draft_note: null },
      stateNullsAreValues: true,
      stateRemovals: ["booking"],
    });
    await page.locator('#ev-6 .state-delta li.set[data-key="draft_note"]').waitFor();
    expect(await page.textContent('#ev-6 .state-delta li.set[data-key="draft_note"]')).toContain("null");
    expect(await page.textContent('#ev-6 .state-delta li.deleted[data-key="booking"]')).toContain("deleted");
    await page.screenshot({ path: path.join(SHOTS, "session-state.png"), fullPage: true });
  });

  it("fits a 360 px wide screen without horizontal overflow on every main view", async () => {
    const narrow = await browser.newPage({ viewport: { width: 360, height: 740 } });
    try {
      narrow.setDefaultTimeout(15_000);
      const views: Array<[string, string]> = [
        ["sessions", "#/"],
        ["search", "#/?app=shop&q=quokka"],
        ["run", "#/session/run-1"],
        ["context", "#/session/ctx-1"],
        ["state", "#/session/state-1"],
        ["stats", "#/stats"],
        ["memories", "#/memories?app=shop-eu&user=anna-1"],
      ];
      for (const [name, fragment] of views) {
        await narrow.goto(`${server.baseUrl}/${fragment}`);
        await narrow.locator("main > *").first().waitFor();
        if (name === "run") await narrow.locator("#ev-7").waitFor();
        if (name === "state") await narrow.locator('.panel.state dd[data-key="draft_note"]').waitFor();
        if (name === "search") await narrow.locator(".hit").first().waitFor();
        if (name === "sessions") await narrow.locator("tr[data-session]").first().waitFor();
        if (name === "context") {
          await narrow.locator("#ev-15").waitFor();
          await narrow.click(".context-form button");
          await narrow.locator("table.sections").waitFor();
        }
        const width = await narrow.evaluate(
          () => (globalThis as unknown as BrowserGlobals).document.documentElement.scrollWidth,
        );
        await narrow.screenshot({ path: path.join(SHOTS, `narrow-${name}.png`), fullPage: true });
        expect(width, name).toBeLessThanOrEqual(360);
      }
    } finally {
      await narrow.close();
    }
  });

  // Playwright's string predicates (waitForFunction) are evaluated with eval, which the CSP
  // forbids: wait with locators instead, so that any violation here is the page's own.
  it("ran without script errors or Content-Security-Policy violations", () => {
    expect(inspector.consoleErrors).toEqual([]);
  });
});
