/**
 * Transports for browsers and edge runtimes: the Connect protocol and
 * gRPC-Web over the platform's fetch, from @connectrpc/connect-web. No
 * `node:` module is imported here or by anything this file imports, so a
 * bundler targeting the browser resolves it (the package's "browser",
 * "worker" and "edge-light" conditions select web.ts, which uses this file).
 * gRPC proper needs HTTP/2 trailers, which fetch cannot read: it is refused.
 */
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import {
  createConnectTransport as createFetchConnectTransport,
  createGrpcWebTransport as createFetchGrpcWebTransport,
} from "@connectrpc/connect-web";
import type { ClosableTransport, Protocol, TransportOptions } from "./protocol.js";

export type { ClosableTransport, Protocol, TransportOptions } from "./protocol.js";

/**
 * fetch keeps no connection of ours to release, so close() means: abort the
 * calls and streams in flight, and fail every later call with CANCELED, as a
 * closed Node.js transport does.
 */
function closing(): { interceptor: Interceptor; close(): void } {
  const closed = new AbortController();
  const interceptor: Interceptor = (next) => (req) => {
    if (closed.signal.aborted) throw new ConnectError("the client is closed", Code.Canceled);
    return next({ ...req, signal: AbortSignal.any([req.signal, closed.signal]) });
  };
  return { interceptor, close: () => closed.abort() };
}

/** The Connect protocol over fetch (JSON by default, binary with useBinaryFormat); server streams included. */
export function createConnectTransport(options: TransportOptions): ClosableTransport {
  const { interceptor, close } = closing();
  const transport = createFetchConnectTransport({
    baseUrl: options.baseUrl,
    useBinaryFormat: options.useBinaryFormat ?? false,
    interceptors: [interceptor, ...(options.interceptors ?? [])],
    defaultTimeoutMs: options.defaultTimeoutMs,
  });
  return { transport, protocol: "connect", close };
}

/** gRPC-Web over fetch (binary); server streams included. */
export function createGrpcWebTransport(options: TransportOptions): ClosableTransport {
  const { interceptor, close } = closing();
  const transport = createFetchGrpcWebTransport({
    baseUrl: options.baseUrl,
    interceptors: [interceptor, ...(options.interceptors ?? [])],
    defaultTimeoutMs: options.defaultTimeoutMs,
  });
  return { transport, protocol: "grpc-web", close };
}

/** The transport for `protocol` over fetch: "connect" or "grpc-web". */
export function createTransport(protocol: Protocol, options: TransportOptions): ClosableTransport {
  switch (protocol) {
    case "connect":
      return createConnectTransport(options);
    case "grpc-web":
      return createGrpcWebTransport(options);
    case "grpc":
      throw new TypeError(
        'protocol "grpc" needs HTTP/2 trailers, which fetch cannot read: use "connect" or "grpc-web" in browsers and edge runtimes',
      );
    default:
      throw new TypeError(`unknown protocol ${JSON.stringify(protocol)}: use "connect" or "grpc-web"`);
  }
}
