/**
 * The inspector in a real browser (Debian's chromium, headless, driven by
 * playwright-core) against a real server on 127.0.0.1: a session created by
 * an agent appears in the list, its events arrive live over Connect server
 * streaming, tool calls are paired with results, hostile content stays text,
 * the context and stats views answer, and the API key travels as a Bearer
 * token. Screenshots go to .tmp/ for a person to look at.
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { MemoryClient } from "@engram-memory/client";
import { CreateSessionRequestSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { REPO_ROOT, type TestServer } from "../support/engram.js";
import { create } from "@bufbuild/protobuf";
import { launchChromium, openInspector, startKeyedServer, type InspectorHarness, type KeyedServer } from "./harness.js";

const SHOTS = path.join(REPO_ROOT, ".tmp");

describe("memory inspector in a browser", () => {
  let server: TestServer;
  let browser: Browser;
  let page: Page;
  let memory: MemoryClient;
  let inspector: InspectorHarness;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    // A wait that never ends fails naming its selector, before the test's own timeout says only "timed out".
    inspector = await openInspector({ pageTimeoutMs: 20_000 });
    ({ server, browser, page, memory } = inspector);
  }, 600_000);

  afterAll(() => inspector?.close());

  it("lists a session as soon as an agent creates it", async () => {
    await page.goto(`${server.baseUrl}/`);
    await page.waitForSelector("table.sessions");
    await memory.createSession("weather-bot", "alice", "chat-live", { channel: "web" });
    await memory.createSession("other-bot", "bob", "chat-other");
    const row = page.locator('tr[data-session="chat-live"]');
    await row.waitFor({ timeout: 10_000 });
    expect(await row.locator("td").nth(1).textContent()).toBe("weather-bot");
    expect(await row.locator("td").nth(2).textContent()).toBe("alice");
    await page.screenshot({ path: path.join(SHOTS, "inspector-sessions.png") });
  });

  it("filters sessions by app and user", async () => {
    await page.fill('input[name="app"]', "other-bot");
    await page.click(".filters button");
    await page.locator('tr[data-session="chat-live"]').waitFor({ state: "detached" });
    await page.locator('tr[data-session="chat-other"]').waitFor();
    await page.fill('input[name="app"]', "");
    await page.fill('input[name="user"]', "alice");
    await page.click(".filters button");
    await page.locator('tr[data-session="chat-other"]').waitFor({ state: "detached" });
    await page.locator('tr[data-session="chat-live"]').waitFor();
    expect(page.url()).toContain("user=alice");
  });

  it("shows a session's events and new ones as they are appended, tool calls paired with results", async () => {
    await memory.addEvent("chat-live", "user_message", "What is the weather in Paris?");
    await page.click('tr[data-session="chat-live"] a');
    await page.waitForSelector("#ev-1");
    await page.waitForSelector(".live.live");
    // Appended after the page caught up: must arrive over the live stream.
    await memory.addEvent(
      "chat-live",
      "tool_call",
      { tool: "weather", arguments: { city: "Paris" }, tool_call_id: "call-1" },
      undefined,
      { eventId: "call-1" },
    );
    await page.waitForSelector("#ev-2");
    expect(await page.textContent("#ev-2 .pair")).toBe("awaiting result");
    await memory.addEvent("chat-live", "tool_result", {
      tool: "weather",
      result: "18°C, sunny",
      tool_call_id: "call-1",
    });
    await memory.addEvent(
      "chat-live",
      "agent_response",
      'It is 18°C <img src=x onerror="window.__pwned=1"> <script>window.__pwned=2</script>',
    );
    await page.waitForSelector("#ev-4");
    expect(await page.textContent("#ev-2 .pair")).toBe("result #3");
    expect(await page.textContent("#ev-3 .pair")).toBe("answers #2");
    expect(await page.getAttribute("#ev-2", "data-type")).toBe("tool_call");
    expect(await page.textContent("#ev-2 .badge")).toBe("tool_call");
    // Event content is text, never markup.
    expect(await page.textContent("#ev-4 .event-content")).toContain('<img src=x onerror="window.__pwned=1">');
    expect(await page.locator(".events img, .events script").count()).toBe(0);
    expect(await page.evaluate("window.__pwned")).toBeUndefined();
    // JSON content is collapsed to a summary and expands on click.
    const details = page.locator("#ev-2 details.json");
    expect(await details.getAttribute("open")).toBeNull();
    await details.locator("summary").click();
    expect(await details.getAttribute("open")).not.toBeNull();
    expect(await details.locator("pre").textContent()).toContain('"city": "Paris"');
    // The header's counts follow the live events.
    await page.locator("dl.session-info", { hasText: "4 events (seq 1–4)" }).waitFor();
    await page.screenshot({ path: path.join(SHOTS, "inspector-session.png"), fullPage: true });
  });

  it("shows the context a BuildConversationContext call produces for a budget", async () => {
    await page.fill('input[name="budget"]', "1000");
    await page.click(".context-form button");
    await page.waitForSelector(".context-text");
    const text = await page.textContent(".context-text");
    expect(text).toContain("User: What is the weather in Paris?");
    expect(await page.textContent(".context-summary")).toMatch(/^\d+ events included, \d+ dropped/);
    expect(await page.locator("ol.messages li").count()).toBeGreaterThanOrEqual(2);
    await page.screenshot({ path: path.join(SHOTS, "inspector-context.png"), fullPage: true });
  });

  it("shows the store's stats", async () => {
    await page.click('a[data-nav="stats"]');
    await page.waitForSelector('dd[data-stat="Sessions"]');
    expect(await page.textContent('dd[data-stat="Sessions"]')).toBe("2");
    expect(await page.textContent('dd[data-stat="Events"]')).toBe("4");
    expect(await page.textContent('dd[data-stat="Backend"]')).toBe("local");
  });

  it("pages through sessions, most recently active first", async () => {
    for (let i = 0; i < 27; i++) await memory.createSession("pager", "p", `page-${String(i).padStart(2, "0")}`);
    await memory.addEvent("page-00", "user_message", "the oldest session is the most recently active now");
    await page.goto(`${server.baseUrl}/#/?app=pager`);
    await page.waitForSelector('tr[data-session="page-00"]');
    expect(await page.textContent("tr[data-session]:first-child td:first-child")).toBe("page-00");
    expect(await page.locator("tr[data-session]").count()).toBe(25);
    expect(await page.isDisabled(".pager button:first-child")).toBe(true);
    const firstPage = await page
      .locator("tr[data-session]")
      .evaluateAll((rows) => rows.map((r) => r.getAttribute("data-session")));
    await page.click("text=Next →");
    await page.locator(".pager .page", { hasText: "page 2 of 2" }).waitFor();
    await page.locator("tr[data-session]").nth(1).waitFor();
    expect(await page.locator("tr[data-session]").count()).toBe(2);
    expect(page.url()).toContain("page=2");
    const secondPage = await page
      .locator("tr[data-session]")
      .evaluateAll((rows) => rows.map((r) => r.getAttribute("data-session")));
    expect(new Set([...firstPage, ...secondPage]).size).toBe(27);
    expect(await page.isDisabled("text=Next →")).toBe(true);
    await page.click("text=← Previous");
    await page.waitForSelector('tr[data-session="page-00"]');
  });

  it("shows a long session's newest 200 events first and loads earlier ones on request", async () => {
    await memory.createSession("long-bot", "l", "long-session");
    await memory.addEvents(
      "long-session",
      Array.from({ length: 230 }, (_, i) => ({ eventType: "user_message", content: `message ${i + 1}` })),
    );
    await page.goto(`${server.baseUrl}/#/session/long-session`);
    await page.locator(".events-count", { hasText: "200 shown" }).waitFor();
    expect(await page.locator("#ev-30").count()).toBe(0);
    expect(await page.textContent(".events article:first-child .seq")).toBe("#31");
    await page.click("text=Load earlier events");
    await page.locator(".events-count", { hasText: "230 shown" }).waitFor();
    expect(await page.textContent(".events article:first-child .seq")).toBe("#1");
    expect(await page.isHidden("text=Load earlier events")).toBe(true);
    await memory.addEvent("long-session", "agent_response", "still live");
    await page.locator("#ev-231").waitFor();
  });

  it("stops on a session that does not exist, saying NOT_FOUND, instead of retrying", async () => {
    // A page of its own: the browser logs the 404 answer as a console error, which this suite's page must not have.
    const own = await browser.newPage();
    try {
      await own.goto(`${server.baseUrl}/#/session/no-such-session`);
      await own.locator(".error", { hasText: "NotFound" }).waitFor();
      await own.locator(".live.ended", { hasText: "stopped" }).waitFor();
    } finally {
      await own.close();
    }
  });

  it("sends the API key of this tab as a Bearer token and keeps it in sessionStorage", async () => {
    await page.fill("#api-key", "ek_test_secret");
    const request = page.waitForRequest(
      (r) => r.url().includes("/engram.v1.MemoryService/") && r.headers()["authorization"] !== undefined,
    );
    await page.click("#api-key-form button");
    expect((await request).headers()["authorization"]).toBe("Bearer ek_test_secret");
    expect(await page.evaluate('sessionStorage.getItem("engram.apiKey")')).toBe("ek_test_secret");
  });

  // Playwright's string predicates (waitForFunction) are evaluated with eval, which this CSP
  // forbids: wait with locators instead, so that any violation here is the page's own.
  it("ran without script errors or Content-Security-Policy violations", () => {
    expect(inspector.consoleErrors).toEqual([]);
  });
});

describe("memory inspector against a server that requires API keys", () => {
  let keyed: KeyedServer;
  let secured: TestServer;
  let browser: Browser;
  let key: string;

  beforeAll(async () => {
    keyed = await startKeyedServer([{ role: "read", apps: ["*"] }]);
    ({
      server: secured,
      keys: [key],
    } = keyed);
    browser = await launchChromium();
  }, 600_000);

  afterAll(async () => {
    await browser?.close();
    await keyed?.close();
  });

  it("asks for a key, then shows the sessions once one is entered", async () => {
    // Seeded through the service itself: the page's key may only read.
    await secured.service.createSession(
      create(CreateSessionRequestSchema, { appName: "secure-app", userId: "u", sessionId: "secret-session" }),
    );
    const page = await browser.newPage();
    await page.goto(`${secured.baseUrl}/`);
    const alert = await page.waitForSelector(".error");
    expect(await alert.textContent()).toContain("enter an API key above");
    await page.fill("#api-key", key);
    await page.click("#api-key-form button");
    await page.waitForSelector('tr[data-session="secret-session"]');
    // The page's own code keeps the key for this tab only.
    expect(await page.evaluate('sessionStorage.getItem("engram.apiKey")')).toBe(key);
    expect(await page.evaluate("localStorage.length")).toBe(0);
  });
});
