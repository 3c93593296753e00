/**
 * ConformanceService (connectrpc/conformance) for the Connect conformance
 * suite's server cases: each call answers as its request's response
 * definition asks (headers, trailers, data or an error, a delay) and echoes
 * what it saw (headers, timeout, the request, a GET's query). The behaviour is
 * written once, protocol-free; two thin adapters serve it the way Engram's
 * own adapters serve MemoryService: through connect-node's router for
 * HTTP/1.1 (mounted by createConnectHandler) and grpc-js for h2c, with errors
 * mapped to statuses by src/server/status.ts. The messages come from the
 * runner's own descriptor set (prepare.sh), read at run time, so no code is
 * generated from another project's protos.
 */
import { setTimeout as sleep } from "node:timers/promises";
import * as grpc from "@grpc/grpc-js";
import {
  create,
  createFileRegistry,
  fromBinary,
  toBinary,
  type DescMessage,
  type DescMethod,
  type DescService,
  type Message,
  type Registry,
} from "@bufbuild/protobuf";
import { anyPack, anyUnpack, FileDescriptorSetSchema, type Any } from "@bufbuild/protobuf/wkt";
import { ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { parseRequest } from "../../src/server/parse-request.js";
import {
  toConnectError,
  toGrpcStatus,
  type InternalErrorReporter,
  type StatusDetail,
} from "../../src/server/status.js";

const PACKAGE = "connectrpc.conformance.v1";

/** A header or query parameter as the conformance messages carry it. */
interface Header {
  name: string;
  value: string[];
}

/** connectrpc.conformance.v1.Error: the error a response definition asks for. */
interface ErrorDefinition {
  code: number;
  message?: string;
  details: Any[];
}

/** What unary and stream response definitions have in common, as this server reads them. */
interface ResponseDefinition {
  responseHeaders: Header[];
  responseTrailers: Header[];
  responseDelayMs: number;
  /** UnaryResponseDefinition's oneof. */
  response?:
    | { case: "responseData"; value: Uint8Array }
    | { case: "error"; value: ErrorDefinition }
    | { case: undefined };
  /** StreamResponseDefinition's messages and final error. */
  responseData?: Uint8Array[];
  error?: ErrorDefinition;
}

/** What the server saw of a call, whichever protocol carried it. */
export interface CallSeen {
  headers: Header[];
  timeoutMs?: number;
  /** A Connect GET's query parameters. */
  queryParams?: Header[];
}

/** How a unary call or a stream answers: headers and trailers, then messages (a stream's each after the delay), then maybe an error. */
export interface Answer {
  headers: Header[];
  trailers: Header[];
  delayMs: number;
  messages: Message[];
  error?: ConnectError;
}

/** The conformance messages and service, read from the runner's descriptor set. */
export class ConformanceSchema {
  readonly registry: Registry;
  readonly service: DescService;
  readonly requestInfo: DescMessage;

  constructor(descriptorSet: Uint8Array) {
    this.registry = createFileRegistry(fromBinary(FileDescriptorSetSchema, descriptorSet));
    this.service = this.registry.getService(`${PACKAGE}.ConformanceService`)!;
    this.requestInfo = this.message("ConformancePayload.RequestInfo");
  }

  /** A message of the conformance package by its name. */
  message(name: string): DescMessage {
    const desc = this.registry.getMessage(`${PACKAGE}.${name}`);
    if (!desc) throw new Error(`the descriptor set has no ${PACKAGE}.${name}`);
    return desc;
  }
}

/** Answers one call of `method` as its request asks. */
export function answer(schema: ConformanceSchema, method: DescMethod, request: Message, seen: CallSeen): Answer {
  const definition = (request as unknown as { responseDefinition?: ResponseDefinition }).responseDefinition;
  const requestInfo = create(schema.requestInfo, {
    requestHeaders: seen.headers,
    timeoutMs: seen.timeoutMs === undefined ? undefined : BigInt(seen.timeoutMs),
    requests: [anyPack(method.input, request)],
    connectGetInfo: seen.queryParams ? { queryParams: seen.queryParams } : undefined,
  } as never);
  const payload = (data: Uint8Array | undefined, withInfo: boolean) =>
    create(method.output, {
      payload: { data: data ?? new Uint8Array(0), requestInfo: withInfo ? requestInfo : undefined },
    } as never);
  const headers = definition?.responseHeaders ?? [];
  const trailers = definition?.responseTrailers ?? [];
  const delayMs = definition?.responseDelayMs ?? 0;
  if (method.methodKind === "server_streaming") {
    const data = definition?.responseData ?? [];
    const messages = data.map((d, i) => payload(d, i === 0));
    const error = definition?.error
      ? errorOf(schema, definition.error, messages.length === 0 ? requestInfo : undefined)
      : undefined;
    return { headers, trailers, delayMs, messages, error };
  }
  const response = definition?.response;
  if (response?.case === "error")
    return { headers, trailers, delayMs: 0, messages: [], error: errorOf(schema, response.value, requestInfo) };
  return {
    headers,
    trailers,
    delayMs,
    messages: [payload(response?.case === "responseData" ? response.value : undefined, true)],
  };
}

/** The error a definition asks for: its own details, then what the server saw (when given). */
function errorOf(schema: ConformanceSchema, definition: ErrorDefinition, seenDetail?: Message): ConnectError {
  const details: StatusDetail[] = definition.details.map((any) => {
    const desc = schema.registry.getMessage(any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1));
    if (!desc) throw new Error(`the descriptor set has no ${any.typeUrl}`);
    return { desc, value: anyUnpack(any, desc) as never };
  });
  if (seenDetail) details.push({ desc: schema.requestInfo, value: seenDetail as never });
  return new ConnectError(definition.message ?? "", definition.code, undefined, details);
}

// --- Connect and gRPC-Web over HTTP/1.1: connect-node's router, as connect-adapter.ts registers MemoryService.

function connectSeen(ctx: HandlerContext): CallSeen {
  const headers: Header[] = [];
  ctx.requestHeader.forEach((value, name) => headers.push({ name, value: [value] }));
  let queryParams: Header[] | undefined;
  if (ctx.requestMethod === "GET") {
    queryParams = [];
    for (const [name, value] of new URL(ctx.url).searchParams) queryParams.push({ name, value: [value] });
  }
  return { headers, timeoutMs: ctx.timeoutMs(), queryParams };
}

function setHeaders(target: Headers, headers: Header[]): void {
  for (const h of headers) for (const v of h.value) target.append(h.name, v);
}

/** Registers ConformanceService's unary and server-streaming methods on a Connect router (Unimplemented and client/bidi streams stay unimplemented). */
export function connectConformanceRoutes(schema: ConformanceSchema, report: InternalErrorReporter) {
  const impl: Record<string, unknown> = {};
  for (const method of schema.service.methods) {
    if (method.methodKind === "unary" && method.name !== "Unimplemented") {
      impl[method.localName] = async (req: Message, ctx: HandlerContext) => {
        try {
          const a = answer(schema, method, req, connectSeen(ctx));
          setHeaders(ctx.responseHeader, a.headers);
          setHeaders(ctx.responseTrailer, a.trailers);
          if (a.error) throw a.error;
          await sleep(a.delayMs, undefined, { signal: ctx.signal });
          return a.messages[0];
        } catch (err) {
          throw toConnectError(err, report);
        }
      };
    } else if (method.methodKind === "server_streaming") {
      impl[method.localName] = async function* (req: Message, ctx: HandlerContext) {
        try {
          const a = answer(schema, method, req, connectSeen(ctx));
          setHeaders(ctx.responseHeader, a.headers);
          setHeaders(ctx.responseTrailer, a.trailers);
          for (const message of a.messages) {
            await sleep(a.delayMs, undefined, { signal: ctx.signal });
            yield message;
          }
          if (a.error) throw a.error;
        } catch (err) {
          throw toConnectError(err, report);
        }
      };
    }
  }
  return (router: ConnectRouter) => {
    router.service(schema.service, impl as never);
  };
}

// --- gRPC over h2c: grpc-js, as grpc-adapter.ts serves MemoryService (requests parsed by the edge's parseRequest).

type GrpcCall = grpc.ServerUnaryCall<Buffer, unknown> | grpc.ServerWritableStream<Buffer, unknown>;

function grpcSeen(call: GrpcCall): CallSeen {
  const headers: Header[] = [];
  for (const [name, values] of Object.entries(call.metadata.toJSON())) {
    headers.push({ name, value: values.map((v) => (typeof v === "string" ? v : Buffer.from(v).toString("base64"))) });
  }
  const deadline = call.getDeadline();
  const ms = deadline instanceof Date ? deadline.getTime() : deadline;
  return { headers, timeoutMs: Number.isFinite(ms) ? Math.max(0, ms - Date.now()) : undefined };
}

function metadataOf(metadata: grpc.Metadata, headers: Header[]): grpc.Metadata {
  for (const h of headers) {
    for (const v of h.value) {
      if (h.name.endsWith("-bin")) metadata.add(h.name, Buffer.from(v, "base64"));
      else metadata.add(h.name, v);
    }
  }
  return metadata;
}

/** Builds the grpc-js service definition and implementation of ConformanceService's unary and server-streaming methods. */
export function grpcConformanceService(
  schema: ConformanceSchema,
  report: InternalErrorReporter,
): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const definition: Record<string, grpc.MethodDefinition<Buffer, unknown>> = {};
  const implementation: grpc.UntypedServiceImplementation = {};
  const failed = (err: unknown, trailers: Header[]) => {
    const status = toGrpcStatus(err, report);
    metadataOf(status.metadata!, trailers);
    return status as grpc.ServiceError;
  };
  for (const method of schema.service.methods) {
    const streaming = method.methodKind === "server_streaming";
    if (!(streaming || (method.methodKind === "unary" && method.name !== "Unimplemented"))) continue;
    definition[method.name] = {
      path: `/${schema.service.typeName}/${method.name}`,
      requestStream: false,
      responseStream: streaming,
      requestSerialize: (b: Buffer) => b,
      requestDeserialize: (b: Buffer) => b,
      responseSerialize: (msg: unknown) => Buffer.from(toBinary(method.output, msg as never)),
      responseDeserialize: (b: Buffer) => b,
      originalName: method.localName,
    };
    implementation[method.name] = streaming
      ? async (call: grpc.ServerWritableStream<Buffer, unknown>) => {
          let trailers: Header[] = [];
          try {
            const a = answer(schema, method, parseRequest(method.input, call.request) as Message, grpcSeen(call));
            trailers = a.trailers;
            call.sendMetadata(metadataOf(new grpc.Metadata(), a.headers));
            for (const message of a.messages) {
              await sleep(a.delayMs);
              if (call.cancelled) return;
              call.write(message);
            }
            if (a.error) throw a.error;
            call.end(metadataOf(new grpc.Metadata(), trailers));
          } catch (err) {
            if (!call.cancelled) call.emit("error", failed(err, trailers));
          }
        }
      : (call: grpc.ServerUnaryCall<Buffer, unknown>, callback: grpc.sendUnaryData<unknown>) => {
          let trailers: Header[] = [];
          try {
            const a = answer(schema, method, parseRequest(method.input, call.request) as Message, grpcSeen(call));
            trailers = a.trailers;
            call.sendMetadata(metadataOf(new grpc.Metadata(), a.headers));
            if (a.error) throw a.error;
            sleep(a.delayMs).then(
              () => callback(null, a.messages[0], metadataOf(new grpc.Metadata(), trailers)),
              (err) => callback(failed(err, trailers)),
            );
          } catch (err) {
            callback(failed(err, trailers));
          }
        };
  }
  return { definition, implementation };
}
