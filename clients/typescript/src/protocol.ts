/**
 * What a transport is to the client, on every platform: the protocols Engram
 * serves, the options of a transport factory and what it returns. No platform
 * API here, so the browser entry point can import it.
 */
import type { Interceptor, Transport } from "@connectrpc/connect";

/** The wire protocols Engram serves. */
export type Protocol = "grpc" | "connect" | "grpc-web";

/** Options shared by every transport factory. */
export interface TransportOptions {
  /** Server address, e.g. "http://127.0.0.1:8000" (https:// for TLS). */
  baseUrl: string;
  /** Interceptors run on every call (auth headers, logging, ...). */
  interceptors?: Interceptor[];
  /** Deadline applied to calls that do not set their own (ms); none by default. */
  defaultTimeoutMs?: number;
  /** Connect protocol only: binary protobuf instead of JSON (default false: JSON). */
  useBinaryFormat?: boolean;
  /** gRPC only: HTTP/2 PING interval that keeps idle connections checked (ms). */
  pingIntervalMs?: number;
}

/** A transport and the means to release its connections. */
export interface ClosableTransport {
  transport: Transport;
  protocol: Protocol;
  /** Closes the connections; calls made afterwards fail. */
  close(): void;
}

/** Makes the transport for a protocol: one per platform (transport.ts for Node.js, transport-web.ts for fetch). */
export type TransportFactory = (protocol: Protocol, options: TransportOptions) => ClosableTransport;
