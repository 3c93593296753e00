/**
 * Serves MemoryService through connect-node: the Connect protocol (JSON and
 * binary) and gRPC-Web over HTTP/1.1, for curl and browsers. Same handlers as
 * the grpc-js path, same status mapping.
 */
import type { DescMethod } from "@bufbuild/protobuf";
import type { ConnectRouter, HandlerContext } from "@connectrpc/connect";
import { MemoryService as MemoryServiceDesc } from "../gen/engram/v1/memory_pb.js";
import type { MemoryService } from "../service/memory-service.js";
import { toConnectError, type InternalErrorReporter } from "./status.js";

type Handler = (req: unknown, ctx: { signal: AbortSignal }) => Promise<unknown> | AsyncIterable<unknown>;

/** Registers MemoryService on a Connect router. */
export function connectMemoryRoutes(service: MemoryService, report: InternalErrorReporter) {
  const impl: Record<string, unknown> = {};
  for (const method of MemoryServiceDesc.methods as DescMethod[]) {
    const handler = (service as unknown as Record<string, Handler>)[method.localName].bind(service);
    impl[method.localName] =
      method.methodKind === "server_streaming"
        ? async function* (req: unknown, ctx: HandlerContext) {
            try {
              yield* handler(req, { signal: ctx.signal }) as AsyncIterable<unknown>;
            } catch (err) {
              throw toConnectError(err, report);
            }
          }
        : async (req: unknown, ctx: HandlerContext) => {
            try {
              return await (handler(req, { signal: ctx.signal }) as Promise<unknown>);
            } catch (err) {
              throw toConnectError(err, report);
            }
          };
  }
  return (router: ConnectRouter) => {
    router.service(MemoryServiceDesc, impl as never);
  };
}
