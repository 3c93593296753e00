/**
 * Serves the memory inspector (the Vite build in inspector/dist) over
 * HTTP/1.1. It is consulted only after the REST and RPC routes found nothing,
 * and it answers only for the exact files of the build, so it can never
 * shadow /engram.v1.MemoryService/*, /memory/*, /healthz or /readyz.
 */
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { Logger } from "../log.js";
import { requestTarget } from "./request-target.js";
import { refusedUnlessRead } from "./status.js";

/** Where the committed build of inspector/ lives. */
export const INSPECTOR_DIST_DIR = fileURLToPath(new URL("../../inspector/dist/", import.meta.url));

/**
 * The page loads only its own scripts and styles and talks only to this
 * origin; event content is rendered as text, and this policy is the second
 * line of defence should any of it ever be interpreted as markup.
 */
export const INSPECTOR_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".json": "application/json",
  ".map": "application/json",
  ".txt": "text/plain; charset=utf-8",
  ".woff2": "font/woff2",
};

interface StaticFile {
  body: Buffer;
  contentType: string;
  etag: string;
  cacheControl: string;
}

/** Every file under `dir`, keyed by its URL path ("/assets/index-3f2a.js"). */
function loadFiles(dir: string): Map<string, StaticFile> {
  const files = new Map<string, StaticFile>();
  const walk = (sub: string) => {
    for (const name of readdirSync(path.join(dir, sub))) {
      const rel = path.posix.join(sub, name);
      if (statSync(path.join(dir, rel)).isDirectory()) {
        walk(rel);
        continue;
      }
      const body = readFileSync(path.join(dir, rel));
      const urlPath = `/${rel}`;
      files.set(urlPath, {
        body,
        contentType: CONTENT_TYPES[path.extname(name).toLowerCase()] ?? "application/octet-stream",
        etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`,
        // Vite names every asset by its content hash, so those never change; the page itself must
        // be revalidated so that a new server version is picked up at once.
        cacheControl: urlPath.startsWith("/assets/") ? "public, max-age=31536000, immutable" : "no-cache",
      });
    }
  };
  walk("");
  return files;
}

/**
 * Returns a handler answering GET/HEAD for the inspector's files (and "/" for
 * index.html); it returns false for every other path. When the build is
 * missing, "/" explains how to produce it.
 */
export function createInspectorHandler(
  log: Logger,
  dir = INSPECTOR_DIST_DIR,
): (req: IncomingMessage, res: ServerResponse) => boolean {
  const files = existsSync(path.join(dir, "index.html")) ? loadFiles(dir) : new Map<string, StaticFile>();
  if (files.size === 0) log.warn({ dir }, "inspector assets not found; run `npm run build:inspector`");
  return (req, res) => {
    // A target URL cannot parse names no file (and must not throw out of the server's request handler).
    const pathname = requestTarget(req.url)?.pathname;
    if (pathname === undefined) return false;
    const key = pathname === "/" ? "/index.html" : pathname;
    const file = files.get(key);
    if (!file) {
      if (pathname !== "/") return false;
      res.writeHead(503, { "content-type": "text/plain; charset=utf-8", "cache-control": "no-store" });
      res.end("The inspector's assets are not built: run `npm run build:inspector`.\n");
      return true;
    }
    const headers: Record<string, string | number> = {
      "content-type": file.contentType,
      "cache-control": file.cacheControl,
      etag: file.etag,
      "content-security-policy": INSPECTOR_CSP,
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "cross-origin-opener-policy": "same-origin",
    };
    if (refusedUnlessRead(req, res, pathname)) return true;
    if (req.headers["if-none-match"] === file.etag) {
      res.writeHead(304, headers);
      res.end();
      return true;
    }
    headers["content-length"] = file.body.length;
    res.writeHead(200, headers);
    res.end(req.method === "HEAD" ? undefined : file.body);
    return true;
  };
}
