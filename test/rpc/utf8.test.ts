/**
 * Request text that is not UTF-8 is refused with INVALID_ARGUMENT, naming
 * where it is (the body, a query parameter, or a string field's path) and
 * the offset of the first bad byte, on every protocol: never stored with
 * U+FFFD in place of the bad byte, never answered INTERNAL.
 */
import * as grpc from "@grpc/grpc-js";
import { create, toBinary, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AddEventRequestSchema,
  AddEventsRequestSchema,
  BuildConversationContextRequestSchema,
  CreateSessionRequestSchema,
  GetSessionRequestSchema,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { connectClient, type MemoryClient } from "../support/clients.js";
import { sid } from "./suite.js";

let server: TestServer;
let client: MemoryClient;
let session: string;

beforeAll(async () => {
  server = await startTestServer();
  client = connectClient(server.baseUrl);
  session = sid("utf8");
  await client.createSession({ appName: "utf8", userId: "u", sessionId: session });
});
afterAll(async () => server?.stop());

/** A byte that never appears in UTF-8. */
const BAD = 0xff;
/** Where a test puts its bad byte: the marker's second byte ("B") is replaced by BAD. */
const MARK = "~BAD~";

/** `json` as bytes with the marker's "B" replaced by BAD, and that byte's offset. */
function jsonWithBadByte(json: string): { bytes: Buffer; offset: number } {
  const bytes = Buffer.from(json);
  const offset = bytes.indexOf(MARK) + 1;
  bytes[offset] = BAD;
  return { bytes, offset };
}

/** A binary message whose marked string gets a bad byte; `offset` is the bad byte's offset inside that string. */
function binaryWithBadByte<D extends DescMessage>(
  schema: D,
  init: MessageInitShape<D>,
  prefixInString: number,
): { bytes: Buffer; offset: number } {
  const bytes = Buffer.from(toBinary(schema, create(schema, init)));
  bytes[bytes.indexOf(MARK) + 1] = BAD;
  return { bytes, offset: prefixInString + 1 };
}

const eventsIn = async (id: string) => (await client.getSessionEvents({ sessionId: id })).events.length;

describe("a JSON body that is not UTF-8", () => {
  it("Connect JSON unary: 400 invalid_argument 'body: is not valid UTF-8' with the byte offset, and nothing is stored", async () => {
    const { bytes, offset } = jsonWithBadByte(
      JSON.stringify({ session_id: session, event: { event_type: "user_message", content: `hi ${MARK}` } }),
    );
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: bytes,
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      code: "invalid_argument",
      message: `body: is not valid UTF-8 (malformed byte sequence at byte ${offset})`,
      details: [{ type: "google.rpc.BadRequest", debug: { field_violations: [{ field: "body" }] } }],
    });
    expect(await eventsIn(session)).toBe(0);
  });

  it("Connect JSON streaming: the end-stream message says body: is not valid UTF-8", async () => {
    const { bytes, offset } = jsonWithBadByte(JSON.stringify({ session_id: `${session}${MARK}` }));
    const body = Buffer.concat([Buffer.from([0, 0, 0, 0, bytes.length]), bytes]);
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/StreamSessionEvents`, {
      method: "POST",
      headers: { "content-type": "application/connect+json" },
      body,
    });
    const frame = Buffer.from(await res.arrayBuffer());
    expect(frame[0]).toBe(0b10);
    expect(JSON.parse(frame.subarray(5).toString())).toMatchObject({
      error: {
        code: "invalid_argument",
        message: `body: is not valid UTF-8 (malformed byte sequence at byte ${offset})`,
      },
    });
  });

  it("Connect GET ?encoding=json: a percent-encoded bad byte in the message is refused, as is one inside base64", async () => {
    const json = JSON.stringify({ session_id: `${session}${MARK}` });
    const offset = Buffer.from(json).indexOf(MARK) + 1;
    // "~BAD~" is left as is by encodeURIComponent; its "B" becomes %FF.
    const percent = encodeURIComponent(json).replace(MARK, "~%FFAD~");
    const plain = await fetch(
      `${server.baseUrl}/engram.v1.MemoryService/GetSession?connect=v1&encoding=json&message=${percent}`,
    );
    expect(plain.status).toBe(400);
    expect(await plain.json()).toMatchObject({
      code: "invalid_argument",
      message: `query parameter message: is not valid UTF-8 (malformed byte sequence at byte ${offset})`,
      details: [{ type: "google.rpc.BadRequest", debug: { field_violations: [{ field: "query parameter message" }] } }],
    });
    const base64 = jsonWithBadByte(json).bytes.toString("base64url");
    const encoded = await fetch(
      `${server.baseUrl}/engram.v1.MemoryService/GetSession?connect=v1&encoding=json&base64=1&message=${base64}`,
    );
    expect(encoded.status).toBe(400);
    expect(((await encoded.json()) as { message: string }).message).toBe(
      `query parameter message: is not valid UTF-8 (malformed byte sequence at byte ${offset})`,
    );
  });

  it("REST: a query parameter with a bad byte is refused, naming the parameter", async () => {
    const res = await fetch(`${server.baseUrl}/memory/events?session_id=ab%FFcd&limit=5`);
    expect(res.status).toBe(400);
    const message = "query parameter session_id: is not valid UTF-8 (malformed byte sequence at byte 2)";
    expect(await res.json()).toMatchObject({
      code: "invalid_argument",
      message,
      error: message,
      details: [
        { type: "google.rpc.BadRequest", debug: { field_violations: [{ field: "query parameter session_id" }] } },
      ],
    });
  });

  it("still accepts UTF-8 with characters outside ASCII, and U+FFFD sent on purpose", async () => {
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: Buffer.from(
        JSON.stringify({ session_id: session, event: { event_type: "user_message", content: "héllo 💥 \uFFFD" } }),
      ),
    });
    expect(res.status).toBe(200);
    const { events } = await client.getSessionEvents({ sessionId: session });
    expect(events.at(-1)!.content!.kind).toEqual({ case: "stringValue", value: "héllo 💥 \uFFFD" });
  });
});

/** Binary requests whose string field holds a bad byte, and the field path each answer must name. */
const binaryCases = [
  {
    what: "AddEvent event.event_type (the append fast path)",
    method: "AddEvent",
    field: "event.event_type",
    ...binaryWithBadByte(AddEventRequestSchema, { sessionId: "s", event: { eventType: `x${MARK}` } }, 1),
  },
  {
    what: "AddEvents events[1].event_id",
    method: "AddEvents",
    field: "events[1].event_id",
    ...binaryWithBadByte(
      AddEventsRequestSchema,
      { sessionId: "s", events: [{ eventType: "a" }, { eventType: "b", eventId: `id${MARK}` }] },
      2,
    ),
  },
  {
    what: "AddEvent event.content (a string inside JSON content)",
    method: "AddEvent",
    field: "event.content",
    ...binaryWithBadByte(
      AddEventRequestSchema,
      {
        sessionId: "s",
        event: {
          eventType: "x",
          content: {
            kind: { case: "structValue", value: { fields: { a: { kind: { case: "stringValue", value: MARK } } } } },
          },
        },
      },
      0,
    ),
  },
  {
    what: "AddEvent event.metadata (a key)",
    method: "AddEvent",
    field: "event.metadata",
    ...binaryWithBadByte(
      AddEventRequestSchema,
      { sessionId: "s", event: { eventType: "x", metadata: { [`k${MARK}`]: 1 } } },
      1,
    ),
  },
  {
    what: "CreateSession app_name",
    method: "CreateSession",
    field: "app_name",
    ...binaryWithBadByte(CreateSessionRequestSchema, { appName: `app${MARK}`, userId: "u" }, 3),
  },
  {
    what: "BuildConversationContext section_budgets (a map key)",
    method: "BuildConversationContext",
    field: "section_budgets",
    ...binaryWithBadByte(BuildConversationContextRequestSchema, { sessionId: "s", sectionBudgets: { [MARK]: 3 } }, 0),
  },
  {
    what: "GetSession session_id",
    method: "GetSession",
    field: "session_id",
    ...binaryWithBadByte(GetSessionRequestSchema, { sessionId: `s${MARK}` }, 1),
  },
];

describe("a binary request whose string field is not UTF-8", () => {
  it.each(binaryCases.map((c) => [c.what, c] as const))(
    "gRPC over h2c, %s: INVALID_ARGUMENT naming the field",
    async (_what, c) => {
      const raw = new grpc.Client(server.address, grpc.credentials.createInsecure());
      try {
        const err = await new Promise<grpc.ServiceError | null>((resolve) =>
          raw.makeUnaryRequest(
            `/engram.v1.MemoryService/${c.method}`,
            (b: Buffer) => b,
            (b: Buffer) => b,
            c.bytes,
            (e) => resolve(e),
          ),
        );
        expect(err?.code).toBe(grpc.status.INVALID_ARGUMENT);
        expect(err?.details).toBe(`${c.field}: is not valid UTF-8 (malformed byte sequence at byte ${c.offset})`);
      } finally {
        raw.close();
      }
    },
  );

  it.each(binaryCases.map((c) => [c.what, c] as const))(
    "Connect binary, %s: 400 invalid_argument naming the field",
    async (_what, c) => {
      const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/${c.method}`, {
        method: "POST",
        headers: { "content-type": "application/proto" },
        body: c.bytes,
      });
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({
        code: "invalid_argument",
        message: `${c.field}: is not valid UTF-8 (malformed byte sequence at byte ${c.offset})`,
        details: [{ type: "google.rpc.BadRequest", debug: { field_violations: [{ field: c.field }] } }],
      });
    },
  );

  it("Connect GET ?encoding=proto&base64=1: refused naming the field (it was INTERNAL)", async () => {
    const c = binaryCases.find((b) => b.method === "GetSession")!;
    const res = await fetch(
      `${server.baseUrl}/engram.v1.MemoryService/GetSession?connect=v1&encoding=proto&base64=1&message=${c.bytes.toString("base64url")}`,
    );
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      code: "invalid_argument",
      message: `session_id: is not valid UTF-8 (malformed byte sequence at byte ${c.offset})`,
      details: [{ type: "google.rpc.BadRequest", debug: { field_violations: [{ field: "session_id" }] } }],
    });
  });
});
