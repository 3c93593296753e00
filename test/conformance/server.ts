/**
 * The server under test of the Connect conformance suite (connectconformance
 * --mode server): reads one size-prefixed ServerCompatRequest on stdin,
 * serves ConformanceService on 127.0.0.1 through Engram's own edge (the
 * shared port with its sniffing and connection limits, createConnectHandler
 * with its body guard for HTTP/1.1, grpc-js for h2c, status.ts for errors),
 * and writes a size-prefixed ServerCompatResponse with the port on stdout.
 * It runs until the runner sends SIGTERM.
 * Usage: node --import tsx test/conformance/server.ts DESCRIPTOR_SET
 */
import { readFileSync } from "node:fs";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { pino } from "pino";
import { loadConfig } from "../../src/config.js";
import { MemoryError } from "../../src/errors.js";
import { createConnectHandler } from "../../src/server/connect-handler.js";
import { createConnectionGate, createGrpcServer, listenOnSharedPort } from "../../src/server/shared-port.js";
import { sendJsonError } from "../../src/server/status.js";
import { Metrics } from "../../src/service/metrics.js";
import { NullStore } from "../../src/store/null.js";
import { ConformanceSchema, connectConformanceRoutes, grpcConformanceService } from "./service.js";

/** Reads one message prefixed by its length (4 bytes, big-endian). */
async function readSizePrefixed(input: AsyncIterable<Buffer>): Promise<Buffer> {
  let buffered = Buffer.alloc(0);
  for await (const chunk of input) {
    buffered = Buffer.concat([buffered, chunk]);
    if (buffered.length >= 4 && buffered.length >= 4 + buffered.readUInt32BE(0)) break;
  }
  if (buffered.length < 4 || buffered.length < 4 + buffered.readUInt32BE(0))
    throw new Error("stdin ended before a whole ServerCompatRequest");
  return buffered.subarray(4, 4 + buffered.readUInt32BE(0));
}

function sizePrefixed(message: Uint8Array): Buffer {
  const out = Buffer.alloc(4 + message.length);
  out.writeUInt32BE(message.length, 0);
  out.set(message, 4);
  return out;
}

async function main(): Promise<void> {
  const schema = new ConformanceSchema(readFileSync(process.argv[2]!));
  const request = fromBinary(
    schema.message("ServerCompatRequest"),
    await readSizePrefixed(process.stdin),
  ) as unknown as {
    useTls: boolean;
    messageReceiveLimit: number;
  };
  // Engram serves TLS too, but the suite's config (config.yaml) leaves it out: this edge is tested over plaintext.
  if (request.useTls) throw new Error("TLS cases are not configured (config.yaml: supports_tls: false)");
  // stdout carries the ServerCompatResponse alone: logs go to stderr, or to a file named by ENGRAM_CONFORMANCE_LOG
  // (the runner does not show its servers' stderr).
  const log = pino({ level: "warn" }, pino.destination(process.env.ENGRAM_CONFORMANCE_LOG ?? 2));
  const report = (err: unknown) => log.error({ err }, "internal error");
  // Engram's defaults for every limit (SETTINGS in src/settings.ts), with the suite's message limit when it sets one.
  const settings = loadConfig([], {});
  const maxMessageBytes = request.messageReceiveLimit || settings.maxMessageBytes;

  const gate = createConnectionGate(settings, new Metrics(new NullStore()), log);
  const grpcServer = createGrpcServer(maxMessageBytes, settings, gate);
  const { definition, implementation } = grpcConformanceService(schema, report);
  grpcServer.addService(definition, implementation);
  const connectHandler = createConnectHandler({
    routes: connectConformanceRoutes(schema, report),
    maxMessageBytes,
    onError: report,
    registry: schema.registry,
    fallback: (_req, res) => sendJsonError(res, new MemoryError("NOT_FOUND", "not found"), { kaos: false }),
  });
  const shared = await listenOnSharedPort({
    host: "127.0.0.1",
    port: 0,
    grpcServer,
    gate,
    handleHttp1: connectHandler,
    settings,
  });
  process.stdout.write(
    sizePrefixed(
      toBinary(
        schema.message("ServerCompatResponse"),
        create(schema.message("ServerCompatResponse"), { host: "127.0.0.1", port: shared.port } as never),
      ),
    ),
  );
  process.once("SIGTERM", () => {
    grpcServer.forceShutdown();
    shared.httpServer.closeAllConnections();
    for (const socket of shared.sockets) socket.destroy();
    shared.listener.close();
    shared.gate.close();
    process.exit(0);
  });
}

main().catch((err: unknown) => {
  process.stderr.write(`conformance server: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
