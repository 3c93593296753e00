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
import { describeRetention, RemovalLog, RetentionSweeper } from "./service/retention.js";
import { openStore, storeLimits } from "./store/index.js";

async function main(): Promise<void> {
  const config = loadConfig();
  log.info({ config: describeConfig(config) }, "effective configuration");
  const rawStore = await openStore(config);
  const limits = storeLimits(config);
  const retention = describeRetention(limits, rawStore.backend, config.capsFromDefaults);
  const durability = await rawStore.describeDurability();
  // What an append survives, and what retention deletes anyway: one line, so neither is read without the other.
  log.info({ backend: rawStore.backend, durability, retention }, `store durability: ${durability.summary}; retention: ${retention}`);
  const metrics = new Metrics(rawStore);
  const store = metrics.instrument(rawStore);
  const sweeper = new RetentionSweeper(store, limits, metrics, log);
  sweeper.start();
  const removals = new RemovalLog(metrics, log);
  removals.start();
  const service = new MemoryService(store, {
    limits: { ...DEFAULT_SERVICE_LIMITS, maxEventBytes: config.maxEventBytes, maxBatchEvents: config.maxBatchEvents },
    contextLimit: config.contextLimit,
    heartbeatMs: config.heartbeatMs,
  });
  const server = await startServer(service, config, log, metrics);
  if (config.auth) log.info({ keys: config.memoryEnabled && config.memoryType !== "local" ? config.memoryType : config.authKeysFile }, "API keys required on every call");
  log.info({ host: config.host, port: server.port, backend: store.backend }, "listening");

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal, graceMs: config.shutdownGraceMs }, "shutting down");
    sweeper.stop();
    removals.stop();
    await server.close();
    await removals.flush().catch(() => {});
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
