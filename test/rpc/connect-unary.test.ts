/**
 * Unary Connect POST calls are answered by the edge's fast path
 * (src/server/connect-unary.ts) instead of connect-node. connect-node still
 * serves a POST with a query string, so each request here is sent both ways
 * and the two answers must be the same: status, headers (but the date) and
 * body, successes and errors alike, compressed or not.
 */
import http from "node:http";
import net from "node:net";
import { brotliCompressSync, gunzipSync, gzipSync } from "node:zlib";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AddEventRequestSchema, GetSessionEventsRequestSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { connectClient } from "../support/clients.js";
import { sid } from "./suite.js";

/** The request limit of the server under test (its smallest allowed value), so that limits are cheap to cross. */
const MAX_MESSAGE_BYTES = 4096;

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

/** One POST over a fresh connection; `chunked` sends the body without a content-length. */
function post(server: TestServer, path: string, headers: Record<string, string>, body: Uint8Array | string, chunked = false): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: "127.0.0.1", port: server.port, path, method: "POST", headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const { date: _date, ...rest } = res.headers;
        resolve({ status: res.statusCode ?? 0, headers: rest, body: Buffer.concat(chunks) });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    if (chunked) {
      // Two writes before end: node sends transfer-encoding: chunked.
      const bytes = Buffer.from(body);
      req.write(bytes.subarray(0, bytes.length >> 1));
      req.write(bytes.subarray(bytes.length >> 1));
      req.end();
    } else req.end(body);
  });
}

/** The answer of the fast path and of connect-node (the same request with a query string) to one request. */
async function bothWays(server: TestServer, method: string, headers: Record<string, string>, body: Uint8Array | string, chunked = false) {
  const path = `/engram.v1.MemoryService/${method}`;
  const fast = await post(server, path, headers, body, chunked);
  const reference = await post(server, `${path}?via=connect-node`, headers, body, chunked);
  return { fast, reference };
}

/** Headers but how the body is framed (a length or chunks), which may differ. */
function withoutFraming(headers: Answer["headers"]): Answer["headers"] {
  const { "content-length": _length, "transfer-encoding": _chunked, ...rest } = headers;
  return rest;
}

let server: TestServer;
let session: string;
beforeAll(async () => {
  server = await startTestServer({ config: { maxMessageBytes: MAX_MESSAGE_BYTES } });
  session = sid("fast");
  const client = connectClient(server.baseUrl);
  await client.createSession({ appName: "app", userId: "u", sessionId: session });
  // Enough text that a read of the session is past the 1 KiB compression threshold.
  for (let i = 0; i < 4; i++) {
    await client.addEvent({ sessionId: session, event: { eventType: "user_message", content: { kind: { case: "stringValue", value: `message ${i} ${"x".repeat(300)}` } }, metadata: { n: i, tag: "t" } } });
  }
});
afterAll(async () => server?.stop());

const JSON_TYPE = { "content-type": "application/json" };
const PROTO_TYPE = { "content-type": "application/proto" };

describe("the unary fast path answers as connect-node does", () => {
  it.each([
    ["a JSON read", () => bothWays(server, "GetSessionEvents", JSON_TYPE, JSON.stringify({ session_id: session }))],
    ["a binary read", () => bothWays(server, "GetSessionEvents", PROTO_TYPE, toBinary(GetSessionEventsRequestSchema, create(GetSessionEventsRequestSchema, { sessionId: session, tail: 2 })))],
    ["an empty binary message", () => bothWays(server, "GetStats", PROTO_TYPE, new Uint8Array(0))],
    ["JSON with a charset and a timeout", () => bothWays(server, "GetSession", { "content-type": "application/json; charset=utf-8", "connect-timeout-ms": "10000", "connect-protocol-version": "1" }, JSON.stringify({ session_id: session }))],
    ["a session that does not exist (404, not_found)", () => bothWays(server, "GetSession", JSON_TYPE, JSON.stringify({ session_id: "nope" }))],
    ["a misspelled JSON field (400 naming it)", () => bothWays(server, "AddEvent", JSON_TYPE, JSON.stringify({ session_id: session, event: { event_type: "x", contnet: 1 } }))],
    ["JSON that is not JSON", () => bothWays(server, "AddEvent", JSON_TYPE, "{not json")],
    ["binary bytes that do not decode (400, not 500)", () => bothWays(server, "AddEvent", PROTO_TYPE, new Uint8Array([0x0a, 0xff, 0xff]))],
    ["an error with metadata (a stale expected_seq)", () => bothWays(server, "AddEvent", PROTO_TYPE, toBinary(AddEventRequestSchema, create(AddEventRequestSchema, { sessionId: session, expectedSeq: 1n, event: { eventType: "x" } })))],
    ["a gzip request body", () => bothWays(server, "GetSession", { ...JSON_TYPE, "content-encoding": "gzip" }, gzipSync(JSON.stringify({ session_id: session })))],
    ["a br request body with a field error", () => bothWays(server, "AddEvent", { ...JSON_TYPE, "content-encoding": "br" }, brotliCompressSync(JSON.stringify({ session_id: session, event: { event_type: 5 } })))],
    ["a chunked body", () => bothWays(server, "GetSession", JSON_TYPE, JSON.stringify({ session_id: session }), true)],
    ["a body past the limit, announced (429, resource_exhausted)", () => bothWays(server, "GetSession", JSON_TYPE, JSON.stringify({ session_id: "x".repeat(MAX_MESSAGE_BYTES) }))],
    ["a chunked body past the limit", () => bothWays(server, "GetSession", JSON_TYPE, JSON.stringify({ session_id: "x".repeat(MAX_MESSAGE_BYTES) }), true)],
  ])("%s", async (_name, send) => {
    const { fast, reference } = await send();
    expect(fast.status).toBe(reference.status);
    expect(withoutFraming(fast.headers)).toEqual(withoutFraming(reference.headers));
    expect(fast.body.toString("hex")).toBe(reference.body.toString("hex"));
    // One write of a known length (connect-node's answers naming a field went chunked).
    expect(fast.headers["content-length"]).toBe(String(fast.body.length));
  });

  it("answers a body announced past the limit before reading it, and closes the connection rather than read the rest", async () => {
    const socket = net.connect(server.port, "127.0.0.1");
    const received: Buffer[] = [];
    socket.on("data", (d: Buffer) => received.push(d));
    const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
    const length = 10 * MAX_MESSAGE_BYTES;
    // The head and the first bytes of a body that never comes whole.
    socket.write(`POST /engram.v1.MemoryService/GetSession HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n{"session_id":"`);
    const timeout = new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), 5_000).unref());
    expect(await Promise.race([closed.then(() => "closed" as const), timeout])).toBe("closed");
    const answer = Buffer.concat(received).toString("latin1");
    expect(answer).toMatch(/^HTTP\/1\.1 429 /);
    expect(answer.toLowerCase()).toContain("\r\nconnection: close\r\n");
  });

  it("compresses a response of 1 KiB or more when the client accepts gzip, and a smaller one not", async () => {
    const big = await bothWays(server, "GetSessionEvents", { ...JSON_TYPE, "accept-encoding": "gzip, br" }, JSON.stringify({ session_id: session }));
    expect(big.fast.headers["content-encoding"]).toBe("gzip");
    expect(big.fast.headers).toEqual(big.reference.headers);
    expect(gunzipSync(big.fast.body).toString()).toBe(gunzipSync(big.reference.body).toString());
    const small = await bothWays(server, "GetSession", { ...JSON_TYPE, "accept-encoding": "gzip" }, JSON.stringify({ session_id: session }));
    expect(small.fast.headers["content-encoding"]).toBeUndefined();
    expect(small.fast.headers).toEqual(small.reference.headers);
    expect(small.fast.body.toString()).toBe(small.reference.body.toString());
  });

  it("leaves what it does not serve to connect-node: an unknown content encoding, a bad timeout, a stream content type", async () => {
    const unknownEncoding = await post(server, "/engram.v1.MemoryService/GetSession", { ...JSON_TYPE, "content-encoding": "zstd" }, "{}");
    expect(unknownEncoding.status).toBe(501);
    expect(JSON.parse(unknownEncoding.body.toString())).toMatchObject({ code: "unimplemented" });
    const badTimeout = await post(server, "/engram.v1.MemoryService/GetSession", { ...JSON_TYPE, "connect-timeout-ms": "soon" }, "{}");
    expect(badTimeout.status).toBe(400);
    expect(JSON.parse(badTimeout.body.toString())).toMatchObject({ code: "invalid_argument" });
    const stream = await post(server, "/engram.v1.MemoryService/GetSession", { "content-type": "application/connect+json" }, "{}");
    expect(stream.status).toBe(415);
  });
});
