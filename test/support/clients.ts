/**
 * Two clients with one shape (connect-es's promise client): a Connect client
 * over HTTP/1.1 and a real @grpc/grpc-js client over h2c. grpc-js errors are
 * turned into ConnectError (code, raw message, trailers) so that one suite
 * asserts identical behaviour on both protocols.
 */
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary, type DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import {
  MemoryService,
  StreamSessionEventsRequestSchema,
  StreamSessionEventsResponseSchema,
  type StreamSessionEventsResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { StatusSchema } from "@engram-memory/client/gen/google/rpc/status_pb.js";
import { Health, HealthCheckResponse_ServingStatus } from "../../src/gen/health/v1/health_pb.js";

/** The typed MemoryService client used by tests. */
export type MemoryClient = Client<typeof MemoryService> & { close(): void };

/** Headers sent with every call (e.g. authorization). */
export type CallHeaders = Record<string, string>;

function withHeaders(headers: CallHeaders = {}): Interceptor[] {
  return [
    (next) => (req) => {
      for (const [k, v] of Object.entries(headers)) req.header.set(k, v);
      return next(req);
    },
  ];
}

/** Connect protocol over HTTP/1.1 (JSON unless binary is asked for). */
export function connectClient(baseUrl: string, opts: { binary?: boolean; headers?: CallHeaders } = {}): MemoryClient {
  const transport = createConnectTransport({
    baseUrl,
    httpVersion: "1.1",
    useBinaryFormat: opts.binary ?? false,
    interceptors: withHeaders(opts.headers),
  });
  return Object.assign(createClient(MemoryService, transport), { close: () => {} });
}

/** gRPC-Web over HTTP/1.1 (binary). */
export function grpcWebClient(baseUrl: string): MemoryClient {
  const transport = createGrpcWebTransport({ baseUrl, httpVersion: "1.1" });
  return Object.assign(createClient(MemoryService, transport), { close: () => {} });
}

/** grpc-js' error as connect-es' ConnectError: code, raw message, text trailers, and the google.rpc.Status details of grpc-status-details-bin. */
function fromGrpcError(err: grpc.ServiceError): ConnectError {
  const headers = new Headers();
  for (const [k, v] of Object.entries(err.metadata?.getMap() ?? {})) if (!k.endsWith("-bin")) headers.set(k, String(v));
  const error = new ConnectError(err.details, err.code as number as Code, headers);
  const statusBytes = err.metadata?.get("grpc-status-details-bin")[0];
  if (statusBytes instanceof Buffer) {
    for (const any of fromBinary(StatusSchema, statusBytes).details) {
      error.details.push({ type: any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1), value: any.value });
    }
  }
  return error;
}

interface CallOptions {
  signal?: AbortSignal;
  timeoutMs?: number;
}

/** gRPC over h2c (or TLS, given credentials) through @grpc/grpc-js. */
export function grpcJsClient(
  address: string,
  opts: { headers?: CallHeaders; credentials?: grpc.ChannelCredentials; options?: grpc.ChannelOptions } = {},
): MemoryClient {
  const client = new grpc.Client(address, opts.credentials ?? grpc.credentials.createInsecure(), opts.options);
  const metadata = () => {
    const m = new grpc.Metadata();
    for (const [k, v] of Object.entries(opts.headers ?? {})) m.set(k, v);
    return m;
  };
  const api: Record<string, unknown> = {
    close: () => client.close(),
  };
  for (const method of MemoryService.methods as DescMethod[]) {
    const path = `/engram.v1.MemoryService/${method.name}`;
    const serialize = (msg: object) => Buffer.from(toBinary(method.input, create(method.input, msg as never)));
    const deserialize = (bytes: Buffer) => fromBinary(method.output, bytes);
    const callOptions = (o?: CallOptions): grpc.CallOptions =>
      o?.timeoutMs ? { deadline: new Date(Date.now() + o.timeoutMs) } : {};
    if (method.methodKind === "unary") {
      api[method.localName] = (req: object, o?: CallOptions) =>
        new Promise((resolve, reject) => {
          const call = client.makeUnaryRequest(
            path,
            serialize,
            deserialize,
            req ?? {},
            metadata(),
            callOptions(o),
            (err, res) => (err ? reject(fromGrpcError(err)) : resolve(res)),
          );
          o?.signal?.addEventListener("abort", () => call.cancel(), { once: true });
        });
    } else {
      api[method.localName] = (req: object, o?: CallOptions) =>
        (async function* () {
          const call = client.makeServerStreamRequest(
            path,
            serialize,
            deserialize,
            req ?? {},
            metadata(),
            callOptions(o),
          );
          const onAbort = () => call.cancel();
          o?.signal?.addEventListener("abort", onAbort, { once: true });
          try {
            for await (const msg of call) yield msg;
          } catch (err) {
            if ((err as grpc.ServiceError).code !== undefined) throw fromGrpcError(err as grpc.ServiceError);
            throw err;
          } finally {
            o?.signal?.removeEventListener("abort", onAbort);
            call.cancel();
          }
        })();
    }
  }
  return api as unknown as MemoryClient;
}

/**
 * A StreamSessionEvents call on a bare grpc-js client, as the flow-control
 * tests need it: the caller reads (or pauses) the call itself, and cancels
 * it and closes the client when done.
 */
export function rawEventStream(
  address: string,
  request: { sessionId: string; afterSeq?: bigint },
  options: grpc.CallOptions = {},
): { client: grpc.Client; call: grpc.ClientReadableStream<StreamSessionEventsResponse> } {
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  const call = client.makeServerStreamRequest(
    "/engram.v1.MemoryService/StreamSessionEvents",
    (m: typeof request) =>
      Buffer.from(toBinary(StreamSessionEventsRequestSchema, create(StreamSessionEventsRequestSchema, m))),
    (b: Buffer) => fromBinary(StreamSessionEventsResponseSchema, b),
    request,
    new grpc.Metadata(),
    options,
  );
  return { client, call };
}

/** The code of a rejected call, for `expect(await codeOf(...)).toBe(Code.X)`. */
export async function codeOf(p: Promise<unknown>): Promise<Code | "ok"> {
  try {
    await p;
    return "ok";
  } catch (err) {
    return ConnectError.from(err).code;
  }
}

/** The ConnectError of a rejected call; fails when the call succeeds. */
export async function errorOf(p: Promise<unknown>): Promise<ConnectError> {
  try {
    await p;
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("expected the call to fail, but it succeeded");
}

/** Every protocol a client can call with: gRPC, Connect JSON and binary, gRPC-Web (binary). */
export const ALL_PROTOCOLS = [
  ["gRPC (grpc-js, h2c)", (s: { address: string; baseUrl: string }) => grpcJsClient(s.address)],
  ["Connect JSON", (s: { address: string; baseUrl: string }) => connectClient(s.baseUrl)],
  ["Connect binary", (s: { address: string; baseUrl: string }) => connectClient(s.baseUrl, { binary: true })],
  ["gRPC-Web", (s: { address: string; baseUrl: string }) => grpcWebClient(s.baseUrl)],
] as const;

/** A stream being followed: its event ids so far, and how it ended. */
export interface FollowedStream {
  /** Event ids delivered so far, in order. */
  delivered: string[];
  /** Resolves when the stream ends: undefined when it ended cleanly, else its error. */
  ended: Promise<ConnectError | undefined>;
}

/**
 * Opens StreamSessionEvents on `client` and resolves once it has caught up
 * (or ended first); the stream is cancelled after `timeoutMs` at most.
 */
export async function followStream(
  client: MemoryClient,
  sessionId: string,
  timeoutMs = 20_000,
): Promise<FollowedStream> {
  const delivered: string[] = [];
  let caughtUp!: () => void;
  const ready = new Promise<void>((resolve) => (caughtUp = resolve));
  const ended = (async () => {
    try {
      for await (const frame of client.streamSessionEvents({ sessionId }, { signal: AbortSignal.timeout(timeoutMs) })) {
        if (frame.frame.case === "event") delivered.push(frame.frame.value.eventId);
        if (frame.frame.case === "caughtUp") caughtUp();
      }
      return undefined;
    } catch (err) {
      return ConnectError.from(err);
    }
  })();
  await Promise.race([ready, ended]);
  return { delivered, ended };
}

/** Both protocols, for describe.each. */
export const PROTOCOLS = [
  ["gRPC (grpc-js, h2c)", (s: { address: string }) => grpcJsClient(s.address)],
  ["Connect JSON (HTTP/1.1)", (s: { baseUrl: string }) => connectClient(s.baseUrl)],
] as const;

/** The server's grpc.health.v1 status ("SERVING", "NOT_SERVING", …) for the whole server, over gRPC (h2c). */
export async function grpcHealthStatus(baseUrl: string): Promise<string> {
  const transport = createGrpcTransport({ baseUrl });
  const { status } = await createClient(Health, transport).check({ service: "" }, { timeoutMs: 5000 });
  return HealthCheckResponse_ServingStatus[status];
}
