/**
 * The inspector's connection to Engram: the generated MemoryService client
 * over connect-web's fetch transport (the Connect protocol, JSON, HTTP/1.1;
 * server streams work in every browser), on the page's own origin, with the
 * API key of this browser tab as a Bearer token.
 */
import { createClient, type Client, type Interceptor } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-web";
import { MemoryService } from "@engram/gen";

/** sessionStorage key of the API key: per tab, gone when the tab closes. */
const API_KEY_STORAGE = "engram.apiKey";

/** The API key in use ("" for none). */
export function apiKey(): string {
  try {
    return sessionStorage.getItem(API_KEY_STORAGE) ?? "";
  } catch {
    return ""; // storage disabled (or a worker, which has none): no key
  }
}

/** Sets (or with "" clears) the API key for this tab. */
export function setApiKey(key: string): void {
  if (key) sessionStorage.setItem(API_KEY_STORAGE, key);
  else sessionStorage.removeItem(API_KEY_STORAGE);
}

/** A MemoryService client on this origin that sends the key `keyOf()` returns at each call. */
export function memoryClient(keyOf: () => string): Client<typeof MemoryService> {
  const bearer: Interceptor = (next) => (req) => {
    const key = keyOf();
    if (key) req.header.set("authorization", `Bearer ${key}`);
    return next(req);
  };
  return createClient(
    MemoryService,
    createConnectTransport({ baseUrl: location.origin, useBinaryFormat: false, interceptors: [bearer] }),
  );
}

/** The MemoryService client every view uses. */
export const memory = memoryClient(apiKey);
