/**
 * A request message past MEMORY_MAX_MESSAGE_BYTES answers RESOURCE_EXHAUSTED
 * on every protocol (Connect: HTTP 429), with a message naming the setting
 * and its value and an ErrorInfo MESSAGE_TOO_LARGE carrying the limit: over
 * gRPC (grpc-js, refused from the length prefix), Connect JSON and binary
 * (the unary fast path and the connect-node router), gRPC-Web and a Connect
 * server stream, and for a gzip body or stream message that inflates past
 * the limit.
 */
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { Code, createClient, type ConnectError } from "@connectrpc/connect";
import { compressionGzip, createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AddEventRequestSchema, MemoryService } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { ErrorInfoSchema } from "@engram-memory/client/gen/google/rpc/error_details_pb.js";
import { ALL_PROTOCOLS, errorOf, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

const LIMIT = 4096;
const NAMED = `MEMORY_MAX_MESSAGE_BYTES=${LIMIT}`;
const bigText = "x".repeat(2 * LIMIT);

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ config: { maxMessageBytes: LIMIT } });
});
afterAll(async () => server?.stop());

/** The ErrorInfo every oversized request carries. */
function expectTooLarge(err: ConnectError): void {
  expect(err.code).toBe(Code.ResourceExhausted);
  expect(err.rawMessage).toContain(NAMED);
  const [info] = err.findDetails(ErrorInfoSchema);
  expect(info).toMatchObject({
    reason: "MESSAGE_TOO_LARGE",
    domain: "engram.v1",
    metadata: expect.objectContaining({ setting: "MEMORY_MAX_MESSAGE_BYTES", limit_bytes: String(LIMIT) }),
  });
  if (info?.metadata.size_bytes !== undefined) expect(Number(info.metadata.size_bytes)).toBeGreaterThan(LIMIT);
}

describe.each(ALL_PROTOCOLS)("%s", (_name, connectTo) => {
  let client: MemoryClient;
  beforeAll(() => {
    client = connectTo(server);
  });
  afterAll(() => client?.close());

  it("an oversized unary request answers RESOURCE_EXHAUSTED naming MEMORY_MAX_MESSAGE_BYTES, with ErrorInfo MESSAGE_TOO_LARGE", async () => {
    const err = await errorOf(
      client.addEvent({
        sessionId: "s",
        event: { eventType: "user_message", content: { kind: { case: "stringValue", value: bigText } } },
      }),
    );
    expectTooLarge(err);
  });

  it("a message far past the limit, refused while the client is still sending it, answers the same", async () => {
    const err = await errorOf(
      client.addEvent({
        sessionId: "s",
        event: {
          eventType: "user_message",
          content: { kind: { case: "stringValue", value: "y".repeat(2 * 1024 * 1024) } },
        },
      }),
    );
    expectTooLarge(err);
  });

  it("an oversized server-streaming request answers the same", async () => {
    const err = await errorOf(client.streamSessionEvents({ sessionId: bigText })[Symbol.asyncIterator]().next());
    expectTooLarge(err);
  });

  it("a request within the limit is served", async () => {
    expect((await client.getStats({})).$typeName).toBeDefined();
  });
});

describe("a compressed message that inflates past the limit", () => {
  const transports = [
    [
      "gRPC-Web, gzip",
      () => createGrpcWebTransport({ baseUrl: server.baseUrl, httpVersion: "1.1", sendCompression: compressionGzip }),
    ],
    [
      "Connect stream, gzip",
      () => createConnectTransport({ baseUrl: server.baseUrl, httpVersion: "1.1", sendCompression: compressionGzip }),
    ],
  ] as const;
  it.each(transports)("%s: refused in the same words, with the same ErrorInfo", async (_name, transport) => {
    const client = createClient(MemoryService, transport());
    expectTooLarge(await errorOf(client.streamSessionEvents({ sessionId: bigText })[Symbol.asyncIterator]().next()));
  });
});

interface JsonError {
  code: string;
  message: string;
  details?: { type: string; value: string; debug?: unknown }[];
}

/** A Connect unary POST by fetch; `via` sends it past the fast path to connect-node's router (a query string). */
async function post(
  headers: Record<string, string>,
  body: Uint8Array | string,
  via: "fast path" | "connect-node",
): Promise<{ status: number; body: JsonError }> {
  const query = via === "connect-node" ? "?via=connect-node" : "";
  const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/AddEvent${query}`, {
    method: "POST",
    headers,
    body,
  });
  return { status: res.status, body: (await res.json()) as JsonError };
}

describe.each(["fast path", "connect-node"] as const)("Connect by fetch, %s", (via) => {
  const json = JSON.stringify({ session_id: "s", event: { event_type: "user_message", content: bigText } });
  const binary = toBinary(
    AddEventRequestSchema,
    create(AddEventRequestSchema, {
      sessionId: "s",
      event: { eventType: "user_message", content: { kind: { case: "stringValue", value: bigText } } },
    }),
  );

  it.each([
    ["JSON", { "content-type": "application/json" }, json, Buffer.byteLength(json)],
    ["binary", { "content-type": "application/proto" }, binary, binary.byteLength],
    [
      "a gzip JSON body that inflates past the limit",
      { "content-type": "application/json", "content-encoding": "gzip" },
      gzipSync(json),
      undefined,
    ],
  ] as const)(
    "%s: HTTP 429, resource_exhausted naming MEMORY_MAX_MESSAGE_BYTES, ErrorInfo with the limit",
    async (_kind, headers, body, size) => {
      const answer = await post({ ...headers }, body, via);
      expect(answer.status).toBe(429);
      expect(answer.body.code).toBe("resource_exhausted");
      expect(answer.body.message).toBe(
        `request message ${size === undefined ? "is" : `of ${size} bytes is`} larger than the server's limit of ${LIMIT} bytes (${NAMED})`,
      );
      expect(answer.body.details).toHaveLength(1);
      const [detail] = answer.body.details ?? [];
      expect(detail?.type).toBe("google.rpc.ErrorInfo");
      const info = fromBinary(ErrorInfoSchema, base64Decode(detail?.value ?? ""));
      expect(info.reason).toBe("MESSAGE_TOO_LARGE");
      expect(info.metadata).toEqual({
        setting: "MEMORY_MAX_MESSAGE_BYTES",
        limit_bytes: String(LIMIT),
        ...(size === undefined ? {} : { size_bytes: String(size) }),
      });
    },
  );
});
