/**
 * Session state under scoped API keys: a key bound to a user reads and
 * changes only its user's sessions' state (another user's session is
 * NOT_FOUND, word for word as an absent one), may change its user state but
 * never the app-wide state every other user reads; a key of another app sees
 * nothing; a read key changes nothing.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey, type ApiKeyRecord } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { connectClient, errorOf, grpcJsClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

let dir: string;
let server: TestServer;
const keys: Record<string, string> = {};
const APP = `state-tenant-${process.pid}`;
const OTHER_APP = `state-other-${process.pid}`;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-state-auth-"));
  const keyFile = new FileKeyStore(path.join(dir, "keys.json"));
  const make = async (label: string, scope: Pick<ApiKeyRecord, "role" | "apps" | "userId">) => {
    const { key, record } = generateApiKey(scope);
    await keyFile.create(record);
    keys[label] = key;
  };
  await make("alice", { role: "write", apps: [APP], userId: "alice" });
  await make("aliceRead", { role: "read", apps: [APP], userId: "alice" });
  await make("app", { role: "write", apps: [APP] });
  await make("other", { role: "write", apps: [OTHER_APP] });
  server = await startTestServer({ config: { auth: true, authKeysFile: keyFile.path, authCacheMs: 0 } });
});

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const PROTOCOLS = [
  ["gRPC (grpc-js)", (key: string) => grpcJsClient(server.address, { headers: { authorization: `Bearer ${key}` } })],
  ["Connect JSON", (key: string) => connectClient(server.baseUrl, { headers: { authorization: `Bearer ${key}` } })],
] as const;

describe.each(PROTOCOLS)("session state under scoped keys over %s", (protocol, clientWith) => {
  const p = protocol.length;
  const aliceSession = `alice-${p}`;
  const bobSession = `bob-${p}`;
  let alice: MemoryClient;
  let aliceRead: MemoryClient;
  let app: MemoryClient;
  let other: MemoryClient;

  beforeAll(async () => {
    [alice, aliceRead, app, other] = [
      clientWith(keys.alice),
      clientWith(keys.aliceRead),
      clientWith(keys.app),
      clientWith(keys.other),
    ];
    await app.createSession({ appName: APP, userId: "alice", sessionId: aliceSession });
    await app.createSession({ appName: APP, userId: "bob", sessionId: bobSession });
    await app.updateSession({
      sessionId: bobSession,
      stateDelta: { secret: `bob's ${p}`, "user:pin": "1234", "app:motd": "hello" },
    });
  });
  afterAll(() => {
    for (const c of [alice, aliceRead, app, other]) c?.close();
  });

  it("another user's session state is NOT_FOUND to read or update, word for word as an absent session", async () => {
    for (const client of [alice, aliceRead, other]) {
      const foreign = await errorOf(client.getSession({ sessionId: bobSession }));
      const absent = await errorOf(client.getSession({ sessionId: `absent-${p}` }));
      expect(foreign.code).toBe(Code.NotFound);
      expect(foreign.rawMessage).toBe(absent.rawMessage.replace(`absent-${p}`, bobSession));
    }
    for (const client of [alice, other]) {
      expect(
        (await errorOf(client.updateSession({ sessionId: bobSession, stateDelta: { secret: "overwritten" } }))).code,
      ).toBe(Code.NotFound);
      expect(
        (
          await errorOf(
            client.addEvent({ sessionId: bobSession, event: { eventType: "x", stateDelta: { "user:pin": "0000" } } }),
          )
        ).code,
      ).toBe(Code.NotFound);
    }
    const { session } = await app.getSession({ sessionId: bobSession });
    expect(session!.state).toEqual({ secret: `bob's ${p}`, "user:pin": "1234", "app:motd": "hello" });
  });

  it("a user-bound key sees its own user state and the app's, never another user's", async () => {
    await alice.updateSession({ sessionId: aliceSession, stateDelta: { "user:lang": "en", mine: p } });
    const { session } = await aliceRead.getSession({ sessionId: aliceSession });
    expect(session!.state).toEqual({ mine: p, "user:lang": "en", "app:motd": "hello" });
    expect(session!.state).not.toHaveProperty("user:pin");
  });

  it("a user-bound key may not change app-wide state: PERMISSION_DENIED naming the field, nothing changed", async () => {
    const update = await errorOf(
      alice.updateSession({ sessionId: aliceSession, stateDelta: { ok: 1, "app:motd": "pwned" } }),
    );
    expect(update.code).toBe(Code.PermissionDenied);
    expect(update.rawMessage).toMatch(/^state_delta: an API key bound to one user may not change app-wide state/);
    const batch = await errorOf(
      alice.addEvents({
        sessionId: aliceSession,
        events: [{ eventType: "x" }, { eventType: "x", stateDelta: { "app:motd": "pwned" } }],
      }),
    );
    expect(batch.code).toBe(Code.PermissionDenied);
    expect(batch.rawMessage).toMatch(/^events\[1\]\.state_delta: /);
    const removal = await errorOf(
      alice.addEvent({ sessionId: aliceSession, event: { eventType: "x", stateRemovals: ["mine", "app:motd"] } }),
    );
    expect(removal.code).toBe(Code.PermissionDenied);
    expect(removal.rawMessage).toMatch(/^event\.state_removals: an API key bound to one user may not change app-wide/);
    const { session } = await app.getSession({ sessionId: bobSession });
    expect(session!.state).toMatchObject({ "app:motd": "hello" });
    expect((await app.getSession({ sessionId: aliceSession })).session!.state).not.toHaveProperty("ok");
  });

  it("a read key may not update state", async () => {
    expect((await errorOf(aliceRead.updateSession({ sessionId: aliceSession, stateDelta: { a: 1 } }))).code).toBe(
      Code.PermissionDenied,
    );
  });
});
