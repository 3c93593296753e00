/**
 * Malformed gRPC requests over real HTTP/2 (node:http2 with prior knowledge,
 * the bytes written by hand) are refused with INVALID_ARGUMENT naming what is
 * wrong, never served, never UNIMPLEMENTED or INTERNAL: a unary body with no
 * whole message or with two, a flag byte other than 0 and 1 or a compressed
 * flag without grpc-encoding, a method other than POST, a grpc-timeout that
 * is not the spec's; and a Cleanup max_age past google.protobuf.Duration's
 * range, as JSON refuses it.
 */
import http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import {
  AddEventRequestSchema,
  CleanupRequestSchema,
  EventInputSchema,
  GetStatsRequestSchema,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { startTestServer, type TestServer } from "../support/engram.js";

let server: TestServer;
let session: http2.ClientHttp2Session;
beforeAll(async () => {
  server = await startTestServer();
  session = http2.connect(server.baseUrl);
  session.on("error", () => {});
});
afterAll(async () => {
  session?.close();
  await server?.stop();
});

interface GrpcAnswer {
  httpStatus: number;
  code: number | undefined;
  message: string;
}

/** One gRPC call with exactly these headers and body bytes; its status from the headers or trailers. */
function call(method: string, body: Buffer, headers: http2.OutgoingHttpHeaders = {}): Promise<GrpcAnswer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": `/engram.v1.MemoryService/${method}`,
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    let httpStatus = 0;
    let status: http2.IncomingHttpHeaders = {};
    stream.on("response", (h) => {
      httpStatus = Number(h[":status"]);
      if (h["grpc-status"] !== undefined) status = h;
    });
    stream.on("trailers", (t) => (status = t));
    stream.on("data", () => {});
    stream.on("error", reject);
    stream.on("close", () =>
      resolve({
        httpStatus,
        code: status["grpc-status"] === undefined ? undefined : Number(status["grpc-status"]),
        message: decodeURIComponent(String(status["grpc-message"] ?? "")),
      }),
    );
    stream.setTimeout(10_000, () => stream.close(http2.constants.NGHTTP2_CANCEL));
    // node:http2 ends a GET's request side itself.
    if (headers[":method"] !== "GET") stream.end(body);
  });
}

/** A length-prefixed message with this flag byte. */
function framed(message: Uint8Array, flag = 0): Buffer {
  const prefix = Buffer.alloc(5);
  prefix[0] = flag;
  prefix.writeUInt32BE(message.length, 1);
  return Buffer.concat([prefix, message]);
}

const INVALID_ARGUMENT = 3;
const stats = toBinary(GetStatsRequestSchema, create(GetStatsRequestSchema, {}));
const cleanup = (seconds: bigint) =>
  toBinary(CleanupRequestSchema, create(CleanupRequestSchema, { maxAge: { seconds } }));

describe("a unary call's body", () => {
  it("is served when it holds one whole message", async () => {
    expect((await call("GetStats", framed(stats))).code).toBe(0);
  });

  it.each([
    ["empty", Buffer.alloc(0), /ended without a whole one/],
    ["a 3-byte prefix", Buffer.from([0, 0, 0]), /ended without a whole one/],
    ["truncated inside the message", framed(cleanup(5n)).subarray(0, 7), /ended without a whole one/],
    ["two messages", Buffer.concat([framed(stats), framed(stats)]), /carried a second/],
  ])("%s: INVALID_ARGUMENT naming the body", async (_name, body, problem) => {
    const answer = await call(body.length === 7 ? "Cleanup" : "GetStats", body);
    expect(answer.code).toBe(INVALID_ARGUMENT);
    expect(answer.message).toMatch(/^body: /);
    expect(answer.message).toMatch(problem);
  });
});

describe("a message's flag byte", () => {
  it("0x80: INVALID_ARGUMENT naming the byte", async () => {
    const answer = await call("GetStats", framed(stats, 0x80));
    expect(answer.code).toBe(INVALID_ARGUMENT);
    expect(answer.message).toMatch(/^body: .*flag byte is 0x80/);
  });

  it.each([
    ["no grpc-encoding", {}],
    ["grpc-encoding: identity", { "grpc-encoding": "identity" }],
  ])("compressed with %s: INVALID_ARGUMENT", async (_name, headers) => {
    const answer = await call("GetStats", framed(stats, 1), headers);
    expect(answer.code).toBe(INVALID_ARGUMENT);
    expect(answer.message).toMatch(/^body: .*flagged compressed.*no grpc-encoding/);
  });
});

describe("a call's headers", () => {
  it("GET: 405 and INVALID_ARGUMENT naming the method", async () => {
    const answer = await call("GetStats", framed(stats), { ":method": "GET" });
    expect(answer.httpStatus).toBe(405);
    expect(answer.code).toBe(INVALID_ARGUMENT);
    expect(answer.message).toMatch(/^:method: gRPC calls are POST, not GET/);
  });

  it.each(["garbage", "1Sxyz", "123456789S", "-1S", "10"])(
    "grpc-timeout %s: INVALID_ARGUMENT naming grpc-timeout",
    async (timeout) => {
      const answer = await call("GetStats", framed(stats), { "grpc-timeout": timeout });
      expect(answer.code).toBe(INVALID_ARGUMENT);
      expect(answer.message).toMatch(/^grpc-timeout: /);
    },
  );

  it("a valid grpc-timeout is served", async () => {
    expect((await call("GetStats", framed(stats), { "grpc-timeout": "5S" })).code).toBe(0);
  });
});

describe("Cleanup max_age over gRPC", () => {
  it("2^62 s: INVALID_ARGUMENT naming max_age, as JSON refuses it", async () => {
    const answer = await call("Cleanup", framed(cleanup(2n ** 62n)));
    expect(answer.code).toBe(INVALID_ARGUMENT);
    expect(answer.message).toMatch(/^max_age: /);
  });

  it("315,576,000,000 s, Duration's largest, is served", async () => {
    expect((await call("Cleanup", framed(cleanup(315_576_000_000n)))).code).toBe(0);
  });
});

describe("a message nested 10,000 deep", () => {
  /** An AddEventRequest whose event content is a google.protobuf.Value of `depth` nested lists, written by hand. */
  function deepAddEvent(depth: number): Uint8Array {
    let value: Uint8Array = new BinaryWriter().uint32(8).uint32(0).finish(); // Value{null_value}
    for (let i = 0; i < depth; i++) {
      const list = new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(value).finish(); // ListValue{values}
      value = new BinaryWriter().tag(6, WireType.LengthDelimited).bytes(list).finish(); // Value{list_value}
    }
    const event = new BinaryWriter()
      .tag(fieldNumber(EventInputSchema, "event_type"), WireType.LengthDelimited)
      .string("note")
      .tag(fieldNumber(EventInputSchema, "content"), WireType.LengthDelimited)
      .bytes(value)
      .finish();
    return new BinaryWriter()
      .tag(fieldNumber(AddEventRequestSchema, "session_id"), WireType.LengthDelimited)
      .string("s")
      .tag(fieldNumber(AddEventRequestSchema, "event"), WireType.LengthDelimited)
      .bytes(event)
      .finish();
  }

  it("INVALID_ARGUMENT naming the field that nests too deep (event.content), not `request`", async () => {
    const answer = await call("AddEvent", framed(deepAddEvent(10_000)));
    expect(answer.code).toBe(INVALID_ARGUMENT);
    expect(answer.message).toMatch(/^event\.content: nests deeper than/);
  });
});

function fieldNumber(desc: DescMessage, name: string): number {
  return desc.fields.find((f) => f.name === name)!.number;
}
