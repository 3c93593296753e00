/**
 * The HTTP/1.1 RPC handler: connect-node's router (Connect JSON/binary and
 * gRPC-Web) behind a guard for binary request bodies. connect-es reports a
 * binary body it cannot decode as INTERNAL; a client's malformed bytes are
 * its mistake, so the guard decodes binary bodies first and answers
 * INVALID_ARGUMENT in the protocol's own error format. The decode is repeated
 * by connect afterwards; this costs a little CPU on the HTTP/1.1 path only
 * (gRPC over h2c is parsed once, in grpc-adapter.ts).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { DescMessage } from "@bufbuild/protobuf";
import { createConnectRouter, type ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerRequest, UniversalServerResponse } from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import { MemoryError } from "../errors.js";
import { parseRequest, PROTO_RECURSION_LIMIT } from "./parse-request.js";

/** Options of the HTTP/1.1 RPC handler. */
export interface ConnectHandlerOptions {
  routes: (router: ConnectRouter) => void;
  maxMessageBytes: number;
  fallback: (req: IncomingMessage, res: ServerResponse) => void;
  onError: (err: unknown) => void;
}

async function* once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  yield bytes;
}

/**
 * Reads the body up to `limit` bytes. A larger body is handed on untouched
 * (what was read, then the rest) so that connect refuses it with its own
 * RESOURCE_EXHAUSTED.
 */
async function readBody(body: AsyncIterable<Uint8Array>, limit: number): Promise<{ bytes?: Uint8Array; body: AsyncIterable<Uint8Array> }> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  const it = body[Symbol.asyncIterator]();
  for (;;) {
    const next = await it.next();
    if (next.done) break;
    chunks.push(next.value);
    size += next.value.byteLength;
    if (size > limit) {
      const rest = async function* () {
        yield* chunks;
        for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
      };
      return { body: rest() };
    }
  }
  const bytes = Buffer.concat(chunks);
  return { bytes, body: once(bytes) };
}

/** The first enveloped message (5-byte header: flags, length), or undefined when it is compressed or incomplete. */
function firstEnvelope(bytes: Uint8Array): Uint8Array | undefined {
  if (bytes.byteLength < 5) return undefined;
  const flags = bytes[0];
  const length = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(1);
  if (flags & 0b1 || bytes.byteLength < 5 + length) return undefined;
  return bytes.subarray(5, 5 + length);
}

function envelope(flags: number, payload: Uint8Array): Uint8Array {
  const out = Buffer.alloc(5 + payload.byteLength);
  out[0] = flags;
  out.writeUInt32BE(payload.byteLength, 1);
  out.set(payload, 5);
  return out;
}

/** The protocol's own "invalid argument" answer for a body that does not decode. */
function invalidBody(contentType: string, err: MemoryError): UniversalServerResponse {
  const error = { code: "invalid_argument", message: err.message };
  if (contentType.startsWith("application/grpc-web")) {
    // Trailers-only response.
    return {
      status: 200,
      header: new Headers({ "content-type": contentType, "grpc-status": "3", "grpc-message": encodeURIComponent(err.message) }),
    };
  }
  if (contentType.startsWith("application/connect+")) {
    const endStream = envelope(0b10, Buffer.from(JSON.stringify({ error })));
    return { status: 200, header: new Headers({ "content-type": contentType }), body: once(endStream) };
  }
  return { status: 400, header: new Headers({ "content-type": "application/json" }), body: once(Buffer.from(JSON.stringify(error))) };
}

/** Decodes a binary body ahead of connect; returns an error response, or undefined to go on. */
async function guardBinaryBody(req: UniversalServerRequest, input: DescMessage, limit: number): Promise<UniversalServerResponse | undefined> {
  const contentType = req.header.get("content-type") ?? "";
  const unary = contentType === "application/proto";
  const enveloped = contentType === "application/connect+proto" || contentType.startsWith("application/grpc-web");
  const compressed = req.header.has("content-encoding") || req.header.has("connect-content-encoding");
  if (req.method !== "POST" || (!unary && !enveloped) || (unary && compressed)) return undefined;
  // Leave an announced oversized body untouched: connect refuses it from the header alone.
  if (Number(req.header.get("content-length") ?? 0) > limit + 5) return undefined;
  const { bytes, body } = await readBody(req.body as AsyncIterable<Uint8Array>, limit + 5);
  req.body = body;
  if (!bytes) return undefined;
  const message = unary ? bytes : firstEnvelope(bytes);
  if (message === undefined) return undefined;
  try {
    parseRequest(input, message);
    return undefined;
  } catch (err) {
    return invalidBody(contentType, err as MemoryError);
  }
}

/** Creates the node:http request handler for Connect and gRPC-Web. */
export function createConnectHandler(options: ConnectHandlerOptions) {
  const router = createConnectRouter({
    readMaxBytes: options.maxMessageBytes,
    writeMaxBytes: options.maxMessageBytes,
    connect: true,
    grpcWeb: true,
    grpc: false,
    acceptCompression: [compressionGzip, compressionBrotli],
    // snake_case field names, as in the proto and the KAOS API; zero values shown, so curl output is complete.
    jsonOptions: { useProtoFieldName: true, alwaysEmitImplicit: true, recursionLimit: PROTO_RECURSION_LIMIT },
    binaryOptions: { recursionLimit: PROTO_RECURSION_LIMIT },
  });
  options.routes(router);
  const handlers = new Map<string, UniversalHandler>(router.handlers.map((h) => [h.requestPath, h]));
  return (req: IncomingMessage, res: ServerResponse): void => {
    const handler = handlers.get((req.url ?? "").split("?", 1)[0]);
    if (!handler) return options.fallback(req, res);
    const uReq = universalRequestFromNodeRequest(req, res, undefined, undefined);
    guardBinaryBody(uReq, handler.method.input, options.maxMessageBytes)
      .then((rejection) => rejection ?? handler(uReq))
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((err) => {
        if (uReq.signal.aborted) return;
        options.onError(err);
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
  };
}
