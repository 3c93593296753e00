/**
 * @engram-memory/client in Node.js: a TypeScript client of Engram, the memory
 * server for AI agents, over gRPC (HTTP/2), Connect (HTTP/1.1) or gRPC-Web.
 * Browsers and edge runtimes get web.ts instead (package.json's conditional
 * export), with the same API over fetch.
 */
import { memoryClientFactory } from "./client.js";
import { createTransport } from "./transport.js";

export * from "./common.js";
export { createConnectTransport, createGrpcTransport, createGrpcWebTransport, createTransport } from "./transport.js";

/** A MemoryClient over gRPC (default), Connect or gRPC-Web, on Node.js's HTTP/2 and HTTP/1.1. */
export const createMemoryClient = memoryClientFactory(createTransport, "grpc");
