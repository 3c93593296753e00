/**
 * Transports for the Engram client: gRPC over HTTP/2 (h2c or TLS), the
 * Connect protocol over HTTP/1.1 and gRPC-Web over HTTP/1.1, all from
 * @connectrpc/connect-node. Each factory returns the transport together with a
 * `close()` that releases its connections (the HTTP/2 session or the HTTP/1.1
 * keep-alive agent), so that a process can exit once the client is closed.
 * Node.js only (node:http, node:https, HTTP/2): browsers and edge runtimes get
 * transport-web.ts through the package's conditional export.
 */
import http from "node:http";
import https from "node:https";
import {
  Http2SessionManager,
  createConnectTransport as createNodeConnectTransport,
  createGrpcTransport as createNodeGrpcTransport,
  createGrpcWebTransport as createNodeGrpcWebTransport,
} from "@connectrpc/connect-node";
import type { ClosableTransport, Protocol, TransportOptions } from "./protocol.js";

export type { ClosableTransport, Protocol, TransportOptions } from "./protocol.js";

/** gRPC over HTTP/2 (h2c for http:// URLs, as `npm start` serves). */
export function createGrpcTransport(options: TransportOptions): ClosableTransport {
  const sessionManager = new Http2SessionManager(options.baseUrl, {
    pingIntervalMs: options.pingIntervalMs,
  });
  const transport = createNodeGrpcTransport({
    baseUrl: options.baseUrl,
    // connect-node's gRPC transport always speaks HTTP/2; the session manager owns the connection.
    sessionManager,
    interceptors: options.interceptors,
    defaultTimeoutMs: options.defaultTimeoutMs,
  });
  return { transport, protocol: "grpc", close: () => sessionManager.abort() };
}

function keepAliveAgent(baseUrl: string): http.Agent {
  return new URL(baseUrl).protocol === "https:"
    ? new https.Agent({ keepAlive: true })
    : new http.Agent({ keepAlive: true });
}

/** The Connect protocol over HTTP/1.1 (JSON by default, binary with useBinaryFormat). */
export function createConnectTransport(options: TransportOptions): ClosableTransport {
  const agent = keepAliveAgent(options.baseUrl);
  const transport = createNodeConnectTransport({
    baseUrl: options.baseUrl,
    httpVersion: "1.1",
    nodeOptions: { agent },
    useBinaryFormat: options.useBinaryFormat ?? false,
    interceptors: options.interceptors,
    defaultTimeoutMs: options.defaultTimeoutMs,
  });
  return { transport, protocol: "connect", close: () => agent.destroy() };
}

/** gRPC-Web over HTTP/1.1 (binary). */
export function createGrpcWebTransport(options: TransportOptions): ClosableTransport {
  const agent = keepAliveAgent(options.baseUrl);
  const transport = createNodeGrpcWebTransport({
    baseUrl: options.baseUrl,
    httpVersion: "1.1",
    nodeOptions: { agent },
    interceptors: options.interceptors,
    defaultTimeoutMs: options.defaultTimeoutMs,
  });
  return { transport, protocol: "grpc-web", close: () => agent.destroy() };
}

/** The transport for `protocol`. */
export function createTransport(protocol: Protocol, options: TransportOptions): ClosableTransport {
  switch (protocol) {
    case "grpc":
      return createGrpcTransport(options);
    case "connect":
      return createConnectTransport(options);
    case "grpc-web":
      return createGrpcWebTransport(options);
    default:
      throw new TypeError(`unknown protocol ${JSON.stringify(protocol)}: use "grpc", "connect" or "grpc-web"`);
  }
}
