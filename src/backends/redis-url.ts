/**
 * MEMORY_REDIS_URL as text: which server or cluster it names, and a URL
 * with its password masked for messages (any URL the configuration prints).
 * Apart from the client (redis.ts) so that reading the configuration, which
 * every command of the CLI does at start-up, does not load ioredis.
 */

/** What MEMORY_REDIS_URL names: one server (its URL as ioredis takes it), or a cluster's seed nodes. */
export type RedisTarget =
  | { kind: "node"; url: string }
  | {
      kind: "cluster";
      seeds: Array<{ host: string; port: number }>;
      username?: string;
      password?: string;
      tls: boolean;
    };

/**
 * MEMORY_REDIS_URL read: redis:// or rediss:// (one server), or
 * redis+cluster:// / rediss+cluster:// with comma-separated host:port seed
 * nodes. Throws an Error saying what is wrong (the caller names the setting).
 */
export function parseRedisUrl(url: string): RedisTarget {
  const scheme = /^([a-z+]+):\/\//i.exec(url)?.[1]?.toLowerCase();
  if (scheme === "redis" || scheme === "rediss") {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new Error(`not a valid URL: ${JSON.stringify(maskUrl(url))}`);
    }
    if (parsed.pathname !== "" && parsed.pathname !== "/" && !/^\/\d+$/.test(parsed.pathname)) {
      throw new Error(`the path must be a database number (e.g. /0), got ${JSON.stringify(parsed.pathname)}`);
    }
    return { kind: "node", url };
  }
  if (scheme !== "redis+cluster" && scheme !== "rediss+cluster") {
    throw new Error(
      `expected redis://host:port, rediss://host:port or redis+cluster://host1:port1,host2:port2, got ${JSON.stringify(maskUrl(url))}`,
    );
  }
  let rest = url.slice(scheme.length + 3);
  const slash = rest.indexOf("/");
  if (slash >= 0) {
    const path = rest.slice(slash);
    // A cluster has only database 0.
    if (path !== "/" && path !== "/0")
      throw new Error(`a cluster has only database 0, got the path ${JSON.stringify(path)}`);
    rest = rest.slice(0, slash);
  }
  let username: string | undefined;
  let password: string | undefined;
  const at = rest.lastIndexOf("@");
  if (at >= 0) {
    const userinfo = rest.slice(0, at);
    rest = rest.slice(at + 1);
    const colon = userinfo.indexOf(":");
    username = decodeURIComponent(colon < 0 ? userinfo : userinfo.slice(0, colon)) || undefined;
    password = colon < 0 ? undefined : decodeURIComponent(userinfo.slice(colon + 1));
  }
  const seeds = rest.split(",").map((node) => {
    const match = /^(\[[0-9a-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/i.exec(node.trim());
    const port = Number(match?.[2]);
    if (!match || port < 1 || port > 65535)
      throw new Error(`each cluster seed node must be host:port, got ${JSON.stringify(node)}`);
    return { host: match[1].replace(/^\[(.*)\]$/, "$1"), port };
  });
  return { kind: "cluster", seeds, username, password, tls: scheme === "rediss+cluster" };
}

/** `url` with its password masked, for messages and the configuration printed at start. */
export function maskUrl(url: string): string {
  return url.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:***@");
}
