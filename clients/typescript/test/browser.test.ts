/**
 * The client in a browser: bundled by esbuild for the browser platform from
 * the package's built dist/ (the "browser" export condition picks web.ts, with
 * connect-web transports and no `node:` import) and run in headless Chromium
 * (Debian's chromium, driven by playwright-core) against a real server on
 * 127.0.0.1: create a session, append, stream (server streaming over fetch,
 * replay then live), build the context, over Connect and over gRPC-Web.
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { chromiumBinary } from "../../../test/inspector/chromium.js";
import { startTestServer, type TestServer } from "../../../test/support/engram.js";
import type { ScenarioResult } from "./browser/scenario.js";

const SCENARIO = path.join(path.dirname(fileURLToPath(import.meta.url)), "browser", "scenario.ts");

/** The scenario bundled as a browser script; esbuild fails on any `node:` import it meets. */
async function bundleForBrowser(): Promise<string> {
  const result = await build({
    entryPoints: [SCENARIO],
    bundle: true,
    platform: "browser",
    format: "iife",
    target: "chrome120",
    write: false,
    logLevel: "silent",
  });
  return result.outputFiles[0].text;
}

describe("the client bundled for the browser", () => {
  let server: TestServer;
  let browser: Browser;
  let page: Page;
  let bundle: string;
  const pageErrors: string[] = [];

  beforeAll(async () => {
    bundle = await bundleForBrowser();
    server = await startTestServer();
    browser = await chromium.launch({ executablePath: await chromiumBinary(), headless: true, args: ["--no-sandbox"] });
    page = await browser.newPage();
    page.on("pageerror", (err) => pageErrors.push(String(err)));
    // A page of the server's own origin, as an app served beside the API would be.
    await page.goto(`${server.baseUrl}/healthz`);
    await page.addScriptTag({ content: bundle });
  }, 600_000);

  afterAll(async () => {
    await browser?.close();
    await server?.stop();
  });

  it("contains no Node.js module", () => {
    expect(bundle).not.toMatch(/["']node:/);
    expect(bundle).not.toContain("connect-node");
  });

  for (const protocol of ["connect", "grpc-web"] as const) {
    it(`creates, appends, streams (replay then live) and builds the context over ${protocol} in Chromium`, async () => {
      const sessionId = `browser-${protocol}`;
      const result: ScenarioResult = await page.evaluate(
        ([baseUrl, p, id]) =>
          (globalThis as unknown as { engramScenario(b: string, p: string, id: string): Promise<ScenarioResult> }).engramScenario(baseUrl, p, id),
        [server.baseUrl, protocol, sessionId] as const,
      );
      expect(result.replayed).toEqual(["1 user_message What is the weather in Paris?", "2 agent_response Sunny, 18°C."]);
      expect(result.live).toEqual(["3 user_message And tomorrow?"]);
      expect(result.contextText).toContain("User: What is the weather in Paris?");
      expect(result.contextText).toContain("User: And tomorrow?");
      expect(result.grpcRefusal).toContain('protocol "grpc" needs HTTP/2 trailers');
      expect(result.afterClose).toBe("Canceled");
      expect(pageErrors).toEqual([]);
    });
  }

  it("wrote what the browser sent to the server", async () => {
    const response = await fetch(`${server.baseUrl}/engram.v1.MemoryService/GetSessionEvents`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sessionId: "browser-connect" }),
    });
    const body = (await response.json()) as { events?: { seq: string; event_type: string }[] };
    expect(body.events?.map((e) => `${e.seq} ${e.event_type}`)).toEqual(["1 user_message", "2 agent_response", "3 user_message"]);
  });
});
