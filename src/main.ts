/**
 * Start-up: read the configuration, open the store, serve, and stop
 * gracefully on SIGTERM/SIGINT.
 */
import { ConfigError, describeConfig, loadConfig } from "./config.js";
import { log } from "./log.js";
import { MemoryService } from "./service/memory-service.js";
import { DEFAULT_SERVICE_LIMITS } from "./service/limits.js";
import { Metrics } from "./service/metrics.js";
import { startServer } from "./server/server.js";
import { openStore } from "./store/index.js";

async function main(): Promise<void> {
  const config = loadConfig();
  log.info({ config: describeConfig(config) }, "effective configuration");
  const rawStore = await openStore(config);
  log.info({ backend: rawStore.backend, durability: await rawStore.describeDurability() }, "store durability");
  const metrics = new Metrics(rawStore);
  const store = metrics.instrument(rawStore);
  const service = new MemoryService(store, {
    limits: { ...DEFAULT_SERVICE_LIMITS, maxEventBytes: config.maxEventBytes, maxBatchEvents: config.maxBatchEvents },
    contextLimit: config.contextLimit,
    heartbeatMs: config.heartbeatMs,
  });
  const server = await startServer(service, config, log, metrics);
  if (config.auth) log.info({ keys: config.memoryEnabled && config.memoryType !== "local" ? config.memoryType : config.authKeysFile }, "API keys required on every call");
  log.info({ host: config.host, port: server.port, backend: store.backend }, "listening");
  // Erasures a stopped replica left unfinished are finished now, while serving (counts only: no tenant data).
  rawStore.resumeErasures?.().then(
    (resumed) => {
      if (resumed.users === 0) return;
      metrics.sessionsRemoved.inc({ reason: "erasure" }, resumed.sessions);
      log.info(resumed, "erasures resumed");
    },
    (err: unknown) => log.warn({ err }, "could not resume erasures; the next start-up tries again"),
  );

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, graceMs: config.shutdownGraceMs }, "shutting down");
    await server.close();
    await store.close();
    log.info("stopped");
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
}

main().catch((err) => {
  if (err instanceof ConfigError) {
    log.fatal(`configuration error: ${err.message}`);
    process.stderr.write(`engram: configuration error: ${err.message}\n`);
    process.exit(2);
  }
  log.fatal({ err }, "failed to start");
  process.exit(1);
});
