/**
 * Scoped API keys over long-term memories, as for sessions: a key bound to a
 * user never sees, changes or forgets another user's memories (NOT_FOUND,
 * word for word as for an absent memory), reads the app-wide ones but never
 * forgets them; a key of another app sees nothing; roles hold.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateApiKey, type ApiKeyRecord } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { ScopeMatch } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { connectClient, errorOf, grpcJsClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

let dir: string;
let server: TestServer;
let keyFile: FileKeyStore;
const keys: Record<string, string> = {};
const keyIds: Record<string, string> = {};
const APP = `mem-tenant-${process.pid}`;
const OTHER_APP = `mem-other-${process.pid}`;

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "engram-mem-auth-"));
  keyFile = new FileKeyStore(path.join(dir, "keys.json"));
  const make = async (label: string, scope: Pick<ApiKeyRecord, "role" | "apps" | "userId">) => {
    const { key, record } = generateApiKey(scope);
    await keyFile.create(record);
    keys[label] = key;
    keyIds[label] = record.id;
  };
  await make("alice", { role: "write", apps: [APP], userId: "alice" });
  await make("aliceRead", { role: "read", apps: [APP], userId: "alice" });
  await make("app", { role: "write", apps: [APP] });
  await make("other", { role: "write", apps: [OTHER_APP] });
  for (const protocol of ["grpc", "connect"])
    await make(`revokedWhileWatching-${protocol}`, { role: "read", apps: [APP], userId: "alice" });
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

describe.each(PROTOCOLS)("memories under scoped keys over %s", (protocol, clientWith) => {
  const p = protocol.length;
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
    await app.writeMemories({
      memories: [
        { memoryId: `bob-${p}`, appName: APP, userId: "bob", text: `bob secret mark${p}` },
        { memoryId: `shared-${p}`, appName: APP, text: `shared secret mark${p}` },
      ],
    });
  });
  afterAll(() => {
    for (const c of [alice, aliceRead, app, other]) c?.close();
  });

  it("a user-bound key writes under its own user when user_id is omitted, and may not write another user's", async () => {
    const { memories } = await alice.writeMemories({
      memories: [{ memoryId: `alice-${p}`, appName: APP, text: `alice secret mark${p}` }],
    });
    expect(memories[0].userId).toBe("alice");
    const err = await errorOf(alice.writeMemories({ memories: [{ appName: APP, userId: "bob", text: "forged" }] }));
    expect(err.code).toBe(Code.PermissionDenied);
    expect(err.rawMessage).toBe("memories[0].user_id: this API key is bound to another user");
  });

  it("answers NOT_FOUND for another user's memory, word for word as for an absent one; shared ones are readable", async () => {
    const foreign = await errorOf(alice.getMemory({ appName: APP, memoryId: `bob-${p}` }));
    const absent = await errorOf(alice.getMemory({ appName: APP, memoryId: `absent-${p}` }));
    expect(foreign.code).toBe(Code.NotFound);
    expect(foreign.rawMessage).toBe(absent.rawMessage.replace(`absent-${p}`, `bob-${p}`));
    expect((await alice.getMemory({ appName: APP, memoryId: `shared-${p}` })).memory?.text).toBe(
      `shared secret mark${p}`,
    );
  });

  it("searches and lists only the key's user and the shared memories, whatever the filter names", async () => {
    const found = await aliceRead.searchMemories({ appName: APP, query: `mark${p}` });
    expect(found.results.map((r) => r.memory?.memoryId).sort()).toEqual([`alice-${p}`, `shared-${p}`]);
    expect((await aliceRead.searchMemories({ appName: APP, userId: "bob", query: "secret" })).results).toEqual([]);
    const everything = await aliceRead.listMemories({ appName: APP, scopeMatch: ScopeMatch.WITHIN });
    expect(everything.memories.map((m) => m.memoryId)).toContain(`alice-${p}`);
    expect(everything.memories.every((m) => m.userId === "alice")).toBe(true);
    expect((await aliceRead.listMemories({ appName: APP, userId: "bob" })).memories).toEqual([]);
    // The app key sees them all.
    const all = await app.searchMemories({ appName: APP, scopeMatch: ScopeMatch.WITHIN, query: `mark${p}` });
    expect(all.results.map((r) => r.memory?.memoryId).sort()).toEqual([`alice-${p}`, `bob-${p}`, `shared-${p}`]);
  });

  it("a user-bound key's lexical scores say nothing of how many of another user's memories hold its words", async () => {
    const word = `zebra${p}x`;
    await alice.writeMemories({
      memories: [{ memoryId: `alice-zebra-${p}`, appName: APP, text: `my ${word} sighting at the park` }],
    });
    const score = async () => {
      const { results } = await aliceRead.searchMemories({ appName: APP, query: word });
      expect(results.map((r) => r.memory?.memoryId)).toEqual([`alice-zebra-${p}`]);
      return results[0].lexicalScore;
    };
    const before = await score();
    for (const count of [1, 4, 15]) {
      await app.writeMemories({
        memories: Array.from({ length: count }, (_, i) => ({
          appName: APP,
          userId: "bob",
          text: `bob saw ${word} number ${count}-${i}`,
        })),
      });
      expect(await score(), `after ${count} more of bob's`).toBeCloseTo(before, 9);
    }
  });

  it("forgets only the key's own user's memories: another user's and the shared ones count as absent", async () => {
    await alice.writeMemories({ memories: [{ memoryId: `alice-gone-${p}`, appName: APP, text: "to forget" }] });
    const { deletedCount } = await alice.deleteMemories({
      appName: APP,
      memoryIds: [`bob-${p}`, `shared-${p}`, `alice-gone-${p}`],
    });
    expect(deletedCount).toBe(1n);
    expect((await app.getMemory({ appName: APP, memoryId: `bob-${p}` })).memory).toBeDefined();
    expect((await app.getMemory({ appName: APP, memoryId: `shared-${p}` })).memory).toBeDefined();
    const err = await errorOf(alice.deleteMemories({ appName: APP, userId: "bob" }));
    expect(err.code).toBe(Code.PermissionDenied);
  });

  it("a key of another app sees nothing of this one and may not write or watch there", async () => {
    expect(
      (await other.searchMemories({ appName: APP, scopeMatch: ScopeMatch.WITHIN, query: "secret" })).results,
    ).toEqual([]);
    expect((await errorOf(other.getMemory({ appName: APP, memoryId: `shared-${p}` }))).code).toBe(Code.NotFound);
    const write = await errorOf(other.writeMemories({ memories: [{ appName: APP, text: "intrusion" }] }));
    expect(write.code).toBe(Code.PermissionDenied);
    expect(write.rawMessage).toMatch(/^memories\[0\]\.app_name: /);
    const watch = await errorOf(
      (async () => {
        for await (const _ of other.watchMemories({ appName: APP }, { timeoutMs: 10_000 } as never)) return;
      })(),
    );
    expect(watch.code).toBe(Code.PermissionDenied);
  });

  it("Recall of another user's session answers NOT_FOUND, as any session RPC; of its own, it recalls no other user's memories", async () => {
    const bobSession = `recall-bob-${p}-${process.pid}`;
    const aliceSession = `recall-alice-${p}-${process.pid}`;
    await app.createSession({ appName: APP, userId: "bob", sessionId: bobSession });
    await alice.createSession({ appName: APP, userId: "alice", sessionId: aliceSession });
    const foreign = await errorOf(aliceRead.recall({ sessionId: bobSession, query: `mark${p}` }));
    expect(foreign.code).toBe(Code.NotFound);
    expect(foreign.rawMessage).toBe(`session_id: session ${JSON.stringify(bobSession)} not found`);
    const own = await aliceRead.recall({ sessionId: aliceSession, query: `secret mark${p}` });
    const recalled = own.memories.map((r) => r.memory?.memoryId);
    expect(recalled).toContain(`shared-${p}`);
    expect(recalled).not.toContain(`bob-${p}`);
  });

  it("SearchEvents finds only the key's own user's events", async () => {
    const text = (t: string) => ({ kind: { case: "stringValue" as const, value: t } });
    await app.createSession({ appName: APP, userId: "bob", sessionId: `ev-bob-${p}-${process.pid}` });
    await app.addEvent({
      sessionId: `ev-bob-${p}-${process.pid}`,
      event: { eventType: "user_message", content: text(`bob diary mark${p}`) },
    });
    await alice.createSession({ appName: APP, userId: "alice", sessionId: `ev-alice-${p}-${process.pid}` });
    await alice.addEvent({
      sessionId: `ev-alice-${p}-${process.pid}`,
      event: { eventType: "user_message", content: text(`alice diary mark${p}`) },
    });
    const mine = await aliceRead.searchEvents({ appName: APP, query: `mark${p}` });
    expect(mine.hits.map((h) => h.sessionId)).toEqual([`ev-alice-${p}-${process.pid}`]);
    expect((await aliceRead.searchEvents({ appName: APP, userId: "bob", query: `mark${p}` })).hits).toEqual([]);
    expect((await other.searchEvents({ appName: APP, query: `mark${p}` })).hits).toEqual([]);
  });

  it("a read key may not write or forget", async () => {
    expect((await errorOf(aliceRead.writeMemories({ memories: [{ appName: APP, text: "x" }] }))).code).toBe(
      Code.PermissionDenied,
    );
    expect((await errorOf(aliceRead.deleteMemories({ appName: APP, memoryIds: [`alice-${p}`] }))).code).toBe(
      Code.PermissionDenied,
    );
  });

  it("a user-bound watch sees its user's and the shared memories only", async () => {
    const abort = new AbortController();
    const seen: string[] = [];
    let started!: () => void;
    const ready = new Promise<void>((resolve) => (started = resolve));
    const done = (async () => {
      try {
        for await (const f of aliceRead.watchMemories(
          { appName: APP },
          { signal: AbortSignal.any([abort.signal, AbortSignal.timeout(20_000)]) },
        )) {
          if (f.frame.case === "started") started();
          if (f.frame.case === "written") seen.push(f.frame.value.memoryId);
          if (seen.length === 2) abort.abort();
        }
      } catch {
        // Aborted by the test.
      }
    })();
    await ready;
    await app.writeMemories({ memories: [{ memoryId: `w-bob-${p}`, appName: APP, userId: "bob", text: "bob only" }] });
    await app.writeMemories({
      memories: [{ memoryId: `w-alice-${p}`, appName: APP, userId: "alice", text: "alice only" }],
    });
    await app.writeMemories({ memories: [{ memoryId: `w-shared-${p}`, appName: APP, text: "everyone" }] });
    await done;
    expect(seen).toEqual([`w-alice-${p}`, `w-shared-${p}`]);
  });
});

describe("a memory watch whose key is revoked", () => {
  it.each([
    [
      "grpc",
      () => grpcJsClient(server.address, { headers: { authorization: `Bearer ${keys["revokedWhileWatching-grpc"]}` } }),
    ],
    [
      "connect",
      () =>
        connectClient(server.baseUrl, { headers: { authorization: `Bearer ${keys["revokedWhileWatching-connect"]}` } }),
    ],
  ] as const)("ends UNAUTHENTICATED over %s, as a session stream does", async (protocol, clientOf) => {
    const watcher = clientOf();
    try {
      let started!: () => void;
      const ready = new Promise<void>((resolve) => (started = resolve));
      const ended = (async () => {
        try {
          for await (const f of watcher.watchMemories({ appName: APP }, { signal: AbortSignal.timeout(20_000) })) {
            if (f.frame.case === "started") started();
          }
          return undefined;
        } catch (err) {
          return ConnectError.from(err);
        }
      })();
      await ready;
      await keyFile.revoke(keyIds[`revokedWhileWatching-${protocol}`]!);
      const err = await ended;
      expect(err?.code).toBe(Code.Unauthenticated);
      expect(err?.rawMessage).toBe("authorization: this API key was revoked");
    } finally {
      watcher.close();
    }
  });
});
