/**
 * The edge: every protocol on the one port (Connect binary, gRPC-Web, raw
 * malformed bytes on each), the KAOS REST endpoints, health (grpc.health.v1,
 * /healthz, /readyz) and server reflection.
 */
import http from "node:http";
import { createRequire } from "node:module";
import path from "node:path";
import { create } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/engram.js";
import { connectClient, errorOf, grpcWebClient, type MemoryClient } from "../support/clients.js";
import { sid } from "./suite.js";
import { ListEventsRequestSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { kaosEvent } from "../../src/server/rest.js";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const jsonOf = async (res: Response): Promise<any> => res.json();

/** One request whose target is sent exactly as given (fetch and URL strings would resolve its dot segments first), on a fresh connection. */
function rawRequest(method: string, target: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port: server.port, method, path: target, agent: false, timeout: 10_000 },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (chunk) => (text += chunk));
        res.on("end", () => resolve({ status: res.statusCode!, text }));
      },
    );
    req.on("timeout", () => req.destroy(new Error(`${method} ${target}: no answer in 10 s`)));
    req.on("error", reject);
    req.end();
  });
}

let server: TestServer;
beforeAll(async () => {
  server = await startTestServer({ config: { agentName: "test-agent" } });
});
afterAll(async () => server?.stop());

describe.each([
  ["Connect binary", (s: TestServer) => connectClient(s.baseUrl, { binary: true })],
  ["gRPC-Web", (s: TestServer) => grpcWebClient(s.baseUrl)],
])("%s over HTTP/1.1", (_name, make) => {
  let client: MemoryClient;
  beforeAll(() => {
    client = make(server);
  });

  it("creates, appends, reads and streams", async () => {
    const id = sid();
    await client.createSession({ appName: "app", userId: "u", sessionId: id });
    const res = await client.addEvent({
      sessionId: id,
      event: { eventType: "user_message", content: { kind: { case: "stringValue", value: "hi" } } },
    });
    expect(res.event!.seq).toBe(1n);
    const { events } = await client.getSessionEvents({ sessionId: id });
    expect(events[0].content!.kind).toEqual({ case: "stringValue", value: "hi" });
    const controller = new AbortController();
    const frames = [];
    for await (const frame of client.streamSessionEvents({ sessionId: id }, { signal: controller.signal })) {
      frames.push(frame.frame.case);
      if (frame.frame.case === "caughtUp") break;
    }
    expect(frames).toEqual(["event", "caughtUp"]);
  });

  it("answers NOT_FOUND and INVALID_ARGUMENT with the field name", async () => {
    const missing = await errorOf(client.getSession({ sessionId: sid("missing") }));
    expect(missing.code).toBe(Code.NotFound);
    const bad = await errorOf(client.createSession({ appName: "", userId: "u" }));
    expect(bad.code).toBe(Code.InvalidArgument);
    expect(bad.rawMessage).toMatch(/^app_name/);
  });
});

describe("malformed bytes never answer INTERNAL", () => {
  const garbage = [
    Buffer.from([0xff, 0xff, 0xff, 0xff]),
    Buffer.from([0x0a, 0x10, 0x41]),
    Buffer.from("not protobuf at all"),
  ];

  it.each(garbage.map((g) => [g.toString("hex"), g]))(
    "Connect binary body %s -> invalid_argument",
    async (_hex, body) => {
      const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
        method: "POST",
        headers: { "content-type": "application/proto" },
        body,
      });
      expect(res.status).toBe(400);
      expect(await jsonOf(res)).toMatchObject({ code: "invalid_argument", message: expect.stringMatching(/^request/) });
    },
  );

  it.each(garbage.map((g) => [g.toString("hex"), g]))("gRPC-Web body %s -> grpc-status 3", async (_hex, payload) => {
    const body = Buffer.concat([Buffer.from([0, 0, 0, 0, payload.length]), payload]);
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto" },
      body,
    });
    expect(res.headers.get("grpc-status")).toBe("3");
  });

  it("Connect streaming body that does not decode -> end-stream invalid_argument", async () => {
    const payload = Buffer.from([0xff, 0xff, 0xff]);
    const body = Buffer.concat([Buffer.from([0, 0, 0, 0, payload.length]), payload]);
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/StreamSessionEvents`, {
      method: "POST",
      headers: { "content-type": "application/connect+proto" },
      body,
    });
    const bytes = Buffer.from(await res.arrayBuffer());
    expect(bytes[0]).toBe(0b10);
    expect(JSON.parse(bytes.subarray(5).toString())).toMatchObject({ error: { code: "invalid_argument" } });
  });

  it("gRPC over h2c with garbage bytes -> INVALID_ARGUMENT", async () => {
    const client = new grpc.Client(server.address, grpc.credentials.createInsecure());
    const err = await new Promise<grpc.ServiceError>((resolve) =>
      client.makeUnaryRequest(
        "/engram.v1.MemoryService/AddEvent",
        (b: Buffer) => b,
        (b: Buffer) => b,
        Buffer.from([0xff, 0xff, 0xff]),
        (e) => resolve(e!),
      ),
    );
    client.close();
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err.details).toMatch(/^request/);
  });

  it("Connect JSON that is not JSON -> invalid_argument", async () => {
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/AddEvent`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{not json",
    });
    expect(res.status).toBe(400);
    expect((await jsonOf(res)).code).toBe("invalid_argument");
  });
});

describe("curl-friendly Connect JSON", () => {
  it("accepts curl's default form content type and answers snake_case JSON", async () => {
    const id = sid();
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/CreateSession`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: JSON.stringify({ app_name: "app", user_id: "u", session_id: id }),
    });
    expect(res.status).toBe(200);
    const body = await jsonOf(res);
    expect(body.session).toMatchObject({ session_id: id, app_name: "app", user_id: "u", head_seq: "0" });
  });

  it("serves side-effect-free methods over GET", async () => {
    const res = await fetch(
      `${server.baseUrl}/engram.v1.MemoryService/GetStats?encoding=json&message=${encodeURIComponent("{}")}`,
    );
    expect(res.status).toBe(200);
    expect(await jsonOf(res)).toMatchObject({ backend: "local" });
  });
});

describe("KAOS REST endpoints", () => {
  it("GET /memory/events and /memory/sessions return the KAOS shapes", async () => {
    const client = connectClient(server.baseUrl);
    const id = sid();
    await client.createSession({ appName: "app", userId: "u", sessionId: id });
    await client.addEvents({
      sessionId: id,
      events: [
        {
          eventType: "user_message",
          eventId: "e1",
          content: { kind: { case: "stringValue", value: "hi" } },
          metadata: { k: "v" },
        },
        { eventType: "agent_response", eventId: "e2", content: { kind: { case: "stringValue", value: "hello" } } },
      ],
    });
    const events = await jsonOf(await fetch(`${server.baseUrl}/memory/events?session_id=${id}&limit=10`));
    expect(events).toEqual({
      agent: "test-agent",
      total: 2,
      events: [
        {
          event_id: "e1",
          timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
          event_type: "user_message",
          content: "hi",
          metadata: { k: "v" },
          seq: 1,
          session_id: id,
        },
        {
          event_id: "e2",
          timestamp: expect.any(String),
          event_type: "agent_response",
          content: "hello",
          metadata: {},
          seq: 2,
          session_id: id,
        },
      ],
    });
    const limited = await jsonOf(await fetch(`${server.baseUrl}/memory/events?session_id=${id}&limit=1`));
    expect(limited.events.map((e: { event_id: string }) => e.event_id)).toEqual(["e2"]);
    const capped = await fetch(`${server.baseUrl}/memory/events?limit=5000`);
    expect(capped.status).toBe(200);
    const sessions = await jsonOf(await fetch(`${server.baseUrl}/memory/sessions?app_name=app`));
    expect(sessions.agent).toBe("test-agent");
    expect(sessions.sessions).toContain(id);
    expect(sessions.total).toBe(sessions.sessions.length);
  });

  it("answers 400 naming the parameter and 405 for writes", async () => {
    const bad = await fetch(`${server.baseUrl}/memory/events?limit=-1`);
    expect(bad.status).toBe(400);
    expect((await jsonOf(bad)).error).toMatch(/^limit/);
    expect((await fetch(`${server.baseUrl}/memory/events`, { method: "POST" })).status).toBe(405);
  });

  it("writes JSON.stringify of each event's KAOS shape, byte for byte, on every read of the same events", async () => {
    const client = connectClient(server.baseUrl);
    const id = sid();
    await client.createSession({ appName: "app", userId: "u", sessionId: id });
    const struct = {
      fields: {
        text: { kind: { case: "stringValue" as const, value: 'quote " and \\ and \u00e9 \u{1F600}' } },
        n: { kind: { case: "numberValue" as const, value: 1.5 } },
        ok: { kind: { case: "boolValue" as const, value: true } },
        none: { kind: { case: "nullValue" as const, value: 0 } },
        list: {
          kind: {
            case: "listValue" as const,
            value: { values: [{ kind: { case: "numberValue" as const, value: -2 } }] },
          },
        },
      },
    };
    await client.addEvents({
      sessionId: id,
      events: [
        {
          eventType: "tool_call",
          content: { kind: { case: "structValue", value: struct } },
          metadata: { nested: { a: [1, "two", null] }, "</script>": "x" },
        },
        { eventType: "user_message", content: { kind: { case: "stringValue", value: "plain" } } },
        { eventType: "agent_response" },
      ],
    });
    const { events } = await server.service.listEvents(create(ListEventsRequestSchema, { sessionId: id, limit: 10 }));
    const expected = JSON.stringify({ agent: "test-agent", events: events.map(kaosEvent), total: events.length });
    for (let read = 0; read < 2; read++) {
      const res = await fetch(`${server.baseUrl}/memory/events?session_id=${id}&limit=10`);
      expect(res.headers.get("content-type")).toBe("application/json");
      expect(await res.text()).toBe(expected);
    }
  });

  it.each([
    ["GET", "/memory/./events?session_id={id}", 200, '"total":1'],
    ["GET", "/memory/x/../events?session_id={id}&limit=1", 200, '"total":1'],
    ["GET", "/memory/%2e%2e/memory/events?session_id={id}", 200, '"total":1'],
    ["GET", "/memory/events?session_id={id}&limit=%31", 200, '"total":1'],
    ["GET", "/memory/events?session_id={id}&limit=1%FF", 400, '"error":"query parameter limit: is not valid UTF-8'],
    ["GET", "/memory/events?session_id={id}&limit=abc", 400, '"error":"limit: must be a positive whole number"'],
    ["GET", "/mcp/../healthz", 200, '{"status":"ok"}'],
    ["POST", "/memory/x/../events", 405, '"error":"POST is not allowed on /memory/events"'],
    ["GET", "//memory/events", 404, '"code":"not_found"'],
    ["GET", "/memory/events/", 404, '"code":"not_found"'],
  ])("%s %s answers %i as URL reads the target", async (method, target, status, fragment) => {
    const client = connectClient(server.baseUrl);
    const id = sid();
    await client.createSession({ appName: "app", userId: "u", sessionId: id });
    await client.addEvent({
      sessionId: id,
      event: { eventType: "user_message", content: { kind: { case: "stringValue", value: "hi" } } },
    });
    const answer = await rawRequest(method, target.replace("{id}", id));
    expect(answer.status).toBe(status);
    expect(answer.text).toContain(fragment);
  });

  it("answers a target URL cannot parse (//[) with 404 not_found, and keeps serving", async () => {
    for (const method of ["GET", "POST"]) {
      const answer = await rawRequest(method, "//[");
      expect(answer.status).toBe(404);
      expect(JSON.parse(answer.text)).toMatchObject({ code: "not_found", error: "not found" });
    }
    expect((await fetch(`${server.baseUrl}/healthz`)).status).toBe(200);
  });

  it("GET /memory/events answers an unknown session with 200 and no events, as KAOS", async () => {
    const missing = await fetch(`${server.baseUrl}/memory/events?session_id=${sid("missing")}`);
    expect(missing.status).toBe(200);
    expect(await jsonOf(missing)).toEqual({ agent: "test-agent", events: [], total: 0 });
  });

  it("GET /memory/sessions lists every session with its true total, and pages only when asked", async () => {
    const client = connectClient(server.baseUrl);
    const app = `many-${sid()}`;
    const ids = Array.from({ length: 152 }, (_, i) => `s-${String(i).padStart(3, "0")}`);
    for (let i = 0; i < ids.length; i += 38) {
      await Promise.all(
        ids
          .slice(i, i + 38)
          .map((id) => client.createSession({ appName: app, userId: "u", sessionId: `${app}-${id}` })),
      );
    }
    const all = await jsonOf(await fetch(`${server.baseUrl}/memory/sessions?app_name=${app}`));
    expect(all.total).toBe(152);
    expect(all.sessions).toEqual(ids.map((id) => `${app}-${id}`));
    expect(all.next_page_token).toBe("");

    const first = await jsonOf(await fetch(`${server.baseUrl}/memory/sessions?app_name=${app}&limit=100`));
    expect(first.sessions).toHaveLength(100);
    expect(first.next_page_token).not.toBe("");
    const rest = await jsonOf(
      await fetch(
        `${server.baseUrl}/memory/sessions?app_name=${app}&page_token=${encodeURIComponent(first.next_page_token)}`,
      ),
    );
    expect([...first.sessions, ...rest.sessions]).toEqual(all.sessions);
    expect(rest.next_page_token).toBe("");
  });
});

describe("health and reflection", () => {
  it("/healthz and /readyz report SERVING", async () => {
    expect((await fetch(`${server.baseUrl}/healthz`)).status).toBe(200);
    const ready = await fetch(`${server.baseUrl}/readyz`);
    expect(ready.status).toBe(200);
    expect(await jsonOf(ready)).toMatchObject({ status: "SERVING", backend: "local" });
  });

  it("grpc.health.v1.Health/Check answers SERVING for the server and MemoryService", async () => {
    const require = createRequire(import.meta.url);
    const healthProto = require("grpc-health-check").protoPath as string;
    const def = grpc.loadPackageDefinition(protoLoader.loadSync(healthProto, { enums: String })) as unknown as {
      grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
    };
    const client = new def.grpc.health.v1.Health(server.address, grpc.credentials.createInsecure());
    for (const service of ["", "engram.v1.MemoryService"]) {
      const res = await new Promise<{ status: string }>((resolve, reject) =>
        (
          client as unknown as { check: (r: object, cb: (e: Error | null, r: { status: string }) => void) => void }
        ).check({ service }, (e, r) => (e ? reject(e) : resolve(r))),
      );
      expect(res.status).toBe("SERVING");
    }
    client.close();
  });

  it("server reflection lists MemoryService and health, and describes the contract", async () => {
    const require = createRequire(import.meta.url);
    const reflectionDir = path.join(path.dirname(require.resolve("@grpc/reflection/package.json")), "build/proto");
    const def = grpc.loadPackageDefinition(
      protoLoader.loadSync("grpc/reflection/v1/reflection.proto", { includeDirs: [reflectionDir], keepCase: true }),
    ) as unknown as { grpc: { reflection: { v1: { ServerReflection: grpc.ServiceClientConstructor } } } };
    const client = new def.grpc.reflection.v1.ServerReflection(server.address, grpc.credentials.createInsecure());
    const call = (
      client as unknown as { ServerReflectionInfo: () => grpc.ClientDuplexStream<object, Record<string, unknown>> }
    ).ServerReflectionInfo();
    const responses: Record<string, unknown>[] = [];
    const done = new Promise<void>((resolve, reject) => {
      call.on("data", (d) => {
        responses.push(d);
        if (responses.length === 2) call.end();
      });
      call.on("end", resolve);
      call.on("error", reject);
    });
    call.write({ list_services: "" });
    call.write({ file_containing_symbol: "engram.v1.MemoryService" });
    await done;
    client.close();
    const services = (responses[0].list_services_response as { service: { name: string }[] }).service.map(
      (s) => s.name,
    );
    expect(services).toEqual(expect.arrayContaining(["engram.v1.MemoryService", "grpc.health.v1.Health"]));
    const files = (responses[1].file_descriptor_response as { file_descriptor_proto: Buffer[] }).file_descriptor_proto;
    expect(files.length).toBeGreaterThan(0);
    expect(Buffer.concat(files).toString("latin1")).toContain("StreamSessionEvents");
  });
});

describe("refusals a newcomer meets first carry a body saying what to send", () => {
  const call = async (method: string, procedure: string, headers: Record<string, string>, body?: string) => {
    const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/${procedure}`, { method, headers, body });
    return { status: res.status, allow: res.headers.get("allow"), json: await jsonOf(res) };
  };

  it("a content type the API does not speak is 415 with a Connect error naming it and the types to send", async () => {
    for (const contentType of ["text/plain", "application/xml"]) {
      const answer = await call("POST", "GetStats", { "content-type": contentType }, "{}");
      expect(answer.status, contentType).toBe(415);
      expect(answer.json).toMatchObject({
        code: "unknown",
        message: expect.stringContaining(`Content-Type "${contentType}"`),
      });
      expect(answer.json.message).toContain("application/json");
    }
  });

  it("a GET on a method that takes only POST is 405 with Allow and a Connect error saying to POST", async () => {
    const answer = await call("GET", "AddEvent", {});
    expect(answer.status).toBe(405);
    expect(answer.allow).toBe("POST");
    expect(answer.json).toMatchObject({
      code: "unknown",
      message: expect.stringContaining("send POST with Content-Type application/json"),
    });
  });

  it("a browser's plain GET of a read-only method says how a GET must look", async () => {
    const answer = await call("GET", "GetStats", { accept: "text/html" });
    expect(answer.status).toBe(415);
    expect(answer.json.message).toContain("?connect=v1&encoding=json&message=");
  });
});
