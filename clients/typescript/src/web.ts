/**
 * @engram-memory/client in browsers and edge runtimes (selected by the
 * package's "browser", "worker" and "edge-light" export conditions, or
 * imported as "@engram-memory/client/web"): the same API as in Node.js, over
 * fetch with the Connect protocol (default) or gRPC-Web. No `node:` imports.
 */
import { memoryClientFactory } from "./client.js";
import { createTransport } from "./transport-web.js";

export * from "./common.js";
export { createConnectTransport, createGrpcWebTransport, createTransport } from "./transport-web.js";

/** A MemoryClient over the Connect protocol (default) or gRPC-Web, on fetch. */
export const createMemoryClient = memoryClientFactory(createTransport, "connect");
