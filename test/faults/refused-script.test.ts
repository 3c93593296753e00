/**
 * A release whose Lua script Redis refuses to compile: a server fault, found
 * at start-up. The replica listens but never reports ready; /readyz, one
 * error log line and engram_store_script_refused name the script and
 * Redis' own error, and calls answer UNAVAILABLE instead of INTERNAL on
 * every append. The release is this one with append-12.lua as it was when
 * Redis' own builds refused it ("[[" inside its --[[ ]] header), copied to a
 * temp dir inside the repository (so its imports resolve as the original's)
 * and run on Redis 6.2.14 built from Redis' source. The same sources
 * unchanged become ready on the same Redis. Every wait is bounded.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectClient, errorOf } from "../support/clients.js";
import { REPO_ROOT, spawnServer, type ServerProcess } from "../support/engram.js";
import { redis62 } from "../support/redis-builds.js";
import { startRedisServer, type RedisServer } from "../support/redis-server.js";

let redis: RedisServer;
let release: string;

beforeAll(async () => {
  redis = await startRedisServer({ appendonly: false, build: await redis62() });
  release = mkdtempSync(path.join(REPO_ROOT, ".tmp", "refused-script-"));
  cpSync(path.join(REPO_ROOT, "src"), path.join(release, "src"), { recursive: true });
  cpSync(path.join(REPO_ROOT, "package.json"), path.join(release, "package.json"));
  const script = path.join(release, "src", "store", "redis", "scripts", "append-12.lua");
  const fixed = readFileSync(script, "utf8");
  const refused = fixed.replace('"changes": [ [scope, key, value], ... ]}', '"changes": [[scope, key, value], ...]}');
  expect(refused).not.toBe(fixed);
  writeFileSync(script, refused);
}, 600_000);
afterAll(async () => {
  await redis?.destroy();
  if (release) rmSync(release, { recursive: true, force: true });
});

/** /readyz's status code and body. */
async function readyz(server: ServerProcess): Promise<{ status: number; body: { status: string; reason?: string } }> {
  const res = await fetch(`${server.baseUrl}/readyz`, { signal: AbortSignal.timeout(5000) });
  return { status: res.status, body: (await res.json()) as { status: string; reason?: string } };
}

/** Polls `probe` until `done` holds of its value, for at most `ms`; the last value. */
async function until<T>(probe: () => Promise<T>, done: (value: T) => boolean, ms: number): Promise<T> {
  const deadline = Date.now() + ms;
  let value = await probe();
  while (!done(value) && Date.now() < deadline) {
    await sleep(100);
    value = await probe();
  }
  return value;
}

const env = () => ({ MEMORY_TYPE: "redis", MEMORY_REDIS_URL: redis.url, MEMORY_KEY_PREFIX: `refused${process.pid}` });
const REDIS_ERROR =
  "ERR Error compiling script (new function): user_script:45: nesting of [[...]] is deprecated near '['";

describe("a replica whose script Redis refuses to compile", () => {
  it("stays unready, naming the script and Redis' error on /readyz, in one error log line and in engram_store_script_refused", async () => {
    const server = await spawnServer(env(), [], {
      entry: ["--import", "tsx", path.join(release, "src", "main.ts")],
      startTimeoutMs: 90_000,
    });
    try {
      const ready = await until(
        () => readyz(server),
        (r) => r.body.reason?.includes("append-12.lua") === true,
        10_000,
      );
      expect(ready.status).toBe(503);
      expect(ready.body.status).toBe("NOT_SERVING");
      expect(ready.body.reason).toContain(`redis refuses the script append-12.lua: ${REDIS_ERROR}`);

      const logged = await until(
        async () => server.lines.filter((line) => line.includes("append-12.lua")),
        (lines) => lines.length > 0,
        5_000,
      );
      const entry = JSON.parse(logged[0]) as { level: string; msg: string; script: string };
      expect(entry.level).toBe("error");
      expect(entry.script).toBe("append-12.lua");
      expect(entry.msg).toBe(
        `redis refuses the script append-12.lua: ${REDIS_ERROR}; serving unready and retrying with back-off`,
      );

      const metrics = await (await fetch(`${server.baseUrl}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
      expect(metrics).toMatch(/^engram_store_script_refused\{script="append-12\.lua"\} 1$/m);

      // Not INTERNAL on each call: the store is not open, and calls say so.
      const err = await errorOf(
        connectClient(server.baseUrl).createSession({ appName: "app", userId: "u", sessionId: "s1" }),
      );
      expect(err.code).toBe(Code.Unavailable);

      // It keeps retrying, and stays unready: the script does not compile on a later try either.
      expect(
        await until(
          async () => server.lines.some((l) => /"attempt":[2-9]/.test(l) && l.includes("append-12.lua")),
          (retried) => retried,
          20_000,
        ),
        "a second retry refused the script",
      ).toBe(true);
      expect(server.child.exitCode).toBeNull();
      expect((await readyz(server)).status).toBe(503);
    } finally {
      await server.kill();
    }
  }, 180_000);

  it("the same sources with the script as it is now become ready on that Redis, with no such metric", async () => {
    const server = await spawnServer(env(), [], { startTimeoutMs: 90_000 });
    try {
      const ready = await until(
        () => readyz(server),
        (r) => r.status === 200,
        15_000,
      );
      expect(ready.body).toEqual({ status: "SERVING", backend: "redis" });
      const metrics = await (await fetch(`${server.baseUrl}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
      expect(metrics).not.toMatch(/^engram_store_script_refused\{/m);
      const client = connectClient(server.baseUrl);
      await client.createSession({ appName: "app", userId: "u", sessionId: "s1" });
      expect((await client.addEvent({ sessionId: "s1", event: { eventType: "user_message" } })).event!.seq).toBe(1n);
    } finally {
      await server.kill();
    }
  }, 180_000);
});
