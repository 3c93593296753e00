/**
 * The HTTP/1.1 RPC handler. Unary Connect POST calls go to the fast path
 * (src/server/fastpath/connect-unary.ts), which keeps connect-node's semantics at a
 * fraction of its per-request cost; everything else (GET, streams, gRPC-Web,
 * unusual requests) to connect-node's router behind a guard for request
 * bodies. connect-es reports a binary
 * body it cannot decode as INTERNAL, and a JSON one with protobuf-es' message,
 * which names a field's type but not where it sits in the request; a client's
 * malformed body is its mistake, so the guard answers INVALID_ARGUMENT naming
 * the field or part, in the protocol's own error format, decoding with the
 * same parsers as the gRPC path (src/server/parse-request.ts).
 *
 * Unary Connect requests (POST bodies and GET messages) are decoded once, by
 * connect: the guard decodes them itself only when connect's answer is an
 * error, to name the field. Both decode with the same rules (the same
 * recursion limit, strict UTF-8, unknown JSON fields refused), so a body one
 * accepts the other accepts. Decoding every body twice cost ~5% of a Connect
 * JSON call's server CPU (bench/README.md). Enveloped bodies (Connect
 * streams, gRPC-Web), whose errors travel in a 200 answer, are still decoded
 * ahead of connect. Gzip or br unary bodies get the same guard, and JSON is
 * decoded as strict UTF-8 (connect-es' default decoder turns a bad byte into
 * U+FFFD).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import type { DescMessage, Registry } from "@bufbuild/protobuf";
import { Code, ConnectError, createConnectRouter, type ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerRequest, UniversalServerResponse } from "@connectrpc/connect/protocol";
import {
  compressionBrotli,
  compressionGzip,
  universalRequestFromNodeRequest,
  universalResponseToNodeResponse,
} from "@connectrpc/connect-node";
import { base64Decode } from "@bufbuild/protobuf/wire";
import {
  codeToHttpStatus,
  errorToJson,
  parseContentType as parseConnectContentType,
} from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { parseContentType as parseGrpcWebContentType } from "@connectrpc/connect/protocol-grpc-web";
import { invalidArgument, MemoryError, messageTooLarge } from "../errors.js";
import { ConnectUnaryFastPath } from "./fastpath/connect-unary.js";
import { jsonResponseEncoder } from "./fastpath/event-json.js";
import { binaryResponseSerializer } from "./fastpath/response-encoding.js";
import { JSON_READ_OPTIONS, parseJsonRequest, parseRequest, PROTO_RECURSION_LIMIT } from "./parse-request.js";
import { JSON_WRITE_OPTIONS, toConnectError } from "./status.js";
import { decodeUtf8, invalidUtf8Offset, notUtf8, rawQueryParams } from "./utf8.js";

/** Options of the HTTP/1.1 RPC handler. */
export interface ConnectHandlerOptions {
  routes: (router: ConnectRouter) => void;
  maxMessageBytes: number;
  fallback: (req: IncomingMessage, res: ServerResponse) => void;
  onError: (err: unknown) => void;
  /** Message types that google.protobuf.Any fields may carry, for JSON (MemoryService has none; the conformance service does). */
  registry?: Registry;
}

async function* once(bytes: Uint8Array): AsyncIterable<Uint8Array> {
  yield bytes;
}

/**
 * Reads the body up to `limit` bytes. A larger body is handed on untouched
 * (what was read, then the rest), with its first bytes (`head`) for a look at
 * its first envelope's length.
 */
async function readBody(
  body: AsyncIterable<Uint8Array>,
  limit: number,
): Promise<{ bytes?: Uint8Array; head?: Uint8Array; body: AsyncIterable<Uint8Array> }> {
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
      return { head: Buffer.concat(chunks.slice(0, 5)).subarray(0, 5), body: rest() };
    }
  }
  const bytes = Buffer.concat(chunks);
  return { bytes, body: once(bytes) };
}

/** The first enveloped message (5-byte header: flags, length), or undefined when it is compressed or incomplete. */
function firstEnvelope(bytes: Uint8Array): Uint8Array | undefined {
  const length = firstEnvelopeLength(bytes);
  if (length === undefined || bytes[0] & 0b1 || bytes.byteLength < 5 + length) return undefined;
  return bytes.subarray(5, 5 + length);
}

function envelope(flags: number, payload: Uint8Array): Uint8Array {
  const out = Buffer.alloc(5 + payload.byteLength);
  out[0] = flags;
  out.writeUInt32BE(payload.byteLength, 1);
  out.set(payload, 5);
  return out;
}

/** The declared length of the first envelope (5-byte header: flags, length), or undefined before 5 bytes. */
function firstEnvelopeLength(bytes: Uint8Array): number | undefined {
  if (bytes.byteLength < 5) return undefined;
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(1);
}

/** The protocol's own error answer for a body that does not decode, with the same details as every other error (src/server/status.ts). */
function invalidBody(contentType: string, err: MemoryError): UniversalServerResponse {
  return errorAnswer(contentType, toConnectError(err));
}

/** An error in the protocol's own form: gRPC-Web trailers, a Connect stream's end, or a unary Connect error body. */
function errorAnswer(contentType: string, error: ConnectError): UniversalServerResponse {
  if (contentType.startsWith("application/grpc-web")) {
    // Trailers-only response: grpc-status, grpc-message and grpc-status-details-bin, as connect writes them.
    const header = new Headers({ "content-type": contentType });
    setTrailerStatus(header, error);
    return { status: 200, header };
  }
  if (contentType.startsWith("application/connect+")) {
    const endStream = envelope(0b10, Buffer.from(JSON.stringify({ error: errorToJson(error, JSON_WRITE_OPTIONS) })));
    return { status: 200, header: new Headers({ "content-type": contentType }), body: once(endStream) };
  }
  const body = Buffer.from(JSON.stringify(errorToJson(error, JSON_WRITE_OPTIONS)));
  return {
    status: codeToHttpStatus(error.code),
    header: new Headers({ "content-type": "application/json" }),
    body: once(body),
  };
}

/**
 * The message of a Connect GET request (?encoding=json|proto&base64=1&message=...),
 * as the bytes connect will parse; refuses what connect would garble (a
 * message that is not UTF-8 unless base64) or answer INTERNAL for (bad
 * base64). Undefined when connect decompresses it first.
 */
function getRequestMessage(req: UniversalServerRequest): { bytes: Uint8Array; json: boolean } | undefined {
  const query = new URL(req.url).searchParams;
  if (query.has("compression")) return undefined;
  const json = query.get("encoding") === "json";
  if (query.get("base64") === "1") {
    let bytes: Uint8Array;
    try {
      bytes = base64Decode(query.get("message") ?? "");
    } catch {
      throw invalidArgument("query parameter message", "is not valid base64 (base64=1)");
    }
    const offset = json ? invalidUtf8Offset(bytes) : undefined;
    if (offset !== undefined) throw notUtf8("query parameter message", offset);
    return { bytes, json };
  }
  // connect reads the message with URLSearchParams, which turns a bad byte into U+FFFD: look at the raw bytes.
  const raw =
    rawQueryParams(new URL(req.url).search).find((p) => p.name.toString("latin1") === "message")?.value ??
    Buffer.alloc(0);
  const offset = invalidUtf8Offset(raw);
  if (offset !== undefined) throw notUtf8("query parameter message", offset);
  return { bytes: raw, json };
}

/** A package-qualified service and a method: "/pkg.Service/Method". */
const PROCEDURE_PATH = /^\/[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)+\/[A-Za-z_][\w]*$/;

/**
 * UNIMPLEMENTED in the protocol's own form (Connect: HTTP 404 with the
 * code in its JSON error; gRPC-Web: trailers) for a call (a POST of their
 * content types to a procedure's path) of a procedure this server does not
 * have; undefined for any other request, which the fallback answers
 * (REST's and KAOS' 404 not_found, the inspector's files).
 */
function unknownProcedure(req: IncomingMessage): UniversalServerResponse | undefined {
  const path = (req.url ?? "").split("?", 1)[0];
  const contentType = req.headers["content-type"] ?? "";
  if (req.method !== "POST" || !PROCEDURE_PATH.test(path)) return undefined;
  const error = new ConnectError(`${path} is not a procedure of this server`, Code.Unimplemented);
  if (parseGrpcWebContentType(contentType)) return errorAnswer(contentType, error);
  if (!parseConnectContentType(contentType)) return undefined;
  // Connect answers an unknown procedure with HTTP 404 before any stream begins (its clients read 404 as unimplemented).
  return {
    status: 404,
    header: new Headers({ "content-type": "application/json" }),
    body: once(Buffer.from(JSON.stringify(errorToJson(error, JSON_WRITE_OPTIONS)))),
  };
}

/**
 * A Connect JSON error for connect-node's bodiless refusals (405 for a
 * method the procedure does not take, 415 for a content type it does not
 * serve), saying what to send instead: a bare status leaves a newcomer with
 * curl or a browser guessing.
 */
function explainedRefusal(req: IncomingMessage, handler: UniversalHandler, status: number): UniversalServerResponse {
  const path = (req.url ?? "").split("?", 1)[0];
  const methods = handler.allowedMethods.join(" or ");
  const how =
    "send POST with Content-Type application/json (Connect JSON) or application/proto (Connect binary), or use gRPC-Web or gRPC" +
    (handler.allowedMethods.includes("GET")
      ? "; a GET needs ?connect=v1&encoding=json&message=<the request as URL-encoded JSON>"
      : "");
  const message =
    status === 405
      ? `${req.method} is not allowed on ${path} (it takes ${methods}): ${how}`
      : `${req.headers["content-type"] ? `Content-Type ${JSON.stringify(req.headers["content-type"])}` : "a request without the Connect GET parameters"} is not served on ${path}: ${how}`;
  // The code a Connect client derives from the bare status (the protocol maps 405 and 415 to unknown), so the body changes what it reads, not how it reacts.
  const error = new ConnectError(message, Code.Unknown);
  const header = new Headers({ "content-type": "application/json" });
  if (status === 405) header.set("allow", handler.allowedMethods.join(", "));
  return { status, header, body: once(Buffer.from(JSON.stringify(errorToJson(error, JSON_WRITE_OPTIONS)))) };
}

/**
 * How a POST body is framed and encoded, by connect's own content-type
 * parsers; undefined for what the guard leaves to connect (grpc-web-text's
 * base64, unknown types).
 */
function bodyFormat(contentType: string): { binary: boolean; enveloped: boolean } | undefined {
  const connect = parseConnectContentType(contentType);
  if (connect) return { binary: connect.binary, enveloped: connect.stream };
  const grpcWeb = parseGrpcWebContentType(contentType);
  if (grpcWeb && !grpcWeb.text) return { binary: grpcWeb.binary, enveloped: true };
  return undefined;
}

/**
 * What the guard does for one request: `rejection`, an answer given instead
 * of connect's; or `explain`, run when connect answered a unary request with
 * an error before (or after) the handler, which decodes the message our way
 * and returns the answer naming the field when that is what failed.
 */
interface BodyGuard {
  rejection?: UniversalServerResponse;
  explain?: () => UniversalServerResponse | undefined;
}

/** Decodes `message` our way; the protocol's error answer naming the field when it does not decode, else undefined. */
function decodeOrExplain(
  contentType: string,
  input: DescMessage,
  message: Uint8Array,
  binary: boolean,
): UniversalServerResponse | undefined {
  try {
    (binary ? parseRequest : parseJsonRequest)(input, message);
    return undefined;
  } catch (err) {
    return invalidBody(contentType, err as MemoryError);
  }
}

/** Message encodings of enveloped bodies that the router accepts (acceptCompression below) besides none. */
const STREAM_ENCODINGS = new Set(["identity", "gzip", "br"]);

/** Checks a body (or a GET's message) around connect, binary or JSON. */
async function guardRequestBody(
  req: UniversalServerRequest,
  handler: UniversalHandler,
  limit: number,
): Promise<BodyGuard> {
  const input = handler.method.input;
  if (req.method === "GET") {
    // A method without GET support: connect answers that itself.
    if (!handler.allowedMethods.includes("GET")) return {};
    let message: { bytes: Uint8Array; json: boolean } | undefined;
    try {
      message = getRequestMessage(req);
    } catch (err) {
      return { rejection: invalidBody("application/json", err as MemoryError) };
    }
    return message ? { explain: () => decodeOrExplain("application/json", input, message.bytes, !message.json) } : {};
  }
  const contentType = req.header.get("content-type") ?? "";
  const format = bodyFormat(contentType);
  const encoding = format?.enveloped ? undefined : req.header.get("content-encoding")?.trim().toLowerCase();
  const compressed = req.header.has("connect-content-encoding") || (encoding !== undefined && encoding !== "identity");
  // A gzip or br unary body is inflated here too, so that its field errors are named as a plain one's are.
  const inflate = encoding === "gzip" ? gunzipSync : encoding === "br" ? brotliDecompressSync : undefined;
  if (req.method !== "POST" || !format || (!format.enveloped && compressed && !inflate)) return {};
  // An enveloped body in an encoding connect does not accept is connect's to refuse (UNIMPLEMENTED), not ours to decode.
  const streamEncoding = format.enveloped
    ? (req.header.get("grpc-encoding") ?? req.header.get("connect-content-encoding"))?.trim().toLowerCase()
    : undefined;
  if (streamEncoding !== undefined && !STREAM_ENCODINGS.has(streamEncoding)) return {};
  // An oversized unary body is refused from its Content-Length, unread, as the fast path refuses it (connect would name its readMaxBytes).
  const announced = Number(req.header.get("content-length") ?? 0);
  if (!format.enveloped && announced > limit)
    return { rejection: invalidBody(contentType, messageTooLarge(limit, announced)) };
  const { bytes, head, body } = await readBody(
    req.body as AsyncIterable<Uint8Array>,
    format.enveloped ? limit + 5 : limit,
  );
  req.body = body;
  if (!format.enveloped) {
    if (!bytes) return { rejection: invalidBody(contentType, messageTooLarge(limit)) };
    return {
      explain: () => {
        if (!inflate) return decodeOrExplain(contentType, input, bytes, format.binary);
        const message = inflated(inflate, bytes, limit);
        if (message === "too large") return invalidBody(contentType, messageTooLarge(limit));
        return message === undefined ? undefined : decodeOrExplain(contentType, input, message, format.binary);
      },
    };
  }
  // The first message's length prefix past the limit: refused from the prefix, as gRPC's is (src/server/grpc-protocol.ts).
  const length = firstEnvelopeLength(bytes ?? head ?? new Uint8Array(0));
  if (length !== undefined && length > limit)
    return { rejection: invalidBody(contentType, messageTooLarge(limit, length)) };
  if (!bytes) return {};
  if (length !== undefined && bytes[0] & 0b1 && bytes.byteLength >= 5 + length) {
    // A compressed first message is inflated as connect will, to refuse one past the limit in the same words as a plain one.
    const inflate = streamEncoding === "gzip" ? gunzipSync : streamEncoding === "br" ? brotliDecompressSync : undefined;
    const message = inflate ? inflated(inflate, bytes.subarray(5, 5 + length), limit) : undefined;
    if (message === "too large") return { rejection: invalidBody(contentType, messageTooLarge(limit)) };
    return {};
  }
  const message = firstEnvelope(bytes);
  if (message === undefined) return {};
  return { rejection: decodeOrExplain(contentType, input, message, format.binary) };
}

/** A compressed body inflated up to `limit` bytes; "too large" past it, undefined (left to connect, which refuses it itself) when it is corrupt. */
function inflated(inflate: typeof gunzipSync, bytes: Uint8Array, limit: number): Uint8Array | "too large" | undefined {
  try {
    return inflate(bytes, { maxOutputLength: limit });
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE" ? "too large" : undefined;
  }
}

/** Decodes JSON request bodies as strict UTF-8: a bad byte is refused (INVALID_ARGUMENT, with its offset), not stored as U+FFFD. */
const strictJsonDecoder = {
  decode(bytes: Uint8Array = new Uint8Array(0)): string {
    try {
      return decodeUtf8("body", bytes);
    } catch (err) {
      // connect-es wraps what this throws; a ConnectError passes through with its code and message.
      throw toConnectError(err);
    }
  },
};

/**
 * JSON options of every method. connect-es' JSON serialization reads
 * textDecoder from them (createJsonSerialization), though the router's
 * option type does not list it.
 */
const JSON_OPTIONS = {
  // snake_case field names, as in the proto and the KAOS API; zero values shown, so curl output is complete.
  ...JSON_WRITE_OPTIONS,
  ...JSON_READ_OPTIONS,
  textDecoder: strictJsonDecoder,
};

/**
 * The router as `routes` sees it: every service goes to connect-node, and
 * one registered without options (interceptors and such, which the fast
 * path does not run) to the unary fast path too.
 */
function routerWithFastPath(router: ConnectRouter, fast: ConnectUnaryFastPath): ConnectRouter {
  const wrapped: ConnectRouter = {
    get handlers() {
      return router.handlers;
    },
    service(service, implementation, options) {
      router.service(service, implementation, options);
      if (options === undefined) fast.addService(service, implementation as Record<string, unknown>);
      return wrapped;
    },
    rpc(method, impl, options) {
      router.rpc(method, impl, options);
      return wrapped;
    },
  };
  return wrapped;
}

/** Creates the node:http request handler for Connect and gRPC-Web. */
export function createConnectHandler(options: ConnectHandlerOptions) {
  const acceptCompression = [compressionGzip, compressionBrotli];
  const jsonOptions = options.registry ? { ...JSON_OPTIONS, registry: options.registry } : JSON_OPTIONS;
  const router = createConnectRouter({
    readMaxBytes: options.maxMessageBytes,
    writeMaxBytes: options.maxMessageBytes,
    connect: true,
    grpcWeb: true,
    grpc: false,
    acceptCompression,
    jsonOptions,
    binaryOptions: { recursionLimit: PROTO_RECURSION_LIMIT },
  });
  const fast = new ConnectUnaryFastPath({
    readMaxBytes: options.maxMessageBytes,
    writeMaxBytes: options.maxMessageBytes,
    acceptCompression,
    jsonOptions,
    registry: options.registry,
    responseWriters: (desc) => ({
      binary: binaryResponseSerializer(desc),
      json: jsonResponseEncoder(desc, options.registry),
    }),
    onError: options.onError,
  });
  options.routes(routerWithFastPath(router, fast));
  const handlers = new Map<string, UniversalHandler>(router.handlers.map((h) => [h.requestPath, h]));
  return (req: IncomingMessage, res: ServerResponse): void => {
    if (fast.handle(req, res)) return;
    const handler = handlers.get((req.url ?? "").split("?", 1)[0]);
    if (!handler) {
      const unimplemented = unknownProcedure(req);
      if (!unimplemented) return options.fallback(req, res);
      req.resume(); // read and drop the body, so the connection can carry the next request
      void universalResponseToNodeResponse(unimplemented, res).catch(options.onError);
      return;
    }
    const uReq = universalRequestFromNodeRequest(req, res, undefined, undefined);
    guardRequestBody(uReq, handler, options.maxMessageBytes)
      .then(async (guard) => {
        if (guard.rejection) return guard.rejection;
        const uRes = await handler(uReq);
        // gRPC-Web clients read these statuses bare; Connect's and a person's get the explanation.
        if (
          (uRes.status === 405 || uRes.status === 415) &&
          uRes.body === undefined &&
          !String(req.headers["content-type"] ?? "").startsWith("application/grpc-web")
        ) {
          return explainedRefusal(req, handler, uRes.status);
        }
        // A unary Connect error is a non-200 status; when the body is what failed, say which field.
        return (uRes.status !== 200 && guard.explain?.()) || uRes;
      })
      .then((uRes) => universalResponseToNodeResponse(uRes, res))
      .catch((err) => {
        if (uReq.signal.aborted) return;
        options.onError(err);
        if (!res.headersSent) res.writeHead(500);
        res.end();
      });
  };
}
