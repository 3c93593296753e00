/**
 * The apiKey option against a real server with MEMORY_AUTH=true: sent on
 * calls and streams over gRPC and Connect; UNAUTHENTICATED without it,
 * PERMISSION_DENIED for what the key's role or apps do not allow.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey } from "../../../src/auth/api-keys.js";
import { FileKeyStore } from "../../../src/auth/file-key-store.js";
import { startTestServer, type TestServer } from "../../../test/support/engram.js";
import { Code, ConnectError, createMemoryClient, type Protocol } from "../src/index.js";

let dir: string;
let server: TestServer;
let writer: string;
let reader: string;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-ts-auth-"));
  const keys = new FileKeyStore(path.join(dir, "keys.json"));
  const w = generateApiKey({ role: "write", apps: ["ts-app"] });
  const r = generateApiKey({ role: "read", apps: ["ts-app"] });
  await keys.create(w.record);
  await keys.create(r.record);
  writer = w.key;
  reader = r.key;
  server = await startTestServer({ config: { auth: true, authKeysFile: keys.path, authCacheMs: 0 } });
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function codeOf(p: Promise<unknown>): Promise<Code | "ok"> {
  try {
    await p;
    return "ok";
  } catch (err) {
    return ConnectError.from(err).code;
  }
}

describe.each(["grpc", "connect"] as Protocol[])("apiKey over %s", (protocol) => {
  it("authenticates calls and streams; refuses what the key may not do", async () => {
    const anonymous = createMemoryClient({ baseUrl: server.baseUrl, protocol, retries: 0 });
    const w = createMemoryClient({ baseUrl: server.baseUrl, protocol, apiKey: writer });
    const r = createMemoryClient({ baseUrl: server.baseUrl, protocol, apiKey: reader });
    try {
      expect(await codeOf(anonymous.getMemoryStats())).toBe(Code.Unauthenticated);
      const sessionId = await w.createSession("ts-app", "u");
      await w.addEvent(sessionId, "user_message", "hi");
      expect(await codeOf(w.createSession("other-app", "u"))).toBe(Code.PermissionDenied);
      expect(await codeOf(r.addEvent(sessionId, "user_message", "no"))).toBe(Code.PermissionDenied);
      const controller = new AbortController();
      const streamed: unknown[] = [];
      for await (const event of r.streamSessionEvents(sessionId, { afterSeq: 0, signal: controller.signal })) {
        streamed.push(event.content);
        controller.abort();
      }
      expect(streamed).toEqual(["hi"]);
    } finally {
      for (const c of [anonymous, w, r]) c.close();
    }
  });
});
