/**
 * The one place where errors become protocol statuses. Connect's Code values
 * are the gRPC status numbers, so both adapters share this table and answer
 * identical codes and messages.
 */
import { Metadata, type StatusObject } from "@grpc/grpc-js";
import { Code, ConnectError } from "@connectrpc/connect";
import { MemoryError, type MemoryErrorCode } from "../errors.js";

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

/** Called for every error that is not the client's doing, before it is hidden behind INTERNAL. */
export type InternalErrorReporter = (err: unknown) => void;

/** Normalises anything thrown by the service into a code, message and trailers. */
export function statusOf(err: unknown, report?: InternalErrorReporter): { code: Code; message: string; metadata: Record<string, string> } {
  if (err instanceof MemoryError) {
    if (err.code === "INTERNAL") report?.(err.cause ?? err);
    return { code: CODES[err.code], message: err.message, metadata: { ...err.metadata } };
  }
  if (err instanceof ConnectError) return { code: err.code, message: err.rawMessage, metadata: {} };
  if (err instanceof Error && err.name === "AbortError") return { code: Code.Canceled, message: "call cancelled", metadata: {} };
  report?.(err);
  return { code: Code.Internal, message: "internal error", metadata: {} };
}

/** The error a connect-node handler throws. */
export function toConnectError(err: unknown, report?: InternalErrorReporter): ConnectError {
  const s = statusOf(err, report);
  return new ConnectError(s.message, s.code, s.metadata);
}

/** The status a grpc-js handler ends with. */
export function toGrpcStatus(err: unknown, report?: InternalErrorReporter): Partial<StatusObject> {
  const s = statusOf(err, report);
  const metadata = new Metadata();
  for (const [k, v] of Object.entries(s.metadata)) metadata.set(k, v);
  return { code: s.code as number, details: s.message, metadata };
}
