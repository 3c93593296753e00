/**
 * Serves MemoryService through connect-node: the Connect protocol (JSON and
 * binary) and gRPC-Web over HTTP/1.1, for curl and browsers. Same handlers as
 * the grpc-js path, same status mapping.
 */
import type { DescMethod } from "@bufbuild/protobuf";
import type { ConnectRouter, HandlerContext } from "@connectrpc/connect";
import { MemoryService as MemoryServiceDesc } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { isStreaming, rpcName, type CallGuard, type CallContext } from "../service/guard/index.js";
import { isFastUnaryContext, requestHeaderValue } from "./fastpath/unary-context.js";
import { toConnectError, type InternalErrorReporter } from "./status.js";

/** The call's headers as the guard needs them. */
function callInfo(ctx: HandlerContext): CallContext {
  const timeout = ctx.timeoutMs();
  return {
    // Unary handlers never read the signal (CallContext.signal); on the fast path reading it would make one.
    signal: isFastUnaryContext(ctx) ? undefined : ctx.signal,
    authorization: requestHeaderValue(ctx, "authorization"),
    traceparent: requestHeaderValue(ctx, "traceparent"),
    protocol: ctx.protocolName,
    deadline: timeout === undefined ? undefined : Date.now() + timeout,
    requestId: requestHeaderValue(ctx, "x-request-id"),
  };
}

/** Registers MemoryService on a Connect router. */
export function connectMemoryRoutes(guard: CallGuard, report: InternalErrorReporter) {
  const impl: Record<string, unknown> = {};
  for (const method of MemoryServiceDesc.methods as DescMethod[]) {
    const rpc = rpcName(method.localName);
    const streaming = isStreaming(rpc);
    const handler = guard.handler(rpc);
    impl[method.localName] = streaming
      ? async function* (req: unknown, ctx: HandlerContext) {
          try {
            yield* handler(req, callInfo(ctx)) as AsyncIterable<unknown>;
          } catch (err) {
            throw toConnectError(err, report);
          }
        }
      : async (req: unknown, ctx: HandlerContext) => {
          try {
            return await (handler(req, callInfo(ctx)) as Promise<unknown>);
          } catch (err) {
            throw toConnectError(err, report);
          }
        };
  }
  return (router: ConnectRouter) => {
    router.service(MemoryServiceDesc, impl as never);
  };
}
