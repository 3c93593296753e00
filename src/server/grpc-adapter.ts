/**
 * Serves MemoryService through @grpc/grpc-js (gRPC over HTTP/2), the fast
 * path for generated clients. Requests are parsed here rather than by
 * grpc-js, so a malformed message answers INVALID_ARGUMENT instead of
 * INTERNAL; writes wait for 'drain', so a slow reader never grows our buffers.
 */
import { once } from "node:events";
import type * as grpc from "@grpc/grpc-js";
import { toBinary, type DescMessage, type DescMethod } from "@bufbuild/protobuf";
import { MemoryService as MemoryServiceDesc } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { isStreaming, rpcName, type CallGuard } from "../service/guard/index.js";
import { parseRequest } from "./parse-request.js";
import { toGrpcStatus, type InternalErrorReporter } from "./status.js";
import { binaryResponseSerializer } from "./fastpath/response-encoding.js";
import type { CallsInFlight } from "../service/calls-in-flight.js";

/**
 * A stream's serializer: the service hands every subscriber of a session the
 * same frame object for the same event, so its bytes are made once and
 * written to every stream, instead of once per subscriber.
 */
function sharedFrameSerializer(desc: DescMessage) {
  const bytes = new WeakMap<object, Buffer>();
  return (msg: unknown) => {
    let out = bytes.get(msg as object);
    if (!out) bytes.set(msg as object, (out = Buffer.from(toBinary(desc, msg as never))));
    return out;
  };
}

/** Aborts when the call is cancelled by the client or its deadline passes. */
function callSignal(
  call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerWritableStream<unknown, unknown>,
): AbortController {
  const controller = new AbortController();
  call.on("cancelled", () => controller.abort());
  return controller;
}

/** The call's first value of a metadata key, as a string. */
function header(
  call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerWritableStream<unknown, unknown>,
  key: string,
): string | undefined {
  const value = call.metadata.get(key)[0];
  return typeof value === "string" ? value : undefined;
}

/** The call's deadline as epoch ms, or undefined when the client set none. */
function deadlineOf(
  call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerWritableStream<unknown, unknown>,
): number | undefined {
  const deadline = call.getDeadline();
  const ms = deadline instanceof Date ? deadline.getTime() : deadline;
  return Number.isFinite(ms) ? ms : undefined;
}

/** Counts the call in `calls` until grpc-js has sent its status or the client went away (both emit "cancelled"). */
function countUntilEnded(
  call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerWritableStream<unknown, unknown>,
  calls: CallsInFlight,
): void {
  if (call.cancelled) return; // gone before its handler ran: nothing will be sent, and nothing emitted again
  calls.started();
  call.on("cancelled", calls.ended);
}

/**
 * Builds the grpc-js service definition and implementation for MemoryService;
 * `calls` counts each call until grpc-js has sent its status (it then emits
 * "cancelled", as it does when the client cancels).
 */
export function grpcMemoryService(
  guard: CallGuard,
  report: InternalErrorReporter,
  calls: CallsInFlight,
): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const definition: Record<string, grpc.MethodDefinition<Buffer, unknown>> = {};
  const implementation: grpc.UntypedServiceImplementation = {};
  for (const method of MemoryServiceDesc.methods as DescMethod[]) {
    const rpc = rpcName(method.localName);
    const streaming = isStreaming(rpc);
    const handler = guard.handler(rpc);
    definition[method.name] = {
      path: `/${MemoryServiceDesc.typeName}/${method.name}`,
      requestStream: false,
      responseStream: streaming,
      requestSerialize: (b: Buffer) => b,
      requestDeserialize: (b: Buffer) => b,
      responseSerialize: streaming ? sharedFrameSerializer(method.output) : binaryResponseSerializer(method.output),
      responseDeserialize: (b: Buffer) => b,
      originalName: method.localName,
    };
    implementation[method.name] = streaming
      ? async (call: grpc.ServerWritableStream<Buffer, unknown>) => {
          const controller = callSignal(call);
          countUntilEnded(call, calls);
          try {
            const req = parseRequest(method.input, call.request);
            const info = {
              signal: controller.signal,
              authorization: header(call, "authorization"),
              traceparent: header(call, "traceparent"),
              requestId: header(call, "x-request-id"),
              protocol: "grpc",
            };
            for await (const frame of handler(req, info) as AsyncIterable<unknown>) {
              if (controller.signal.aborted) break;
              // One wait that removes its own listeners: a race of two once() calls left the loser's
              // listener behind, one per wait, on a stream that may wait thousands of times.
              // An abort rejects it (AbortError), ending the loop; the catch below stays quiet then.
              if (!call.write(frame)) await once(call, "drain", { signal: controller.signal });
            }
            if (!controller.signal.aborted) call.end();
          } catch (err) {
            if (!controller.signal.aborted) call.emit("error", toGrpcStatus(err, report));
          } finally {
            controller.abort();
          }
        }
      : (call: grpc.ServerUnaryCall<Buffer, unknown>, callback: grpc.sendUnaryData<unknown>) => {
          let answer: Promise<unknown>;
          countUntilEnded(call, calls);
          try {
            // No abort signal: unary handlers never read one (see CallContext.signal).
            answer = handler(parseRequest(method.input, call.request), {
              authorization: header(call, "authorization"),
              traceparent: header(call, "traceparent"),
              protocol: "grpc",
              deadline: deadlineOf(call),
              requestId: header(call, "x-request-id"),
            }) as Promise<unknown>;
          } catch (err) {
            // A request that does not parse: answered in this turn, never thrown into grpc-js.
            callback(toGrpcStatus(err, report) as grpc.ServiceError);
            return;
          }
          // Inline callbacks, not a named per-call closure: tsx (esbuild keepNames) names each with a defineProperty.
          answer.then(
            (res) => callback(null, res),
            (err) => callback(toGrpcStatus(err, report) as grpc.ServiceError),
          );
        };
  }
  return { definition, implementation };
}
