/**
 * The CallContext of a plain HTTP/1.1 request that the edge answers itself
 * (the KAOS REST routes and MCP), read from the request's headers the same
 * way for both so that auth, tracing and request ids never differ by path.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { CallContext } from "../service/guard/index.js";

/** The call's headers, with a signal aborted when the client goes away. */
export function httpCallContext(req: IncomingMessage, res: ServerResponse, protocol: "rest" | "mcp"): CallContext {
  const abort = new AbortController();
  res.once("close", () => abort.abort());
  return { ...httpCallHeaders(req, protocol), signal: abort.signal };
}

/**
 * The call's headers alone, for a call that runs unary methods only: they
 * never read a signal (CallContext.signal), and making one cost a REST read an
 * AbortController and a DOMException at every response's close.
 */
export function httpCallHeaders(req: IncomingMessage, protocol: "rest" | "mcp"): CallContext {
  return {
    authorization: req.headers.authorization,
    traceparent: typeof req.headers.traceparent === "string" ? req.headers.traceparent : undefined,
    requestId: typeof req.headers["x-request-id"] === "string" ? req.headers["x-request-id"] : undefined,
    protocol,
  };
}
