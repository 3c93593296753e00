/**
 * API keys in every backend: the key store contract on the key file, Redis
 * and PostgreSQL; and, on the shared backends, the keys CLI against two
 * server replicas: a key made by `engram keys` works on both, its rate limit is one
 * budget across both, and its revocation reaches both.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { Code, ConnectError } from "@connectrpc/connect";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, describe, expect, it, vi } from "vitest";
import { generateApiKey, keyMatches } from "../../src/auth/api-keys.js";
import { openApiKeyStore } from "../../src/auth/index.js";
import { loadConfig, type Config } from "../../src/config.js";
import { Quotas } from "../../src/service/quotas.js";
import { connectClient, errorOf, followStream, grpcJsClient } from "../support/clients.js";
import { REPO_ROOT, spawnServer } from "../support/engram.js";

const run = promisify(execFile);
const dir = mkdtempSync(path.join(tmpdir(), "engram-keys-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const BACKENDS: Array<[string, () => Record<string, string>]> = [
  [
    "key file (local store)",
    () => ({ MEMORY_TYPE: "local", MEMORY_AUTH_KEYS_FILE: path.join(dir, `keys-${process.pid}.json`) }),
  ],
  [
    "redis",
    () => ({
      MEMORY_TYPE: "redis",
      MEMORY_REDIS_URL: process.env.MEMORY_TEST_REDIS_URL!,
      MEMORY_KEY_PREFIX: `keys${process.pid}`,
    }),
  ],
  [
    "postgres",
    () => ({
      MEMORY_TYPE: "postgres",
      MEMORY_POSTGRES_URL: process.env.MEMORY_TEST_POSTGRES_URL!,
      MEMORY_KEY_PREFIX: `keys${process.pid}`,
    }),
  ],
];

const configOf = (env: Record<string, string>): Config => loadConfig([], env);

describe.each(BACKENDS)("API key store: %s", (_name, env) => {
  it("creates, finds, lists and revokes keys; stores only the hash", async () => {
    const keys = await openApiKeyStore(configOf(env()));
    try {
      const first = generateApiKey({ role: "write", apps: ["app-1"], userId: "alice", name: "first", rateLimit: 7 });
      const second = generateApiKey({ role: "admin", apps: ["*"] });
      await keys.create(first.record);
      await keys.create(second.record);
      const found = await keys.get(first.record.id);
      expect(found).toEqual(first.record);
      expect(JSON.stringify(found)).not.toContain(first.key.slice("ek_000000000000_".length)); // the secret (it may hold "_")
      expect(keyMatches(first.key, found!)).toBe(true);
      expect(keyMatches(second.key, found!)).toBe(false);
      const listed = (await keys.list()).map((k) => k.id);
      expect(listed).toEqual(expect.arrayContaining([first.record.id, second.record.id]));
      expect(await keys.revoke(first.record.id, 1_700_000_000_000)).toBe(true);
      expect((await keys.get(first.record.id))?.revokedAt).toBe(1_700_000_000_000);
      expect(await keys.revoke("000000000000")).toBe(false);
      expect(await keys.get("000000000000")).toBeUndefined();
    } finally {
      await keys.close();
    }
  });
});

/** The names of the backend's client connections: CLIENT LIST on Redis, application_name on PostgreSQL. */
async function connectionNames(backend: string): Promise<string[]> {
  if (backend === "redis") {
    const admin = new Redis(process.env.MEMORY_TEST_REDIS_URL!);
    try {
      const list = (await admin.call("CLIENT", "LIST")) as string;
      return [...list.matchAll(/ name=(\S*) /g)].map((m) => m[1]);
    } finally {
      admin.disconnect();
    }
  }
  const admin = new pg.Client(process.env.MEMORY_TEST_POSTGRES_URL!);
  await admin.connect();
  try {
    const { rows } = await admin.query<{ name: string }>("SELECT application_name AS name FROM pg_stat_activity");
    return rows.map((row) => row.name);
  } finally {
    await admin.end();
  }
}

describe.each(BACKENDS.slice(1))("connections of the key store and the quotas on %s", (name, env) => {
  it("are named after the key prefix and their role, as the store's are", async () => {
    const prefix = `named${process.pid}${name.length}`;
    const config = configOf({ ...env(), MEMORY_KEY_PREFIX: prefix, MEMORY_RATE_LIMIT: "100" });
    const keys = await openApiKeyStore(config);
    const quotas = await Quotas.open(config);
    try {
      await keys.list();
      await quotas.consume("some-key");
      const expected =
        name === "redis"
          ? [`${prefix}:keys`, `${prefix}:quotas`]
          : [`engram:${prefix}:keys`, `engram:${prefix}:quotas`];
      await vi.waitFor(async () => expect(await connectionNames(name)).toEqual(expect.arrayContaining(expected)), {
        timeout: 10_000,
        interval: 100,
      });
    } finally {
      await keys.close();
      await quotas.close();
    }
  });
});

async function keysCli(env: Record<string, string>, ...args: string[]): Promise<string> {
  const { stdout } = await run(path.join(REPO_ROOT, "node_modules/.bin/tsx"), ["src/cli/main.ts", "keys", ...args], {
    cwd: REPO_ROOT,
    env: { ...process.env, ...env },
    timeout: 60_000,
  });
  return stdout;
}

describe.each(BACKENDS.slice(1))("keys CLI and two replicas on %s", (name, env) => {
  it("a key made by the CLI works on both replicas, shares one rate budget, and its revocation reaches both", async () => {
    const backend = { ...env(), MEMORY_KEY_PREFIX: `cli${process.pid}${name.length}` };
    const created = JSON.parse(
      await keysCli(backend, "create", "--app", "cli-app", "--role", "write", "--rate-limit", "5", "--json"),
    ) as { key: string; id: string };
    expect(created.key).toMatch(/^ek_[0-9a-f]{12}_/);
    expect(await keysCli(backend, "list")).toContain(created.id);

    const serverEnv = { ...backend, MEMORY_AUTH: "true", MEMORY_AUTH_CACHE_MS: "200" };
    const replicas = await Promise.all([spawnServer(serverEnv), spawnServer(serverEnv)]);
    const clients = replicas.map((r) =>
      grpcJsClient(r.address, { headers: { authorization: `Bearer ${created.key}` } }),
    );
    try {
      await clients[0].createSession({ appName: "cli-app", userId: "u", sessionId: `cli-${name}` });
      await new Promise((r) => setTimeout(r, 1100)); // a fresh one-second window
      // 12 calls at once, half to each replica: 5 per second in all, not per replica.
      const outcomes = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          clients[i % 2].getSession({ sessionId: `cli-${name}` }).then(
            () => "ok",
            (e: unknown) => ConnectError.from(e).code,
          ),
        ),
      );
      const ok = outcomes.filter((o) => o === "ok").length;
      expect(outcomes.filter((o) => o !== "ok").every((o) => o === Code.ResourceExhausted)).toBe(true);
      expect(ok).toBeGreaterThan(0);
      // One window of 5 across both replicas (per-replica counting would let 10 through).
      expect(ok).toBeLessThanOrEqual(6);
      await new Promise((r) => setTimeout(r, 1100));

      // A live stream on each replica, one per protocol: the revocation must end both.
      const streamers = [
        grpcJsClient(replicas[0].address, { headers: { authorization: `Bearer ${created.key}` } }),
        connectClient(replicas[1].baseUrl, { headers: { authorization: `Bearer ${created.key}` } }),
      ];
      const streams = await Promise.all(streamers.map((client) => followStream(client, `cli-${name}`)));
      const revokedAt = Date.now();
      expect(await keysCli(backend, "revoke", created.id)).toContain("revoked");
      // Both end within MEMORY_AUTH_CACHE_MS (200 ms) of the CLI's write; the CLI process itself takes seconds, so the bound is loose.
      const endings = await Promise.all(
        streams.map((stream) => stream.ended.then((err) => ({ code: err?.code, at: Date.now() }))),
      );
      for (const { code, at } of endings) {
        expect(code).toBe(Code.Unauthenticated);
        expect(at - revokedAt).toBeLessThan(15_000);
      }
      for (const client of clients) {
        let code: Code | "ok" = "ok";
        for (let i = 0; i < 40 && code !== Code.Unauthenticated; i++) {
          await new Promise((r) => setTimeout(r, 100));
          code = await client.getStats({}).then(
            () => "ok" as const,
            (e: unknown) => ConnectError.from(e).code,
          );
        }
        expect(code).toBe(Code.Unauthenticated);
      }
      expect((await errorOf(clients[1].getSession({ sessionId: `cli-${name}` }))).rawMessage).toBe(
        "authorization: this API key was revoked",
      );
    } finally {
      for (const c of clients) c.close();
      await Promise.all(replicas.map((r) => r.kill()));
    }
  }, 120_000);
});
