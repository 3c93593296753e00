/**
 * Start-up with the backend down: a server whose Redis or PostgreSQL does
 * not answer yet stays up and unready on its port (/readyz 503, gRPC health
 * NOT_SERVING), answers calls UNAVAILABLE saying the store is not connected
 * yet, and keeps retrying; once the backend starts on the configured port it
 * becomes ready by itself and serves. API keys live in the same backend
 * (MEMORY_AUTH=true here): a call with a key is refused UNAVAILABLE, not
 * UNAUTHENTICATED, until the key store connects too.
 * engram_store_errors_total counts the outages but not a client's NOT_FOUND.
 * Every wait is bounded.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { generateApiKey } from "../../src/auth/api-keys.js";
import { openApiKeyStore } from "../../src/auth/index.js";
import { loadConfig } from "../../src/config.js";
import { connectClient, errorOf, grpcHealthStatus, grpcJsClient } from "../support/clients.js";
import { spawnServer, type ServerProcess } from "../support/engram.js";
import { freePort } from "../support/host.js";

async function readyz(server: ServerProcess): Promise<number> {
  return (await fetch(`${server.baseUrl}/readyz`, { signal: AbortSignal.timeout(5000) })).status;
}

/** engram_store_errors_total by code, summed over operations. */
async function storeErrors(server: ServerProcess): Promise<Record<string, number>> {
  const text = await (await fetch(`${server.baseUrl}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  const byCode: Record<string, number> = {};
  for (const [, code, value] of text.matchAll(/^engram_store_errors_total\{[^}]*code="([A-Z_]+)"[^}]*\} (\S+)$/gm)) {
    byCode[code] = (byCode[code] ?? 0) + Number(value);
  }
  return byCode;
}

/** Whether the server has logged a failed attempt to open the store numbered `attempt` or later (its first try is 0). */
function loggedRetry(server: ServerProcess, attempt: number): boolean {
  return server.lines.some((l) => {
    const m = /"attempt":(\d+)/.exec(l);
    return m !== null && Number(m[1]) >= attempt && l.includes("retrying with back-off");
  });
}

/** Polls until /readyz answers 200, for at most `ms`. */
async function waitReady(server: ServerProcess, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline && (await readyz(server)) !== 200) await sleep(100);
}

/** A backend started on the port the server was told about. */
interface StartedBackend {
  /** Stops it, keeping its data (an outage). */
  halt(): Promise<void>;
  /** Starts it again after halt(). */
  resume(): Promise<void>;
  /** Stops it and removes its data. */
  stop(): Promise<void>;
}

interface Backend {
  env: (port: number) => Record<string, string>;
  start: (port: number) => Promise<StartedBackend>;
}

const BACKENDS: Array<[string, Backend]> = [
  [
    "Redis",
    {
      env: (port) => ({ MEMORY_TYPE: "redis", MEMORY_REDIS_URL: `redis://127.0.0.1:${port}` }),
      start: async (port) => {
        const { startRedisServer } = await import("../support/redis-server.js");
        const redis = await startRedisServer({ port, appendonly: false });
        return { halt: () => redis.stop(), resume: () => redis.restart(), stop: () => redis.destroy() };
      },
    },
  ],
  [
    "PostgreSQL",
    {
      env: (port) => ({
        MEMORY_TYPE: "postgres",
        MEMORY_POSTGRES_URL: `postgres://postgres@127.0.0.1:${port}/postgres`,
      }),
      start: async (port) => {
        const { startPostgresServer } = await import("../support/postgres-server.js");
        const postgres = await startPostgresServer({ port });
        return { halt: () => postgres.halt(), resume: () => postgres.start(), stop: () => postgres.stop() };
      },
    },
  ],
];

describe.each(BACKENDS)("a server started while %s is unreachable", (_name, backend) => {
  it("listens unready, refuses calls UNAVAILABLE until the store connects, then becomes ready and serves", async () => {
    const port = await freePort(); // nothing listens there yet
    const env = { ...backend.env(port), MEMORY_KEY_PREFIX: `startup${process.pid}`, MEMORY_AUTH: "true" };
    const server = await spawnServer(env);
    const { key, record } = generateApiKey({ role: "admin", apps: ["*"] });
    const headers = { authorization: `Bearer ${key}` };
    const grpcClient = grpcJsClient(server.address, { headers });
    const connect = connectClient(server.baseUrl, { headers });
    let started: StartedBackend | undefined;
    try {
      // Up and unready, on both probes.
      expect(await readyz(server)).toBe(503);
      expect(await grpcHealthStatus(server.baseUrl)).toBe("NOT_SERVING");
      for (const client of [grpcClient, connect]) {
        const err = await errorOf(client.createSession({ appName: "startup", userId: "u", sessionId: "s1" }));
        expect(err.code).toBe(Code.Unavailable);
        expect(err.rawMessage).toMatch(/not connected yet/);
      }

      // Still up and still unready after two more attempts: it retries, it does not give up or exit.
      const retriedBy = Date.now() + 20_000;
      while (Date.now() < retriedBy && !loggedRetry(server, 2)) await sleep(20);
      expect(loggedRetry(server, 2), "a second retry logged").toBe(true);
      expect(server.child.exitCode).toBeNull();
      expect(await readyz(server)).toBe(503);

      started = await backend.start(port);
      const keys = await openApiKeyStore(loadConfig([], env));
      await keys.create(record);
      await keys.close();
      await waitReady(server, 30_000);
      expect(await readyz(server)).toBe(200);
      expect(await grpcHealthStatus(server.baseUrl)).toBe("SERVING");
      // The log line travels through the child's stdout pipe, which may be read after /readyz answers: wait for it (bounded).
      const loggedBy = Date.now() + 5_000;
      while (Date.now() < loggedBy && !server.lines.some((l) => l.includes('"msg":"store opened"'))) await sleep(20);
      expect(server.lines.some((l) => l.includes('"msg":"store opened"'))).toBe(true);

      // The key store reconnects on its own back-off schedule: allow it as long (bounded).
      const keysBy = Date.now() + 15_000;
      while (
        Date.now() < keysBy &&
        (await errorOf(grpcClient.getSession({ sessionId: "probe" }))).code === Code.Unavailable
      )
        await sleep(100);
      for (const client of [grpcClient, connect]) {
        const sessionId = `s-${client === connect ? "connect" : "grpc"}`;
        await client.createSession({ appName: "startup", userId: "u", sessionId });
        const added = await client.addEvent({ sessionId, event: { eventType: "user_message" } });
        expect(added.event!.seq).toBe(1n);
      }

      // A client's NOT_FOUND is an answer, not a store error.
      const before = await storeErrors(server);
      expect((await errorOf(grpcClient.getSession({ sessionId: "no-such-session" }))).code).toBe(Code.NotFound);
      expect(
        (await errorOf(grpcClient.addEvent({ sessionId: "no-such-session", event: { eventType: "user_message" } })))
          .code,
      ).toBe(Code.NotFound);
      expect(await storeErrors(server)).toEqual(before);

      // An outage is a store error (the key's verdict is cached, so the call reaches the store).
      await started.halt();
      expect((await errorOf(grpcClient.getSession({ sessionId: "s-grpc" }))).code).toBe(Code.Unavailable);
      expect((await storeErrors(server)).UNAVAILABLE ?? 0).toBeGreaterThan(before.UNAVAILABLE ?? 0);
      await started.resume();
      expect(server.child.exitCode).toBeNull();
    } finally {
      grpcClient.close();
      await server.kill();
      await started?.stop();
    }
  }, 120_000);
});
