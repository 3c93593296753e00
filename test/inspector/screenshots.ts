/**
 * Makes the inspector screenshots of docs/inspector-and-cli.md (inspector/screenshots/*.png):
 * starts a server on 127.0.0.1 with the test suite's helper, writes a small
 * multi-agent run (with session state) into it through the TypeScript
 * client, with a turn stored as the ADK adapter stores it, and photographs
 * the main views in headless Debian chromium (light and dark, wide and phone).
 *
 *   npm run screenshots:inspector      (after npm run build:inspector)
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import { Resvg } from "@resvg/resvg-js";
import { chromium } from "playwright-core";
import { createMemoryClient, type JsonObject } from "@engram-memory/client";
import { REPO_ROOT, startTestServer } from "../support/engram.js";
import { chromiumBinary } from "./chromium.js";

const OUT = path.join(REPO_ROOT, "inspector", "screenshots");

/** A small chart an agent was asked about, as a PNG data URL. */
function chartPng(): string {
  const bars = [38, 64, 51, 90, 72]
    .map((h, i) => `<rect x="${20 + i * 36}" y="${110 - h}" width="26" height="${h}" fill="#4f46e5"/>`)
    .join("");
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="220" height="130"><rect width="220" height="130" fill="#fff"/>${bars}<line x1="12" y1="110" x2="208" y2="110" stroke="#333"/></svg>`;
  return `data:image/png;base64,${Buffer.from(new Resvg(svg).render().asPng()).toString("base64")}`;
}

const server = await startTestServer();
const memory = createMemoryClient({ baseUrl: server.baseUrl, protocol: "connect" });
const browser = await chromium.launch({
  executablePath: await chromiumBinary(),
  headless: true,
  args: ["--no-sandbox"],
});
try {
  mkdirSync(OUT, { recursive: true });
  const t0 = Date.now() - 60_000;
  const at = (ms: number) => new Date(t0 + ms);
  for (const [app, user, id] of [
    ["travel-bot", "alice", "trip-paris"],
    ["travel-bot", "bob", "trip-lyon"],
    ["support-bot", "carol", "ticket-4411"],
  ] as const) {
    await memory.createSession(app, user, id);
  }
  await memory.addEvents("trip-lyon", [{ eventType: "user_message", content: "Any trains to Lyon tonight?" }]);
  await memory.addEvents("ticket-4411", [
    { eventType: "user_message", content: "The export fails with a timeout." },
    {
      eventType: "error",
      content: {
        message: "export worker crashed",
        stack:
          "TimeoutError: export took longer than 30 s\n    at runExport (export.ts:88:11)\n    at Worker.handle (worker.ts:41:5)",
      },
    },
  ]);
  await memory.addEvents("trip-paris", [
    { eventType: "system", content: "You plan trips. Delegate research to the researcher.", timestamp: at(0) },
    {
      eventType: "user_message",
      content: [
        { type: "text", text: "Plan a weekend in Paris. Here are my museum visits per month:" },
        { type: "image_url", image_url: { url: chartPng() } },
      ],
      timestamp: at(1200),
      stateDelta: { city: "Paris", plan: "draft", "user:language": "en", "app:planner": "v2" },
    },
    {
      eventType: "delegation_request",
      content: { agent: "researcher", task: "find museums open late on Saturday" },
      timestamp: at(1900),
    },
    {
      eventType: "tool_call",
      content: { tool: "search", arguments: { q: "Paris museums open late Saturday" }, tool_call_id: "call-1" },
      timestamp: at(2100),
    },
    {
      eventType: "tool_result",
      content: {
        tool: "search",
        result: "Musée d'Orsay until 21:45 on Thursdays; Louvre until 21:00 on Fridays",
        tool_call_id: "call-1",
      },
      timestamp: at(3350),
      stateDelta: { museums: ["Louvre", "Orsay"] },
    },
    {
      eventType: "delegation_request",
      content: { agent: "booker", task: "check tickets for the Louvre" },
      timestamp: at(3500),
    },
    {
      eventType: "error",
      content: {
        message: "ticket API rate limited",
        stack: "HTTPError: 429 Too Many Requests\n    at fetchTickets (booker.py:57)\n    at run (booker.py:12)",
      },
      timestamp: at(4100),
    },
    { eventType: "delegation_response", content: { agent: "booker", result: "retry later" }, timestamp: at(4800) },
    {
      eventType: "delegation_response",
      content: { agent: "researcher", result: "Louvre on Friday night, Orsay on Thursday" },
      timestamp: at(5200),
    },
    {
      eventType: "agent_response",
      content:
        "Friday: the Louvre until 21:00. Saturday: a walk along the Seine. Tickets: I will retry the booking shortly.",
      timestamp: at(6000),
      stateDelta: { plan: null, itinerary: { friday: "Louvre", saturday: "Seine" }, "user:home_city": "Lyon" },
    },
  ]);

  // A turn as the Python client's ADK adapter stores it (engram_memory/adk.py): ADK's Event as JSON, metadata source "adk".
  await memory.createSession("weather_app", "dana", "adk-weather");
  const adkTurn = (author: string, role: string, parts: JsonObject[], ms: number) => {
    const id = `adk-${ms}`;
    const timestamp = (t0 + ms) / 1000;
    return {
      eventType: author === "user" ? "user_message" : "agent_response",
      content: {
        content: { parts, role },
        invocation_id: "e-42",
        author,
        actions: { state_delta: {}, artifact_delta: {} },
        id,
        timestamp,
      },
      metadata: { source: "adk", author, invocation_id: "e-42" },
      eventId: id,
      timestamp: at(ms),
    };
  };
  await memory.addEvents("adk-weather", [
    adkTurn("user", "user", [{ text: "Will I need an umbrella in Paris on Saturday?" }], 0),
    adkTurn(
      "weather_agent",
      "model",
      [
        { text: "Let me look at the forecast." },
        { function_call: { id: "adk-call-1", name: "get_forecast", args: { city: "Paris", day: "Saturday" } } },
      ],
      900,
    ),
    adkTurn(
      "weather_agent",
      "user",
      [
        {
          function_response: {
            id: "adk-call-1",
            name: "get_forecast",
            response: { result: "light rain after 15:00, 14°C" },
          },
        },
      ],
      1700,
    ),
    adkTurn(
      "weather_agent",
      "model",
      [{ text: "Yes: light rain from 3 pm, around 14°C. Take an umbrella for the afternoon." }],
      2600,
    ),
  ]);

  const shoot = async (
    name: string,
    fragment: string,
    opts: {
      width?: number;
      height?: number;
      dark?: boolean;
      ready?: string;
      context?: boolean;
      fullPage?: boolean;
    } = {},
  ) => {
    const page = await browser.newPage({
      viewport: { width: opts.width ?? 1280, height: opts.height ?? 820 },
      colorScheme: opts.dark ? "dark" : "light",
    });
    await page.goto(`${server.baseUrl}/${fragment}`);
    if (opts.ready) await page.locator(opts.ready).first().waitFor();
    if (opts.context) {
      await page.fill('input[name="budget"]', "300");
      await page.fill('input[name="query"]', "museum tickets");
      await page.click(".context-form button");
      await page.locator("table.sections").waitFor();
    }
    await page.waitForTimeout(300); // token counts and the live badge settle
    await page.screenshot({ path: path.join(OUT, `${name}.png`), fullPage: opts.fullPage ?? false });
    await page.close();
  };
  await shoot("sessions", "#/?q=Louvre", { ready: ".hit" });
  await shoot("session", "#/session/trip-paris", { ready: "#ev-10 .tokens:not(:empty)", height: 1200 });
  await shoot("context", "#/session/trip-paris", { ready: "#ev-10", context: true, height: 1300 });
  await shoot("session-dark", "#/session/trip-paris", {
    ready: "#ev-10 .tokens:not(:empty)",
    dark: true,
    height: 1200,
  });
  await shoot("adk", "#/session/adk-weather", { ready: "#ev-4 .tokens:not(:empty)", height: 900 });
  await shoot("phone", "#/session/ticket-4411", { ready: "#ev-2", width: 390, height: 844 });
  await shoot("phone-sessions", "#/", {
    ready: 'tr[data-session="adk-weather"] td.last-event .badge',
    width: 390,
    height: 844,
  });
  console.log(`screenshots written to ${path.relative(REPO_ROOT, OUT)}/`);
} finally {
  await browser.close();
  memory.close();
  await server.stop();
}
