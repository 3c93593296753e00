/**
 * How every client subcommand reaches the server: the options they share
 * (--url, --api-key, --protocol, --timeout, --json) and the MemoryClient
 * built from them, sending the API key as `authorization: Bearer <key>`.
 */
import { Option, type Command } from "commander";
import type { MemoryClient, Protocol } from "@engram-memory/client";
import type { Interceptor } from "@connectrpc/connect";
import { positiveInt } from "./output.js";

/** The options shared by every subcommand that talks to a server. */
export interface ConnectionOptions {
  url: string;
  apiKey?: string;
  protocol: Protocol;
  timeout?: number;
  json?: boolean;
}

/** Adds the shared connection and output options to a subcommand. */
export function withConnectionOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option("--url <url>", "server address").env("ENGRAM_URL").default("http://127.0.0.1:8000"))
    .addOption(new Option("--api-key <key>", "API key, sent as `authorization: Bearer <key>`").env("ENGRAM_API_KEY"))
    .addOption(
      new Option("--protocol <protocol>", "wire protocol").choices(["connect", "grpc", "grpc-web"]).default("connect"),
    )
    .addOption(
      new Option("--timeout <ms>", "deadline of each call in ms (streams have none)").argParser(
        positiveInt("--timeout"),
      ),
    )
    .option("--json", "machine-readable JSON output");
}

/** A client for the options given; close() it when done. */
export async function connect(
  opts: ConnectionOptions,
  extra: { reconnect?: { maxRetries?: number; maxBackoffMs?: number } } = {},
): Promise<MemoryClient> {
  let url: URL;
  try {
    url = new URL(opts.url);
  } catch {
    throw new UsageError(`--url: not a URL: ${JSON.stringify(opts.url)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new UsageError(`--url: expected http:// or https://, got ${JSON.stringify(opts.url)}`);
  const interceptors: Interceptor[] = [];
  const key = opts.apiKey?.trim();
  if (key) {
    interceptors.push((next) => (req) => {
      req.header.set("authorization", `Bearer ${key}`);
      return next(req);
    });
  }
  // Loaded here, not at start: the client and its RPC stack are most of the CLI's start-up time.
  const { createMemoryClient } = await import("@engram-memory/client");
  return createMemoryClient({
    baseUrl: url.origin + url.pathname.replace(/\/$/, ""),
    protocol: opts.protocol,
    timeoutMs: opts.timeout,
    interceptors,
    reconnect: extra.reconnect,
  });
}

/**
 * A listing's pages from `pageToken` on: that one only, or with `all` each
 * next one until there is none. Bounded: every page advances the cursor; the
 * cap guards against a server that would not.
 */
export async function* pagesFrom<Page extends { nextPageToken: string }>(
  pageToken: string,
  all: boolean,
  fetchPage: (pageToken: string) => Promise<Page>,
): AsyncGenerator<Page> {
  for (let pages = 0; pages < 1_000_000; pages++) {
    const page = await fetchPage(pageToken);
    yield page;
    if (!all || !page.nextPageToken || page.nextPageToken === pageToken) return;
    pageToken = page.nextPageToken;
  }
}

/** A mistake in how the command was called (exit status 2). */
export class UsageError extends Error {
  override readonly name = "UsageError";
}
