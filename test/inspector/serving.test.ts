/**
 * How the server serves the inspector: / and its assets with their content
 * types, cache headers and Content-Security-Policy; conditional requests;
 * nothing shadowed (RPC, /memory/*, /healthz, /readyz still answer as
 * before); MEMORY_INSPECTOR=false / --inspector false turn it off.
 */
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../../src/config.js";
import { createInspectorHandler, INSPECTOR_DIST_DIR } from "../../src/server/inspector.js";
import { startTestServer, type TestServer } from "../support/engram.js";

let server: TestServer;
let disabled: TestServer;
let asset: { js: string; css: string };

beforeAll(async () => {
  const files = readdirSync(path.join(INSPECTOR_DIST_DIR, "assets"));
  asset = {
    js: `/assets/${files.find((f) => f.endsWith(".js"))}`,
    css: `/assets/${files.find((f) => f.endsWith(".css"))}`,
  };
  server = await startTestServer();
  disabled = await startTestServer({ config: { inspector: false } });
}, 120_000);

afterAll(async () => {
  await server?.stop();
  await disabled?.stop();
});

describe("inspector assets", () => {
  it("serves index.html at / with a strict CSP and no caching without revalidation", async () => {
    const res = await fetch(`${server.baseUrl}/`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(res.headers.get("cache-control")).toBe("no-cache");
    const csp = res.headers.get("content-security-policy")!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("connect-src 'self'");
    expect(csp).not.toContain("unsafe-inline");
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
    const html = await res.text();
    expect(html).toContain("<title>Engram inspector</title>");
    expect(html).toContain(`src="${asset.js}"`);
    expect(html).not.toMatch(/https?:\/\//); // no CDN: everything from this origin
  });

  it("serves hashed assets as immutable with their content types", async () => {
    const js = await fetch(`${server.baseUrl}${asset.js}`);
    expect(js.status).toBe(200);
    expect(js.headers.get("content-type")).toBe("text/javascript; charset=utf-8");
    expect(js.headers.get("cache-control")).toBe("public, max-age=31536000, immutable");
    expect((await js.text()).length).toBeGreaterThan(1000);
    const css = await fetch(`${server.baseUrl}${asset.css}`);
    expect(css.headers.get("content-type")).toBe("text/css; charset=utf-8");
  });

  it("answers a matching If-None-Match with 304, and HEAD without a body", async () => {
    const first = await fetch(`${server.baseUrl}/`);
    const etag = first.headers.get("etag")!;
    expect(etag).toMatch(/^".+"$/);
    const again = await fetch(`${server.baseUrl}/`, { headers: { "if-none-match": etag } });
    expect(again.status).toBe(304);
    const head = await fetch(`${server.baseUrl}${asset.js}`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(Number(head.headers.get("content-length"))).toBeGreaterThan(1000);
    expect(await head.text()).toBe("");
  });

  it("refuses other methods on its files with 405 and answers unknown paths 404, in the shared JSON error shape", async () => {
    const post = await fetch(`${server.baseUrl}/`, { method: "POST", body: "x" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET, HEAD");
    expect(await post.json()).toEqual({
      code: "unimplemented",
      message: "POST is not allowed on /",
      error: "POST is not allowed on /",
    });
    for (const p of [
      "/assets/nope.js",
      "/index.htm",
      "/../package.json",
      "/assets/../../package.json",
      "/%2e%2e/package.json",
    ]) {
      const res = await fetch(`${server.baseUrl}${p}`);
      expect(res.status, p).toBe(404);
      expect(await res.json()).toMatchObject({ code: "not_found", message: "not found", error: "not found" });
    }
  });

  it("shadows none of the RPC, REST and health paths", async () => {
    const rpc = await fetch(`${server.baseUrl}/engram.v1.MemoryService/GetStats`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(rpc.status).toBe(200);
    expect(await rpc.json()).toMatchObject({ backend: "local" });
    expect((await fetch(`${server.baseUrl}/healthz`)).status).toBe(200);
    expect((await fetch(`${server.baseUrl}/readyz`)).status).toBe(200);
    const sessions = await fetch(`${server.baseUrl}/memory/sessions`);
    expect(await sessions.json()).toMatchObject({ sessions: [] });
    const unknownRpc = await fetch(`${server.baseUrl}/engram.v1.MemoryService/Nope`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    expect(unknownRpc.status).toBe(404);
  });

  it("explains how to build the assets when they are missing", async () => {
    const empty = mkdtempSync(path.join(tmpdir(), "engram-no-inspector-"));
    try {
      const handler = createInspectorHandler(pino({ level: "silent" }), empty);
      const http = await import("node:http");
      const srv = http.createServer((req, res) => {
        if (!handler(req, res)) res.writeHead(404).end();
      });
      await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
      const port = (srv.address() as { port: number }).port;
      const res = await fetch(`http://127.0.0.1:${port}/`);
      expect(res.status).toBe(503);
      expect(await res.text()).toContain("npm run build:inspector");
      expect((await fetch(`http://127.0.0.1:${port}/assets/x.js`)).status).toBe(404);
      await new Promise((resolve) => srv.close(resolve));
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});

describe("turning the inspector off", () => {
  it("answers / with 404 when disabled", async () => {
    const res = await fetch(`${disabled.baseUrl}/`);
    expect(res.status).toBe(404);
    expect((await fetch(`${disabled.baseUrl}${asset.js}`)).status).toBe(404);
    expect((await fetch(`${disabled.baseUrl}/healthz`)).status).toBe(200);
  });

  it("reads MEMORY_INSPECTOR and --inspector, on by default", () => {
    expect(loadConfig([], {}).inspector).toBe(true);
    expect(loadConfig([], { MEMORY_INSPECTOR: "false" }).inspector).toBe(false);
    expect(loadConfig(["--inspector", "false"], { MEMORY_INSPECTOR: "true" }).inspector).toBe(false);
    expect(() => loadConfig([], { MEMORY_INSPECTOR: "maybe" })).toThrow(ConfigError);
    expect(() => loadConfig([], { MEMORY_INSPECTOR: "maybe" })).toThrow(/MEMORY_INSPECTOR: expected true or false/);
  });
});
