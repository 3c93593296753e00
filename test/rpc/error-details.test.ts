/**
 * One error model on every protocol: errors carry google.rpc.Status details
 * that machines read instead of the message. A field error carries a
 * BadRequest field violation (path + description); an expected_seq conflict
 * an ErrorInfo with current_seq; a rate limit a RetryInfo; and REST, Connect
 * and an unknown path answer the same JSON shape. Over gRPC (grpc-js, h2c:
 * grpc-status-details-bin), Connect JSON and binary (details in the JSON
 * error), gRPC-Web (grpc-status-details-bin) and REST.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
} from "@engram-memory/client/gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "@engram-memory/client/gen/google/rpc/status_pb.js";
import { generateApiKey } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { ALL_PROTOCOLS, connectClient, errorOf, grpcJsClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

let server: TestServer;
let limited: TestServer;
let dir: string;
let limitedKey: string;
const run = `${process.pid}`;

beforeAll(async () => {
  server = await startTestServer();
  dir = mkdtempSync(path.join(tmpdir(), "engram-details-"));
  const keys = new FileKeyStore(path.join(dir, "keys.json"));
  const { key, record } = generateApiKey({ role: "read", apps: ["app"], rateLimit: 1 });
  await keys.create(record);
  limitedKey = key;
  limited = await startTestServer({ config: { auth: true, authKeysFile: keys.path, authCacheMs: 0 } });
});

afterAll(async () => {
  await server?.stop();
  await limited?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe.each(ALL_PROTOCOLS)("%s", (_name, connectTo) => {
  let client: MemoryClient;
  beforeAll(() => {
    client = connectTo(server);
  });
  afterAll(() => client?.close());

  it("a bad field answers INVALID_ARGUMENT with a BadRequest field violation: its path and what is wrong", async () => {
    const err = await errorOf(
      client.addEvents({
        sessionId: "s",
        events: [{ eventType: "user_message" }, { eventType: "user_message", eventId: "has space" }],
      }),
    );
    expect(err.code).toBe(Code.InvalidArgument);
    expect(err.findDetails(BadRequestSchema)).toEqual([
      expect.objectContaining({
        fieldViolations: [
          expect.objectContaining({
            field: "events[1].event_id",
            description: "must be 1-128 printable ASCII characters without spaces (pattern ^[!-~]{1,128}$)",
          }),
        ],
      }),
    ]);
  });

  it("an expected_seq conflict answers FAILED_PRECONDITION with ErrorInfo SEQ_CONFLICT carrying current_seq (and the old trailer)", async () => {
    const sessionId = `details-conflict-${run}-${_name.replace(/\W+/g, "-")}`;
    await client.createSession({ sessionId, appName: "app", userId: "u" });
    await client.addEvent({ sessionId, event: { eventType: "user_message" }, expectedSeq: 0n });
    const err = await errorOf(client.addEvent({ sessionId, event: { eventType: "user_message" }, expectedSeq: 0n }));
    expect(err.code).toBe(Code.FailedPrecondition);
    expect(err.findDetails(ErrorInfoSchema)).toEqual([
      expect.objectContaining({
        reason: "SEQ_CONFLICT",
        domain: "engram.v1",
        metadata: { current_seq: "1", expected_seq: "0" },
      }),
    ]);
    expect(err.metadata.get("engram-current-seq")).toBe("1");
  });

  it("an unknown session answers NOT_FOUND with ErrorInfo SESSION_NOT_FOUND naming session_id", async () => {
    const err = await errorOf(client.getSession({ sessionId: `absent-${run}` }));
    expect(err.code).toBe(Code.NotFound);
    expect(err.findDetails(ErrorInfoSchema)[0]?.reason).toBe("SESSION_NOT_FOUND");
    expect(err.findDetails(BadRequestSchema)[0]?.fieldViolations[0]?.field).toBe("session_id");
  });
});

describe("a rate limit answers RESOURCE_EXHAUSTED with RetryInfo", () => {
  const clients: [string, () => MemoryClient][] = [
    ["gRPC", () => grpcJsClient(limited.address, { headers: { authorization: `Bearer ${limitedKey}` } })],
    ["Connect JSON", () => connectClient(limited.baseUrl, { headers: { authorization: `Bearer ${limitedKey}` } })],
    [
      "Connect binary",
      () => connectClient(limited.baseUrl, { binary: true, headers: { authorization: `Bearer ${limitedKey}` } }),
    ],
  ];
  it.each(clients)(
    "%s: a retry delay in RetryInfo, ErrorInfo RATE_LIMITED, and the retry-after-ms trailer",
    async (_name, open) => {
      const client = open();
      try {
        // One call per second is allowed: of three at once, at least one is refused.
        const outcomes = await Promise.all(
          Array.from({ length: 3 }, () =>
            client.getStats({}).then(
              () => undefined,
              (e: unknown) => ConnectError.from(e),
            ),
          ),
        );
        const refused = outcomes.filter((e): e is ConnectError => e !== undefined);
        expect(refused.length).toBeGreaterThan(0);
        for (const err of refused) {
          expect(err.code).toBe(Code.ResourceExhausted);
          const [retry] = err.findDetails(RetryInfoSchema);
          const delayMs = Number(retry?.retryDelay?.seconds ?? 0n) * 1000 + (retry?.retryDelay?.nanos ?? 0) / 1e6;
          expect(delayMs).toBeGreaterThan(0);
          expect(delayMs).toBeLessThanOrEqual(1000);
          expect(delayMs).toBe(Number(err.metadata.get("retry-after-ms")));
          expect(err.findDetails(ErrorInfoSchema)[0]).toMatchObject({
            reason: "RATE_LIMITED",
            metadata: { calls_per_second: "1" },
          });
        }
      } finally {
        client.close();
      }
    },
  );
});

interface JsonError {
  code: string;
  message: string;
  error?: string;
  details?: { type: string; value: string; debug?: unknown }[];
}

async function fetchJson(url: string, init?: RequestInit): Promise<{ status: number; body: JsonError }> {
  const res = await fetch(url, init);
  return { status: res.status, body: (await res.json()) as JsonError };
}

describe("one JSON error shape: Connect, REST and an unknown path", () => {
  it("Connect JSON: code, message, and details as {type, value (base64 protobuf), debug (its JSON)}, an unknown field included", async () => {
    const { status, body } = await fetchJson(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ session_id: "s", event: { event_type: "user_message", contnet: "hi" } }),
    });
    expect(status).toBe(400);
    expect(body).toEqual({
      code: "invalid_argument",
      message: "event.contnet: unknown field",
      details: [
        {
          type: "google.rpc.BadRequest",
          value: expect.any(String),
          debug: {
            field_violations: [expect.objectContaining({ field: "event.contnet", description: "unknown field" })],
          },
        },
      ],
    });
    const violation = fromBinary(BadRequestSchema, base64Decode(body.details![0]!.value)).fieldViolations[0];
    expect(violation).toMatchObject({ field: "event.contnet", description: "unknown field" });
  });

  it("an unknown key with a lone surrogate, or cut inside a pair, is named alike in the message and in the detail", async () => {
    const longKey = `${"k".repeat(63)}😀tail`;
    for (const [key, named] of [
      ["\\ud800x", "\ufffdx"],
      [JSON.stringify(longKey).slice(1, -1), `${"k".repeat(63)}\ufffd…`],
    ] as const) {
      const { status, body } = await fetchJson(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: `{"session_id": "s", "event": {"event_type": "user_message", "${key}": 1}}`,
      });
      expect(status).toBe(400);
      expect(body.message).toBe(`event.${named}: unknown field`);
      const violation = fromBinary(BadRequestSchema, base64Decode(body.details![0]!.value)).fieldViolations[0];
      expect(violation?.field).toBe(`event.${named}`);
    }
  });

  it("gRPC-Web: a JSON body's unknown field comes back in grpc-status-details-bin", async () => {
    const bytes = Buffer.from('{"session_id": "s", "verbose": true}');
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/GetSession`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+json" },
      body: Buffer.concat([Buffer.from([0, 0, 0, 0, bytes.length]), bytes]),
    });
    expect(res.headers.get("grpc-status")).toBe("3");
    const status = fromBinary(StatusSchema, base64Decode(res.headers.get("grpc-status-details-bin")!));
    expect(status.details.map((d) => d.typeUrl)).toEqual(["type.googleapis.com/google.rpc.BadRequest"]);
    expect(fromBinary(BadRequestSchema, status.details[0]!.value).fieldViolations[0]).toMatchObject({
      field: "verbose",
      description: "unknown field",
    });
  });

  it("the same shape from Connect, REST and an unknown path; REST and unknown paths add `error` (the message) for KAOS clients", async () => {
    const connect = await fetchJson(`${server.baseUrl}/engram.v1.MemoryService/GetSession`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ session_id: "" }),
    });
    const rest = await fetchJson(`${server.baseUrl}/memory/events?limit=0`);
    const unknown = await fetchJson(`${server.baseUrl}/no/such/path`);
    const shape = (status: number, code: string, message: string, field: string) => ({
      status,
      body: {
        code,
        message,
        details: [
          {
            type: "google.rpc.BadRequest",
            value: expect.any(String),
            debug: { field_violations: [expect.objectContaining({ field })] },
          },
        ],
      },
    });
    expect(connect).toEqual(shape(400, "invalid_argument", "session_id: is required", "session_id"));
    expect(rest).toEqual({
      ...shape(400, "invalid_argument", "limit: must be a positive whole number", "limit"),
      body: {
        ...shape(400, "invalid_argument", "limit: must be a positive whole number", "limit").body,
        error: "limit: must be a positive whole number",
      },
    });
    expect(unknown).toEqual({
      status: 404,
      body: {
        code: "not_found",
        message: "not found",
        error: "not found",
        details: [
          {
            type: "google.rpc.ErrorInfo",
            value: expect.any(String),
            debug: { reason: "PATH_NOT_FOUND", domain: "engram.v1", metadata: {} },
          },
        ],
      },
    });
  });

  it("REST: a method other than GET answers 405 in the same shape, code unimplemented", async () => {
    const res = await fetchJson(`${server.baseUrl}/memory/events`, { method: "POST", body: "{}" });
    expect(res).toEqual({
      status: 405,
      body: {
        code: "unimplemented",
        message: "POST is not allowed on /memory/events",
        error: "POST is not allowed on /memory/events",
      },
    });
  });

  it("REST: a rate limit carries RetryInfo in the body and Retry-After in the headers", async () => {
    const outcomes = await Promise.all(
      Array.from({ length: 3 }, () =>
        fetch(`${limited.baseUrl}/memory/sessions`, { headers: { authorization: `Bearer ${limitedKey}` } }),
      ),
    );
    const refused = outcomes.filter((r) => r.status === 429);
    expect(refused.length).toBeGreaterThan(0);
    for (const res of refused) {
      expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
      const body = (await res.json()) as JsonError;
      expect(body.code).toBe("resource_exhausted");
      expect(body.error).toBe(body.message);
      expect(body.details?.map((d) => d.type)).toEqual(["google.rpc.ErrorInfo", "google.rpc.RetryInfo"]);
    }
    await Promise.all(outcomes.map((r) => r.arrayBuffer().catch(() => undefined)));
  });
});
