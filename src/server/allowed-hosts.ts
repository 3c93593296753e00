/**
 * The Host check that keeps DNS rebinding out when auth is off. A web page on
 * evil.example can make its own name resolve to 127.0.0.1; the browser then
 * sends the page's requests to this server, same-origin with it, with
 * `Host: evil.example:8000` and `Origin: http://evil.example:8000`, so no
 * Origin rule can tell them apart. Browsers never let a page choose Host, so
 * with auth off a request is answered only when its Host is one a rebinding
 * page cannot have: a loopback name (localhost, *.localhost), an IP address
 * (a page's name must be a domain name to be rebound: Vite's rule), the name
 * the server was told to listen on, or one listed in MEMORY_ALLOWED_HOSTS.
 * The rest get 403 naming the setting, on every HTTP/1.1 path (RPC, Connect,
 * gRPC-Web, REST, MCP, the inspector). gRPC over h2c is not checked: no
 * browser speaks it, and over TLS a rebound name fails the certificate.
 * With auth on a page still needs a key, which the browser never adds by
 * itself: no check.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import net from "node:net";
import { MemoryError } from "../errors.js";
import { sendJsonError } from "./status.js";

/** What the check needs to know: whether keys are required, the listen address and MEMORY_ALLOWED_HOSTS. */
export interface HostPolicySettings {
  auth: boolean;
  /** HOST: a name there (not an address) is allowed as well. */
  listenHost: string;
  /** MEMORY_ALLOWED_HOSTS: host names without port, ".example.com" for it and its subdomains, or "*" for any. */
  allowedHosts: readonly string[];
}

const REST_PATH = /^\/memory\//;

/**
 * Returns a handler that answers (403) and returns true for a request whose
 * Host is not allowed, else returns false; undefined when every Host is
 * allowed (auth on, or MEMORY_ALLOWED_HOSTS=*).
 */
export function createHostPolicy(
  settings: HostPolicySettings,
): ((req: IncomingMessage, res: ServerResponse) => boolean) | undefined {
  if (settings.auth || settings.allowedHosts.includes("*")) return undefined;
  const exact = new Set<string>();
  const suffixes: string[] = [];
  for (const entry of [...settings.allowedHosts, settings.listenHost]) {
    const name = normaliseName(entry);
    if (name.startsWith(".")) suffixes.push(name);
    else exact.add(name);
  }
  const allowed = (name: string) =>
    name === "localhost" ||
    name.endsWith(".localhost") ||
    net.isIP(name) !== 0 ||
    exact.has(name) ||
    suffixes.some((s) => name.endsWith(s) || name === s.slice(1));
  return (req, res) => {
    const host = req.headers.host;
    // HTTP/1.0 without Host: no browser sends such a request.
    if (host === undefined) return false;
    const name = hostNameOf(host);
    if (name !== undefined && allowed(name)) return false;
    const path = (req.url ?? "/").split("?", 1)[0]!;
    sendJsonError(
      res,
      new MemoryError(
        "PERMISSION_DENIED",
        `Host ${JSON.stringify(host.slice(0, 100))} is not allowed: with MEMORY_AUTH off only loopback names, IP addresses and the hosts in MEMORY_ALLOWED_HOSTS are served (DNS rebinding guard); add this host to MEMORY_ALLOWED_HOSTS or turn MEMORY_AUTH on`,
        {},
        { reason: "HOST_NOT_ALLOWED" },
      ),
      { kaos: REST_PATH.test(path) },
    );
    return true;
  };
}

/** The host name of a Host header value, lower case, without port, brackets or trailing dot; undefined if it is not one. */
export function hostNameOf(host: string): string | undefined {
  const match = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+))(?::\d*)?$/.exec(host.trim());
  if (!match) return undefined;
  if (match[1] !== undefined) return net.isIPv6(match[1]) ? match[1].toLowerCase() : undefined;
  return normaliseName(match[2]!);
}

function normaliseName(name: string): string {
  const lower = name.toLowerCase();
  return lower.length > 1 && lower.endsWith(".") ? lower.slice(0, -1) : lower;
}
