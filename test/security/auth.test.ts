/**
 * Auth and tenant isolation over real sockets, on both protocols and REST:
 * every RPC and stream with a key of another tenant answers exactly as for
 * an absent session; missing, malformed, unknown and revoked keys are
 * UNAUTHENTICATED; roles, per-key rate limits and stream limits hold.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryService as MemoryServiceDesc } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { generateApiKey, type ApiKeyRecord } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { connectClient, errorOf, followStream, grpcJsClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

let dir: string;
let keyFile: FileKeyStore;
let server: TestServer;
const keys: Record<string, string> = {};
const ids: Record<string, string> = {};

async function makeKey(
  label: string,
  scope: Pick<ApiKeyRecord, "role" | "apps" | "userId" | "rateLimit">,
): Promise<void> {
  const { key, record } = generateApiKey(scope);
  await keyFile.create(record);
  keys[label] = key;
  ids[label] = record.id;
}

const run = `${process.pid}`;
const APP_A = `tenant-a-${run}`;
const APP_B = `tenant-b-${run}`;
/** The user of the erasure tests (one of their keys is bound to it). */
const ERASABLE = `erasable-${run}`;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-auth-"));
  keyFile = new FileKeyStore(path.join(dir, "keys.json"));
  await makeKey("a", { role: "write", apps: [APP_A] });
  await makeKey("aAlice", { role: "write", apps: [APP_A], userId: "alice" });
  await makeKey("aRead", { role: "read", apps: [APP_A] });
  await makeKey("b", { role: "write", apps: [APP_B] });
  await makeKey("ab", { role: "write", apps: [APP_A, APP_B] });
  await makeKey("admin", { role: "admin", apps: ["*"] });
  await makeKey("appAdmin", { role: "admin", apps: [APP_A] });
  await makeKey("limited", { role: "read", apps: [APP_A], rateLimit: 3 });
  await makeKey("limitedStreamer", { role: "read", apps: [APP_A], rateLimit: 1 });
  await makeKey("revoked", { role: "write", apps: [APP_A] });
  await makeKey("streamer", { role: "read", apps: [APP_A] });
  await makeKey("revokedWhileStreaming", { role: "read", apps: [APP_A] });
  await makeKey("erasable", { role: "write", apps: [APP_A], userId: ERASABLE });
  await makeKey("erasableRead", { role: "read", apps: [APP_A], userId: ERASABLE });
  server = await startTestServer({
    config: { auth: true, authKeysFile: keyFile.path, authCacheMs: 0, maxStreamsPerKey: 2 },
  });
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const bearer = (label: string) => ({ authorization: `Bearer ${keys[label]}` });

/** A minimal request for every RPC, addressed at `sessionId` where the RPC takes one. */
function requestFor(method: string, sessionId: string): Record<string, unknown> {
  switch (method) {
    case "createSession":
      return { appName: APP_A, userId: "alice", sessionId };
    case "getOrCreateSession":
      return { sessionId, appName: APP_A, userId: "alice" };
    case "addEvent":
      return {
        sessionId,
        event: { eventType: "user_message", content: { kind: { case: "stringValue", value: "x" } } },
      };
    case "addEvents":
      return { sessionId, events: [{ eventType: "user_message" }] };
    case "cleanup":
      return { maxAge: { seconds: 1n } };
    case "deleteUserData":
      return { appName: APP_A, userId: "nobody" };
    case "listSessions":
    case "getStats":
      return {};
    default:
      return { sessionId };
  }
}

async function call(client: MemoryClient, method: string, req: Record<string, unknown>): Promise<unknown> {
  const fn = (client as unknown as Record<string, (r: unknown, o?: unknown) => unknown>)[method];
  const out = fn(req, { timeoutMs: 10_000 });
  if (Symbol.asyncIterator in (out as object)) {
    for await (const frame of out as AsyncIterable<unknown>) return frame; // first frame is enough
    return undefined;
  }
  return out;
}

const PROTOCOLS = [
  ["gRPC (grpc-js)", (h: Record<string, string>) => grpcJsClient(server.address, { headers: h })],
  ["Connect JSON", (h: Record<string, string>) => connectClient(server.baseUrl, { headers: h })],
] as const;

describe.each(PROTOCOLS)("auth over %s", (_name, clientWith) => {
  const sessionA = `auth-a-${run}-${_name.length}`;
  const sessionBob = `auth-bob-${run}-${_name.length}`;
  const sessionB = `auth-b-${run}-${_name.length}`;
  let a: MemoryClient;
  let b: MemoryClient;
  let admin: MemoryClient;

  beforeAll(async () => {
    a = clientWith(bearer("a"));
    b = clientWith(bearer("b"));
    admin = clientWith(bearer("admin"));
    await a.createSession({ appName: APP_A, userId: "alice", sessionId: sessionA });
    await a.addEvent({
      sessionId: sessionA,
      event: { eventType: "user_message", content: { kind: { case: "stringValue", value: "secret of A" } } },
    });
    await a.createSession({ appName: APP_A, userId: "bob", sessionId: sessionBob });
    await b.createSession({ appName: APP_B, userId: "carol", sessionId: sessionB });
    await b.addEvent({ sessionId: sessionB, event: { eventType: "user_message" } });
  });
  afterAll(() => {
    for (const c of [a, b, admin]) c?.close();
  });

  it("answers UNAUTHENTICATED on every RPC without a key, with a malformed key, an unknown key and a wrong secret", async () => {
    const forged = keys.a.slice(0, -4) + (keys.a.endsWith("AAAA") ? "BBBB" : "AAAA");
    for (const headers of [
      {} as Record<string, string>,
      { authorization: "Basic Zm9vOmJhcg==" },
      { authorization: "Bearer not-a-key" },
      { authorization: `Bearer ek_000000000000_${"A".repeat(43)}` },
      { authorization: `Bearer ${forged}` },
    ]) {
      const client = clientWith(headers);
      try {
        for (const method of MemoryServiceDesc.methods) {
          const err = await errorOf(call(client, method.localName, requestFor(method.localName, sessionA)));
          expect(err.code, `${method.name} with ${JSON.stringify(headers)}`).toBe(Code.Unauthenticated);
          expect(err.rawMessage).toMatch(/^authorization: /);
          expect(err.rawMessage).not.toContain(keys.a.slice(16));
        }
      } finally {
        client.close();
      }
    }
  });

  it("answers NOT_FOUND, word for word as for an absent session, on every session RPC and stream of another tenant", async () => {
    const sessionRpcs = [
      "getSession",
      "deleteSession",
      "addEvent",
      "addEvents",
      "getSessionEvents",
      "streamSessionEvents",
      "buildConversationContext",
      "countEventTokens",
      "listEvents",
    ];
    for (const method of sessionRpcs) {
      const foreign = await errorOf(call(b, method, requestFor(method, sessionA)));
      const absent = await errorOf(call(b, method, requestFor(method, `${sessionA}-absent`)));
      expect(foreign.code, method).toBe(Code.NotFound);
      expect(foreign.rawMessage, method).toBe(absent.rawMessage.replace(`${sessionA}-absent`, sessionA));
    }
    // Nothing was changed or deleted by those attempts.
    const events = await a.getSessionEvents({ sessionId: sessionA });
    expect(events.events.map((e) => e.eventType)).toEqual(["user_message"]);
  });

  it("never lists another tenant's sessions or events (RPC and REST)", async () => {
    const mine = await b.listSessions({});
    expect(mine.sessions.map((s) => s.appName)).toEqual(mine.sessions.map(() => APP_B));
    expect(mine.sessions.map((s) => s.sessionId)).toContain(sessionB);
    expect((await b.listSessions({ appName: APP_A })).sessions).toEqual([]);
    const recent = await b.listEvents({});
    expect(recent.events.length).toBeGreaterThan(0);
    expect(recent.events.every((e) => e.sessionId.startsWith("auth-b-"))).toBe(true);

    const rest = async (p: string, label: string) => {
      const res = await fetch(`${server.baseUrl}${p}`, { headers: bearer(label) });
      return {
        status: res.status,
        body: (await res.json()) as { sessions?: string[]; events?: { session_id: string }[] },
      };
    };
    const sessions = await rest("/memory/sessions", "b");
    expect(sessions.status).toBe(200);
    expect(sessions.body.sessions).toContain(sessionB);
    expect(sessions.body.sessions).not.toContain(sessionA);
    const restEvents = await rest("/memory/events", "b");
    expect(restEvents.body.events!.length).toBeGreaterThan(0);
    expect(restEvents.body.events!.every((e) => e.session_id.startsWith("auth-b-"))).toBe(true);
    // Another tenant's session reads as an unknown one: KAOS's 200 with no events.
    const theirs = await rest(`/memory/events?session_id=${sessionA}`, "b");
    expect(theirs).toEqual({ status: 200, body: { agent: expect.any(String), events: [], total: 0 } });
    const anonymous = await fetch(`${server.baseUrl}/memory/sessions`);
    expect(anonymous.status).toBe(401);
    expect(anonymous.headers.get("www-authenticate")).toContain("Bearer");
  });

  it("refuses to create in another tenant's app, and hides whose an existing session id is", async () => {
    expect((await errorOf(b.createSession({ appName: APP_A, userId: "x", sessionId: `${sessionA}-new` }))).code).toBe(
      Code.PermissionDenied,
    );
    // The id is taken (as CreateSession would say to anyone); the session itself is not revealed.
    const taken = await errorOf(b.getOrCreateSession({ sessionId: sessionA, appName: APP_B, userId: "carol" }));
    expect(taken.code).toBe(Code.AlreadyExists);
    expect(taken.rawMessage).not.toContain("alice");
    // A key bound to one app fills in an omitted app_name.
    const made = await b.getOrCreateSession({ sessionId: `${sessionB}-default` });
    expect(made.session?.appName).toBe(APP_B);
  });

  it("keeps a user-bound key to its user's sessions", async () => {
    const alice = clientWith(bearer("aAlice"));
    try {
      expect((await alice.getSession({ sessionId: sessionA })).session?.userId).toBe("alice");
      expect((await errorOf(alice.getSession({ sessionId: sessionBob }))).code).toBe(Code.NotFound);
      const listed = await alice.listSessions({});
      expect(listed.sessions.map((s) => s.sessionId)).toContain(sessionA);
      expect(listed.sessions.every((s) => s.userId === "alice")).toBe(true);
      expect((await alice.listSessions({ userId: "bob" })).sessions).toEqual([]);
      expect((await errorOf(alice.createSession({ appName: APP_A, userId: "bob" }))).code).toBe(Code.PermissionDenied);
    } finally {
      alice.close();
    }
  });

  it("enforces roles: read keys cannot write, Cleanup needs an admin key for every app", async () => {
    const reader = clientWith(bearer("aRead"));
    const appAdmin = clientWith(bearer("appAdmin"));
    try {
      expect((await reader.getSessionEvents({ sessionId: sessionA })).events).toHaveLength(1);
      for (const method of [
        "addEvent",
        "addEvents",
        "deleteSession",
        "createSession",
        "getOrCreateSession",
        "cleanup",
      ]) {
        expect((await errorOf(call(reader, method, requestFor(method, sessionA)))).code, method).toBe(
          Code.PermissionDenied,
        );
      }
      expect((await errorOf(appAdmin.cleanup({ maxAge: { seconds: 3600n } }))).code).toBe(Code.PermissionDenied);
      expect((await errorOf(a.cleanup({ maxAge: { seconds: 3600n } }))).code).toBe(Code.PermissionDenied);
      expect((await admin.cleanup({ maxAge: { seconds: 3600n } })).removedSessions).toBe(0n);
      // A key bound to several apps must say which one it lists.
      const several = clientWith(bearer("ab"));
      try {
        const err = await errorOf(several.listSessions({}));
        expect(err.code).toBe(Code.InvalidArgument);
        expect(err.rawMessage).toMatch(/^app_name: /);
        expect((await several.listSessions({ appName: APP_B })).sessions.map((s) => s.sessionId)).toContain(sessionB);
      } finally {
        several.close();
      }
    } finally {
      reader.close();
      appAdmin.close();
    }
  });

  it("DeleteUserData: only admin keys over the app and keys bound to that user (write or admin) may erase a user", async () => {
    const clients = Object.fromEntries(
      ["erasable", "erasableRead", "aAlice", "aRead", "appAdmin"].map((label) => [label, clientWith(bearer(label))]),
    );
    const own = { appName: APP_A, userId: ERASABLE };
    const denied = async (client: MemoryClient, req: { appName: string; userId: string }, why: string) => {
      const err = await errorOf(client.deleteUserData(req));
      expect(err.code, why).toBe(Code.PermissionDenied);
    };
    const seed = async () => {
      const id = `erase-${run}-${_name.length}-${Math.random().toString(36).slice(2)}`;
      await clients.erasable.createSession({ ...own, sessionId: id });
      await clients.erasable.addEvent({ sessionId: id, event: { eventType: "user_message" } });
      return id;
    };
    try {
      const first = await seed();
      // Refused: another user, another app, no user binding short of admin, read role, another tenant.
      await denied(clients.erasable, { appName: APP_A, userId: "alice" }, "a key bound to another user");
      await denied(clients.erasable, { appName: APP_B, userId: ERASABLE }, "an app outside the key");
      await denied(a, own, "a write key bound to no user");
      await denied(clients.aRead, own, "a read key");
      await denied(clients.erasableRead, own, "a read key bound to the user");
      await denied(clients.aAlice, own, "a key bound to another user");
      await denied(b, own, "another tenant's key");
      await denied(clients.appAdmin, { appName: APP_B, userId: ERASABLE }, "an admin key of another app");
      expect((await admin.getSession({ sessionId: first })).session?.userId).toBe(ERASABLE);
      // Allowed: the user's own key, an admin key over the app, an admin key over every app.
      expect(await clients.erasable.deleteUserData(own)).toMatchObject({ removedSessions: 1n, removedEvents: 1n });
      expect((await errorOf(admin.getSession({ sessionId: first }))).code).toBe(Code.NotFound);
      await seed();
      expect(await clients.appAdmin.deleteUserData(own)).toMatchObject({ removedSessions: 1n, removedEvents: 1n });
      await seed();
      expect(await admin.deleteUserData(own)).toMatchObject({ removedSessions: 1n, removedEvents: 1n });
      // Nobody else's data went with it.
      expect((await admin.getSessionEvents({ sessionId: sessionA })).events).toHaveLength(1);
      expect((await admin.getSession({ sessionId: sessionB })).session?.userId).toBe("carol");
    } finally {
      for (const client of Object.values(clients)) client.close();
    }
  });

  it("Cleanup with a filter: an admin key of one app may clean up that app only, never every app", async () => {
    const appAdmin = clientWith(bearer("appAdmin"));
    try {
      expect(await appAdmin.cleanup({ maxAge: { seconds: 3600n }, appName: APP_A })).toMatchObject({
        removedSessions: 0n,
      });
      expect(await appAdmin.cleanup({ maxAge: { seconds: 3600n }, appName: APP_A, userId: "alice" })).toMatchObject({
        removedSessions: 0n,
      });
      for (const req of [{}, { appName: APP_B }, { userId: "alice" }]) {
        const err = await errorOf(appAdmin.cleanup({ maxAge: { seconds: 3600n }, ...req }));
        expect(err.code, JSON.stringify(req)).toBe(Code.PermissionDenied);
        expect(err.rawMessage).toMatch(/^app_name: /);
      }
      expect((await errorOf(a.cleanup({ maxAge: { seconds: 3600n }, appName: APP_A }))).code).toBe(
        Code.PermissionDenied,
      );
      expect((await admin.cleanup({ maxAge: { seconds: 3600n }, appName: APP_B })).removedSessions).toBe(0n);
    } finally {
      appAdmin.close();
    }
  });

  it("an admin key for every app sees every tenant", async () => {
    expect((await admin.getSession({ sessionId: sessionA })).session?.appName).toBe(APP_A);
    expect((await admin.getSession({ sessionId: sessionB })).session?.appName).toBe(APP_B);
  });
});

describe("key lifecycle and quotas", () => {
  it("a revoked key stops working (MEMORY_AUTH_CACHE_MS=0: at once)", async () => {
    const client = grpcJsClient(server.address, { headers: bearer("revoked") });
    try {
      await client.getStats({});
      await keyFile.revoke(ids.revoked);
      const err = await errorOf(client.getStats({}));
      expect(err.code).toBe(Code.Unauthenticated);
      expect(err.rawMessage).toBe("authorization: this API key was revoked");
    } finally {
      client.close();
    }
  });

  it("a live stream whose key is revoked ends UNAUTHENTICATED, on both protocols", async () => {
    const owner = grpcJsClient(server.address, { headers: bearer("a") });
    const streamers = [
      grpcJsClient(server.address, { headers: bearer("revokedWhileStreaming") }),
      connectClient(server.baseUrl, { headers: bearer("revokedWhileStreaming") }),
    ];
    const sessionId = `auth-revoked-stream-${run}`;
    try {
      await owner.createSession({ appName: APP_A, userId: "u", sessionId });
      await owner.addEvent({ sessionId, event: { eventId: "before", eventType: "user_message" } });
      const streams = await Promise.all(streamers.map((client) => followStream(client, sessionId, 10_000)));
      await keyFile.revoke(ids.revokedWhileStreaming);
      for (const stream of streams) {
        const err = await stream.ended;
        expect(err?.code).toBe(Code.Unauthenticated);
        expect(err?.rawMessage).toBe("authorization: this API key was revoked");
      }
      for (const stream of streams) expect(stream.delivered).toEqual(["before"]);
    } finally {
      owner.close();
      for (const client of streamers) client.close();
    }
  });

  it("answers RESOURCE_EXHAUSTED with a retry hint past a key's calls per second", async () => {
    const client = grpcJsClient(server.address, { headers: bearer("limited") });
    try {
      const outcomes = await Promise.all(
        Array.from({ length: 10 }, () =>
          client.getStats({}).then(
            () => undefined,
            (e: unknown) => ConnectError.from(e),
          ),
        ),
      );
      const refused = outcomes.filter((e): e is ConnectError => e !== undefined);
      expect(refused.length).toBeGreaterThanOrEqual(7 - 1); // 3 per second; allow one window boundary
      for (const err of refused) {
        expect(err.code).toBe(Code.ResourceExhausted);
        expect(Number(err.metadata.get("retry-after-ms"))).toBeGreaterThan(0);
      }
    } finally {
      client.close();
    }
  });

  it("limits live streams per key per replica, and frees the slot when a stream ends", async () => {
    const owner = grpcJsClient(server.address, { headers: bearer("a") });
    const client = grpcJsClient(server.address, { headers: bearer("streamer") });
    const sessionId = `auth-streams-${run}`;
    await owner.createSession({ appName: APP_A, userId: "u", sessionId });
    const open = () => {
      const controller = new AbortController();
      const it = client.streamSessionEvents({ sessionId }, { signal: controller.signal })[Symbol.asyncIterator]();
      return { controller, first: it.next(), it };
    };
    try {
      const s1 = open();
      const s2 = open();
      await Promise.all([s1.first, s2.first]); // both caught up: both hold a slot
      const s3 = open();
      const err = await errorOf(s3.first);
      expect(err.code).toBe(Code.ResourceExhausted);
      expect(err.rawMessage).toMatch(/^streams: /);
      s1.controller.abort();
      await s1.it.return?.();
      // The slot comes back once the server sees the cancel; bounded retry.
      let s4: ReturnType<typeof open> | undefined;
      for (let i = 0; i < 50; i++) {
        const attempt = open();
        try {
          await attempt.first;
          s4 = attempt;
          break;
        } catch {
          await new Promise((r) => setTimeout(r, 50));
        }
      }
      expect(s4).toBeDefined();
      s2.controller.abort();
      s4?.controller.abort();
    } finally {
      owner.close();
      client.close();
    }
  });

  it("counts a stream refused by its key's calls per second once in engram_rate_limited_total", async () => {
    const owner = grpcJsClient(server.address, { headers: bearer("a") });
    const client = grpcJsClient(server.address, { headers: bearer("limitedStreamer") });
    const sessionId = `auth-limited-streams-${run}`;
    const rateLimited = async () =>
      Number(/^engram_rate_limited_total (\d+)$/m.exec(await (await fetch(`${server.baseUrl}/metrics`)).text())?.[1]);
    const controllers: AbortController[] = [];
    try {
      await owner.createSession({ appName: APP_A, userId: "u", sessionId });
      const before = await rateLimited();
      const outcomes = await Promise.all(
        Array.from({ length: 4 }, () => {
          const controller = new AbortController();
          controllers.push(controller);
          return client
            .streamSessionEvents({ sessionId }, { signal: controller.signal })
            [Symbol.asyncIterator]()
            .next()
            .then(
              () => undefined,
              (e: unknown) => ConnectError.from(e),
            );
        }),
      );
      const refused = outcomes.filter((e): e is ConnectError => e !== undefined);
      expect(refused.length).toBeGreaterThanOrEqual(4 - 2); // 1 per second; allow one window boundary
      for (const err of refused) expect(err.rawMessage).toMatch(/^rate limit: /);
      expect((await rateLimited()) - before).toBe(refused.length);
    } finally {
      for (const controller of controllers) controller.abort();
      owner.close();
      client.close();
    }
  });

  it("fills trace_id/span_id from traceparent; a retry in a new span is still the same event", async () => {
    const sessionId = `auth-trace-${run}`;
    const first = connectClient(server.baseUrl, {
      headers: { ...bearer("a"), traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" },
    });
    const retry = connectClient(server.baseUrl, {
      headers: { ...bearer("a"), traceparent: "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01" },
    });
    await first.createSession({ appName: APP_A, userId: "u", sessionId });
    const event = { eventId: "traced-1", eventType: "tool_call" };
    const stored = await first.addEvent({ sessionId, event });
    expect(stored.event?.metadata).toEqual({
      trace_id: "0af7651916cd43dd8448eb211c80319c",
      span_id: "b7ad6b7169203331",
    });
    const again = await retry.addEvent({ sessionId, event });
    expect(again.event?.seq).toBe(stored.event?.seq);
    // A client's own trace fields are kept as given.
    const own = await first.addEvent({
      sessionId,
      event: { eventType: "user_message", metadata: { trace_id: "mine" } },
    });
    expect(own.event?.metadata).toEqual({ trace_id: "mine" });
  });

  it("exports Prometheus metrics: RPCs by method and code, auth failures, rate limits, streams", async () => {
    const res = await fetch(`${server.baseUrl}/metrics`);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toMatch(
      /engram_rpc_requests_total\{method="getStats",code="RESOURCE_EXHAUSTED",protocol="grpc"\} [1-9]/,
    );
    expect(text).toMatch(
      /engram_rpc_requests_total\{method="getSession",code="UNAUTHENTICATED",protocol="connect"\} [1-9]/,
    );
    expect(text).toMatch(/engram_auth_failures_total [1-9]/);
    expect(text).toMatch(/engram_rate_limited_total [1-9]/);
    expect(text).toMatch(/engram_streams_active 0/);
    expect(text).toMatch(/engram_rpc_duration_seconds_bucket\{le="0.005",method="addEvent",protocol="connect"\}/);
    expect(text).toMatch(/engram_sessions \d+/);
    expect(text).toMatch(/engram_sessions_evicted_total 0/);
    // No tenant data in labels.
    expect(text).not.toContain(APP_A);
    expect(text).not.toContain("alice");
  });
});
