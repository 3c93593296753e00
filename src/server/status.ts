/**
 * The one place where errors become protocol statuses. Connect's Code values
 * are the gRPC status numbers, so both adapters share this table and answer
 * identical codes, messages and google.rpc.Status details:
 * - BadRequest (one field violation: path + description) when the error is
 *   about a request field or part (MemoryError.field);
 * - ErrorInfo (reason, domain, metadata such as current_seq or last_seq) when
 *   it has a reason (MemoryError.reason);
 * - RetryInfo (retry_delay) when the client should wait (MemoryError.retryAfterMs).
 * grpc-js sends them as a binary google.rpc.Status in grpc-status-details-bin;
 * connect-node as ConnectError details (Connect JSON `details: [{type, value,
 * debug}]`, gRPC-Web grpc-status-details-bin). REST, the unknown-path answer,
 * the cross-site refusal and MCP's tool errors carry the same JSON as Connect
 * (errorJsonOf).
 * The older trailers (engram-current-seq, engram-last-seq, retry-after-ms)
 * are still sent, for clients that predate the details.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Metadata, type StatusObject } from "@grpc/grpc-js";
import { create, toBinary, type DescMessage, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeToHttpStatus, errorToJson } from "@connectrpc/connect/protocol-connect";
import {
  BadRequestSchema,
  ErrorInfoSchema,
  RetryInfoSchema,
} from "@engram-memory/client/gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "@engram-memory/client/gen/google/rpc/status_pb.js";
import { ERROR_DOMAIN, MemoryError, type MemoryErrorCode } from "../errors.js";

const CODES: Record<MemoryErrorCode, Code> = {
  INVALID_ARGUMENT: Code.InvalidArgument,
  NOT_FOUND: Code.NotFound,
  ALREADY_EXISTS: Code.AlreadyExists,
  FAILED_PRECONDITION: Code.FailedPrecondition,
  OUT_OF_RANGE: Code.OutOfRange,
  RESOURCE_EXHAUSTED: Code.ResourceExhausted,
  UNAVAILABLE: Code.Unavailable,
  DEADLINE_EXCEEDED: Code.DeadlineExceeded,
  CANCELLED: Code.Canceled,
  UNAUTHENTICATED: Code.Unauthenticated,
  PERMISSION_DENIED: Code.PermissionDenied,
  INTERNAL: Code.Internal,
};

/** How JSON is written on every path, errors' `debug` included: proto field names (as in the proto and the KAOS API) and zero values shown. */
export const JSON_WRITE_OPTIONS = { useProtoFieldName: true, alwaysEmitImplicit: true } as const;

/** Called for every error that is not the client's doing, before it is hidden behind INTERNAL. */
export type InternalErrorReporter = (err: unknown) => void;

/** A google.rpc.Status detail: a message and its schema, as connect-es sends one. */
export interface StatusDetail {
  desc: DescMessage;
  value: MessageInitShape<DescMessage>;
}

/** A protocol-neutral status: code, human message, compatibility trailers and machine-readable details. */
export interface ErrorStatus {
  code: Code;
  message: string;
  metadata: Record<string, string>;
  details: StatusDetail[];
}

/** The google.rpc details a MemoryError's facts become. */
function detailsOf(err: MemoryError): StatusDetail[] {
  const details: StatusDetail[] = [];
  if (err.field !== undefined) {
    details.push(
      detail(BadRequestSchema, {
        fieldViolations: [{ field: err.field, description: err.fieldProblem ?? err.message }],
      }),
    );
  }
  if (err.reason !== undefined) {
    details.push(detail(ErrorInfoSchema, { reason: err.reason, domain: ERROR_DOMAIN, metadata: { ...err.info } }));
  }
  if (err.retryAfterMs !== undefined) {
    const ms = Math.max(0, Math.ceil(err.retryAfterMs));
    details.push(
      detail(RetryInfoSchema, {
        retryDelay: { seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1_000_000 },
      }),
    );
  }
  return details;
}

function detail<Desc extends DescMessage>(desc: Desc, value: MessageInitShape<Desc>): StatusDetail {
  return { desc, value: create(desc, value) as MessageInitShape<DescMessage> };
}

/** Normalises anything thrown by the service into a code, message, trailers and details. */
export function statusOf(err: unknown, report?: InternalErrorReporter): ErrorStatus {
  if (err instanceof MemoryError) {
    if (err.code === "INTERNAL") report?.(err.cause ?? err);
    return { code: CODES[err.code], message: err.message, metadata: { ...err.metadata }, details: detailsOf(err) };
  }
  if (err instanceof ConnectError) {
    const details = err.details.filter((d): d is StatusDetail => "desc" in d);
    return { code: err.code, message: err.rawMessage, metadata: {}, details };
  }
  if (err instanceof Error && err.name === "AbortError") {
    // connect aborts a call whose timeout passed with DEADLINE_EXCEEDED as the reason, which a wait's AbortError carries as its cause.
    if (err.cause instanceof ConnectError) return statusOf(err.cause, report);
    return { code: Code.Canceled, message: "call cancelled", metadata: {}, details: [] };
  }
  report?.(err);
  return { code: Code.Internal, message: "internal error", metadata: {}, details: [] };
}

/** The error a connect-node handler throws. */
export function toConnectError(err: unknown, report?: InternalErrorReporter): ConnectError {
  const s = statusOf(err, report);
  return new ConnectError(s.message, s.code, s.metadata, s.details);
}

/** Trailer of a binary google.rpc.Status, read by every gRPC library's rich-error support. */
export const STATUS_DETAILS_TRAILER = "grpc-status-details-bin";

/** The status a grpc-js handler ends with. */
export function toGrpcStatus(err: unknown, report?: InternalErrorReporter): Partial<StatusObject> {
  const s = statusOf(err, report);
  const metadata = new Metadata();
  for (const [k, v] of Object.entries(s.metadata)) metadata.set(k, v);
  if (s.details.length > 0) {
    const status = create(StatusSchema, {
      code: s.code,
      message: s.message,
      details: s.details.map((d) => anyPack(d.desc, create(d.desc, d.value))),
    });
    metadata.set(STATUS_DETAILS_TRAILER, Buffer.from(toBinary(StatusSchema, status)));
  }
  return { code: s.code as number, details: s.message, metadata };
}

/** Connect's JSON error shape of a status (`{"code", "message", "details"}`), which plain HTTP paths and MCP tool errors carry. */
export function errorJsonOf(s: ErrorStatus): Record<string, JsonValue> {
  return errorToJson(new ConnectError(s.message, s.code, undefined, s.details), JSON_WRITE_OPTIONS) as Record<
    string,
    JsonValue
  >;
}

/**
 * Writes the JSON error every plain HTTP path (REST, an unknown path, a
 * cross-site refusal) answers with: Connect's error shape
 * (`{"code": "not_found", "message": ..., "details": [{type, value, debug}]}`,
 * what connect-node writes for Connect RPCs) with Connect's HTTP status for
 * the code. REST and other non-RPC paths (`kaos`) add `error`, the message
 * again, which KAOS clients read. A rate limit also sets Retry-After, and
 * UNAUTHENTICATED WWW-Authenticate.
 */
export function sendJsonError(
  res: ServerResponse,
  err: unknown,
  opts: { kaos: boolean; report?: InternalErrorReporter; httpStatus?: number },
): void {
  const s = statusOf(err, opts.report);
  const json = errorJsonOf(s);
  const bytes = Buffer.from(JSON.stringify(opts.kaos ? { ...json, error: s.message } : json));
  const retryAfterMs = s.metadata["retry-after-ms"];
  if (retryAfterMs) res.setHeader("retry-after", String(Math.ceil(Number(retryAfterMs) / 1000)));
  if (s.code === Code.Unauthenticated) res.setHeader("www-authenticate", 'Bearer realm="engram"');
  res.writeHead(opts.httpStatus ?? codeToHttpStatus(s.code), {
    "content-type": "application/json",
    "content-length": bytes.length,
  });
  res.end(bytes);
}

/** Answers 405 (Allow: GET, HEAD) unless the request is a GET or HEAD (KAOS' read-only paths); true when it did. */
export function refusedUnlessRead(req: IncomingMessage, res: ServerResponse, path: string): boolean {
  if (req.method === "GET" || req.method === "HEAD") return false;
  res.setHeader("allow", "GET, HEAD");
  const err = new ConnectError(`${req.method} is not allowed on ${path}`, Code.Unimplemented);
  sendJsonError(res, err, { kaos: true, httpStatus: 405 });
  return true;
}
