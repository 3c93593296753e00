/**
 * The one error type of Engram. Stores and the service throw it; the RPC edge
 * maps `code` to a gRPC/Connect status in exactly one place
 * (src/server/status.ts), so both protocols answer the same code and message.
 */

/** Error codes, named after the gRPC status each one maps to. */
export type MemoryErrorCode =
  | "INVALID_ARGUMENT"
  | "NOT_FOUND"
  | "ALREADY_EXISTS"
  | "FAILED_PRECONDITION"
  | "OUT_OF_RANGE"
  | "RESOURCE_EXHAUSTED"
  | "UNAVAILABLE"
  | "DEADLINE_EXCEEDED"
  | "CANCELLED"
  | "UNAUTHENTICATED"
  | "PERMISSION_DENIED"
  | "INTERNAL";

/** An error with a status code and, optionally, metadata sent as trailers. */
export class MemoryError extends Error {
  override readonly name = "MemoryError";

  constructor(
    readonly code: MemoryErrorCode,
    message: string,
    /** Sent to the client as response trailers (e.g. engram-current-seq). */
    readonly metadata: Readonly<Record<string, string>> = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** INVALID_ARGUMENT for one request field; the message always names the field. */
export function invalidArgument(field: string, problem: string): MemoryError {
  return new MemoryError("INVALID_ARGUMENT", `${field}: ${problem}`);
}

/** NOT_FOUND for a session id. */
export function sessionNotFound(sessionId: string): MemoryError {
  return new MemoryError("NOT_FOUND", `session_id: session ${JSON.stringify(sessionId)} not found`);
}

/** Trailer carrying the session's head seq on an expected_seq mismatch. */
export const CURRENT_SEQ_TRAILER = "engram-current-seq";
/** Trailer carrying the last seq a stream delivered when the server ends it. */
export const LAST_SEQ_TRAILER = "engram-last-seq";

/** FAILED_PRECONDITION for an expected_seq that does not match the head. */
export function seqConflict(expected: number, current: number): MemoryError {
  return new MemoryError(
    "FAILED_PRECONDITION",
    `expected_seq: expected ${expected} but the session's current seq is ${current}`,
    { [CURRENT_SEQ_TRAILER]: String(current) },
  );
}

/** OUT_OF_RANGE for a cursor that points into events no longer retained. */
export function cursorEvicted(afterSeq: number, firstSeq: number): MemoryError {
  return new MemoryError(
    "OUT_OF_RANGE",
    `after_seq: events after seq ${afterSeq} are no longer retained (oldest retained seq is ${firstSeq})`,
  );
}

/** Wraps anything thrown into a MemoryError; unknown errors become INTERNAL. */
export function asMemoryError(err: unknown): MemoryError {
  if (err instanceof MemoryError) return err;
  return new MemoryError("INTERNAL", "internal error", {}, { cause: err });
}
