/**
 * Errors are connect-es's own ConnectError (re-exported here with Code), so
 * `err.code` is the gRPC status code on every protocol. Engram adds metadata
 * as response trailers; these helpers read them.
 */
import { Code, ConnectError } from "@connectrpc/connect";

export { Code, ConnectError };

/** Trailer carrying the session's head seq on an expected_seq mismatch (FAILED_PRECONDITION). */
export const CURRENT_SEQ_TRAILER = "engram-current-seq";
/** Trailer carrying the last seq a stream delivered when the server ended it. */
export const LAST_SEQ_TRAILER = "engram-last-seq";

function seqTrailer(err: unknown, name: string): number | undefined {
  if (err === null || err === undefined) return undefined;
  const value = ConnectError.from(err).metadata.get(name);
  if (value === null || value.trim() === "") return undefined;
  const n = Number(value.split(",")[0]!.trim());
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/**
 * The session's current head seq reported with a FAILED_PRECONDITION
 * (expected_seq mismatch), or undefined when the error does not carry it.
 */
export function currentSeqOf(err: unknown): number | undefined {
  return seqTrailer(err, CURRENT_SEQ_TRAILER);
}

/** The last seq a server-ended stream delivered (engram-last-seq), if reported. */
export function lastSeqOf(err: unknown): number | undefined {
  return seqTrailer(err, LAST_SEQ_TRAILER);
}

/** The status code of any error (Code.Unknown for non-RPC errors). */
export function codeOf(err: unknown): Code {
  return ConnectError.from(err).code;
}
