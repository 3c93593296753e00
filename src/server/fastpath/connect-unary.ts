/**
 * Unary Connect POST calls (JSON and binary) answered straight from node's
 * IncomingMessage, without connect-node's per-request machinery: its
 * AbortController per request (and the AbortError it builds when the
 * response closes), a Headers object for the request, the response and the
 * trailers, the request's URL parsed, and the universal request and
 * response with async-iterable bodies. Profiled, those and protobuf-es'
 * reflective JSON writer were what a Connect JSON call cost beyond a gRPC
 * one (bench/README.md, issue 23).
 *
 * It is generic over any service registered on the router without options
 * (MemoryService, and the Connect conformance suite's service in its tests)
 * and keeps connect-es' unary handler's semantics (handler-factory.ts in
 * @connectrpc/connect/protocol-connect): the same content types, timeout
 * header, compression negotiation and threshold, read and write limits,
 * error JSON, HTTP status per code and `trailer-` headers, and the context
 * an implementation sees (its signal, request and response headers are made
 * when first read). Everything else (GET, streams, gRPC-Web, an unknown
 * content encoding, a bad timeout, a query string, a method registered with
 * options) is declined, and connect-node answers it as before.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import {
  create,
  isMessage,
  type DescMessage,
  type DescMethod,
  type DescService,
  type Registry,
} from "@bufbuild/protobuf";
import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import { compressionNegotiate, type Compression } from "@connectrpc/connect/protocol";
import {
  codeToHttpStatus,
  errorToJsonBytes,
  parseContentType,
  parseTimeout,
} from "@connectrpc/connect/protocol-connect";
import { parseJsonRequest, parseRequest } from "../parse-request.js";
import { messageTooLarge } from "../../errors.js";
import { toConnectError } from "../status.js";
import { headerValue, UnaryContext } from "./unary-context.js";

/** connect-es' default compressMinBytes: smaller responses are not worth compressing. */
const COMPRESS_MIN_BYTES = 1024;

/** A unary method's implementation, as connect-es calls it. */
type UnaryImpl = (req: unknown, ctx: HandlerContext) => unknown;

/** A response message's encoders, binary and JSON (each must write what toBinary / toJsonString with the router's JSON options would). */
export interface ResponseWriters {
  binary: (message: unknown) => Uint8Array;
  json: (message: unknown) => Uint8Array;
}

/** Settings of the unary fast path: the router's own. */
export interface ConnectUnaryOptions {
  readMaxBytes: number;
  writeMaxBytes: number;
  acceptCompression: Compression[];
  jsonOptions: object;
  /** The types google.protobuf.Any fields may hold in JSON requests (the router's jsonOptions.registry). */
  registry?: Registry;
  /** The encoders of a response type, asked once per method. */
  responseWriters: (desc: DescMessage) => ResponseWriters;
  /** Called with what failed outside any call's answer (a response node refused to write). */
  onError: (err: unknown) => void;
}

interface UnaryMethod {
  method: DescMethod;
  impl: UnaryImpl;
  writers: ResponseWriters;
}

/** Reads the whole body; RESOURCE_EXHAUSTED naming the setting (as the connect-node path answers) past `limit` bytes. */
function readBody(req: IncomingMessage, limit: number): Promise<Uint8Array> {
  const length = req.headers["content-length"];
  if (length !== undefined && Number(length) > limit) {
    return Promise.reject(toConnectError(messageTooLarge(limit, Number(length))));
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.byteLength;
      if (size > limit) {
        cleanup();
        reject(toConnectError(messageTooLarge(limit)));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    // A client gone before the body's end: nothing will come (no answer is written to a closed socket).
    const onClose = () => {
      if (req.complete) return;
      cleanup();
      reject(new ConnectError("the client closed the request", Code.Canceled));
    };
    const cleanup = () => {
      req.off("data", onData);
      req.off("end", onEnd);
      req.off("error", onError);
      req.off("close", onClose);
    };
    req.on("data", onData);
    req.on("end", onEnd);
    req.on("error", onError);
    req.on("close", onClose);
  });
}

/** A compressed body inflated; past `limit` bytes, RESOURCE_EXHAUSTED naming the setting rather than connect-es' readMaxBytes. */
async function inflated(inflate: Compression, bytes: Uint8Array, limit: number): Promise<Uint8Array> {
  try {
    return await inflate.decompress(bytes, limit);
  } catch (err) {
    if (err instanceof ConnectError && err.code === Code.ResourceExhausted)
      throw toConnectError(messageTooLarge(limit));
    throw err;
  }
}

/** The unary Connect POST fast path over the methods registered with `addService`. */
export class ConnectUnaryFastPath {
  private readonly methods = new Map<string, UnaryMethod>();

  constructor(private readonly options: ConnectUnaryOptions) {}

  /** Takes a service's unary methods, as connect-es binds them (a missing one answers UNIMPLEMENTED). */
  addService(service: DescService, impl: Record<string, unknown>): void {
    for (const method of service.methods) {
      if (method.methodKind !== "unary") continue;
      const fn = impl[method.localName];
      const message = `${service.typeName}.${method.name} is not implemented`;
      const bound: UnaryImpl =
        typeof fn === "function"
          ? (fn.bind(impl) as UnaryImpl)
          : () => {
              throw new ConnectError(message, Code.Unimplemented);
            };
      this.methods.set(`/${service.typeName}/${method.name}`, {
        method,
        impl: bound,
        writers: this.options.responseWriters(method.output),
      });
    }
  }

  /** Answers the request and returns true, or returns false (untouched) when connect-node should. */
  handle(req: IncomingMessage, res: ServerResponse): boolean {
    if (req.method !== "POST") return false;
    const unary = this.methods.get(req.url ?? "");
    if (!unary) return false;
    const type = parseContentType(headerValue(req, "content-type"));
    if (!type || type.stream || req.headers["connect-content-encoding"] !== undefined) return false;
    const compression = compressionNegotiate(
      this.options.acceptCompression,
      headerValue(req, "content-encoding"),
      headerValue(req, "accept-encoding"),
      "accept-encoding",
    );
    const timeout = parseTimeout(headerValue(req, "connect-timeout-ms"), Number.MAX_SAFE_INTEGER);
    // connect-node answers these protocol errors itself, as before.
    if (compression.error || timeout.error) return false;
    const ctx = new UnaryContext(
      unary.method,
      req,
      res,
      timeout.timeoutMs,
      type.binary ? "application/proto" : "application/json",
    );
    this.call(unary, ctx, type.binary, compression.request, compression.response, res).catch((err: unknown) => {
      this.options.onError(err);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
    return true;
  }

  private async call(
    unary: UnaryMethod,
    ctx: UnaryContext,
    binary: boolean,
    inflate: Compression | null,
    deflate: Compression | null,
    res: ServerResponse,
  ): Promise<void> {
    const { readMaxBytes, writeMaxBytes } = this.options;
    let status = 200;
    let contentType = binary ? "application/proto" : "application/json";
    let body: Uint8Array;
    try {
      let bytes = await readBody(ctx.req, readMaxBytes);
      if (inflate) bytes = await inflated(inflate, bytes, readMaxBytes);
      let input: unknown;
      try {
        // The same parsers as the gRPC path: INVALID_ARGUMENT naming the field (connect-es says INTERNAL for binary).
        input = binary
          ? parseRequest(unary.method.input, bytes)
          : parseJsonRequest(unary.method.input, bytes, this.options.registry);
      } catch (err) {
        throw toConnectError(err);
      }
      const output = await unary.impl(input, ctx);
      const message = isMessage(output, unary.method.output) ? output : create(unary.method.output, output as never);
      try {
        body = binary ? unary.writers.binary(message) : unary.writers.json(message);
      } catch (err) {
        throw ConnectError.from(err, Code.Internal);
      }
      if (body.byteLength > writeMaxBytes) {
        throw new ConnectError(
          `message size ${body.byteLength} is larger than configured writeMaxBytes ${writeMaxBytes}`,
          Code.ResourceExhausted,
        );
      }
      ctx.finish();
    } catch (err) {
      ctx.finish(err);
      const error =
        err instanceof ConnectError
          ? err
          : new ConnectError("internal error", Code.Internal, undefined, undefined, err);
      status = codeToHttpStatus(error.code);
      contentType = "application/json";
      error.metadata.forEach((value, key) => ctx.responseHeader.set(key, value));
      body = errorToJsonBytes(error, this.options.jsonOptions);
    }
    const extra: Record<string, string> = {};
    if (deflate && body.byteLength >= COMPRESS_MIN_BYTES) {
      body = await deflate.compress(body);
      extra["content-encoding"] = deflate.name;
    }
    extra["content-length"] = String(body.byteLength);
    if (res.destroyed) return;
    res.writeHead(status, ctx.nodeHeaders(contentType, extra));
    res.end(body);
  }
}
