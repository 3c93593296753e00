/**
 * What grpc-js lets through of a malformed gRPC request, refused here with
 * INVALID_ARGUMENT naming what is wrong. grpc-go answers these protocol
 * errors INTERNAL (the gRPC spec's compression.md asks INTERNAL for a
 * compressed flag without encoding); Engram keeps INTERNAL for its own
 * faults, so that a client's malformed request never reads as a server bug
 * on dashboards or in clients (neither code is retried).
 * - A unary (or server-streaming) call must carry exactly one whole message:
 *   an empty body, one cut short (in its 5-byte prefix or its message) and a
 *   second message are refused, where grpc-js says UNIMPLEMENTED "…server
 *   streaming method…".
 * - The method must be POST (the spec's only one; grpc-go answers 405 too).
 * - grpc-timeout must be the spec's 1–8 digits and a unit; grpc-js reads the
 *   first such run anywhere in the value and ignores the rest.
 * - A message's flag byte must be 0 or 1, and 1 only with a grpc-encoding
 *   other than identity; grpc-js reads any other byte as "not compressed"
 *   and a 1 without encoding as uncompressed.
 * - A message whose length prefix is past MEMORY_MAX_MESSAGE_BYTES is
 *   refused from the prefix with RESOURCE_EXHAUSTED naming the setting and
 *   its ErrorInfo, as the Connect paths refuse it; grpc-js would say
 *   "Received message larger than max". (A compressed message that inflates
 *   past the limit is still grpc-js' to refuse, with the same code.)
 */
import http2 from "node:http2";
import { ServerInterceptingCall, type Server, type ServerInterceptor } from "@grpc/grpc-js";
import { invalidArgument, messageTooLarge, type MemoryError } from "../errors.js";
import { toGrpcStatus } from "./status.js";

/** Refuses a unary or server-streaming call whose body holds no whole message, or a second one. */
export const oneRequestMessage: ServerInterceptor = (method, call) => {
  if (method.requestStream) return new ServerInterceptingCall(call);
  let received = 0;
  let refused = false;
  const refuse = (problem: string) => {
    refused = true;
    // Through the outer call, so that interceptors inside (the connection gate) see the call end.
    intercepted.sendStatus(
      toGrpcStatus(invalidArgument("body", problem)) as Parameters<ServerInterceptingCall["sendStatus"]>[0],
    );
  };
  const intercepted: ServerInterceptingCall = new ServerInterceptingCall(call, {
    start: (next) =>
      next({
        onReceiveMessage: (message, pass) => {
          if (refused) return;
          if (++received > 1) return refuse("this method takes one request message; the body carried a second");
          pass(message);
        },
        onReceiveHalfClose: (pass) => {
          if (refused) return;
          if (received === 0)
            return refuse(
              "this method takes one request message; the body ended without a whole one (empty, or cut short in its 5-byte prefix or its message)",
            );
          pass();
        },
      }),
  });
  return intercepted;
};

const TIMEOUT = /^\d{1,8}[HMSmun]$/;

/** The problem with a gRPC request's headers, if any. */
function headersProblem(headers: http2.IncomingHttpHeaders): MemoryError | undefined {
  const method = headers[":method"];
  if (method !== "POST") return invalidArgument(":method", `gRPC calls are POST, not ${String(method)}`);
  const timeout = headers["grpc-timeout"];
  if (timeout !== undefined && !TIMEOUT.test(String(timeout))) {
    return invalidArgument(
      "grpc-timeout",
      `${JSON.stringify(String(timeout).slice(0, 40))} is not 1 to 8 digits and a unit (H, M, S, m, u or n), e.g. 500m`,
    );
  }
  return undefined;
}

/** Ends `stream` with a trailers-only gRPC status (and `httpStatus`), then stops it: nothing more of it is read. */
function endWithStatus(stream: http2.ServerHttp2Stream, err: MemoryError, httpStatus = 200): void {
  if (stream.destroyed || stream.closed) return;
  const status = toGrpcStatus(err);
  const trailers: http2.OutgoingHttpHeaders = {
    ":status": httpStatus,
    "content-type": "application/grpc",
    "grpc-status": String(status.code),
    // As grpc-js writes it, and reads it back (decodeURI): encodeURIComponent's %3A or %3D would reach its clients verbatim.
    "grpc-message": encodeURI(status.details ?? ""),
  };
  for (const [key, values] of Object.entries(status.metadata?.toHttp2Headers() ?? {})) trailers[key] = values;
  if (!stream.headersSent) stream.respond(trailers, { endStream: true });
  // Closed at once, so that grpc-js (which reads the same stream) takes it as cancelled and reads no message.
  stream.close(http2.constants.NGHTTP2_NO_ERROR);
}

/** Watches the length-prefixed messages of a request body for flag bytes the call cannot have and lengths past `maxMessageBytes`. */
function watchMessagePrefixes(
  stream: http2.ServerHttp2Stream,
  encoding: string | undefined,
  maxMessageBytes: number,
): void {
  const compressionDeclared = encoding !== undefined && encoding !== "identity";
  let bodyLeft = 0;
  const prefix = Buffer.alloc(5);
  let prefixRead = 0;
  const onData = (chunk: Buffer) => {
    let i = 0;
    while (i < chunk.length) {
      if (bodyLeft > 0) {
        const n = Math.min(bodyLeft, chunk.length - i);
        bodyLeft -= n;
        i += n;
        continue;
      }
      prefix[prefixRead++] = chunk[i++]!;
      if (prefixRead < 5) continue;
      prefixRead = 0;
      const flag = prefix[0]!;
      const problem =
        flag > 1
          ? `a message's flag byte is 0x${flag.toString(16).padStart(2, "0")}; only 0 (uncompressed) and 1 (compressed) are defined`
          : flag === 1 && !compressionDeclared
            ? "a message is flagged compressed, but the call declares no grpc-encoding"
            : undefined;
      if (problem) {
        stream.off("data", onData);
        return endWithStatus(stream, invalidArgument("body", problem));
      }
      bodyLeft = prefix.readUInt32BE(1);
      if (bodyLeft > maxMessageBytes) {
        stream.off("data", onData);
        return endWithStatus(stream, messageTooLarge(maxMessageBytes, bodyLeft));
      }
    }
  };
  stream.prependListener("data", onData);
}

/**
 * Adds the header, flag-byte and message-length checks to `server`, at
 * grpc-js' own check of a new stream's headers (its content type), before it
 * makes a call of it; `maxMessageBytes` is the server's
 * grpc.max_receive_message_length.
 */
export function checkGrpcRequests(server: Server, maxMessageBytes: number): void {
  type Verify = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => boolean;
  const target = server as unknown as { _verifyContentType?: Verify };
  if (typeof target._verifyContentType !== "function")
    throw new Error("grpc-js no longer has _verifyContentType: update src/server/grpc-protocol.ts");
  const verifyContentType = target._verifyContentType.bind(server);
  target._verifyContentType = (stream, headers) => {
    if (!verifyContentType(stream, headers)) return false;
    const problem = headersProblem(headers);
    if (problem) {
      endWithStatus(stream, problem, headers[":method"] === "POST" ? 200 : 405);
      return false;
    }
    const encoding = headers["grpc-encoding"];
    watchMessagePrefixes(stream, typeof encoding === "string" ? encoding : undefined, maxMessageBytes);
    return true;
  };
}
