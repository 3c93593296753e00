/**
 * The load generator, a forked child of the runner (bench/run.ts) so that its
 * CPU never counts as the server's. It drives one gRPC method over h2c at a
 * fixed concurrency for a bounded time (lib/closed-loop.ts).
 *
 * Requests are serialized once, up front, and responses are not decoded
 * (except a page token when paging): the client does as little as a client
 * can, so that the server, not the client, is what is measured.
 */
import http from "node:http";
import http2 from "node:http2";
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { BinaryReader } from "@bufbuild/protobuf/wire";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { ListSessionsRequestSchema, MemoryService } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { closedLoop, type LoadResult } from "./lib/closed-loop.js";
import { serveRequests } from "./lib/processes.js";

/** What to run. */
export interface LoadSpec {
  /** host:port of the server. */
  target: string;
  /** Full method path, e.g. /engram.v1.MemoryService/AddEvent. */
  method: string;
  /** Serialized requests (base64); worker i sends requests[i % n], or cycles through all of them when `cycle`. */
  requests: string[];
  cycle?: boolean;
  /** Paging mode (ListSessions): follow next_page_token (field 2 of the response) to the end, then start over. */
  paging?: { appName: string; pageSize: number };
  concurrency: number;
  durationMs: number;
  warmupMs: number;
  /** Processes whose CPU time, with their children's, is charged per call: name -> pids. */
  cpuPids: Record<string, number[]>;
  /**
   * Client: "h2" (default) frames gRPC by hand on node:http2, the lightest client there is;
   * "grpc-js" with pre-serialized buffers; "connect" (connect-node's gRPC transport with messages);
   * "http1": plain HTTP/1.1 requests on keep-alive connections (one per worker), as `http` says.
   */
  client?: "h2" | "grpc-js" | "connect" | "http1";
  /** For "http1": the verb, one path per request (requests[i] is its body, empty for GET) and the body's content type. */
  http?: { verb: "GET" | "POST"; paths: string[]; contentType?: string };
}

const identity = (b: Buffer) => b;

/** Extracts field 2 (string) of a message: next_page_token of ListSessionsResponse. */
function nextPageToken(bytes: Uint8Array): string {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [field, wireType] = reader.tag();
    if (field === 2 && wireType === 2) return reader.string();
    reader.skip(wireType);
  }
  return "";
}

type Call = (request: Uint8Array) => Promise<Uint8Array>;

function grpcJsCaller(spec: LoadSpec): { call: Call; close(): void } {
  const client = new grpc.Client(spec.target, grpc.credentials.createInsecure(), {
    "grpc.max_receive_message_length": 64 * 1024 * 1024,
  });
  const call: Call = (request) =>
    new Promise((resolve, reject) => {
      client.makeUnaryRequest(spec.method, identity, identity, request as Buffer, (err, res) =>
        err ? reject(err) : resolve(res!),
      );
    });
  return { call, close: () => client.close() };
}

function connectCaller(spec: LoadSpec): { call: Call; close(): void } {
  const name = spec.method.split("/").pop()!;
  const method = MemoryService.methods.find((m) => m.name === name);
  if (!method || method.methodKind !== "unary") throw new Error(`connect client: no unary method ${spec.method}`);
  const transport = createGrpcTransport({ baseUrl: `http://${spec.target}` });
  // Messages are decoded once up front; the transport serializes each call, as a connect client does.
  const decoded = new Map<Uint8Array, unknown>();
  const call: Call = async (request) => {
    let message = decoded.get(request);
    if (!message) decoded.set(request, (message = fromBinary(method.input, request)));
    await transport.unary(method as never, undefined, undefined, undefined, message as never);
    return new Uint8Array(0);
  };
  return { call, close: () => {} };
}

/**
 * gRPC over h2c straight on node:http2: a 5-byte length prefix on the request,
 * grpc-status read from the trailers. It does what any gRPC client must do
 * on the wire and nothing else, so the client costs a fraction of the server.
 */
function h2Caller(spec: LoadSpec): { call: Call; close(): void } {
  // Requests are reused, so each is framed once.
  const frames = new WeakMap<Uint8Array, Buffer>();
  const framed = (request: Uint8Array) => {
    let frame = frames.get(request);
    if (!frame) {
      frame = Buffer.allocUnsafe(5 + request.length);
      frame[0] = 0;
      frame.writeUInt32BE(request.length, 1);
      frame.set(request, 5);
      frames.set(request, frame);
    }
    return frame;
  };
  const session = http2.connect(`http://${spec.target}`);
  session.on("error", () => {});
  const headers = { ":method": "POST", ":path": spec.method, "content-type": "application/grpc", te: "trailers" };
  const call: Call = (request) =>
    new Promise((resolve, reject) => {
      const stream = session.request(headers);
      const chunks: Buffer[] = [];
      let status: string | undefined;
      let message = "";
      stream.on("response", (h) => {
        // A trailers-only response carries the status in the headers.
        if (h["grpc-status"] !== undefined) {
          status = String(h["grpc-status"]);
          message = String(h["grpc-message"] ?? "");
        }
      });
      stream.on("trailers", (t) => {
        status = String(t["grpc-status"]);
        message = String(t["grpc-message"] ?? "");
      });
      stream.on("data", (d: Buffer) => chunks.push(d));
      stream.on("error", reject);
      stream.on("end", () => {
        if (status !== "0") {
          reject(new Error(`grpc-status ${status}: ${decodeURIComponent(message)}`));
          return;
        }
        const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
        resolve(body.subarray(5));
      });
      stream.end(framed(request));
    });
  return { call, close: () => session.close() };
}

/**
 * Plain HTTP/1.1 (Connect JSON, REST, Motorhead's API) on keep-alive
 * connections, one per worker at most; a non-2xx answer is an error.
 */
function http1Caller(spec: LoadSpec, requests: Uint8Array[]): { call: Call; close(): void } {
  const [host, port] = spec.target.split(":");
  const agent = new http.Agent({ keepAlive: true, maxSockets: spec.concurrency });
  const { verb, paths, contentType } = spec.http!;
  // Bodies may repeat across workers (Motorhead's path names the session): each request object has its path.
  const pathOf = new Map(requests.map((r, i) => [r, paths[i]]));
  const call: Call = (request) =>
    new Promise((resolve, reject) => {
      const headers: Record<string, string | number> = { "content-length": request.length };
      if (contentType) headers["content-type"] = contentType;
      const req = http.request(
        { host, port: Number(port), method: verb, path: pathOf.get(request)!, agent, headers },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (d: Buffer) => chunks.push(d));
          res.on("end", () => {
            const body = Buffer.concat(chunks);
            if (res.statusCode! >= 200 && res.statusCode! < 300) resolve(body);
            else reject(new Error(`HTTP ${res.statusCode}: ${body.toString().slice(0, 200)}`));
          });
          res.on("error", reject);
        },
      );
      req.on("error", reject);
      req.end(request);
    });
  return { call, close: () => agent.destroy() };
}

/** Runs one load point. */
export async function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const requests = spec.requests.map((r) => Buffer.from(r, "base64"));
  const { call, close } =
    spec.client === "connect"
      ? connectCaller(spec)
      : spec.client === "grpc-js"
        ? grpcJsCaller(spec)
        : spec.client === "http1"
          ? http1Caller(spec, requests)
          : h2Caller(spec);
  const tokens = new Array<string>(spec.concurrency).fill("");
  const pageRequest = (token: string) =>
    Buffer.from(
      toBinary(
        ListSessionsRequestSchema,
        create(ListSessionsRequestSchema, {
          appName: spec.paging!.appName,
          pageSize: spec.paging!.pageSize,
          pageToken: token,
        }),
      ),
    );
  try {
    return await closedLoop(spec, async (worker, iteration) => {
      if (spec.paging) {
        tokens[worker] = nextPageToken(await call(pageRequest(tokens[worker])));
        return;
      }
      const index = spec.cycle ? (worker + iteration * spec.concurrency) % requests.length : worker % requests.length;
      await call(requests[index]);
    });
  } finally {
    close();
  }
}

if (process.send) serveRequests((spec: LoadSpec) => runLoad(spec));
