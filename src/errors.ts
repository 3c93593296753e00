/**
 * The one error type of Engram. Stores and the service throw it; the RPC edge
 * maps `code` to a gRPC/Connect status in exactly one place
 * (src/server/status.ts), so both protocols answer the same code and message.
 * The message is for people; the machine-readable facts (the field at fault,
 * a reason, a retry delay) travel as explicit properties, which the edge
 * turns into google.rpc.Status details, so nobody parses message text.
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

/** Machine-readable facts about an error, sent as google.rpc.Status details by src/server/status.ts. */
export interface MemoryErrorFacts {
  /** The request field or part at fault, as a path ("event.content", "events[1].event_id", "body"): a BadRequest field violation. */
  readonly field?: string;
  /** What is wrong with `field` (the violation's description); defaults to the message. */
  readonly fieldProblem?: string;
  /** Why the call failed, UPPER_SNAKE_CASE, stable for machines (an ErrorInfo reason), e.g. SEQ_CONFLICT. */
  readonly reason?: string;
  /** Facts that go with `reason` (ErrorInfo metadata), e.g. { current_seq: "7" }. */
  readonly info?: Readonly<Record<string, string>>;
  /** How long to wait before retrying, in ms (RetryInfo). */
  readonly retryAfterMs?: number;
}

/** An error with a status code and, optionally, metadata sent as trailers and facts sent as status details. */
export class MemoryError extends Error implements MemoryErrorFacts {
  override readonly name = "MemoryError";
  readonly field?: string;
  readonly fieldProblem?: string;
  readonly reason?: string;
  readonly info?: Readonly<Record<string, string>>;
  readonly retryAfterMs?: number;

  constructor(
    readonly code: MemoryErrorCode,
    message: string,
    /** Sent to the client as response trailers (e.g. engram-current-seq), kept for clients that predate the details. */
    readonly metadata: Readonly<Record<string, string>> = {},
    options: { cause?: unknown } & MemoryErrorFacts = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.field = options.field;
    this.fieldProblem = options.fieldProblem;
    this.reason = options.reason;
    this.info = options.info;
    this.retryAfterMs = options.retryAfterMs;
  }
}

/**
 * The domain of every ErrorInfo Engram sends: reasons are unique within it.
 * The proto package rather than a DNS name: Engram owns no domain, and a
 * name someone else owns must not stand for it.
 */
export const ERROR_DOMAIN = "engram.v1";

/** INVALID_ARGUMENT for one request field (or part, such as "body"); the message names it and `field` carries it. */
export function invalidArgument(field: string, problem: string): MemoryError {
  return new MemoryError("INVALID_ARGUMENT", `${field}: ${problem}`, {}, { field, fieldProblem: problem });
}

/** NOT_FOUND for a session id. */
export function sessionNotFound(sessionId: string): MemoryError {
  return new MemoryError(
    "NOT_FOUND",
    `session_id: session ${JSON.stringify(sessionId)} not found`,
    {},
    {
      field: "session_id",
      fieldProblem: "session not found",
      reason: "SESSION_NOT_FOUND",
    },
  );
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
    {
      field: "expected_seq",
      fieldProblem: `expected ${expected} but the session's current seq is ${current}`,
      reason: "SEQ_CONFLICT",
      info: { current_seq: String(current), expected_seq: String(expected) },
    },
  );
}

/** Trailer carrying the session's version on an expected_version mismatch. */
export const CURRENT_VERSION_TRAILER = "engram-current-version";

/** FAILED_PRECONDITION for an expected_version (UpdateSession) that does not match the session's version. */
export function versionConflict(expected: number, current: number): MemoryError {
  const problem = `expected ${expected} but the session's current version is ${current}`;
  return new MemoryError(
    "FAILED_PRECONDITION",
    `expected_version: ${problem}`,
    { [CURRENT_VERSION_TRAILER]: String(current) },
    {
      field: "expected_version",
      fieldProblem: problem,
      reason: "VERSION_CONFLICT",
      info: { current_version: String(current), expected_version: String(expected) },
    },
  );
}

/** OUT_OF_RANGE for a cursor that points into events no longer retained. */
export function cursorEvicted(afterSeq: number, firstSeq: number): MemoryError {
  const problem = `events after seq ${afterSeq} are no longer retained (oldest retained seq is ${firstSeq})`;
  return new MemoryError(
    "OUT_OF_RANGE",
    `after_seq: ${problem}`,
    {},
    {
      field: "after_seq",
      fieldProblem: problem,
      reason: "CURSOR_EVICTED",
      info: { first_seq: String(firstSeq) },
    },
  );
}

/** UNAVAILABLE for a stream the server ends while shutting down; `lastSeq` is the last seq it delivered, to resume after. */
export function shuttingDown(lastSeq?: number): MemoryError {
  if (lastSeq === undefined)
    return new MemoryError("UNAVAILABLE", "server is shutting down", {}, { reason: "SHUTTING_DOWN" });
  return new MemoryError(
    "UNAVAILABLE",
    `server is shutting down; resume after seq ${lastSeq}`,
    { [LAST_SEQ_TRAILER]: String(lastSeq) },
    {
      reason: "SHUTTING_DOWN",
      info: { last_seq: String(lastSeq) },
    },
  );
}

/** The setting that caps every message, as its environment variable is named (src/config.ts). */
export const MAX_MESSAGE_SETTING = "MEMORY_MAX_MESSAGE_BYTES";

/**
 * RESOURCE_EXHAUSTED for a request message past the server's limit, on every
 * protocol (gRPC's own code for an oversized message; Connect answers it
 * with HTTP 429). The message names the setting and its value, so a
 * newcomer knows what to raise; `size` is given when the request announced
 * it (a Content-Length, a gRPC length prefix).
 */
export function messageTooLarge(limit: number, size?: number): MemoryError {
  const what =
    size === undefined ? "request message is larger than" : `request message of ${size} bytes is larger than`;
  return new MemoryError(
    "RESOURCE_EXHAUSTED",
    `${what} the server's limit of ${limit} bytes (${MAX_MESSAGE_SETTING}=${limit})`,
    {},
    {
      reason: "MESSAGE_TOO_LARGE",
      info: {
        setting: MAX_MESSAGE_SETTING,
        limit_bytes: String(limit),
        ...(size === undefined ? {} : { size_bytes: String(size) }),
      },
    },
  );
}

/** Wraps anything thrown into a MemoryError; unknown errors become INTERNAL. */
export function asMemoryError(err: unknown): MemoryError {
  if (err instanceof MemoryError) return err;
  return new MemoryError("INTERNAL", "internal error", {}, { cause: err });
}
