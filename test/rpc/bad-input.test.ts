/**
 * A JSON request that does not decode is refused with INVALID_ARGUMENT whose
 * message says what is wrong and where: "body: ..." for text that is not a
 * JSON object, else the path of the field ("events[1].event_id: ..."), on
 * Connect unary, Connect streaming, Connect GET and gRPC-Web JSON alike.
 * (protobuf-es' own message names a field's type and name, e.g. "cannot
 * decode field engram.v1.EventInput.event_id from JSON", not where it sits.)
 */
import { brotliCompressSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { AddEventRequestSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { startTestServer, type TestServer } from "../support/engram.js";

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => server?.stop());

interface JsonAnswer {
  status: number;
  code?: string;
  message?: string;
  details?: { type: string; debug?: { field_violations?: { field: string; description: string }[] } }[];
}

async function connectJson(method: string, body: string): Promise<JsonAnswer> {
  const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/${method}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  return { status: res.status, ...((await res.json()) as Omit<JsonAnswer, "status">) };
}

/** The field paths of an answer's google.rpc.BadRequest detail. */
function violatedFields(answer: JsonAnswer): string[] {
  return (answer.details ?? [])
    .filter((d) => d.type === "google.rpc.BadRequest")
    .flatMap((d) => d.debug?.field_violations?.map((v) => v.field) ?? []);
}

describe("Connect JSON bodies that do not decode name what is wrong", () => {
  it.each([
    ["AddEvent", "{not json", /^body: is not valid JSON \(.*position 1.*\)$/],
    ["AddEvent", "[1, 2]", /^body: must be a JSON object \(got an array\)$/],
    ["AddEvent", '"just a string"', /^body: must be a JSON object \(got "just a string"\)$/],
    ["AddEvent", '{"session_id": {}}', /^session_id: expected string, got object$/],
    ["AddEvent", '{"session_id": "s", "event": {"event_type": 5}}', /^event\.event_type: expected string, got 5$/],
    [
      "AddEvent",
      '{"session_id": "s", "event": {"event_type": "a", "timestamp": "yesterday"}}',
      /^event\.timestamp: is not a valid google\.protobuf\.Timestamp/,
    ],
    [
      "AddEvent",
      '{"session_id": "s", "event": {"event_type": "a", "metadata": true}}',
      /^event\.metadata: is not a valid google\.protobuf\.Struct/,
    ],
    [
      "AddEvents",
      '{"session_id": "s", "events": [{"event_type": "a"}, {"event_type": "b", "event_id": 7}]}',
      /^events\[1\]\.event_id: expected string, got 7$/,
    ],
    ["AddEvents", '{"session_id": "s", "events": [{"event_type": "a"}, null]}', /^events\[1\]: must not be null$/],
    ["AddEvents", '{"session_id": "s", "events": {"event_type": "a"}}', /^events: expected Array, got object$/],
    [
      "AddEvent",
      '{"session_id": "s", "sessionId": "t"}',
      /^session_id: is set twice \(as "session_id" and "sessionId"\)$/,
    ],
    ["AddEvent", '{"session_id": "s", "session_id": "t"}', /^body: .*duplicate object key "session_id"/],
    ["Cleanup", '{"max_age": "forever"}', /^max_age: is not a valid google\.protobuf\.Duration/],
    ["ListSessions", '{"page_size": -1}', /^page_size: /],
    ["BuildConversationContext", '{"session_id": "s", "section_budgets": {"a": -1}}', /^section_budgets: /],
    ["GetSessionEvents", '{"session_id": "s", "event_types": [null]}', /^event_types: /],
  ])("%s %s", async (method, body, message) => {
    const answer = await connectJson(method, body);
    expect(answer.status).toBe(400);
    expect(answer.code).toBe("invalid_argument");
    expect(answer.message).toMatch(message);
    // The detail names the same field as the message, for machines.
    expect(violatedFields(answer)).toEqual([answer.message!.slice(0, answer.message!.indexOf(": "))]);
  });

  it("Connect streaming JSON: the end-stream error names the field", async () => {
    const json = Buffer.from(JSON.stringify({ session_id: "s", after_seq: "not a number" }));
    const body = Buffer.concat([Buffer.from([0, 0, 0, 0, json.length]), json]);
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/StreamSessionEvents`, {
      method: "POST",
      headers: { "content-type": "application/connect+json" },
      body,
    });
    const frame = Buffer.from(await res.arrayBuffer());
    expect(frame[0]).toBe(0b10);
    expect(JSON.parse(frame.subarray(5).toString())).toMatchObject({
      error: { code: "invalid_argument", message: expect.stringMatching(/^after_seq: /) },
    });
  });

  it("Connect GET ?encoding=json: names the field", async () => {
    const res = await fetch(
      `${server.baseUrl}/engram.v1.MemoryService/GetSession?encoding=json&message=${encodeURIComponent('{"session_id": 1}')}`,
    );
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      code: "invalid_argument",
      message: "session_id: expected string, got 1",
      details: [
        {
          type: "google.rpc.BadRequest",
          debug: { field_violations: [{ field: "session_id", description: "expected string, got 1" }] },
        },
      ],
    });
  });

  it("gRPC-Web JSON: names the field, and a valid JSON request is served (the binary guard used to refuse it)", async () => {
    const call = (method: string, json: string) => {
      const bytes = Buffer.from(json);
      return fetch(`${server.baseUrl}/engram.v1.MemoryService/${method}`, {
        method: "POST",
        headers: { "content-type": "application/grpc-web+json" },
        body: Buffer.concat([Buffer.from([0, 0, 0, 0, bytes.length]), bytes]),
      });
    };
    const bad = await call("GetSession", '{"session_id": []}');
    expect(bad.headers.get("grpc-status")).toBe("3");
    expect(decodeURIComponent(bad.headers.get("grpc-message")!)).toBe("session_id: expected string, got Array(0)");
    const good = await call("GetStats", "{}");
    await good.arrayBuffer();
    expect(good.status).toBe(200);
    expect(good.headers.get("grpc-status")).toBeNull(); // trailers-only is for errors: a served call puts its status in the body's trailer frame
  });
});

describe("Connect JSON is strict: an unknown field is refused, naming its path", () => {
  it.each([
    ["AddEvent", "event.contnet", { session_id: "s", event: { event_type: "user_message", contnet: "hi" } }],
    ["AddEvent", "sesion_id", { session_id: "s", sesion_id: "t" }],
    [
      "AddEvents",
      "events[1].contnet",
      { session_id: "s", events: [{ event_type: "a" }, { event_type: "b", contnet: "x" }] },
    ],
    ["ListSessions", "page_sise", { app_name: "a", page_sise: 3 }],
    ["AddEvent", `event.${"k".repeat(64)}…`, { session_id: "s", event: { event_type: "a", ["k".repeat(500)]: 1 } }],
  ])("%s names %s as an unknown field, in the message and in the BadRequest detail", async (method, path, body) => {
    const answer = await connectJson(method, JSON.stringify(body));
    expect(answer.status).toBe(400);
    expect(answer.code).toBe("invalid_argument");
    expect(answer.message).toBe(`${path}: unknown field`);
    expect(violatedFields(answer)).toEqual([path]);
  });

  it("a misspelled content is refused and nothing is stored (it used to store content null and show 'User: null')", async () => {
    await connectJson("CreateSession", JSON.stringify({ session_id: "strict-json", app_name: "a", user_id: "u" }));
    const answer = await connectJson(
      "AddEvent",
      JSON.stringify({ session_id: "strict-json", event: { event_type: "user_message", contnet: "hi" } }),
    );
    expect(answer.message).toBe("event.contnet: unknown field");
    const session = (await connectJson("GetSession", JSON.stringify({ session_id: "strict-json" }))) as {
      session?: { head_seq?: string };
    };
    expect(session.session?.head_seq).toBe("0");
  });

  it("keys inside free-form JSON (content, metadata) are data, not fields", async () => {
    const answer = await connectJson(
      "AddEvent",
      JSON.stringify({
        session_id: "strict-json",
        event: { event_type: "user_message", content: { contnet: 1 }, metadata: { anything: true } },
      }),
    );
    expect(answer.status).toBe(200);
  });

  it("Connect GET ?encoding=json and gRPC-Web JSON refuse it too", async () => {
    const get = await fetch(
      `${server.baseUrl}/engram.v1.MemoryService/GetSession?encoding=json&message=${encodeURIComponent('{"session_id": "s", "verbose": true}')}`,
    );
    expect(get.status).toBe(400);
    expect(await get.json()).toMatchObject({ code: "invalid_argument", message: "verbose: unknown field" });
    const bytes = Buffer.from('{"session_id": "s", "verbose": true}');
    const web = await fetch(`${server.baseUrl}/engram.v1.MemoryService/GetSession`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+json" },
      body: Buffer.concat([Buffer.from([0, 0, 0, 0, bytes.length]), bytes]),
    });
    expect(web.headers.get("grpc-status")).toBe("3");
    expect(decodeURIComponent(web.headers.get("grpc-message")!)).toBe("verbose: unknown field");
  });

  it.each([
    ["gzip", gzipSync],
    ["br", brotliCompressSync],
  ] as const)("a %s-compressed body is refused the same way", async (encoding, compress) => {
    const body = compress(
      Buffer.from(JSON.stringify({ session_id: "s", event: { event_type: "user_message", contnet: "hi" } })),
    );
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-encoding": encoding },
      body,
    });
    expect(res.status).toBe(400);
    const answer = { status: res.status, ...((await res.json()) as Omit<JsonAnswer, "status">) };
    expect(answer.message).toBe("event.contnet: unknown field");
    expect(violatedFields(answer)).toEqual(["event.contnet"]);
  });

  it("a compressed body that is valid is served (the guard's inflating leaves it intact for connect)", async () => {
    const body = gzipSync(
      Buffer.from(
        JSON.stringify({ session_id: "strict-json", event: { event_type: "user_message", content: "zipped" } }),
      ),
    );
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-encoding": "gzip" },
      body,
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { event: { content: unknown } }).event.content).toBe("zipped");
  });

  it("binary protobuf keeps protobuf's rule: an unknown field number is skipped and the event is stored", async () => {
    const known = toBinary(
      AddEventRequestSchema,
      create(AddEventRequestSchema, { sessionId: "strict-json", event: { eventType: "user_message" } }),
    );
    const unknown = new BinaryWriter().tag(99, WireType.LengthDelimited).string("from a newer client").finish();
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
      method: "POST",
      headers: { "content-type": "application/proto" },
      body: Buffer.concat([known, unknown]),
    });
    expect(res.status).toBe(200);
  });
});
