/**
 * Unary Connect POST calls are answered by the edge's fast path
 * (src/server/fastpath/connect-unary.ts) instead of connect-node. connect-node still
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
import { LINGER_IDLE_MS, LINGER_MAX_BYTES, LINGER_MAX_MS } from "../../src/server/shared-port.js";
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
function post(
  server: TestServer,
  path: string,
  headers: Record<string, string>,
  body: Uint8Array | string,
  chunked = false,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port: server.port, path, method: "POST", headers, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => {
          const { date: _date, ...rest } = res.headers;
          resolve({ status: res.statusCode ?? 0, headers: rest, body: Buffer.concat(chunks) });
        });
        res.on("error", reject);
      },
    );
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
async function bothWays(
  server: TestServer,
  method: string,
  headers: Record<string, string>,
  body: Uint8Array | string,
  chunked = false,
) {
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
    await client.addEvent({
      sessionId: session,
      event: {
        eventType: "user_message",
        content: { kind: { case: "stringValue", value: `message ${i} ${"x".repeat(300)}` } },
        metadata: { n: i, tag: "t" },
      },
    });
  }
});
afterAll(async () => server?.stop());

const JSON_TYPE = { "content-type": "application/json" };
const PROTO_TYPE = { "content-type": "application/proto" };

describe("the unary fast path answers as connect-node does", () => {
  it.each([
    ["a JSON read", () => bothWays(server, "GetSessionEvents", JSON_TYPE, JSON.stringify({ session_id: session }))],
    [
      "a binary read",
      () =>
        bothWays(
          server,
          "GetSessionEvents",
          PROTO_TYPE,
          toBinary(
            GetSessionEventsRequestSchema,
            create(GetSessionEventsRequestSchema, { sessionId: session, tail: 2 }),
          ),
        ),
    ],
    ["an empty binary message", () => bothWays(server, "GetStats", PROTO_TYPE, new Uint8Array(0))],
    [
      "JSON with a charset and a timeout",
      () =>
        bothWays(
          server,
          "GetSession",
          {
            "content-type": "application/json; charset=utf-8",
            "connect-timeout-ms": "10000",
            "connect-protocol-version": "1",
          },
          JSON.stringify({ session_id: session }),
        ),
    ],
    [
      "a session that does not exist (404, not_found)",
      () => bothWays(server, "GetSession", JSON_TYPE, JSON.stringify({ session_id: "nope" })),
    ],
    [
      "a misspelled JSON field (400 naming it)",
      () =>
        bothWays(
          server,
          "AddEvent",
          JSON_TYPE,
          JSON.stringify({ session_id: session, event: { event_type: "x", contnet: 1 } }),
        ),
    ],
    ["JSON that is not JSON", () => bothWays(server, "AddEvent", JSON_TYPE, "{not json")],
    [
      "binary bytes that do not decode (400, not 500)",
      () => bothWays(server, "AddEvent", PROTO_TYPE, new Uint8Array([0x0a, 0xff, 0xff])),
    ],
    [
      "an error with metadata (a stale expected_seq)",
      () =>
        bothWays(
          server,
          "AddEvent",
          PROTO_TYPE,
          toBinary(
            AddEventRequestSchema,
            create(AddEventRequestSchema, { sessionId: session, expectedSeq: 1n, event: { eventType: "x" } }),
          ),
        ),
    ],
    [
      "a gzip request body",
      () =>
        bothWays(
          server,
          "GetSession",
          { ...JSON_TYPE, "content-encoding": "gzip" },
          gzipSync(JSON.stringify({ session_id: session })),
        ),
    ],
    [
      "a br request body with a field error",
      () =>
        bothWays(
          server,
          "AddEvent",
          { ...JSON_TYPE, "content-encoding": "br" },
          brotliCompressSync(JSON.stringify({ session_id: session, event: { event_type: 5 } })),
        ),
    ],
    ["a chunked body", () => bothWays(server, "GetSession", JSON_TYPE, JSON.stringify({ session_id: session }), true)],
    [
      "a body past the limit, announced (429, resource_exhausted)",
      () => bothWays(server, "GetSession", JSON_TYPE, JSON.stringify({ session_id: "x".repeat(MAX_MESSAGE_BYTES) })),
    ],
    [
      "a chunked body past the limit",
      () =>
        bothWays(server, "GetSession", JSON_TYPE, JSON.stringify({ session_id: "x".repeat(MAX_MESSAGE_BYTES) }), true),
    ],
  ])("%s", async (_name, send) => {
    const { fast, reference } = await send();
    expect(fast.status).toBe(reference.status);
    expect(withoutFraming(fast.headers)).toEqual(withoutFraming(reference.headers));
    expect(fast.body.toString("hex")).toBe(reference.body.toString("hex"));
    // One write of a known length (connect-node's answers naming a field went chunked).
    expect(fast.headers["content-length"]).toBe(String(fast.body.length));
  });

  /** A raw HTTP/1.1 connection that keeps writing after the server's FIN, as a client still sending its body does. */
  function rawConnection() {
    const socket = net.connect({ port: server.port, host: "127.0.0.1", allowHalfOpen: true });
    const received: Buffer[] = [];
    socket.on("data", (d: Buffer) => received.push(d));
    const errors: Error[] = [];
    socket.on("error", (err) => errors.push(err));
    const ended = new Promise<void>((resolve) => socket.once("end", () => resolve()));
    const closed = new Promise<"closed">((resolve) => socket.once("close", () => resolve("closed")));
    const within = (ms: number) =>
      new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), ms).unref());
    const answer = () => Buffer.concat(received).toString("latin1");
    return { socket, errors, ended, closed, within, answer };
  }
  const head = (length: number) =>
    `POST /engram.v1.MemoryService/GetSession HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n{"session_id":"`;

  /** Writes a byte every `gapMs` (at most `probes` times) until the server's close shows as a reset; whether it did. */
  async function resetBy(c: ReturnType<typeof rawConnection>, probes: number, gapMs: number): Promise<boolean> {
    for (let i = 0; i < probes && c.errors.length === 0; i++) {
      c.socket.write("x");
      await Promise.race([c.closed, c.within(gapMs)]);
    }
    return c.errors.length > 0;
  }

  it("answers a body announced past the limit before reading it, and closes at once when the rest is too large to wait for", async () => {
    const c = rawConnection();
    c.socket.write(head(LINGER_MAX_BYTES + 1));
    await c.ended;
    expect(c.answer()).toMatch(/^HTTP\/1\.1 429 /);
    expect(c.answer().toLowerCase()).toContain("\r\nconnection: close\r\n");
    expect(await resetBy(c, 10, 200)).toBe(true);
  });

  it("closes lingering after an early answer: the rest of the body is read and dropped, so the client still sending sees no reset", async () => {
    const c = rawConnection();
    const length = 10 * MAX_MESSAGE_BYTES;
    const first = head(length);
    c.socket.write(first);
    await c.ended; // the answer is whole, and the server has shut its side
    expect(c.answer()).toMatch(/^HTTP\/1\.1 429 [^]*\r\nconnection: close\r\n/i);
    // The rest, in pieces: each would meet a reset if the server had closed at once.
    let left = length - Buffer.byteLength(first) + first.indexOf("\r\n\r\n") + 4;
    for (let i = 0; i < 8 && left > 0; i++) {
      const piece = Math.min(left, Math.ceil(length / 8));
      await new Promise<void>((resolve) => c.socket.write("x".repeat(piece), () => resolve()));
      left -= piece;
      // Spread in time on purpose: a piece written after the server had closed would meet a reset.
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    c.socket.end();
    expect(await Promise.race([c.closed, c.within(5_000)])).toBe("closed");
    expect(c.errors).toEqual([]);
  });

  it("a lingering close drops at most LINGER_MAX_BYTES of a chunked body, then closes", async () => {
    const c = rawConnection();
    c.socket.write(
      "POST /engram.v1.MemoryService/GetSession HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n",
    );
    const MiB = 1024 * 1024;
    const chunk = `${MiB.toString(16)}\r\n${"x".repeat(MiB)}\r\n`;
    let sent = 0;
    // Past the message limit the server answers and lingers; the client goes on sending, well past the bound.
    for (let i = 0; i < 4 * (LINGER_MAX_BYTES / MiB) && c.errors.length === 0; i++) {
      await Promise.race([new Promise<void>((resolve) => c.socket.write(chunk, () => resolve())), c.closed]);
      sent += MiB;
    }
    await Promise.race([c.closed, c.within(5_000)]);
    expect(c.answer()).toMatch(/^HTTP\/1\.1 429 /);
    expect(c.errors.length).toBeGreaterThan(0);
    expect(sent).toBeLessThan(4 * LINGER_MAX_BYTES);
  });

  it("a lingering close does not wait for a client that stops sending", async () => {
    const c = rawConnection();
    c.socket.write(head(10 * MAX_MESSAGE_BYTES));
    await c.ended;
    expect(c.answer()).toMatch(/^HTTP\/1\.1 429 /);
    // The client neither sends the rest nor closes: a byte now and then, further apart than the idle
    // bound, is dropped until the server gives up on it and closes.
    expect(await resetBy(c, Math.ceil(LINGER_MAX_MS / LINGER_IDLE_MS) + 2, LINGER_IDLE_MS * 1.5)).toBe(true);
  });

  it("compresses a response of 1 KiB or more when the client accepts gzip, and a smaller one not", async () => {
    const big = await bothWays(
      server,
      "GetSessionEvents",
      { ...JSON_TYPE, "accept-encoding": "gzip, br" },
      JSON.stringify({ session_id: session }),
    );
    expect(big.fast.headers["content-encoding"]).toBe("gzip");
    expect(big.fast.headers).toEqual(big.reference.headers);
    expect(gunzipSync(big.fast.body).toString()).toBe(gunzipSync(big.reference.body).toString());
    const small = await bothWays(
      server,
      "GetSession",
      { ...JSON_TYPE, "accept-encoding": "gzip" },
      JSON.stringify({ session_id: session }),
    );
    expect(small.fast.headers["content-encoding"]).toBeUndefined();
    expect(small.fast.headers).toEqual(small.reference.headers);
    expect(small.fast.body.toString()).toBe(small.reference.body.toString());
  });

  it("leaves what it does not serve to connect-node: an unknown content encoding, a bad timeout, a stream content type", async () => {
    const unknownEncoding = await post(
      server,
      "/engram.v1.MemoryService/GetSession",
      { ...JSON_TYPE, "content-encoding": "zstd" },
      "{}",
    );
    expect(unknownEncoding.status).toBe(501);
    expect(JSON.parse(unknownEncoding.body.toString())).toMatchObject({ code: "unimplemented" });
    const badTimeout = await post(
      server,
      "/engram.v1.MemoryService/GetSession",
      { ...JSON_TYPE, "connect-timeout-ms": "soon" },
      "{}",
    );
    expect(badTimeout.status).toBe(400);
    expect(JSON.parse(badTimeout.body.toString())).toMatchObject({ code: "invalid_argument" });
    const stream = await post(
      server,
      "/engram.v1.MemoryService/GetSession",
      { "content-type": "application/connect+json" },
      "{}",
    );
    expect(stream.status).toBe(415);
  });
});
