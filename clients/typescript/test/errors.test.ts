/**
 * The client reads the server's google.rpc error details, not its messages:
 * the field at fault (BadRequest), the reason and its facts (ErrorInfo) and
 * the retry delay (RetryInfo), over gRPC, Connect and gRPC-Web against real
 * servers on 127.0.0.1.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey } from "../../../src/auth/api-keys.js";
import { FileKeyStore } from "../../../src/auth/file-key-store.js";
import { startTestServer, type TestServer } from "../../../test/support/engram.js";
import {
  Code,
  createMemoryClient,
  currentSeqOf,
  errorDetailsOf,
  fieldOf,
  reasonOf,
  retryDelayMsOf,
  type MemoryClient,
  type Protocol,
} from "../src/index.js";
import { errorOf } from "./support.js";

let server: TestServer;
let limited: TestServer;
let dir: string;
let limitedKey: string;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-ts-errors-"));
  const keys = new FileKeyStore(path.join(dir, "keys.json"));
  const { key, record } = generateApiKey({ role: "read", apps: ["ts-app"], rateLimit: 1 });
  await keys.create(record);
  limitedKey = key;
  [server, limited] = await Promise.all([startTestServer(), startTestServer({ config: { auth: true, authKeysFile: keys.path, authCacheMs: 0 } })]);
});

afterAll(async () => {
  await Promise.all([server?.stop(), limited?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

describe.each<[Protocol]>([["grpc"], ["connect"], ["grpc-web"]])("error details over %s", (protocol) => {
  let client: MemoryClient;
  beforeAll(() => {
    client = createMemoryClient({ baseUrl: server.baseUrl, protocol, timeoutMs: 10_000 });
  });
  afterAll(() => client?.close());

  it("a bad field: fieldOf and the BadRequest violation's path and description", async () => {
    const err = await errorOf(client.createSession("app", "u", "has space"));
    expect(err.code).toBe(Code.InvalidArgument);
    expect(fieldOf(err)).toBe("session_id");
    expect(errorDetailsOf(err).fieldViolations).toEqual([
      { field: "session_id", description: "must be 1-128 printable ASCII characters without spaces (pattern ^[!-~]{1,128}$)" },
    ]);
  });

  it("an expected_seq conflict: reason SEQ_CONFLICT and current_seq from ErrorInfo", async () => {
    const sid = await client.createSession("app", "u", `errors-${protocol}-occ`);
    await client.addEvent(sid, "user_message", "a", undefined, { expectedSeq: 0 });
    const err = await errorOf(client.addEvent(sid, "user_message", "b", undefined, { expectedSeq: 0 }));
    expect(reasonOf(err)).toBe("SEQ_CONFLICT");
    expect(errorDetailsOf(err).metadata).toEqual({ current_seq: "1", expected_seq: "0" });
    expect(currentSeqOf(err)).toBe(1);
  });

  it("an unknown session: reason SESSION_NOT_FOUND, field session_id", async () => {
    const err = await errorOf(client.getSession(`errors-${protocol}-absent`));
    expect(err.code).toBe(Code.NotFound);
    expect(reasonOf(err)).toBe("SESSION_NOT_FOUND");
    expect(fieldOf(err)).toBe("session_id");
  });

  it("a rate limit: reason RATE_LIMITED and the retry delay from RetryInfo", async () => {
    const limitedClient = createMemoryClient({ baseUrl: limited.baseUrl, protocol, apiKey: limitedKey, timeoutMs: 10_000 });
    try {
      const outcomes = await Promise.all(Array.from({ length: 3 }, () => limitedClient.getMemoryStats().then(() => undefined, (e: unknown) => e)));
      const refused = outcomes.filter((e) => e !== undefined);
      expect(refused.length).toBeGreaterThan(0);
      for (const err of refused) {
        expect(reasonOf(err)).toBe("RATE_LIMITED");
        const delay = retryDelayMsOf(err);
        expect(delay).toBeGreaterThan(0);
        expect(delay).toBeLessThanOrEqual(1000);
      }
    } finally {
      limitedClient.close();
    }
  });

  it("a non-RPC error has no details", () => {
    expect(errorDetailsOf(new Error("plain"))).toEqual({ fieldViolations: [], metadata: {}, reason: undefined, retryDelayMs: undefined });
    expect(fieldOf(undefined)).toBeUndefined();
  });
});
