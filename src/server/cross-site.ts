/**
 * The cross-site policy of the HTTP/1.1 API. A browser sends some requests
 * to any server without asking first (a form post, or fetch in no-cors mode
 * with a form content type, which the RPC paths read as JSON for curl's
 * sake), so a web page on any site could otherwise write into, or delete
 * from, a memory server on the developer's own machine. Browsers say where a
 * request comes from (Origin, Sec-Fetch-Site); curl, gRPC and the generated
 * clients send neither header and are not affected.
 *
 * On API paths (the RPC services, /memory/* and /mcp) a request is refused
 * with PERMISSION_DENIED, before it is read, when
 * - its Origin is neither this server's own (same host and port as the Host
 *   header; not enough on /mcp) nor listed in MEMORY_CORS_ORIGINS, or
 * - it carries no Origin and Sec-Fetch-Site says cross-site or same-site
 *   (same-site covers another port of localhost: still another program).
 * A listed origin gets CORS answers (preflight, exposed headers) so that a
 * browser client served elsewhere can use Connect and gRPC-Web.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { cors } from "@connectrpc/connect";
import { CURRENT_SEQ_TRAILER, LAST_SEQ_TRAILER, MemoryError } from "../errors.js";
import { RETRY_AFTER_TRAILER } from "../service/quotas.js";
import { sendJsonError } from "./status.js";

/** RPC services (also grpc health and reflection, should they ever be served over HTTP/1.1), the REST memory endpoints and MCP. */
const API_PATH = /^\/(?:engram\.v1\.|grpc\.health\.v1\.|grpc\.reflection\.|memory\/|mcp(?:\/|$))/;
const REST_PATH = /^\/memory\//;
/**
 * Paths no page of this server calls (the inspector uses the RPCs), where an
 * Origin must be listed even when it matches Host: a page whose own name was
 * made to resolve to this server (DNS rebinding) matches Host too. MCP's
 * transport spec asks servers to check Origin against exactly that; MCP
 * clients outside a browser send no Origin.
 */
const LISTED_ORIGIN_ONLY_PATH = /^\/mcp(?:\/|$)/;

/** Headers a browser client may send: Connect's and gRPC-Web's, MCP's, and the ones the call guard reads. */
const ALLOWED_HEADERS = [
  ...cors.allowedHeaders,
  "mcp-protocol-version",
  "authorization",
  "traceparent",
  "x-request-id",
].join(", ");

/** Headers a browser client may read: the protocols' status headers and Engram's trailers (Connect unary sends them as trailer-*). */
const EXPOSED_HEADERS = [
  ...cors.exposedHeaders,
  ...[CURRENT_SEQ_TRAILER, LAST_SEQ_TRAILER, RETRY_AFTER_TRAILER].flatMap((name) => [name, `trailer-${name}`]),
  "retry-after",
  "www-authenticate",
].join(", ");

/** How long a browser may cache a preflight answer. */
const PREFLIGHT_MAX_AGE_S = 7200;

/**
 * Applies the policy to one HTTP/1.1 request. Returns true when it has
 * answered (a refusal or a preflight) and the request must go no further.
 * `allowedOrigins` is MEMORY_CORS_ORIGINS: exact origins, or ["*"] for any.
 */
export function createCrossSitePolicy(allowedOrigins: readonly string[]) {
  const anyOrigin = allowedOrigins.includes("*");
  const allowed = new Set(allowedOrigins);
  return (req: IncomingMessage, res: ServerResponse): boolean => {
    const path = apiPath(req.url);
    if (path === undefined) return false;
    // The answer depends on Origin (CORS headers or not): caches must key on it.
    res.setHeader("vary", "origin");
    const origin = singleHeader(req.headers.origin);
    const site = singleHeader(req.headers["sec-fetch-site"]);
    if (origin !== undefined && (anyOrigin || allowed.has(origin))) {
      res.setHeader("access-control-allow-origin", origin);
      if (req.method === "OPTIONS" && req.headers["access-control-request-method"] !== undefined) {
        res.writeHead(204, {
          "access-control-allow-methods": cors.allowedMethods.join(", "),
          "access-control-allow-headers": ALLOWED_HEADERS,
          "access-control-max-age": String(PREFLIGHT_MAX_AGE_S),
        });
        res.end();
        return true;
      }
      res.setHeader("access-control-expose-headers", EXPOSED_HEADERS);
      return false;
    }
    const refusal =
      origin !== undefined
        ? isSameOrigin(origin, req.headers.host) &&
          !LISTED_ORIGIN_ONLY_PATH.test(path) &&
          site !== "cross-site" &&
          site !== "same-site"
          ? undefined
          : `origin ${origin} is not in MEMORY_CORS_ORIGINS`
        : site === "cross-site" || site === "same-site"
          ? `Sec-Fetch-Site is ${site} and the request has no Origin in MEMORY_CORS_ORIGINS`
          : undefined;
    if (refusal === undefined) return false;
    refuse(
      res,
      REST_PATH.test(path),
      new MemoryError(
        "PERMISSION_DENIED",
        `cross-site request refused: ${refusal}`,
        {},
        { reason: "CROSS_SITE_REFUSED" },
      ),
    );
    return true;
  };
}

/**
 * The request's path when it is an API path, else undefined. Both the raw
 * path (what the RPC router matches) and its normalised form (what the REST
 * router matches: dot segments resolved) are checked.
 */
function apiPath(url: string | undefined): string | undefined {
  const raw = (url ?? "/").split("?", 1)[0]!;
  if (API_PATH.test(raw)) return raw;
  let normalised: string;
  try {
    normalised = new URL(url ?? "/", "http://localhost").pathname;
  } catch {
    return undefined;
  }
  return API_PATH.test(normalised) ? normalised : undefined;
}

/**
 * True when `origin` names this server: its host and port equal the Host
 * header's. The scheme is not compared: one port serves one scheme, and a
 * TLS-terminating proxy that passes Host on stays same-origin. The Host
 * header is read with the origin's scheme so that default ports compare equal.
 */
function isSameOrigin(origin: string, host: string | undefined): boolean {
  if (!host) return false;
  try {
    const url = new URL(origin);
    if (url.origin !== origin || (url.protocol !== "http:" && url.protocol !== "https:")) return false;
    return url.host === new URL(`${url.protocol}//${host}`).host;
  } catch {
    return false; // "null" (sandboxed frames, file: pages) and anything unparsable
  }
}

function singleHeader(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value.join(",") : value;
}

/** 403 in the shared JSON error shape (src/server/status.ts); `error` too on /memory/*, for KAOS clients. */
function refuse(res: ServerResponse, rest: boolean, err: MemoryError): void {
  sendJsonError(res, err, { kaos: rest });
}
