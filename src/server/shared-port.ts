/**
 * One listening port for every protocol. Each new TCP connection is sniffed:
 * the HTTP/2 client preface ("PRI * HTTP/2.0") goes to grpc-js (gRPC over
 * h2c, the fast path), anything else to a node:http server (Connect,
 * gRPC-Web, REST and MCP over HTTP/1.1); with TLS, ALPN tells them apart.
 * What each side serves is the caller's: startServer mounts MemoryService,
 * health, reflection, REST and MCP; the Connect conformance server
 * (test/conformance) mounts ConformanceService on the very same edge.
 */
import { readFileSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import tls from "node:tls";
import * as grpc from "@grpc/grpc-js";
import type { Config } from "../config.js";
import type { Logger } from "../log.js";
import type { Metrics } from "../service/metrics.js";
import { checkGrpcRequests, oneRequestMessage } from "./grpc-protocol.js";
import {
  ConnectionGate,
  enforceHttp1Deadlines,
  grpcConnectionOptions,
  http1ServerOptions,
  resolveMaxConnections,
  sniffProtocol,
  type ConnectionSettings,
} from "./connection-limits.js";
import { CallsInFlight } from "../service/calls-in-flight.js";

/** What the port needs to know: connection limits, TLS files and the gRPC connection age. */
export type SharedPortSettings = ConnectionSettings &
  Partial<Pick<Config, "tlsCert" | "tlsKey" | "tlsClientCa" | "maxConnectionAgeMs">>;

/** The gRPC server of the h2c side, with the edge's message size and connection limits; the caller adds its services. */
export function createGrpcServer(
  maxMessageBytes: number,
  settings: SharedPortSettings,
  gate: ConnectionGate,
): grpc.Server {
  const server = new grpc.Server({
    // The gate counts each connection's open streams: one without any may be closed to make room at a cap.
    // It comes first (innermost), so that it also sees the calls the outer ones end.
    interceptors: [gate.grpcInterceptor, oneRequestMessage],
    "grpc.max_receive_message_length": maxMessageBytes,
    "grpc.max_send_message_length": maxMessageBytes,
    ...grpcConnectionOptions(settings),
    // Channelz (per-call trackers, closures and timestamps) serves only the channelz
    // service, which is not registered: off, it leaves ~5 µs of every call's CPU.
    "grpc.enable_channelz": 0,
    // GOAWAY past this age: long streams reconnect (and resume) on whichever replica the balancer picks.
    ...(settings.maxConnectionAgeMs
      ? { "grpc.max_connection_age_ms": settings.maxConnectionAgeMs, "grpc.max_connection_age_grace_ms": 30_000 }
      : {}),
  });
  checkGrpcRequests(server, maxMessageBytes);
  return server;
}

/**
 * A response sent before the request body was read in full (an oversized
 * message or an unknown encoding refused from the head) closes the
 * connection: otherwise node would read and discard the rest of the body
 * before the connection could carry another request. It closes lingering
 * (see closeLingering). A class rather than a writeHead wrapped per request:
 * the wrapper was a closure and a new own property on every response.
 */
class ClosingEarlyResponse extends http.ServerResponse {
  override writeHead(statusCode: number, ...rest: unknown[]): this {
    if (!this.req.complete && !this.headersSent) {
      this.setHeader("connection", "close");
      if (this.socket) closeLingering(this.socket, this.req);
    }
    return (super.writeHead as (statusCode: number, ...rest: unknown[]) => this).call(this, statusCode, ...rest);
  }
}

/** A lingering close waits at most this long in all, */
export const LINGER_MAX_MS = 5_000;
/** and this long for the client's next bytes; */
export const LINGER_IDLE_MS = 1_000;
/** it drops at most this many bytes of the unread body (a larger body announced is not waited for). */
export const LINGER_MAX_BYTES = 16 * 1024 * 1024;

/**
 * Makes the close node's server does after this response (socket.destroySoon,
 * once the answer is written) a lingering one: the write side is shut after
 * the answer, then the rest of the request's body is read and dropped until
 * the client has sent it all or closed, and only then is the connection
 * closed. Closing at once with the client still sending makes the kernel
 * answer its next bytes with a reset, and a client that has not yet read the
 * answer sees "connection reset" or "broken pipe" instead of it. Bounded by
 * LINGER_MAX_MS, LINGER_IDLE_MS and LINGER_MAX_BYTES.
 */
function closeLingering(socket: net.Socket, req: http.IncomingMessage): void {
  const announced = Number(req.headers["content-length"]);
  if (announced > LINGER_MAX_BYTES) return; // node's own close: waiting for that much would be worse than the reset
  socket.destroySoon = () => {
    socket.end();
    if (req.complete) return destroyOnceWritten(socket);
    // Node drops the rest of the body in its parser (req._dump) without emitting it, so progress is read from
    // the socket's byte count, which also counts reads of a handle node's parser consumes directly.
    const start = Date.now();
    const startBytes = socket.bytesRead;
    let lastBytes = startBytes;
    let lastProgress = start;
    const tick = setInterval(() => {
      const now = Date.now();
      if (socket.bytesRead !== lastBytes) {
        lastBytes = socket.bytesRead;
        lastProgress = now;
      }
      if (
        lastBytes - startBytes > LINGER_MAX_BYTES ||
        now - lastProgress >= LINGER_IDLE_MS ||
        now - start >= LINGER_MAX_MS
      )
        close();
    }, LINGER_TICK_MS);
    function close(): void {
      clearInterval(tick);
      destroyOnceWritten(socket);
    }
    req.once("end", close); // the body's last byte read
    socket.once("end", close); // the client closed its side
    socket.once("close", () => clearInterval(tick));
  };
}

/**
 * How often a lingering close looks at what was read. The bytes bound is
 * only as exact as this: loopback delivers ~600 MB/s here, so a 100 ms
 * tick let ~64 MiB through before the first look; at 10 ms, ~6 MiB.
 */
const LINGER_TICK_MS = 10;

/** Closes the socket once what was written to it is out: destroying it at once would drop writes still queued. */
function destroyOnceWritten(socket: net.Socket): void {
  if (socket.writableFinished) socket.destroy();
  else socket.once("finish", () => socket.destroy());
}

/** The connection gate of one shared port: create it first, give it to createGrpcServer and listenOnSharedPort. */
export function createConnectionGate(settings: SharedPortSettings, metrics: Metrics, log: Logger): ConnectionGate {
  return new ConnectionGate(
    resolveMaxConnections(settings.maxConnections),
    settings.maxConnectionsPerAddress,
    metrics,
    log,
  );
}

/** A listening shared port and the parts its owner's shutdown closes, in its own order. */
export interface SharedPort {
  readonly port: number;
  readonly listener: net.Server;
  readonly httpServer: http.Server;
  readonly injector: grpc.ConnectionInjector;
  /** Every open connection, whichever side it went to. */
  readonly sockets: ReadonlySet<net.Socket>;
  readonly gate: ConnectionGate;
  /** HTTP/1.1 responses begun and not yet written out (or their connection closed). */
  readonly http1Calls: CallsInFlight;
}

/** Where to listen, what to serve on each side, and under which limits. */
export interface SharedPortOptions {
  host: string;
  port: number;
  grpcServer: grpc.Server;
  /** The gate `grpcServer` was created with. */
  gate: ConnectionGate;
  /** Every HTTP/1.1 request. */
  handleHttp1: http.RequestListener;
  settings: SharedPortSettings;
}

/** Starts listening: gRPC connections to `grpcServer`, the rest to a node:http server calling `handleHttp1`. */
export async function listenOnSharedPort(options: SharedPortOptions): Promise<SharedPort> {
  const { settings, gate } = options;
  const injector = options.grpcServer.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const httpServer = http.createServer(
    { ...http1ServerOptions(settings), ServerResponse: ClosingEarlyResponse },
    options.handleHttp1,
  );

  enforceHttp1Deadlines(httpServer);
  // A keep-alive connection between requests may be closed to make room at a cap; one with a request in flight may not.
  // node:http's close() waits for nothing here (this server never listens), so shutdown waits on this count.
  const http1Calls = new CallsInFlight();
  httpServer.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    gate.callStarted(req.socket);
    http1Calls.started();
    res.once("close", () => {
      gate.callEnded(req.socket);
      http1Calls.ended();
    });
  });

  const sockets = new Set<net.Socket>();
  const track = (socket: net.Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    socket.on("error", () => socket.destroy());
  };
  const listener = settings.tlsCert
    ? // TLS: ALPN tells the protocols apart ("h2" for gRPC; anything else is HTTP/1.1), no sniffing needed.
      tls.createServer(
        {
          cert: readFileSync(settings.tlsCert),
          key: readFileSync(settings.tlsKey!),
          ALPNProtocols: ["h2", "http/1.1"],
          ...(settings.tlsClientCa
            ? { ca: readFileSync(settings.tlsClientCa), requestCert: true, rejectUnauthorized: true }
            : {}),
          // The TLS handshake is this transport's first bytes (0 here means Node's own 120 s).
          ...(settings.firstBytesTimeoutMs > 0 ? { handshakeTimeout: settings.firstBytesTimeoutMs } : {}),
        },
        (socket) => {
          track(socket);
          gate.proven(socket, socket.alpnProtocol === "h2");
          if (socket.alpnProtocol === "h2") injector.injectConnection(socket);
          else httpServer.emit("connection", socket);
        },
      )
    : net.createServer((socket) => {
        if (socket.destroyed) return; // refused by the gate
        track(socket);
        sniffProtocol(
          socket,
          settings.firstBytesTimeoutMs,
          (isHttp2) => {
            gate.proven(socket, isHttp2);
            if (isHttp2) {
              // node:http2 drains bytes already buffered on the socket itself.
              injector.injectConnection(socket);
            } else {
              httpServer.emit("connection", socket);
              // node:http reads the handle directly; the put-back bytes flow once resumed.
              socket.resume();
            }
          },
          () => gate.rejected("first_bytes_timeout"),
        );
      });
  // Before any other listener: a connection over a cap is closed before it is read or wrapped in TLS.
  listener.prependListener("connection", (socket: net.Socket) => void gate.admit(socket));
  // A failed TLS handshake (wrong or missing client certificate, plain HTTP on a TLS port) only ends that connection.
  listener.on("tlsClientError", (_err: Error, socket: tls.TLSSocket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    listener.once("error", reject);
    listener.listen(options.port, options.host, () => resolve());
  });
  // Past listening, an accept that fails (EMFILE: out of descriptors) costs that one connection, not the process.
  listener.on("error", () => gate.rejected("accept_failed"));
  const port = (listener.address() as net.AddressInfo).port;
  return { port, listener, httpServer, injector, sockets, gate, http1Calls };
}
