/**
 * The RPC suite on the Redis store: each server gets its own key prefix on
 * the shared test Redis, removed after the file.
 */
import { Redis } from "ioredis";
import { afterAll } from "vitest";
import { RedisStore } from "../../src/store/redis.js";
import { describeRpcSuite } from "./suite.js";

const url = process.env.MEMORY_TEST_REDIS_URL!;
const prefixes: string[] = [];

describeRpcSuite("redis", async (limits) => {
  const keyPrefix = `rpc${process.pid}_${prefixes.length + 1}`;
  prefixes.push(keyPrefix);
  return RedisStore.open({ url, keyPrefix, limits });
});

afterAll(async () => {
  const admin = new Redis(url);
  for (const prefix of prefixes) {
    let cursor = "0";
    do {
      const [next, keys] = await admin.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
      if (keys.length > 0) await admin.del(...keys);
      cursor = next;
    } while (cursor !== "0");
  }
  await admin.quit();
});
