/**
 * Start-up: read the configuration, open the store, serve, and stop
 * gracefully on SIGTERM/SIGINT. A network store (Redis, PostgreSQL) that is
 * unreachable at start does not stop the server: it listens unready and keeps
 * opening the store in the background (src/store/connecting.ts). A store that
 * answers but must not be used by this release (StoreIncompatibleError: a
 * PostgreSQL schema migrated by a newer one) stops the server like a
 * configuration error, whether found at the first attempt or a later one.
 * A backend that refuses one of the store's scripts (StoreScriptRefusedError)
 * keeps it unready too, logged as an error naming the script, and retried.
 */
import { ConfigError, describeConfig, loadConfig, type Config } from "./config.js";
import { log } from "./log.js";
import { MemoryService } from "./service/memory-service.js";
import { embeddingsClientFromConfig } from "./service/memories/embeddings.js";
import { rerankerFromConfig } from "./service/memories/reranker.js";
import { extractionSettingsFromConfig } from "./service/memories/extraction.js";
import { DEFAULT_SERVICE_LIMITS } from "./service/limits.js";
import { Metrics } from "./service/metrics.js";
import { startServer } from "./server/server.js";
import { describeRetention, RemovalLog, RetentionSweeper } from "./service/retention.js";
import { ConnectingStore } from "./store/connecting.js";
import { StoreIncompatibleError, StoreScriptRefusedError } from "./store/incompatible.js";
import { openStore, storeLimits } from "./store/index.js";
import type { MemoryStore } from "./store/types.js";
import { VERSION } from "./version.js";

/** Logs what an acknowledged append survives on the opened store, and what retention deletes anyway: one line, so neither is read without the other. */
async function logDurability(store: MemoryStore, config: Config): Promise<void> {
  const retention = describeRetention(storeLimits(config), store.backend, config.capsFromDefaults);
  const durability = await store.describeDurability();
  log.info(
    { backend: store.backend, durability, retention },
    `store durability: ${durability.summary}; retention: ${retention}`,
  );
}

/**
 * The configured store, opened now when its backend answers; otherwise (a
 * network store only) a ConnectingStore that keeps trying in the background.
 */
async function openStoreOrKeepTrying(config: Config): Promise<MemoryStore> {
  const failed = (err: unknown, attempt: number) => {
    // A script the backend refuses is this release's fault on that backend: an error, saying which script and why, in one line.
    if (err instanceof StoreScriptRefusedError)
      log.error(
        { attempt, script: err.script, reason: err.reason },
        `${err.message}; serving unready and retrying with back-off`,
      );
    else
      log.warn(
        { attempt, reason: err instanceof Error ? err.message : String(err) },
        "cannot open the store yet; serving unready and retrying with back-off",
      );
  };
  try {
    return await openStore(config);
  } catch (err) {
    if (
      err instanceof ConfigError ||
      err instanceof StoreIncompatibleError ||
      !config.memoryEnabled ||
      config.memoryType === "local"
    )
      throw err;
    failed(err, 0);
    return new ConnectingStore(
      config.memoryType,
      () => openStore(config),
      {
        failed,
        opened: (_store, attempts) => log.info({ backend: config.memoryType, attempts }, "store opened"),
      },
      {},
      err,
    );
  }
}

async function main(): Promise<void> {
  const config = loadConfig();
  log.info({ version: VERSION, node: process.version }, "engram starting");
  log.info({ config: describeConfig(config) }, "effective configuration");
  const rawStore = await openStoreOrKeepTrying(config);
  const limits = storeLimits(config);
  if (!(rawStore instanceof ConnectingStore)) await logDurability(rawStore, config);
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
    embeddings: embeddingsClientFromConfig(config),
    reranker: rerankerFromConfig(config, (err, message) => log.warn({ err }, message)),
    extraction: extractionSettingsFromConfig(config),
  });
  if (service.extractor) metrics.watchExtraction(service.extractor.counts);
  if (service.longTerm.reranker) metrics.watchReranker(service.longTerm.reranker.counts);
  const server = await startServer(service, config, log, metrics);
  if (config.auth)
    log.info(
      { keys: config.memoryEnabled && config.memoryType !== "local" ? config.memoryType : config.authKeysFile },
      "API keys required on every call",
    );
  log.info({ host: config.host, port: server.port, backend: store.backend, version: VERSION }, "listening");
  // Erasures a stopped replica left unfinished are finished once the store is open, while serving (counts only: no tenant data).
  const resumeErasures = (opened: MemoryStore) =>
    opened.resumeErasures?.().then(
      (resumed) => {
        if (resumed.users === 0) return;
        metrics.sessionsRemoved.inc({ reason: "erasure" }, resumed.sessions);
        log.info(resumed, "erasures resumed");
      },
      (err: unknown) => log.warn({ err }, "could not resume erasures; the next start-up tries again"),
    );
  if (rawStore instanceof ConnectingStore) {
    // Ready as soon as the store opens, not at the next health tick.
    void rawStore.opened
      .then(async (opened) => {
        void resumeErasures(opened);
        await server.health.check();
        await logDurability(opened, config);
      })
      .catch((err: unknown) => {
        if (err instanceof StoreIncompatibleError) exitRefused(err);
        log.warn({ err }, "store opened, but reading its durability failed");
      });
  } else {
    void resumeErasures(rawStore);
  }

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

/** Exits 2, as for a configuration error, saying why the store must not be used: a restart of the same release would not help. */
function exitRefused(err: StoreIncompatibleError): never {
  log.fatal(`refusing the store: ${err.message}`);
  process.stderr.write(`engram: refusing the store: ${err.message}\n`);
  process.exit(2);
}

/** A human line for a port the server cannot listen on (taken, or privileged): a configuration problem, not a crash. */
function listenFailureOf(err: unknown): string | undefined {
  const e = err as NodeJS.ErrnoException & { port?: number; address?: string };
  if (e?.syscall !== "listen") return undefined;
  const where = `port ${e.port ?? "?"}${e.address ? ` on ${e.address}` : ""}`;
  if (e.code === "EADDRINUSE") return `${where} is in use (set PORT or --port)`;
  if (e.code === "EACCES") return `${where} needs privileges this process lacks (set PORT or --port to 1024 or above)`;
  if (e.code === "EADDRNOTAVAIL")
    return `${e.address ?? "the address"} is not an address of this machine (set HOST or --host)`;
  return undefined;
}

main().catch((err) => {
  if (err instanceof ConfigError) {
    log.fatal(`configuration error: ${err.message}`);
    process.stderr.write(`engram: configuration error: ${err.message}\n`);
    process.exit(2);
  }
  if (err instanceof StoreIncompatibleError) exitRefused(err);
  const listenFailure = listenFailureOf(err);
  if (listenFailure) {
    log.fatal({ err }, listenFailure);
    process.stderr.write(`engram: ${listenFailure}\n`);
    process.exit(2);
  }
  log.fatal({ err }, "failed to start");
  process.exit(1);
});
