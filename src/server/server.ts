/**
 * Engram's server: MemoryService, health and reflection over gRPC (h2c) and
 * Connect, gRPC-Web, REST and MCP (/mcp) over HTTP/1.1, all on one port
 * (shared-port.ts tells the protocols apart).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "../log.js";
import { ConnectingKeyStore } from "../auth/connecting-key-store.js";
import { Authenticator, openApiKeyStore } from "../auth/index.js";
import { loadConfig, type Config } from "../config.js";
import { MemoryError } from "../errors.js";
import { CallGuard } from "../service/guard/index.js";
import type { MemoryService } from "../service/memory-service.js";
import { Metrics } from "../service/metrics.js";
import { Quotas } from "../service/quotas.js";
import { connectMemoryRoutes } from "./connect-adapter.js";
import { createConnectHandler } from "./connect-handler.js";
import type { ConnectionSettings } from "./connection-limits.js";
import { createHostPolicy } from "./allowed-hosts.js";
import { createCrossSitePolicy } from "./cross-site.js";
import { CallsInFlight } from "../service/calls-in-flight.js";
import { grpcMemoryService } from "./grpc-adapter.js";
import { HealthMonitor } from "./health.js";
import { addReflection } from "./reflection.js";
import { createInspectorHandler } from "./inspector.js";
import { createMcpHandler } from "./mcp/handler.js";
import { createRestHandler } from "./rest.js";
import { createConnectionGate, createGrpcServer, listenOnSharedPort } from "./shared-port.js";
import { sendJsonError } from "./status.js";

/** Settings of the listener. */
export interface ServerOptions {
  host: string;
  port: number;
  agentName: string;
  maxMessageBytes: number;
  shutdownGraceMs: number;
  /** Serve the memory inspector at / (default true). */
  inspector?: boolean;
  /** Serve the Model Context Protocol at /mcp (default true). */
  mcp?: boolean;
}

/** Hardening settings (auth, quotas, metrics, TLS); each defaults to the config's default. */
export type SecurityOptions = Partial<
  Pick<
    Config,
    | "auth"
    | "authKeysFile"
    | "authCacheMs"
    | "rateLimit"
    | "maxStreams"
    | "maxStreamsPerKey"
    | "metrics"
    | "tlsCert"
    | "tlsKey"
    | "tlsClientCa"
    | "maxConnectionAgeMs"
    | "memoryEnabled"
    | "memoryType"
    | "redisUrl"
    | "postgresUrl"
    | "keyPrefix"
    | "corsOrigins"
    | "allowedHosts"
    | keyof ConnectionSettings
  >
>;

/** A running server. */
export interface RunningServer {
  readonly port: number;
  readonly health: HealthMonitor;
  /** Graceful stop: NOT_SERVING, streams end UNAVAILABLE, in-flight calls finish within the grace period. */
  close(): Promise<void>;
}

const RPC_PATH_PREFIX = "/engram.v1.MemoryService/";

/**
 * Starts serving `service` on one port. `metrics` is the registry whose
 * store wrapper the service's store went through (main does that); a fresh
 * one is made otherwise.
 */
export async function startServer(
  service: MemoryService,
  options: ServerOptions & SecurityOptions,
  log: Logger,
  metrics: Metrics = new Metrics(service.store),
): Promise<RunningServer> {
  const report = (err: unknown) => log.error({ err }, "internal error");
  const health = new HealthMonitor(service.store, log);
  // Settings not given take their documented defaults (SETTINGS in src/settings.ts), not a second copy of them.
  const security = { ...loadConfig([], {}), ...options };
  // Keys in Redis or PostgreSQL open like the memory store: a backend down at start-up leaves calls UNAVAILABLE until it answers.
  const networkKeys = security.memoryEnabled && security.memoryType !== "local";
  const keyStore = !options.auth
    ? undefined
    : networkKeys
      ? await ConnectingKeyStore.open(
          () => openApiKeyStore(security),
          (err, attempt) =>
            log.warn(
              { attempt, reason: err instanceof Error ? err.message : String(err) },
              "cannot open the API key store yet; retrying with back-off",
            ),
        )
      : await openApiKeyStore(security);
  const authenticator = keyStore ? new Authenticator(keyStore, security.authCacheMs) : undefined;
  const quotas = await Quotas.open(security);
  const guard = new CallGuard(service, { authenticator, quotas, metrics, log });

  // gRPC over h2c.
  const gate = createConnectionGate(security, metrics, log);
  const grpcServer = createGrpcServer(options.maxMessageBytes, security, gate);
  const grpcCalls = new CallsInFlight();
  const { definition, implementation } = grpcMemoryService(guard, report, grpcCalls);
  grpcServer.addService(definition, implementation);
  health.grpc.addToServer(grpcServer);
  addReflection(grpcServer);

  // Connect, gRPC-Web and REST over HTTP/1.1.
  const rest = createRestHandler({
    guard,
    health,
    agentName: options.agentName,
    report,
    metrics: options.metrics === false ? undefined : metrics,
  });
  const inspector = options.inspector === false ? undefined : createInspectorHandler(log);
  const hostPolicy = createHostPolicy({
    auth: Boolean(options.auth),
    listenHost: options.host,
    allowedHosts: security.allowedHosts,
  });
  const crossSite = createCrossSitePolicy(security.corsOrigins);
  const mcp =
    options.mcp === false ? undefined : createMcpHandler({ guard, report, maxMessageBytes: options.maxMessageBytes });
  const connectHandler = createConnectHandler({
    routes: connectMemoryRoutes(guard, report),
    maxMessageBytes: options.maxMessageBytes,
    onError: report,
    fallback: (req, res) => {
      // Last, so that the inspector's files can never shadow an RPC or REST path.
      if (inspector?.(req, res)) return;
      sendJsonError(res, new MemoryError("NOT_FOUND", "not found", {}, { reason: "PATH_NOT_FOUND" }), { kaos: true });
    },
  });
  const handleHttp1 = (req: IncomingMessage, res: ServerResponse) => {
    if (hostPolicy?.(req, res)) return;
    // `curl -d '{...}'` sends a form content type; on RPC paths treat it as Connect JSON.
    const type = req.headers["content-type"];
    if (
      req.method === "POST" &&
      req.url?.startsWith(RPC_PATH_PREFIX) &&
      (!type || type.startsWith("application/x-www-form-urlencoded"))
    ) {
      req.headers["content-type"] = "application/json";
    }
    if (crossSite(req, res)) return;
    if (mcp?.(req, res)) return;
    // Declined synchronously: a Connect call pays no promise turn for REST.
    if (!rest(req, res)) connectHandler(req, res);
  };

  await health.start();
  const { port, listener, httpServer, injector, sockets, http1Calls } = await listenOnSharedPort({
    host: options.host,
    port: options.port,
    grpcServer,
    gate,
    handleHttp1,
    settings: security,
  });

  let closing: Promise<void> | undefined;
  return {
    port,
    health,
    close: () =>
      (closing ??= (async () => {
        health.shutdown();
        listener.close();
        // Streams end first, each with UNAVAILABLE and its last seq, while their connections are still open.
        service.hub.shutdown();
        // Unary calls already running finish (neither grpc-js' tryShutdown nor node:http's close waits for
        // calls on connections handed to them, so nothing else would); new ones are refused UNAVAILABLE.
        const unaryIdle = guard.drainUnary();
        let timer: NodeJS.Timeout | undefined;
        const graceOver = new Promise<"timeout">((resolve) => {
          timer = setTimeout(() => resolve("timeout"), options.shutdownGraceMs);
        });
        // Their handlers have returned; gRPC connections close once every call's status has been sent (a
        // connection closed first drops a stream without its status and last seq), which under load can be long
        // after its handler returned.
        await Promise.race([Promise.all([service.hub.whenIdle(), unaryIdle, grpcCalls.idle()]), graceOver]);
        // A time, not a condition: node:http2 tells when a stream's status was queued, not when the frames reached
        // the socket, and closing the connection (GOAWAY) right after still drops the status under load.
        await new Promise((resolve) => setTimeout(resolve, 50));
        injector.drain(options.shutdownGraceMs);
        httpServer.closeIdleConnections();
        const grpcDone = new Promise<void>((resolve) => grpcServer.tryShutdown(() => resolve()));
        // node:http's close() waits for nothing (this server never listens): wait for each response to be written.
        const outcome = await Promise.race([Promise.all([grpcDone, http1Calls.idle()]), graceOver]);
        clearTimeout(timer);
        if (outcome === "timeout") log.warn("shutdown grace period over; closing remaining connections");
        grpcServer.forceShutdown();
        injector.destroy();
        httpServer.closeAllConnections();
        for (const socket of sockets) socket.destroy();
        gate.close();
        await Promise.allSettled([authenticator?.close(), quotas.close()]);
      })()),
  };
}
