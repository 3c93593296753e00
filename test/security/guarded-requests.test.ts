/**
 * The guard never changes a caller's request: an app or user a scoped key
 * fills in, or trace ids from traceparent, travel in a request of its own. An edge that makes several calls
 * from one decoded message (MCP) or keeps its request for a retry must find
 * it as it sent it. Each request here is deep-frozen, so a write into it
 * throws, and compared with a copy taken before the call.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { clone, create, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import {
  WriteMemoriesRequestSchema,
  type WriteMemoriesResponse,
} from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import {
  AddEventRequestSchema,
  CreateSessionRequestSchema,
  GetOrCreateSessionRequestSchema,
  ListSessionsRequestSchema,
  type AddEventResponse,
  type CreateSessionResponse,
  type GetOrCreateSessionResponse,
  type ListSessionsResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { Authenticator } from "../../src/auth/index.js";
import { CallGuard, type RpcName } from "../../src/service/guard/index.js";
import { Metrics } from "../../src/service/metrics.js";
import { Quotas } from "../../src/service/quotas.js";
import { startTestServer, type TestServer } from "../support/engram.js";

const APP = `guarded-${process.pid}`;
let dir: string;
let server: TestServer;
let guard: CallGuard;
let authorization: string;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-guarded-"));
  const keys = new FileKeyStore(path.join(dir, "keys.json"));
  const { key, record } = generateApiKey({ role: "write", apps: [APP], userId: "alice" });
  await keys.create(record);
  authorization = `Bearer ${key}`;
  server = await startTestServer();
  const quotas = await Quotas.open({
    rateLimit: 0,
    maxStreams: 10,
    maxStreamsPerKey: 10,
    memoryEnabled: true,
    memoryType: "local",
    keyPrefix: "guarded",
  });
  guard = new CallGuard(server.service, {
    authenticator: new Authenticator(keys, 0),
    quotas,
    metrics: new Metrics(server.store),
  });
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

function deepFreeze<T>(value: T): T {
  if (value && typeof value === "object" && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

/** Calls `method` through the guard with the user-bound key; the request must come back as it went in. */
async function callUnchanged<Desc extends DescMessage>(
  method: RpcName,
  schema: Desc,
  request: MessageShape<Desc>,
  traceparent?: string,
): Promise<unknown> {
  const before = clone(schema, request);
  deepFreeze(request);
  const context = { authorization, traceparent, protocol: "test" };
  const answer = await (guard.handler(method)(request, context) as Promise<unknown>);
  expect(request).toStrictEqual(before);
  return answer;
}

describe("the guard and a user-bound key's defaults", () => {
  it("creates the session under the key's app and user without writing them into the request", async () => {
    const request = create(CreateSessionRequestSchema, { sessionId: `created-${process.pid}` });
    const { session } = (await callUnchanged(
      "createSession",
      CreateSessionRequestSchema,
      request,
    )) as CreateSessionResponse;
    expect([session?.appName, session?.userId]).toEqual([APP, "alice"]);
    expect(request.appName).toBe("");
  });

  it("gets or creates the session under the key's app and user without writing them into the request", async () => {
    const request = create(GetOrCreateSessionRequestSchema, { sessionId: `got-${process.pid}` });
    const answer = (await callUnchanged(
      "getOrCreateSession",
      GetOrCreateSessionRequestSchema,
      request,
    )) as GetOrCreateSessionResponse;
    expect([answer.session?.appName, answer.session?.userId]).toEqual([APP, "alice"]);
    expect(request.userId).toBe("");
  });

  it("lists the key's app and user's sessions without writing the filter into the request", async () => {
    const request = create(ListSessionsRequestSchema, {});
    const { sessions } = (await callUnchanged(
      "listSessions",
      ListSessionsRequestSchema,
      request,
    )) as ListSessionsResponse;
    expect(sessions.length).toBeGreaterThan(0);
    expect(sessions.every((s) => s.appName === APP && s.userId === "alice")).toBe(true);
    expect([request.appName, request.userId]).toEqual([undefined, undefined]);
  });

  it("writes a memory under the key's user without writing it into the request", async () => {
    const request = create(WriteMemoriesRequestSchema, { memories: [{ appName: APP, text: "likes tea" }] });
    const { memories } = (await callUnchanged(
      "writeMemories",
      WriteMemoriesRequestSchema,
      request,
    )) as WriteMemoriesResponse;
    expect(memories[0]?.userId).toBe("alice");
    expect(request.memories[0].userId).toBeUndefined();
  });

  it("appends an event traced from traceparent without writing the trace ids into the request", async () => {
    const sessionId = `traced-${process.pid}`;
    await callUnchanged("createSession", CreateSessionRequestSchema, create(CreateSessionRequestSchema, { sessionId }));
    const request = create(AddEventRequestSchema, {
      sessionId,
      event: { eventType: "message" },
    });
    const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const { event } = (await callUnchanged(
      "addEvent",
      AddEventRequestSchema,
      request,
      traceparent,
    )) as AddEventResponse;
    expect(event?.metadata).toMatchObject({
      trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
      span_id: "00f067aa0ba902b7",
    });
    expect(request.event?.metadata).toBeUndefined();
  });
});
