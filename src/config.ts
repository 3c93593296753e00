/**
 * Configuration: environment variables with the KAOS names, overridden by
 * command-line flags. Every value is checked; a bad one is a ConfigError
 * that main() prints before exiting with status 2.
 */
import { parseArgs } from "node:util";
import type { AppRetention } from "./store/types.js";
import { maskUrl, parseRedisUrl } from "./backends/redis-url.js";
import { LOCAL_DEFAULTS, SETTINGS, type Setting } from "./settings.js";

/** The storage engines. */
export type MemoryType = "local" | "redis" | "postgres";

/** Effective configuration. */
export interface Config {
  host: string;
  port: number;
  /** Name reported as "agent" by the KAOS REST endpoints. */
  agentName: string;
  /** false: the null store (every call succeeds, nothing is kept). */
  memoryEnabled: boolean;
  memoryType: MemoryType;
  /** Default max_events of BuildConversationContext. */
  contextLimit: number;
  /** Sessions kept (0: no cap); default 1000 on the local store, 0 on Redis and PostgreSQL. */
  maxSessions: number;
  /** Events kept per session (0: no cap); default 500 on the local store, 0 on Redis and PostgreSQL. */
  maxSessionEvents: number;
  /** Sessions not updated for this long are removed by the idle sweep; 0: never. */
  sessionIdleMs: number;
  /** Retention per app_name, overriding the three settings above for its sessions. */
  retentionApps: Map<string, AppRetention>;
  /** How long the ids of trimmed events are remembered, so their retries are not appended again; 0: not at all. */
  dedupeWindowMs: number;
  /** At most this many trimmed ids remembered per session. */
  dedupeMaxIds: number;
  /** True when a session or events cap was left unset and took the local store's in-memory default (said at start-up). */
  capsFromDefaults: boolean;
  maxEventBytes: number;
  maxBatchEvents: number;
  /** Largest request or response message on any protocol. */
  maxMessageBytes: number;
  heartbeatMs: number;
  shutdownGraceMs: number;
  redisUrl?: string;
  /** Replicas that must acknowledge each Redis write script (WAIT) before the call succeeds; 0: none. */
  redisWaitReplicas: number;
  postgresUrl?: string;
  /** Longest one Redis command or PostgreSQL statement may take (a call's own deadline, when shorter, wins); unset: the driver's default. */
  storeTimeoutMs?: number;
  /** Redis key prefix / PostgreSQL schema, so deployments can share a server. */
  keyPrefix: string;
  /** Require an API key (authorization: Bearer) on every RPC, stream and REST memory endpoint. */
  auth: boolean;
  /** Key file of the local and null stores (Redis and PostgreSQL keep keys in the backend). */
  authKeysFile: string;
  /** How long a checked key is trusted before it is looked up again (bounds revocation delay). */
  authCacheMs: number;
  /** Calls per second per API key (0: unlimited); a key may carry its own. */
  rateLimit: number;
  /** Live streams per replica. */
  maxStreams: number;
  /** Live streams per API key per replica. */
  maxStreamsPerKey: number;
  /** Serve Prometheus metrics at GET /metrics. */
  metrics: boolean;
  /** PEM certificate chain and key: serve TLS (h2 and HTTP/1.1 by ALPN) instead of cleartext. */
  tlsCert?: string;
  tlsKey?: string;
  /** PEM CA bundle: require client certificates signed by it (mutual TLS). */
  tlsClientCa?: string;
  /** Connections older than this are asked to reconnect (GOAWAY), spreading long streams over replicas; 0: never. */
  maxConnectionAgeMs: number;
  /** Serve the memory inspector (web page) at /. */
  inspector: boolean;
  /** Serve the Model Context Protocol (streamable HTTP) at /mcp. */
  mcp: boolean;
  /** A new connection must show its protocol (or finish its TLS handshake) within this; 0: no limit. */
  firstBytesTimeoutMs: number;
  /** HTTP/1.1: a request's headers must arrive in full within this; 0: no limit. */
  headersTimeoutMs: number;
  /** HTTP/1.1: a request (headers and body) must arrive in full within this; responses are not limited; 0: no limit. */
  requestTimeoutMs: number;
  /** An HTTP/1.1 keep-alive connection between requests, or an HTTP/2 connection without streams, is closed after this; 0: never. */
  idleTimeoutMs: number;
  /** HTTP/2 connections are pinged this often; one whose answer is late is closed. */
  pingIntervalMs: number;
  /** Open connections per replica; unset: derived from the open-file limit; 0: unlimited. */
  maxConnections?: number;
  /** Open connections per remote address per replica; 0: unlimited. */
  maxConnectionsPerAddress: number;
  /** Web origins (scheme://host[:port]) whose pages may call the API cross-site; ["*"]: any page (needs auth). */
  corsOrigins: string[];
  /** Host names (".example.com": with subdomains; "*": any) served besides loopback names and IP addresses while auth is off. */
  allowedHosts: string[];
  /** Base URL of the OpenAI-compatible embeddings API (…/v1); unset: no embeddings from the server, ranking is lexical unless clients send vectors. */
  embeddingsUrl?: string;
  /** Model name sent to the embeddings API; required with embeddingsUrl. */
  embeddingsModel?: string;
  /** Bearer key for the embeddings API; never logged. */
  embeddingsApiKey?: string;
  /** Length every embedding must have; unset: learnt from the endpoint's first answer. */
  embeddingsDimensions?: number;
  /** Longest one embeddings request may take, retries included. */
  embeddingsTimeoutMs: number;
  /** Texts per embeddings request. */
  embeddingsBatchSize: number;
  /** Retries of a failed embeddings request (connection, 408, 409, 429, 5xx). */
  embeddingsMaxRetries: number;
  /** A TEI- or Cohere-compatible /rerank endpoint the best fused memories are reranked by; unset: no reranking. */
  rerankUrl?: string;
  /** Model sent to the reranker (Cohere's request shape); unset: TEI's shape. */
  rerankModel?: string;
  /** Bearer key for the reranker; never logged. */
  rerankApiKey?: string;
  /** Longest one rerank request may take before the fused order is kept. */
  rerankTimeoutMs: number;
  /** Fused memories sent to the reranker per search. */
  rerankTopN: number;
  /** Base URL of the OpenAI-compatible chat API facts are extracted with (…/v1); unset: no extraction. */
  extractionUrl?: string;
  /** Model name sent to the extraction API; required with extractionUrl. */
  extractionModel?: string;
  /** Bearer key for the extraction API; never logged. */
  extractionApiKey?: string;
  /** Longest one extraction request may take, retries included. */
  extractionTimeoutMs: number;
  /** Events per extraction request: a longer append goes as several ranges. */
  extractionMaxEvents: number;
  /** Event ranges waiting for extraction; past it new ones are dropped (and counted). */
  extractionQueueSize: number;
  /** Extraction requests in flight at once. */
  extractionConcurrency: number;
  /** Event types whose text is sent for extraction; others are left out. */
  extractionEventTypes: string[];
}

/** A configuration mistake, reported to the operator as is. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
}

/** The settings, each held to a field of Config: a setting naming no field fails the type check. */
const CONFIG_SETTINGS: readonly (Setting & { readonly key: keyof Config })[] = SETTINGS;

const MEMORY_TYPES: readonly string[] = ["local", "redis", "postgres"];

/** Reads the configuration from flags (first) and the environment. */
export function loadConfig(argv: string[] = process.argv.slice(2), env: NodeJS.ProcessEnv = process.env): Config {
  let flags: Record<string, string | boolean | undefined>;
  try {
    flags = parseArgs({
      args: argv,
      options: Object.fromEntries(CONFIG_SETTINGS.map((s) => [s.flag, { type: "string" as const }])),
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new ConfigError(err instanceof Error ? err.message : String(err));
  }
  const config: Record<string, unknown> = {};
  for (const s of CONFIG_SETTINGS) {
    const raw = (flags[s.flag] as string | undefined) ?? env[s.env] ?? s.default;
    if (raw === undefined || raw === "") continue;
    const source =
      flags[s.flag] !== undefined ? `--${s.flag}` : env[s.env] !== undefined ? s.env : `default of ${s.env}`;
    if (s.kind === "int") {
      if (!/^\d+$/.test(raw)) throw new ConfigError(`${source}: expected a whole number, got ${JSON.stringify(raw)}`);
      const n = Number(raw);
      if (s.min !== undefined && n < s.min) throw new ConfigError(`${source}: must be at least ${s.min}, got ${n}`);
      if (s.key === "port" && n > 65535) throw new ConfigError(`${source}: must be at most 65535, got ${n}`);
      if (s.max !== undefined && n > s.max) throw new ConfigError(`${source}: must be at most ${s.max}, got ${n}`);
      config[s.key] = n;
    } else if (s.kind === "bool") {
      const v = raw.toLowerCase();
      if (!["true", "false", "1", "0", "yes", "no"].includes(v)) {
        throw new ConfigError(`${source}: expected true or false, got ${JSON.stringify(raw)}`);
      }
      config[s.key] = v === "true" || v === "1" || v === "yes";
    } else if (s.kind === "apps") {
      config[s.key] = parseRetentionApps(raw, source);
    } else if (s.kind === "list") {
      config[s.key] = raw
        .split(",")
        .map((entry) => entry.trim())
        .filter((entry) => entry !== "");
    } else {
      config[s.key] = raw;
    }
  }
  const result = config as unknown as Config;
  result.corsOrigins ??= [];
  result.allowedHosts ??= [];
  result.retentionApps ??= new Map();
  // Only the in-memory store caps by default: a durable store deletes nothing unless asked.
  const local = result.memoryType === "local";
  result.capsFromDefaults = local && (result.maxSessions === undefined || result.maxSessionEvents === undefined);
  result.maxSessions ??= local ? LOCAL_DEFAULTS.maxSessions : 0;
  result.maxSessionEvents ??= local ? LOCAL_DEFAULTS.maxSessionEvents : 0;
  checkCorsOrigins(result);
  checkAllowedHosts(result.allowedHosts);
  if (!MEMORY_TYPES.includes(result.memoryType)) {
    throw new ConfigError(
      `MEMORY_TYPE: unknown memory type ${JSON.stringify(result.memoryType)}; expected one of ${MEMORY_TYPES.join(", ")}`,
    );
  }
  if (result.memoryEnabled && result.memoryType === "redis" && !result.redisUrl) {
    throw new ConfigError("MEMORY_TYPE=redis needs MEMORY_REDIS_URL (e.g. redis://127.0.0.1:6379/0)");
  }
  if (result.redisUrl !== undefined) {
    try {
      parseRedisUrl(result.redisUrl);
    } catch (err) {
      throw new ConfigError(`MEMORY_REDIS_URL: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  if (result.memoryEnabled && result.memoryType === "postgres" && !result.postgresUrl) {
    throw new ConfigError(
      "MEMORY_TYPE=postgres needs MEMORY_POSTGRES_URL (e.g. postgres://user@127.0.0.1:5432/engram)",
    );
  }
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(result.keyPrefix)) {
    throw new ConfigError(
      "MEMORY_KEY_PREFIX: must match ^[A-Za-z_][A-Za-z0-9_]{0,62}$ (it names a Redis prefix and a PostgreSQL schema)",
    );
  }
  if (Boolean(result.tlsCert) !== Boolean(result.tlsKey)) {
    throw new ConfigError("MEMORY_TLS_CERT and MEMORY_TLS_KEY go together: give both or neither");
  }
  if (result.tlsClientCa && !result.tlsCert) {
    throw new ConfigError("MEMORY_TLS_CLIENT_CA needs MEMORY_TLS_CERT and MEMORY_TLS_KEY (mutual TLS runs over TLS)");
  }
  if (result.headersTimeoutMs > 0 && result.requestTimeoutMs > 0 && result.headersTimeoutMs > result.requestTimeoutMs) {
    throw new ConfigError(
      `MEMORY_HEADERS_TIMEOUT_MS (${result.headersTimeoutMs}) must not exceed MEMORY_REQUEST_TIMEOUT_MS (${result.requestTimeoutMs}): headers are part of the request`,
    );
  }
  checkEndpoints(result);
  return result;
}

const APP_RETENTION_FIELDS: Record<string, keyof AppRetention> = {
  max_session_events: "maxSessionEvents",
  max_sessions: "maxSessions",
  session_idle_ms: "sessionIdleMs",
};

/**
 * MEMORY_RETENTION_APPS: a JSON object from app_name to its retention. JSON
 * because app names are data and may hold any character a compact
 * "app=field:value;..." form would have to escape. Every mistake names the
 * app and field.
 */
export function parseRetentionApps(raw: string, source: string): Map<string, AppRetention> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch (err) {
    throw new ConfigError(`${source}: not valid JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError(
      `${source}: expected a JSON object from app_name to retention, e.g. {"my-app": {"max_session_events": 100}}`,
    );
  }
  const apps = new Map<string, AppRetention>();
  const fields = Object.keys(APP_RETENTION_FIELDS).join(", ");
  for (const [app, value] of Object.entries(parsed)) {
    const where = `${source}[${JSON.stringify(app)}]`;
    const bytes = Buffer.byteLength(app, "utf8");
    if (bytes < 1 || bytes > 256) throw new ConfigError(`${where}: an app_name is 1-256 UTF-8 bytes, got ${bytes}`);
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw new ConfigError(`${where}: expected an object with any of ${fields}`);
    }
    const retention: AppRetention = {};
    for (const [field, n] of Object.entries(value as Record<string, unknown>)) {
      const key = Object.hasOwn(APP_RETENTION_FIELDS, field) ? APP_RETENTION_FIELDS[field] : undefined;
      if (!key) throw new ConfigError(`${where}.${field}: unknown field; expected one of ${fields}`);
      if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) {
        throw new ConfigError(
          `${where}.${field}: expected a whole number, at least 0 (0: no cap), got ${JSON.stringify(n)}`,
        );
      }
      retention[key] = n;
    }
    apps.set(app, retention);
  }
  return apps;
}

/** Each MEMORY_ALLOWED_HOSTS entry is a host name as Host carries it, without scheme, port or path (they would never match); "*" stands alone. */
function checkAllowedHosts(hosts: readonly string[]): void {
  if (hosts.includes("*")) {
    if (hosts.length > 1) throw new ConfigError("MEMORY_ALLOWED_HOSTS: * allows every host and must be the only entry");
    return;
  }
  for (const entry of hosts) {
    if (!/^\.?[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?$/i.test(entry)) {
      throw new ConfigError(
        `MEMORY_ALLOWED_HOSTS: ${JSON.stringify(entry)} is not a host name (write it without scheme, port or path, e.g. memory.example.com or .example.com)`,
      );
    }
  }
}

/**
 * Each MEMORY_CORS_ORIGINS entry must be an origin exactly as a browser sends
 * it in the Origin header (lower case, no default port, no path), since
 * entries are matched as exact strings; "*" stands alone and only with auth,
 * because without keys it would hand every web page the whole memory.
 */
function checkCorsOrigins(config: Config): void {
  const origins = config.corsOrigins;
  if (origins.includes("*")) {
    if (origins.length > 1)
      throw new ConfigError("MEMORY_CORS_ORIGINS: * allows every origin and must be the only entry");
    if (!config.auth) {
      throw new ConfigError(
        "MEMORY_CORS_ORIGINS=* needs MEMORY_AUTH=true: without API keys any web page could read and write memory",
      );
    }
    return;
  }
  for (const entry of origins) {
    let origin: string | undefined;
    try {
      origin = new URL(entry).origin;
    } catch {
      // reported below
    }
    if (origin !== entry || !/^https?:\/\//.test(entry)) {
      const hint = origin && origin !== "null" ? `; write it as ${origin}` : "";
      throw new ConfigError(
        `MEMORY_CORS_ORIGINS: ${JSON.stringify(entry)} is not a web origin (scheme://host[:port], no path)${hint}`,
      );
    }
  }
}

/** An outside endpoint's settings, for checkEndpoint. */
interface EndpointSettings {
  /** The URL's setting and value. */
  url: [env: string, value: string | undefined];
  /** What the URL names, e.g. "the rerank endpoint to call". */
  names: string;
  /** What a URL must look like, e.g. "an http(s) base URL such as https://api.openai.com/v1". */
  expected: string;
  /** The settings that mean nothing without the URL, and their values. */
  needingUrl: Array<[env: string, value: unknown]>;
  /** The model setting the URL needs, its value and examples; absent when the model is optional. */
  model?: [env: string, value: string | undefined, examples: string];
}

/**
 * An endpoint's settings go together: a URL the server can call (http or
 * https) and, where one is needed, the model to ask it for; a model, key or
 * dimension without a URL is a typo to report, not a setting to ignore.
 */
function checkEndpoint({ url: [urlEnv, url], names, expected, needingUrl, model }: EndpointSettings): void {
  if (url === undefined) {
    const orphan = needingUrl.find(([, value]) => value !== undefined);
    if (orphan) throw new ConfigError(`${orphan[0]} needs ${urlEnv} (${names})`);
    return;
  }
  let protocol: string | undefined;
  try {
    protocol = new URL(url).protocol;
  } catch {
    // reported below
  }
  if (protocol !== "http:" && protocol !== "https:")
    throw new ConfigError(`${urlEnv}: expected ${expected}, got ${JSON.stringify(url)}`);
  if (model && !model[1]) throw new ConfigError(`${urlEnv} needs ${model[0]} (${model[2]})`);
}

/** The embeddings, rerank and extraction endpoints' settings, each checked by checkEndpoint. */
function checkEndpoints(config: Config): void {
  const openAiBaseUrl = "an http(s) base URL such as https://api.openai.com/v1";
  checkEndpoint({
    url: ["MEMORY_EMBEDDINGS_URL", config.embeddingsUrl],
    names: "the OpenAI-compatible API to call",
    expected: openAiBaseUrl,
    needingUrl: [
      ["MEMORY_EMBEDDINGS_MODEL", config.embeddingsModel],
      ["MEMORY_EMBEDDINGS_API_KEY", config.embeddingsApiKey],
      ["MEMORY_EMBEDDINGS_DIMENSIONS", config.embeddingsDimensions],
    ],
    model: ["MEMORY_EMBEDDINGS_MODEL", config.embeddingsModel, "e.g. text-embedding-3-small, nomic-embed-text"],
  });
  checkEndpoint({
    url: ["MEMORY_RERANK_URL", config.rerankUrl],
    names: "the rerank endpoint to call",
    expected: "an http(s) URL of a rerank endpoint such as http://127.0.0.1:8080/rerank",
    needingUrl: [
      ["MEMORY_RERANK_MODEL", config.rerankModel],
      ["MEMORY_RERANK_API_KEY", config.rerankApiKey],
    ],
  });
  checkEndpoint({
    url: ["MEMORY_EXTRACTION_URL", config.extractionUrl],
    names: "the OpenAI-compatible chat API to call",
    expected: openAiBaseUrl,
    needingUrl: [
      ["MEMORY_EXTRACTION_MODEL", config.extractionModel],
      ["MEMORY_EXTRACTION_API_KEY", config.extractionApiKey],
    ],
    model: ["MEMORY_EXTRACTION_MODEL", config.extractionModel, "e.g. gpt-4o-mini, llama3.1"],
  });
}

/** The configuration as printed at start, with credentials in URLs and the embeddings and extraction keys masked. */
export function describeConfig(config: Config): Record<string, unknown> {
  const mask = (url?: string) => url && maskUrl(url);
  return {
    ...config,
    redisUrl: mask(config.redisUrl),
    postgresUrl: mask(config.postgresUrl),
    embeddingsUrl: mask(config.embeddingsUrl),
    embeddingsApiKey: config.embeddingsApiKey === undefined ? undefined : "***",
    extractionUrl: mask(config.extractionUrl),
    extractionApiKey: config.extractionApiKey === undefined ? undefined : "***",
    retentionApps: Object.fromEntries(config.retentionApps),
  };
}
