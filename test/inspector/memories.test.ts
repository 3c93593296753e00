/**
 * The inspector's memories view in a real browser (Debian's chromium,
 * headless, driven by playwright-core) against a real server on 127.0.0.1:
 * memories written through the API show up per user beside the app-wide ones,
 * newest first and paged; new memories arrive, superseded ones are marked
 * (or leave while superseded ones are hidden) and forgotten ones vanish live
 * over WatchMemories; a search finds a memory by a word, with its scores; the
 * view fits a phone-wide screen; a key bound to one user sees theirs and the
 * shared ones, and another user's scope is refused with the server's reason.
 * Screenshots go to .tmp/ for a person to look at.
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMemoryClient, type MemoryClient } from "@engram-memory/client";
import type { MemorySchema } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { REPO_ROOT, type TestServer } from "../support/engram.js";
import { launchChromium, openInspector, startKeyedServer, type InspectorHarness, type KeyedServer } from "./harness.js";

const SHOTS = path.join(REPO_ROOT, ".tmp");
const APP = "notes-bot";
/** Alice's memories beside the app-wide ones. */
const ALICE = `#/memories?app=${APP}&user=alice`;

describe("memories view of the inspector in a browser", () => {
  let server: TestServer;
  let browser: Browser;
  let page: Page;
  let client: MemoryClient;
  let inspector: InspectorHarness;

  /** Writes memories of APP (one call, so one batch) through the API, as an agent would. */
  const write = (...memories: MessageInitShape<typeof MemorySchema>[]) =>
    client.rpc.writeMemories({ memories: memories.map((m) => ({ appName: APP, ...m })) });
  const card = (memoryId: string) => page.locator(`article.memory[data-memory="${memoryId}"]`);
  const shownIds = () =>
    page.locator("article.memory").evaluateAll((els) => els.map((e) => e.getAttribute("data-memory")));
  const openMemories = async (fragment: string) => {
    await page.goto(`${server.baseUrl}/${fragment}`);
    await page.locator(".live.live").waitFor();
  };

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    // A missing element fails its test, well before the test timeout.
    inspector = await openInspector({ pageTimeoutMs: 10_000 });
    ({ server, browser, page, memory: client } = inspector);
    await client.createSession(APP, "alice", "alice-chat");
    await client.addEvents("alice-chat", [
      { eventType: "user_message", content: "I like green tea in the afternoon" },
      { eventType: "agent_response", content: "Noted." },
    ]);
    // One call each, so that created_at orders them as written.
    await write({
      memoryId: "alice-tea",
      userId: "alice",
      text: "Alice prefers green tea in the afternoon",
      fact: { subject: "alice", predicate: "prefers", object: "green tea" },
      topics: ["drinks", "preferences"],
      importance: 0.8,
      pinned: true,
      metadata: { origin: "chat" },
      source: { sessionId: "alice-chat", fromSeq: 1n, toSeq: 2n },
    });
    await write({
      memoryId: "alice-agenda",
      userId: "alice",
      agentId: "planner",
      text: "Alice plans her week on Mondays",
    });
    await write({ memoryId: "bob-coffee", userId: "bob", text: "Bob drinks black coffee" });
    await write({ memoryId: "office-hours", text: "The office closes at six" });
  }, 600_000);

  afterAll(() => inspector?.close());

  it("lists a user's memories and the app-wide ones, newest first, with every field shown", async () => {
    await page.goto(`${server.baseUrl}/`);
    await page.click('a[data-nav="memories"]');
    await page.fill('input[name="app"]', APP);
    await page.fill('input[name="user"]', "alice");
    await page.click(".memory-filters button[type=submit]");
    await card("alice-tea").waitFor();
    expect(page.url()).toContain(`#/memories?app=${APP}&user=alice`);
    // Bob's are never shown for Alice, nor (with the user's scope "visible") those of one agent of hers.
    expect(await shownIds()).toEqual(["office-hours", "alice-tea"]);
    const tea = card("alice-tea");
    expect(await tea.locator(".memory-text").textContent()).toBe("Alice prefers green tea in the afternoon");
    expect(await tea.locator(".fact").textContent()).toBe("alice – prefers – green tea");
    expect(await tea.locator(".topic").allTextContents()).toEqual(["drinks", "preferences"]);
    expect(await tea.locator(".chip-pinned").textContent()).toBe("pinned");
    expect(await tea.locator(".importance").textContent()).toBe("importance 0.80");
    expect(await tea.locator(".scope").allTextContents()).toEqual(["user alice"]);
    expect(await tea.locator(".validity").textContent()).toMatch(/^valid \d{4}-\d\d-\d\d \d\d:\d\d:\d\d → now$/);
    expect(await tea.locator(".source").textContent()).toBe("from session alice-chat #1–#2");
    expect(await tea.locator("details.json summary").textContent()).toContain('origin: "chat"');
    expect(await card("office-hours").locator(".scope").textContent()).toBe("app-wide");
    expect(await page.textContent(".memories-count")).toBe("2 shown");
    await page.screenshot({ path: path.join(SHOTS, "inspector-memories.png"), fullPage: true });
  });

  it("shows everything filed under the user, whatever the agent, with the scope 'everything under the user'", async () => {
    await page.selectOption('select[name="scope"]', "within");
    await card("alice-agenda").waitFor();
    expect(page.url()).toContain("scope=within");
    expect(await shownIds()).toEqual(["alice-agenda", "alice-tea"]);
    expect(await card("alice-agenda").locator(".scope").allTextContents()).toEqual(["user alice", "agent planner"]);
  });

  it("links a memory to the session it was drawn from, and the session to its user's memories", async () => {
    await card("alice-tea").locator(".source a").click();
    await page.locator("h1.session-title", { hasText: "alice-chat" }).waitFor();
    await page.waitForSelector("#ev-2");
    // And back: a session links to its user's memories.
    await page.click("a.user-memories");
    await card("alice-tea").waitFor();
    expect(page.url()).toContain(`#/memories?app=${APP}&user=alice`);
  });

  it("shows a memory written while the page is open at the top, live", async () => {
    await openMemories(ALICE);
    await card("office-hours").waitFor();
    await write({ memoryId: "alice-walks", userId: "alice", text: "Alice walks to work" });
    await card("alice-walks").waitFor();
    expect((await shownIds())[0]).toBe("alice-walks");
    expect(await page.textContent(".memories-count")).toBe("3 shown");
  });

  it("takes a superseded memory away live while superseded ones are hidden, and marks it when they are shown", async () => {
    await openMemories(ALICE);
    await card("alice-tea").waitFor();
    await write({
      memoryId: "alice-oolong",
      userId: "alice",
      text: "Alice now prefers oolong tea",
      fact: { subject: "alice", predicate: "prefers", object: "oolong tea" },
    });
    await card("alice-oolong").waitFor();
    await card("alice-tea").waitFor({ state: "detached" });
    await page.check('input[name="superseded"]');
    await card("alice-tea").waitFor();
    expect(page.url()).toContain("superseded=1");
    const old = card("alice-tea");
    expect(await old.getAttribute("data-validity")).toBe("superseded");
    expect(await old.locator(".chip-superseded").textContent()).toBe("superseded");
    expect(await old.locator(".validity").textContent()).toMatch(
      /→ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d · superseded by alice-oolong$/,
    );
    expect(await card("alice-oolong").getAttribute("data-validity")).toBe("valid");
  });

  it("marks a memory superseded live while superseded ones are shown", async () => {
    await openMemories(`${ALICE}&superseded=1`);
    await card("alice-oolong").waitFor();
    await write({
      memoryId: "alice-jasmine",
      userId: "alice",
      text: "Alice now prefers jasmine tea",
      fact: { subject: "alice", predicate: "prefers", object: "jasmine tea" },
    });
    await card("alice-jasmine").waitFor();
    await page.locator('article.memory[data-memory="alice-oolong"][data-validity="superseded"]').waitFor();
    expect(await card("alice-oolong").locator(".superseded-by").textContent()).toBe("alice-jasmine");
    expect((await shownIds()).slice(0, 3)).toEqual(["alice-jasmine", "alice-oolong", "alice-walks"]);
    await page.screenshot({ path: path.join(SHOTS, "inspector-memories-superseded.png"), fullPage: true });
  });

  it("finds a memory by a word with its scores, and ranks again when a matching one is written", async () => {
    await openMemories(`${ALICE}&superseded=1`);
    await page.fill('input[name="q"]', "oolong");
    await page.click(".memory-search button[type=submit]");
    await page.locator(".memories-count", { hasText: "1 results for “oolong”" }).waitFor();
    expect(page.url()).toContain("q=oolong");
    expect(await shownIds()).toEqual(["alice-oolong"]);
    const score = await card("alice-oolong").locator(".score").textContent();
    expect(score).toMatch(/^score \d+\.\d{4} · lexical \d+\.\d\d · vector 0\.00$/);
    expect(Number(/lexical (\S+)/.exec(score!)![1])).toBeGreaterThan(0);
    await write({ memoryId: "office-oolong", text: "The office kitchen stocks oolong" });
    await card("office-oolong").waitFor();
    expect(await page.locator("article.memory").count()).toBe(2);
    await page.click("a.clear-search");
    await card("alice-walks").waitFor();
  });

  it("removes a forgotten memory live", async () => {
    await openMemories(ALICE);
    await card("office-hours").waitFor();
    const { deletedCount } = await client.rpc.deleteMemories({ appName: APP, memoryIds: ["office-hours"] });
    expect(deletedCount).toBe(1n);
    await card("office-hours").waitFor({ state: "detached" });
    await card("alice-walks").waitFor(); // the others stay
  });

  it("pages through many memories, newest first, without repeating one", async () => {
    for (let i = 0; i < 30; i++)
      await client.rpc.writeMemories({
        memories: [{ appName: "pager-bot", memoryId: `note-${String(i).padStart(2, "0")}`, text: `note ${i}` }],
      });
    await openMemories("#/memories?app=pager-bot");
    await card("note-29").waitFor();
    const first = await shownIds();
    expect(first).toHaveLength(25);
    expect(first[0]).toBe("note-29");
    expect(await page.isDisabled("text=← Previous")).toBe(true);
    await page.click("text=Next →");
    await card("note-00").waitFor();
    const second = await shownIds();
    expect(second).toEqual(["note-04", "note-03", "note-02", "note-01", "note-00"]);
    expect(await page.textContent(".pager .page")).toBe("page 2");
    expect(await page.isDisabled("text=Next →")).toBe(true);
  });

  it("fits a 390 px wide screen without scrolling sideways", async () => {
    const phone = await browser.newPage({ viewport: { width: 390, height: 844 } });
    try {
      await phone.goto(`${server.baseUrl}/#/memories?app=${APP}&user=alice&superseded=1`);
      await phone.locator('article.memory[data-memory="alice-tea"]').waitFor();
      expect(await phone.evaluate("document.documentElement.scrollWidth")).toBeLessThanOrEqual(390);
      await phone.screenshot({ path: path.join(SHOTS, "inspector-memories-390.png"), fullPage: true });
    } finally {
      await phone.close();
    }
  });

  it("asks for an app before listing anything", async () => {
    await page.goto(`${server.baseUrl}/#/memories`);
    await page.locator("text=Enter an app name").waitFor();
    expect(await page.locator("article.memory").count()).toBe(0);
  });

  // Playwright's string predicates (waitForFunction) are evaluated with eval, which the CSP forbids: locators only.
  it("ran without script errors or Content-Security-Policy violations", () => {
    expect(inspector.consoleErrors).toEqual([]);
  });
});

describe("memories view with an API key bound to one user", () => {
  let keyed: KeyedServer;
  let secured: TestServer;
  let browser: Browser;
  let aliceKey: string;

  beforeAll(async () => {
    keyed = await startKeyedServer([
      { role: "read", apps: [APP], userId: "alice" },
      { role: "write", apps: ["*"] },
    ]);
    const [alice, writerKey] = keyed.keys;
    secured = keyed.server;
    aliceKey = alice;
    const client = createMemoryClient({ baseUrl: secured.baseUrl, protocol: "connect", apiKey: writerKey });
    try {
      await client.rpc.writeMemories({
        memories: [
          { appName: APP, memoryId: "alice-own", userId: "alice", text: "Alice keeps a diary" },
          { appName: APP, memoryId: "bob-secret", userId: "bob", text: "Bob hides a secret" },
          { appName: APP, memoryId: "shared", text: "Everyone may read this" },
        ],
      });
    } finally {
      client.close();
    }
    browser = await launchChromium();
  }, 600_000);

  afterAll(async () => {
    await browser?.close();
    await keyed?.close();
  });

  it("shows the key's user their own and the shared memories, and refuses another user's with the server's reason", async () => {
    const page = await browser.newPage();
    page.setDefaultTimeout(10_000);
    try {
      await page.goto(`${secured.baseUrl}/#/memories?app=${APP}&user=alice`);
      expect(await page.locator(".error").textContent()).toContain("enter an API key above");
      await page.fill("#api-key", aliceKey);
      await page.click("#api-key-form button");
      await page.locator('article.memory[data-memory="alice-own"]').waitFor();
      expect(
        await page.locator("article.memory").evaluateAll((els) => els.map((e) => e.getAttribute("data-memory")).sort()),
      ).toEqual(["alice-own", "shared"]);
      await page.goto(`${secured.baseUrl}/#/memories?app=${APP}&user=bob`);
      await page.locator(".live.ended").waitFor();
      expect(await page.locator(".error").textContent()).toBe(
        "user_id: this API key is bound to another user — this API key may not do that.",
      );
      expect(await page.locator("article.memory").count()).toBe(0);
    } finally {
      await page.close();
    }
  });
});
