/**
 * Every Lua script the Redis store sends (sessions and long-term memories,
 * includes resolved: the text as sent) loads on every Redis build we
 * support: Debian's, and Redis' own builds of the oldest (6.2.14) and a
 * current one (Redis Stack 7.4.1). Redis' own build bundles a stricter Lua
 * than Debian's (it refuses "[[" inside a --[[ ]] comment), so passing on
 * Debian alone proves nothing for the official images.
 */
import { readdirSync } from "node:fs";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SCRIPTS_DIR as MEMORY_SCRIPTS_DIR } from "../../src/store/memories/redis.js";
import { everyScript } from "../../src/store/redis/script-check.js";
import { SCRIPTS_DIR } from "../../src/store/redis/script-runner.js";
import { redis62, redisStack74, type RedisBuild } from "../support/redis-builds.js";
import { startRedisServer, type RedisServer } from "../support/redis-server.js";

const BUILDS: Array<[string, () => Promise<RedisBuild | undefined>]> = [
  ["Debian's redis-server", async () => undefined],
  ["Redis 6.2.14 built from Redis' source", redis62],
  ["Redis Stack 7.4.1", redisStack74],
];

it("lists every script file of the sessions and of the long-term memories", () => {
  const files = [SCRIPTS_DIR, MEMORY_SCRIPTS_DIR].flatMap((dir) =>
    readdirSync(dir).filter((file) => file.endsWith(".lua")),
  );
  expect(
    everyScript()
      .map((s) => s.file)
      .sort(),
  ).toEqual(files.sort());
  expect(files.length).toBeGreaterThanOrEqual(10);
  // Includes are pasted in: no script is sent with an include line left.
  for (const { file, lua } of everyScript()) expect(lua, file).not.toMatch(/^--- @include /m);
  expect(path.basename(SCRIPTS_DIR)).toBe("scripts");
});

describe.each(BUILDS)("on %s", (_name, build) => {
  let server: RedisServer;
  let redis: Redis;
  beforeAll(async () => {
    server = await startRedisServer({ appendonly: false, build: await build() });
    redis = new Redis(server.url);
  }, 600_000);
  afterAll(async () => {
    redis?.disconnect();
    await server?.destroy();
  });

  it("SCRIPT LOAD accepts every script the store sends", async () => {
    const refused: string[] = [];
    for (const { file, lua } of everyScript()) {
      await redis.script("LOAD", lua).catch((err: Error) => refused.push(`${file}: ${err.message}`));
    }
    expect(refused).toEqual([]);
  });
});
