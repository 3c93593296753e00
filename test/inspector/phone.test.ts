/**
 * The inspector on a phone (390×844, in Debian's chromium against a real
 * server on 127.0.0.1) and with the events the Python client's ADK adapter
 * writes: the sessions list reads as cards without scrolling sideways, ids
 * on one line; a session opens at its newest event and "Jump to newest"
 * never covers it; ADK events read as their author and text, a function
 * call as name(args) and its response as name → result, not as JSON.
 * Screenshots go to .tmp/inspector/ for a person to look at.
 */
import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import path from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JsonObject } from "@engram-memory/client";
import { REPO_ROOT } from "../support/engram.js";
import { openInspector, type InspectorHarness } from "./harness.js";

const SHOTS = path.join(REPO_ROOT, ".tmp", "inspector");
const PHONE = { width: 390, height: 844 };

/** What the page functions below use of the browser (this project's tests compile without the DOM library). */
interface BrowserGlobals {
  innerHeight: number;
  scrollTo(x: number, y: number): void;
  requestAnimationFrame(callback: () => void): number;
  getComputedStyle(el: unknown): { lineHeight: string; paddingTop: string; paddingBottom: string };
  document: {
    scrollingElement: { scrollWidth: number; clientWidth: number; scrollHeight: number };
    querySelector(selector: string): {
      scrollWidth: number;
      clientWidth: number;
      clientHeight: number;
      scrollIntoView(opts: { block: string }): void;
    } | null;
  };
}

interface Box {
  x: number;
  y: number;
  width: number;
  height: number;
}

function overlaps(a: Box, b: Box): boolean {
  return a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;
}

/** Waits two frames: scroll events and the layout they cause have run. */
async function settle(page: Page): Promise<void> {
  await page.evaluate(async () => {
    const g = globalThis as unknown as BrowserGlobals;
    for (let i = 0; i < 2; i++) await new Promise((r) => g.requestAnimationFrame(() => r(undefined)));
  });
}

/** An ADK event as engram_memory/adk.py stores it: Event.model_dump(mode="json", exclude_none=True), snake_case. */
function adkEvent(
  author: string,
  role: "user" | "model",
  parts: JsonObject[],
  invocationId: string,
): { eventType: string; content: JsonObject; metadata: JsonObject; eventId: string; timestamp: Date } {
  const id = randomUUID();
  const timestamp = Date.now() / 1000;
  return {
    // adk.py: "user_message" if event.author == "user" else "agent_response".
    eventType: author === "user" ? "user_message" : "agent_response",
    content: {
      content: { parts, role },
      invocation_id: invocationId,
      author,
      actions: { state_delta: {}, artifact_delta: {}, requested_auth_configs: {}, requested_tool_confirmations: {} },
      id,
      timestamp,
    },
    metadata: { source: "adk", author, invocation_id: invocationId },
    eventId: id,
    timestamp: new Date(timestamp * 1000),
  };
}

describe("the inspector on a phone and with ADK events", () => {
  let inspector: InspectorHarness;
  let phone: Page;

  beforeAll(async () => {
    mkdirSync(SHOTS, { recursive: true });
    inspector = await openInspector({ pageTimeoutMs: 15_000 });
    phone = await inspector.browser.newPage({ viewport: PHONE });
    phone.setDefaultTimeout(15_000);
    phone.on("console", (msg) => {
      if (msg.type() === "error") inspector.consoleErrors.push(msg.text());
    });
    phone.on("pageerror", (err) => inspector.consoleErrors.push(String(err)));
  }, 600_000);

  afterAll(() => inspector?.close());

  it("lists sessions as cards at 390 px: the page does not scroll sideways and a UUID takes at most two lines", async () => {
    const { memory, server } = inspector;
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    for (const id of ids) await memory.createSession("weather-agent", `user-${randomUUID()}`, id);
    await memory.addEvent(
      ids[0]!,
      "user_message",
      "What is the weather in Paris this weekend, and should I take an umbrella?",
    );
    await phone.goto(`${server.baseUrl}/`);
    for (const id of ids) await phone.locator(`tr[data-session="${id}"]`).waitFor();
    await phone.locator(`tr[data-session="${ids[0]}"] td.last-event .badge`).waitFor();
    await phone.screenshot({ path: path.join(SHOTS, "phone-sessions.png"), fullPage: true });
    const measured = await phone.evaluate((id) => {
      const g = globalThis as unknown as BrowserGlobals;
      const cell = g.document.querySelector(`tr[data-session="${id}"] td.session-id`)!;
      const style = g.getComputedStyle(cell);
      const table = g.document.querySelector(".table-scroll")!;
      return {
        page: {
          scrollWidth: g.document.scrollingElement.scrollWidth,
          clientWidth: g.document.scrollingElement.clientWidth,
        },
        table: { scrollWidth: table.scrollWidth, clientWidth: table.clientWidth },
        idHeight: cell.clientHeight - parseFloat(style.paddingTop) - parseFloat(style.paddingBottom),
        lineHeight: parseFloat(style.lineHeight),
      };
    }, ids[0]!);
    expect(measured.lineHeight).toBeGreaterThan(0);
    expect(measured.idHeight, "the session id's height").toBeLessThanOrEqual(2 * measured.lineHeight + 1);
    expect(measured.page.scrollWidth, "the page's width").toBeLessThanOrEqual(measured.page.clientWidth);
    expect(measured.table.scrollWidth, "the list's width").toBeLessThanOrEqual(measured.table.clientWidth);
    // The whole id is one hover (or long press) away, and the link still opens the session.
    const link = phone.locator(`tr[data-session="${ids[0]}"] td.session-id a`);
    expect(await link.getAttribute("title")).toBe(ids[0]);
    expect(await link.textContent()).toBe(ids[0]);
    expect(await phone.locator(`tr[data-session="${ids[0]}"] td.app`).textContent()).toBe("weather-agent");
  });

  it("opens a session at its newest event on a phone, and Jump to newest never covers that event", async () => {
    const { memory, server } = inspector;
    const id = randomUUID();
    const count = 30;
    await memory.createSession("weather-agent", "alice", id);
    await memory.addEvents(
      id,
      Array.from({ length: count }, (_, i) => ({
        eventType: i % 2 ? "agent_response" : "user_message",
        content: `message ${i + 1}: ${"a few words that wrap on a phone screen ".repeat(1 + (i % 4))}`,
      })),
    );
    const newestRow = phone.locator(`#ev-${count}`);
    const button = phone.locator(".new-events");
    const assertNothingCovered = async (when: string) => {
      await settle(phone);
      const newest = (await newestRow.boundingBox())!;
      const floating = await button.boundingBox(); // null while hidden
      if (floating) expect(overlaps(floating, newest), `${when}: the button covers the newest event`).toBe(false);
      return newest;
    };

    await phone.goto(`${server.baseUrl}/#/session/${id}`);
    await newestRow.waitFor();
    await phone.locator(".live.live").waitFor();
    // Token counts are the last thing to change the rows' heights.
    await phone.locator(`#ev-${count} .tokens:not(:empty)`).waitFor();
    const opened = await assertNothingCovered("opened");
    await phone.screenshot({ path: path.join(SHOTS, "phone-session-opened.png") });
    // Opened at the newest: the last event is on screen, whole.
    expect(opened.y).toBeGreaterThanOrEqual(0);
    expect(opened.y + opened.height).toBeLessThanOrEqual(PHONE.height + 1);

    // Scrolled so that the newest event is at the bottom of the window.
    await phone.evaluate(
      (seq) =>
        (globalThis as unknown as BrowserGlobals).document
          .querySelector(`#ev-${seq}`)!
          .scrollIntoView({ block: "end" }),
      count,
    );
    const atBottom = await assertNothingCovered("newest event at the bottom");
    expect(atBottom.y + atBottom.height).toBeLessThanOrEqual(PHONE.height + 1);
    await phone.screenshot({ path: path.join(SHOTS, "phone-session-newest.png") });

    // Scrolled to the page's end (on a phone, the side panels follow the events).
    await phone.evaluate(() => {
      const g = globalThis as unknown as BrowserGlobals;
      g.scrollTo(0, g.document.scrollingElement.scrollHeight);
    });
    await assertNothingCovered("page end");

    // Scrolled to the top, the button offers the newest, and brings it into view.
    await phone.evaluate(() => (globalThis as unknown as BrowserGlobals).scrollTo(0, 0));
    await button.waitFor();
    await phone.screenshot({ path: path.join(SHOTS, "phone-session-scrolled-up.png") });
    await button.click();
    await button.waitFor({ state: "hidden" });
    const jumped = await assertNothingCovered("after the jump");
    expect(jumped.y + jumped.height).toBeLessThanOrEqual(PHONE.height + 1);
  });

  it("shows events the ADK adapter wrote as author and text, a call as name(args), a response as name → result", async () => {
    const { memory, server, page } = inspector;
    const id = `adk-${randomUUID()}`;
    await memory.createSession("weather_app", "alice", id);
    const turn = `e-${randomUUID()}`;
    await memory.addEvents(id, [
      adkEvent("user", "user", [{ text: "What's the weather in Paris?" }], turn),
      adkEvent(
        "weather_agent",
        "model",
        [
          { text: "Let me check." },
          { function_call: { id: "adk-call-1", args: { city: "Paris", days: 2 }, name: "get_weather" } },
        ],
        turn,
      ),
      adkEvent(
        "weather_agent",
        "user",
        [{ function_response: { id: "adk-call-1", name: "get_weather", response: { result: "18°C and sunny" } } }],
        turn,
      ),
      adkEvent("weather_agent", "model", [{ text: "It is 18°C and sunny in Paris." }], turn),
    ]);
    await page.goto(`${server.baseUrl}/#/session/${id}`);
    await page.locator("#ev-4").waitFor();
    const said = (seq: number, part: string) =>
      page.locator(`#ev-${seq} .event-content .adk ${part}`).allTextContents();
    expect(await said(1, ".adk-author")).toEqual(["user"]);
    expect(await said(1, ".text")).toEqual(["What's the weather in Paris?"]);
    expect(await said(2, ".adk-author")).toEqual(["weather_agent"]);
    expect(await said(2, ".text")).toEqual(["Let me check."]);
    expect(await said(2, ".adk-call code")).toEqual(['get_weather(city: "Paris", days: 2)']);
    expect(await said(3, ".adk-response code")).toEqual(["get_weather → 18°C and sunny"]);
    expect(await said(4, ".text")).toEqual(["It is 18°C and sunny in Paris."]);
    // What a person reads first is the author and the text, not JSON.
    expect((await page.locator("#ev-1 .event-content").innerText()).split("\n").slice(0, 2)).toEqual([
      "user",
      "What's the weather in Paris?",
    ]);
    // The stored JSON is still there, collapsed.
    expect(await page.locator("#ev-1 details.json .json-label").first().textContent()).toBe("ADK event");
    await page.screenshot({ path: path.join(SHOTS, "adk-session.png"), fullPage: true });

    // The sessions list previews the last event the same way.
    await page.goto(`${server.baseUrl}/#/?app=weather_app`);
    const last = page.locator(`tr[data-session="${id}"] td.last-event`);
    await last.locator(".badge").waitFor();
    expect(await last.locator(".muted").textContent()).toBe("weather_agent: It is 18°C and sunny in Paris.");
  });

  // Playwright's string predicates (waitForFunction) are evaluated with eval, which the CSP forbids: locators only.
  it("ran without script errors or Content-Security-Policy violations", () => {
    expect(inspector.consoleErrors).toEqual([]);
  });
});
