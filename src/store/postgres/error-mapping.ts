/**
 * The PostgreSQL driver's errors as MemoryErrors: connection trouble is
 * UNAVAILABLE (and, when an established connection broke, worth one retry),
 * the rest INTERNAL.
 */
import { asMemoryError, MemoryError } from "../../errors.js";
import { StoreIncompatibleError } from "../incompatible.js";

const CONNECTION_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "ECONNABORTED",
]);
/** SQLSTATEs meaning the server went away or cannot serve now (class 08, 57P0x, too many connections, statement or lock timeout). */
const UNAVAILABLE_STATES = /^(08...|57P0[1-4]|53300|57014|55P03)$/;
const CONNECTION_MESSAGES =
  /timeout|connection terminated|terminated unexpectedly|connection error|client was closed|not queryable|Cannot use a pool after calling end/i;

function errorCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** True when the error says the backend is unreachable or went away, not that the query was wrong. */
export function isUnavailable(err: unknown): boolean {
  if (err instanceof MemoryError) return err.code === "UNAVAILABLE";
  const code = errorCode(err);
  if (code && (CONNECTION_CODES.has(code) || UNAVAILABLE_STATES.test(code))) return true;
  if (err instanceof AggregateError && err.errors.some(isUnavailable)) return true;
  return err instanceof Error && CONNECTION_MESSAGES.test(err.message);
}

/**
 * True when an established connection broke, so a statement may or may not
 * have run: the one case worth a retry on a fresh connection (a refused or
 * timed-out connect would only fail again and double the wait).
 */
export function isConnectionLost(err: unknown): boolean {
  const code = errorCode(err);
  if (
    code === "ECONNRESET" ||
    code === "EPIPE" ||
    code === "57P01" ||
    code === "57P02" ||
    (code?.startsWith("08") && code !== "08001" && code !== "08004")
  )
    return true;
  return (
    err instanceof Error &&
    /connection terminated unexpectedly|connection error/i.test(err.message) &&
    !/timeout/i.test(err.message)
  );
}

/** Every driver error as a MemoryError: connection trouble is UNAVAILABLE, the rest INTERNAL. */
export function toMemoryError(err: unknown): MemoryError | StoreIncompatibleError {
  if (err instanceof MemoryError || err instanceof StoreIncompatibleError) return err;
  if (isUnavailable(err)) {
    const detail = (err instanceof Error && err.message) || errorCode(err) || String(err);
    return new MemoryError("UNAVAILABLE", `PostgreSQL is unavailable: ${detail}`, {}, { cause: err });
  }
  return asMemoryError(err);
}
