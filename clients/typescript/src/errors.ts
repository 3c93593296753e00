/**
 * Errors are connect-es's own ConnectError (re-exported here with Code), so
 * `err.code` is the gRPC status code on every protocol. The server attaches
 * google.rpc details (BadRequest, ErrorInfo, RetryInfo) on every protocol;
 * connect-es decodes them into `err.details`, and `errorDetailsOf` reads them
 * into plain fields, so nobody parses the message. The older trailers are
 * still read as a fallback, for servers that predate the details.
 */
import { Code, ConnectError } from "@connectrpc/connect";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

export { Code, ConnectError };

/** Trailer carrying the session's head seq on an expected_seq mismatch (FAILED_PRECONDITION). */
export const CURRENT_SEQ_TRAILER = "engram-current-seq";
/** Trailer carrying the session's version on an expected_version mismatch (UpdateSession). */
export const CURRENT_VERSION_TRAILER = "engram-current-version";
/** Trailer carrying the last seq a stream delivered when the server ended it. */
export const LAST_SEQ_TRAILER = "engram-last-seq";

/** One request field an error is about: its path ("events[1].event_id", "body") and what is wrong with it. */
export interface FieldViolation {
  field: string;
  description: string;
}

/** The machine-readable details of a failed call (google.rpc.BadRequest, ErrorInfo and RetryInfo). */
export interface ErrorDetails {
  /** The request fields at fault (BadRequest); empty when the error is not about a field. */
  fieldViolations: FieldViolation[];
  /** Why the call failed, stable for machines (ErrorInfo.reason), e.g. "SEQ_CONFLICT", "RATE_LIMITED". */
  reason?: string;
  /** Facts that go with the reason (ErrorInfo.metadata), e.g. { current_seq: "7" }. */
  metadata: Record<string, string>;
  /** How long to wait before retrying, in ms (RetryInfo.retry_delay). */
  retryDelayMs?: number;
}

/** The details the server attached to an error (empty for a non-RPC error or a server that sends none). */
export function errorDetailsOf(err: unknown): ErrorDetails {
  if (err === null || err === undefined) return { fieldViolations: [], metadata: {} };
  const error = ConnectError.from(err);
  const fieldViolations = error
    .findDetails(BadRequestSchema)
    .flatMap((b) => b.fieldViolations.map((v) => ({ field: v.field, description: v.description })));
  const [info] = error.findDetails(ErrorInfoSchema);
  const [retry] = error.findDetails(RetryInfoSchema);
  const delay = retry?.retryDelay;
  return {
    fieldViolations,
    reason: info?.reason || undefined,
    metadata: { ...info?.metadata },
    retryDelayMs: delay ? Number(delay.seconds) * 1000 + Math.round(delay.nanos / 1e6) : undefined,
  };
}

/** The request field an error is about (its first BadRequest violation's path), if any. */
export function fieldOf(err: unknown): string | undefined {
  return errorDetailsOf(err).fieldViolations[0]?.field;
}

/** The error's ErrorInfo reason (e.g. "SEQ_CONFLICT", "SESSION_NOT_FOUND", "RATE_LIMITED"), if any. */
export function reasonOf(err: unknown): string | undefined {
  return errorDetailsOf(err).reason;
}

/** How long the server asks the client to wait before retrying, in ms (RetryInfo), if it said. */
export function retryDelayMsOf(err: unknown): number | undefined {
  return errorDetailsOf(err).retryDelayMs;
}

/** A seq from ErrorInfo metadata, else from the older trailer. */
function seqOf(err: unknown, key: string, trailer: string): number | undefined {
  if (err === null || err === undefined) return undefined;
  const value = errorDetailsOf(err).metadata[key] ?? ConnectError.from(err).metadata.get(trailer);
  if (value === null || value === undefined || value.trim() === "") return undefined;
  const n = Number(value.split(",")[0]!.trim());
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/**
 * The session's current head seq reported with a FAILED_PRECONDITION
 * (expected_seq mismatch: ErrorInfo SEQ_CONFLICT's current_seq), or undefined
 * when the error does not carry it.
 */
export function currentSeqOf(err: unknown): number | undefined {
  return seqOf(err, "current_seq", CURRENT_SEQ_TRAILER);
}

/** The session's current version on an expected_version mismatch (ErrorInfo VERSION_CONFLICT), if reported. */
export function currentVersionOf(err: unknown): number | undefined {
  return seqOf(err, "current_version", CURRENT_VERSION_TRAILER);
}

/** The last seq a server-ended stream delivered (ErrorInfo SHUTTING_DOWN's last_seq), if reported. */
export function lastSeqOf(err: unknown): number | undefined {
  return seqOf(err, "last_seq", LAST_SEQ_TRAILER);
}

/** The status code of any error (Code.Unknown for non-RPC errors). */
export function codeOf(err: unknown): Code {
  return ConnectError.from(err).code;
}
