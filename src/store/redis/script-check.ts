/**
 * The start-up check of the Redis store's Lua scripts: each one the store
 * sends (sessions and long-term memories) is loaded with SCRIPT LOAD on
 * every master before the store counts as open. A script Redis refuses to
 * compile is a fault of the release on this Redis, not of any client: found
 * here, it keeps the replica unready naming the script and Redis' error
 * (StoreScriptRefusedError), instead of answering INTERNAL on every call
 * that runs it.
 */
import { SCRIPTS_DIR as MEMORY_SCRIPTS_DIR } from "../memories/redis.js";
import { StoreScriptRefusedError } from "../incompatible.js";
import { isCluster, type RedisClient } from "../../backends/redis.js";
import { storeError } from "./connection.js";
import { loadScripts, type ScriptText } from "./script-runner.js";

/** Every script the Redis store sends, as it sends them: the sessions' (scripts/) then the long-term memories' (memories/redis-scripts/). */
export function everyScript(): ScriptText[] {
  return [...loadScripts().values(), ...loadScripts(MEMORY_SCRIPTS_DIR).values()];
}

/**
 * Loads every script on `redis` (each master of a cluster). Throws
 * StoreScriptRefusedError for the first script a node refuses, and
 * UNAVAILABLE (storeError) when a node cannot be reached.
 */
export async function checkScripts(redis: RedisClient): Promise<void> {
  const nodes = isCluster(redis) ? redis.nodes("master") : [redis];
  const scripts = everyScript();
  await Promise.all(
    nodes.map(async (node) => {
      for (const { file, lua } of scripts) {
        try {
          await node.script("LOAD", lua);
        } catch (err) {
          // A transient answer (LOADING, BUSY...) or an outage passes by retrying; any other error reply is Redis refusing this script.
          const mapped = storeError(err);
          if (mapped.code === "INTERNAL" && err instanceof Error && err.name === "ReplyError")
            throw new StoreScriptRefusedError("redis", file, err.message);
          throw mapped;
        }
      }
    }),
  );
}
