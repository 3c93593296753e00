/**
 * DNS rebinding over real sockets: a page on evil.example that made its name
 * resolve to 127.0.0.1 sends the server same-origin requests carrying
 * `Host: evil.example:<port>` and `Origin: http://evil.example:<port>`. With
 * auth off (the default) every HTTP/1.1 path refuses them with 403 naming
 * MEMORY_ALLOWED_HOSTS and writes nothing; loopback names, IP addresses and
 * the listed hosts are served; with auth on nothing changes (a key decides).
 */
import http from "node:http";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { startTestServer, type TestServer } from "../support/engram.js";

interface RawResponse {
  status: number;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  json: any;
}

/** One HTTP/1.1 request to 127.0.0.1 with exactly these headers, Host included, as a browser on a rebound name sends it. */
function request(
  port: number,
  method: string,
  urlPath: string,
  headers: Record<string, string>,
  body?: string,
): Promise<RawResponse> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port, method, path: urlPath, headers, agent: false, timeout: 10_000, setHost: false },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk) => (text += chunk));
        res.on("end", () => {
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode!, json });
        });
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${method} ${urlPath}: no answer in 10 s`)));
    req.on("error", reject);
    req.end(body);
  });
}

const rpc = (method: string) => `/engram.v1.MemoryService/${method}`;
const FORM = "application/x-www-form-urlencoded";
const MCP_HEADERS = { "content-type": "application/json", accept: "application/json, text/event-stream" };
const INITIALIZE = JSON.stringify({
  jsonrpc: "2.0",
  id: 1,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } },
});

/** What the rebound page sends on each path: the RPCs (Connect POST and GET, gRPC-Web), REST, MCP and the inspector. */
function attacks(sessionId: string): [string, string, string, Record<string, string>, string?][] {
  return [
    [
      "Connect POST with a form type (AddEvent)",
      "POST",
      rpc("AddEvent"),
      { "content-type": FORM },
      JSON.stringify({ session_id: sessionId, event: { event_type: "system", content: "planted" } }),
    ],
    [
      "Connect GET (ListMemories)",
      "GET",
      `${rpc("ListMemories")}?encoding=json&message=${encodeURIComponent(JSON.stringify({ app_name: "app", user_id: "u" }))}`,
      { "sec-fetch-site": "same-origin" },
    ],
    [
      "gRPC-Web (GetStats)",
      "POST",
      rpc("GetStats"),
      { "content-type": "application/grpc-web+proto", "x-grpc-web": "1" },
      "\0\0\0\0\0",
    ],
    ["REST (GET /memory/events)", "GET", "/memory/events?limit=10", { "sec-fetch-site": "same-origin" }],
    ["MCP (initialize)", "POST", "/mcp", MCP_HEADERS, INITIALIZE],
    ["the inspector", "GET", "/", { "sec-fetch-site": "same-origin" }],
    ["metrics", "GET", "/metrics", {}],
  ];
}

describe("with auth off (the default)", () => {
  let server: TestServer;
  let sessionId: string;

  beforeAll(async () => {
    server = await startTestServer({ config: { allowedHosts: ["memory.example", ".corp.example"] } });
    const created = await request(
      server.port,
      "POST",
      rpc("CreateSession"),
      { host: `127.0.0.1:${server.port}`, "content-type": "application/json" },
      JSON.stringify({ app_name: "app", user_id: "u" }),
    );
    sessionId = created.json.session.session_id;
  });
  afterAll(() => server.stop());

  for (const evil of [
    "evil.example",
    "localhost.evil.example",
    "127.0.0.1.nip.example",
    "memory.example.evil.example",
  ]) {
    it(`refuses a rebound page's requests with Host ${evil} on every path, with 403 naming MEMORY_ALLOWED_HOSTS`, async () => {
      const host = `${evil}:${server.port}`;
      for (const [name, method, urlPath, headers, body] of attacks(sessionId)) {
        const res = await request(server.port, method, urlPath, { host, origin: `http://${host}`, ...headers }, body);
        expect(res.status, name).toBe(403);
        expect(res.json?.code, name).toBe("permission_denied");
        expect(res.json?.message, name).toContain("MEMORY_ALLOWED_HOSTS");
        expect(res.json?.details?.[0]?.debug?.reason ?? res.json?.message, name).toBeDefined();
        if (urlPath.startsWith("/memory/")) expect(res.json?.error, name).toContain("MEMORY_ALLOWED_HOSTS");
      }
      const read = await request(
        server.port,
        "POST",
        rpc("GetSessionEvents"),
        { host: `127.0.0.1:${server.port}`, "content-type": "application/json" },
        JSON.stringify({ session_id: sessionId }),
      );
      expect(read.status).toBe(200);
      expect(read.json.events ?? []).toHaveLength(0);
    });
  }

  for (const host of [
    "localhost",
    "LOCALHOST.",
    "app.localhost",
    "127.0.0.1",
    "127.5.6.7",
    "[::1]",
    "192.168.1.20",
    "memory.example",
    "corp.example",
    "a.corp.example",
  ]) {
    it(`serves Host ${host} on every path`, async () => {
      for (const [name, method, urlPath, headers, body] of attacks(sessionId)) {
        const withPort = `${host}:${server.port}`;
        // A same-origin page (the inspector) sends its Origin; MCP clients send none.
        const origin: Record<string, string> = urlPath === "/mcp" ? {} : { origin: `http://${withPort.toLowerCase()}` };
        const res = await request(server.port, method, urlPath, { host: withPort, ...origin, ...headers }, body);
        expect(res.status, `${name}: ${JSON.stringify(res.json)}`).not.toBe(403);
        expect(res.status, name).toBeLessThan(300);
      }
    });
  }
});

describe("with auth on", () => {
  let server: TestServer;
  let dir: string;
  let key: string;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), "engram-rebinding-"));
    const keys = new FileKeyStore(path.join(dir, "keys.json"));
    const generated = generateApiKey({ role: "write", apps: ["app"] });
    await keys.create(generated.record);
    key = generated.key;
    server = await startTestServer({ config: { auth: true, authKeysFile: keys.path, authCacheMs: 0 } });
  });
  afterAll(async () => {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("leaves any Host to the key: 401 without one, served with one", async () => {
    const host = `evil.example:${server.port}`;
    const without = await request(
      server.port,
      "POST",
      rpc("GetStats"),
      { host, "content-type": "application/json" },
      "{}",
    );
    expect(without.status).toBe(401);
    const withKey = await request(
      server.port,
      "POST",
      rpc("GetStats"),
      { host, "content-type": "application/json", authorization: `Bearer ${key}` },
      "{}",
    );
    expect(withKey.status).toBe(200);
  });
});

describe("MEMORY_ALLOWED_HOSTS", () => {
  it("takes host names, .domain for subdomains, or * alone; refuses a scheme, port or path", () => {
    expect(loadConfig([], { MEMORY_ALLOWED_HOSTS: "memory.example, .corp.example" }).allowedHosts).toEqual([
      "memory.example",
      ".corp.example",
    ]);
    expect(loadConfig([], { MEMORY_ALLOWED_HOSTS: "*" }).allowedHosts).toEqual(["*"]);
    for (const bad of ["http://memory.example", "memory.example:8000", "memory.example/x", "*,memory.example"]) {
      expect(() => loadConfig([], { MEMORY_ALLOWED_HOSTS: bad }), bad).toThrow(ConfigError);
    }
  });
});
