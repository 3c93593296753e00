/** Opens the store the configuration names. */
import { ConfigError, type Config } from "../config.js";
import { LocalStore } from "./local.js";
import { NullStore } from "./null.js";
import type { MemoryStore } from "./types.js";

/** Creates (and for network stores, connects) the configured MemoryStore. */
export async function openStore(config: Config): Promise<MemoryStore> {
  const limits = { maxSessions: config.maxSessions, maxSessionEvents: config.maxSessionEvents };
  if (!config.memoryEnabled) return new NullStore();
  switch (config.memoryType) {
    case "local":
      return new LocalStore(limits);
    // BEGIN redis
    case "redis":
      throw new ConfigError("MEMORY_TYPE=redis is not supported by this build yet");
    // END redis
    // BEGIN postgres
    case "postgres":
      throw new ConfigError("MEMORY_TYPE=postgres is not supported by this build yet");
    // END postgres
  }
}
