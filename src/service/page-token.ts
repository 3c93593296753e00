/**
 * Opaque page tokens. A token is base64url JSON naming the position after
 * which the next page starts and a digest of the filters it was issued for, so
 * a token replayed with other filters is refused instead of skipping data.
 */
import { createHash } from "node:crypto";
import { invalidArgument } from "../errors.js";

interface TokenBody {
  /** Position: the last session_id or seq of the previous page. */
  p: string | number;
  /** Digest of the filters. */
  f: string;
}

function digest(filters: unknown): string {
  return createHash("sha256").update(JSON.stringify(filters)).digest("base64url").slice(0, 16);
}

/** Encodes the position after which the next page starts. */
export function encodePageToken(position: string | number, filters: unknown): string {
  const body: TokenBody = { p: position, f: digest(filters) };
  return Buffer.from(JSON.stringify(body)).toString("base64url");
}

/** Decodes a token issued for the same filters; INVALID_ARGUMENT otherwise. */
export function decodePageToken<P extends string | number>(
  token: string,
  kind: "string" | "number",
  filters: unknown,
): P {
  let body: TokenBody;
  try {
    body = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
  } catch {
    throw invalidArgument("page_token", "is malformed");
  }
  if (body === null || typeof body !== "object" || typeof body.p !== kind || typeof body.f !== "string") {
    throw invalidArgument("page_token", "is malformed");
  }
  if (kind === "number" && (!Number.isSafeInteger(body.p) || (body.p as number) < 0)) {
    throw invalidArgument("page_token", "is malformed");
  }
  if (body.f !== digest(filters)) throw invalidArgument("page_token", "was issued for different filters");
  return body.p as P;
}
