/**
 * What every inspector browser test starts from: a real server on
 * 127.0.0.1, headless Debian chromium, a page that keeps the browser's
 * console errors (each test file ends by expecting none), and for the
 * API-key tests a server that requires keys from a key file of its own.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { chromium, type Browser, type Page } from "playwright-core";
import { createMemoryClient, type MemoryClient } from "@engram-memory/client";
import { generateApiKey } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { chromiumBinary } from "./chromium.js";

/** Headless chromium as the browser tests run it. */
export async function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: await chromiumBinary(), headless: true, args: ["--no-sandbox"] });
}

/** A server, a Connect client of it, and a browser page whose console errors are collected. */
export interface InspectorHarness {
  server: TestServer;
  memory: MemoryClient;
  browser: Browser;
  page: Page;
  /** Console errors and uncaught page errors of `page`, in order. */
  consoleErrors: string[];
  close(): Promise<void>;
}

/** Starts the server and the browser; `pageTimeoutMs` bounds each wait of `page`, well under the test's own timeout. */
export async function openInspector(opts: { pageTimeoutMs?: number } = {}): Promise<InspectorHarness> {
  const server = await startTestServer();
  const memory = createMemoryClient({ baseUrl: server.baseUrl, protocol: "connect" });
  const browser = await launchChromium();
  const page = await browser.newPage({ viewport: { width: 1360, height: 900 } });
  if (opts.pageTimeoutMs !== undefined) page.setDefaultTimeout(opts.pageTimeoutMs);
  const consoleErrors: string[] = [];
  page.on("console", (msg) => {
    if (msg.type() === "error") consoleErrors.push(msg.text());
  });
  page.on("pageerror", (err) => consoleErrors.push(String(err)));
  return {
    server,
    memory,
    browser,
    page,
    consoleErrors,
    close: async () => {
      await browser.close();
      memory.close();
      await server.stop();
    },
  };
}

/** A server that requires API keys, and the keys it was given, in the order of `requests`. */
export interface KeyedServer {
  server: TestServer;
  keys: string[];
  close(): Promise<void>;
}

/** Starts a server with auth on, its key file in a temp dir holding one key per request. */
export async function startKeyedServer(requests: Parameters<typeof generateApiKey>[0][]): Promise<KeyedServer> {
  const dir = mkdtempSync(path.join(tmpdir(), "engram-inspector-keys-"));
  const store = new FileKeyStore(path.join(dir, "keys.json"));
  const keys: string[] = [];
  for (const request of requests) {
    const generated = generateApiKey(request);
    await store.create(generated.record);
    keys.push(generated.key);
  }
  const server = await startTestServer({ config: { auth: true, authKeysFile: store.path, authCacheMs: 0 } });
  return {
    server,
    keys,
    close: async () => {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
