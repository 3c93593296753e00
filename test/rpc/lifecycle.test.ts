/**
 * Process lifecycle: graceful SIGTERM drain, configuration errors and the
 * null store (MEMORY_ENABLED=false), against real server processes.
 */
import { readFileSync } from "node:fs";
import net from "node:net";
import { createRequire } from "node:module";
import path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "@engram-memory/client/gen/google/rpc/error_details_pb.js";
import { ConfigError, loadConfig } from "../../src/config.js";
import { settingsList } from "../../src/settings.js";
import { parseRedisUrl } from "../../src/backends/redis-url.js";
import { REPO_ROOT, spawnServer } from "../support/engram.js";
import { connectClient, errorOf, grpcJsClient } from "../support/clients.js";
import { startChaosProxy } from "../support/chaos-proxy.js";
import { collect, seqsOf, sid } from "./suite.js";

describe("SIGTERM", () => {
  it("reports NOT_SERVING, ends streams UNAVAILABLE with their last seq, and exits 0 within the grace period", async () => {
    const proc = await spawnServer({ MEMORY_SHUTDOWN_GRACE_MS: "3000" });
    const grpcClient = grpcJsClient(proc.address);
    const connect = connectClient(proc.baseUrl);
    const id = sid();
    await grpcClient.createSession({ appName: "app", userId: "u", sessionId: id });
    await grpcClient.addEvents({
      sessionId: id,
      events: Array.from({ length: 3 }, () => ({ eventType: "user_message" })),
    });

    // Watch health over gRPC.
    const require = createRequire(import.meta.url);
    const healthDef = grpc.loadPackageDefinition(
      protoLoader.loadSync(require("grpc-health-check").protoPath, { enums: String }),
    ) as unknown as {
      grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
    };
    const health = new healthDef.grpc.health.v1.Health(proc.address, grpc.credentials.createInsecure());
    const statuses: string[] = [];
    const watch = (health as unknown as { watch: (r: object) => grpc.ClientReadableStream<{ status: string }> }).watch({
      service: "",
    });
    watch.on("data", (d) => statuses.push(d.status));
    watch.on("error", () => {});

    const seen: Array<Awaited<ReturnType<typeof collect>>> = [[], []];
    const streams = [grpcClient, connect].map(async (client, i) => {
      const controller = new AbortController();
      const frames = seen[i];
      const err = await errorOf(
        collect(
          client.streamSessionEvents({ sessionId: id }, { signal: controller.signal }),
          (f) => (frames.push(...f.slice(frames.length)), false),
          controller,
          20_000,
        ),
      );
      return { err, frames };
    });
    // SIGTERM once health is watched and both streams are live (they sent the three events), not after a guess at how long that takes.
    const deadline = Date.now() + 10_000;
    while ((statuses.length === 0 || seen.some((frames) => seqsOf(frames).length < 3)) && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));

    const started = Date.now();
    const exit = proc.kill("SIGTERM");
    const results = await Promise.all(streams);
    for (const { err, frames } of results) {
      expect(err.code).toBe(Code.Unavailable);
      expect(seqsOf(frames)).toEqual([1, 2, 3]);
      // The message says which path ended the stream when the trailer is missing (seen once under load).
      expect(err.metadata.get("engram-last-seq"), `${err.code} ${err.rawMessage}`).toBe("3");
      expect(err.findDetails(ErrorInfoSchema)).toEqual([
        expect.objectContaining({ reason: "SHUTTING_DOWN", domain: "engram.v1", metadata: { last_seq: "3" } }),
      ]);
    }
    expect(await exit).toEqual({ code: 0, signal: null });
    expect(Date.now() - started).toBeLessThan(3000 + 2000);
    expect(statuses[0]).toBe("SERVING");
    expect(statuses).toContain("NOT_SERVING");
    expect(proc.lines.some((l) => l.includes('"msg":"stopped"'))).toBe(true);
    health.close();
    grpcClient.close();
  });
});

describe("SIGTERM with unary calls in flight", () => {
  it("lets every call already at the server finish OK, refuses new ones UNAVAILABLE, and exits 0", async () => {
    // Redis behind a proxy that delays every byte 2.5 s each way: each append spends ~5 s at the server,
    // time enough to see every call arrive (and to SIGTERM) even on a loaded machine.
    const redisPort = Number(new URL(process.env.MEMORY_TEST_REDIS_URL!).port);
    const proxy = await startChaosProxy(redisPort);
    const proc = await spawnServer({
      MEMORY_TYPE: "redis",
      MEMORY_REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
      MEMORY_KEY_PREFIX: `sigterm${process.pid}`,
      MEMORY_SHUTDOWN_GRACE_MS: "15000",
      // Above the slow proxy's round trip, so its delay is not a Redis timeout.
      MEMORY_STORE_TIMEOUT_MS: "20000",
    });
    const grpcClient = grpcJsClient(proc.address);
    const connect = connectClient(proc.baseUrl);
    try {
      const id = sid();
      await grpcClient.createSession({ appName: "app", userId: "u", sessionId: id });
      // Warm both connections, so the calls below need no new one, and Redis's script cache, so each append
      // below is one script call.
      await Promise.all([grpcClient.getSession({ sessionId: id }), connect.getSession({ sessionId: id })]);
      await grpcClient.addEvent({ sessionId: id, event: { eventId: "warm-up", eventType: "user_message" } });
      proxy.set({ kind: "latency", ms: 2500 });
      // Each append is one script call (RESP `evalsha`); nothing else runs a script meanwhile.
      const appendsSent = proxy.countFromClients("\r\nevalsha\r\n");

      const CALLS = 40;
      const inFlight = Array.from({ length: CALLS }, (_, i) => {
        const client = i % 2 === 0 ? grpcClient : connect;
        return client.addEvent({ sessionId: id, event: { eventId: `in-flight-${i}`, eventType: "user_message" } }).then(
          (res) => ({ ok: true as const, seq: Number(res.event!.seq), at: Date.now() }),
          (err: unknown) => ({ ok: false as const, error: String(err), at: Date.now() }),
        );
      });
      // SIGTERM once the server has sent every append to Redis, long before any reply can have come
      // back through the slow proxy.
      await until(
        () => appendsSent() >= CALLS,
        10_000,
        () => `only ${appendsSent()} of ${CALLS} appends reached Redis`,
      );
      const killedAt = Date.now();
      const exit = proc.kill("SIGTERM");
      await until(
        () => proc.lines.some((l) => l.includes('"msg":"shutting down"')),
        10_000,
        () => "the server did not log that it is shutting down",
      );

      // New calls, on the open gRPC connection and on a new one, are refused.
      const fresh = grpcJsClient(proc.address);
      const refused = await Promise.all([
        errorOf(grpcClient.getSession({ sessionId: id }, { timeoutMs: 5000 })),
        errorOf(fresh.getSession({ sessionId: id }, { timeoutMs: 5000 })),
      ]);
      fresh.close();
      for (const err of refused) expect(err.code).toBe(Code.Unavailable);

      const results = await Promise.all(inFlight);
      expect(results.every((r) => r.at > killedAt)).toBe(true); // still at the server when SIGTERM came
      for (const r of results) expect(r, JSON.stringify(r)).toMatchObject({ ok: true });
      expect(results.map((r) => (r.ok ? r.seq : 0)).sort((a, b) => a - b)).toEqual(
        Array.from({ length: CALLS }, (_, i) => i + 2),
      );
      expect(await exit).toEqual({ code: 0, signal: null });
    } finally {
      grpcClient.close();
      await proc.kill("SIGKILL");
      await proxy.close();
    }
  }, 60_000);
});

describe("configuration", () => {
  it("reads KAOS env names with flags overriding them", () => {
    const config = loadConfig(["--max-session-events", "7"], {
      MEMORY_MAX_SESSION_EVENTS: "5",
      MEMORY_CONTEXT_LIMIT: "9",
      PORT: "9001",
    });
    expect(config).toMatchObject({
      maxSessionEvents: 7,
      contextLimit: 9,
      port: 9001,
      memoryType: "local",
      memoryEnabled: true,
      maxSessions: 1000,
    });
  });

  it.each([
    [{ MEMORY_TYPE: "mongo" }, /MEMORY_TYPE: unknown memory type "mongo"/],
    [{ MEMORY_TYPE: "redis" }, /MEMORY_REDIS_URL/],
    [{ MEMORY_TYPE: "postgres" }, /MEMORY_POSTGRES_URL/],
    [{ PORT: "eighty" }, /PORT: expected a whole number/],
    [{ PORT: "70000" }, /PORT: must be at most 65535/],
    [{ MEMORY_ENABLED: "maybe" }, /MEMORY_ENABLED: expected true or false/],
    [{ MEMORY_MAX_SESSIONS: "-1" }, /MEMORY_MAX_SESSIONS: expected a whole number, got "-1"/],
    [{ MEMORY_RETENTION_APPS: "bot=events:100" }, /MEMORY_RETENTION_APPS: not valid JSON/],
    [{ MEMORY_RETENTION_APPS: "[1]" }, /MEMORY_RETENTION_APPS: expected a JSON object from app_name to retention/],
    [
      { MEMORY_RETENTION_APPS: '{"bot": 5}' },
      /MEMORY_RETENTION_APPS\["bot"\]: expected an object with any of max_session_events, max_sessions, session_idle_ms/,
    ],
    [
      { MEMORY_RETENTION_APPS: '{"bot": {"max_events": 5}}' },
      /MEMORY_RETENTION_APPS\["bot"\]\.max_events: unknown field; expected one of max_session_events/,
    ],
    [
      { MEMORY_RETENTION_APPS: '{"bot": {"max_sessions": -1}}' },
      /MEMORY_RETENTION_APPS\["bot"\]\.max_sessions: expected a whole number, at least 0 \(0: no cap\), got -1/,
    ],
    [
      { MEMORY_RETENTION_APPS: '{"bot": {"session_idle_ms": "7d"}}' },
      /MEMORY_RETENTION_APPS\["bot"\]\.session_idle_ms: expected a whole number, at least 0 \(0: no cap\), got "7d"/,
    ],
    [{ MEMORY_RETENTION_APPS: '{"": {}}' }, /MEMORY_RETENTION_APPS\[""\]: an app_name is 1-256 UTF-8 bytes, got 0/],
    [{ MEMORY_KEY_PREFIX: "bad-prefix" }, /MEMORY_KEY_PREFIX/],
    [
      { MEMORY_TYPE: "redis", MEMORY_REDIS_URL: "127.0.0.1:6379" },
      /MEMORY_REDIS_URL: expected redis:\/\/host:port, rediss:\/\/host:port or redis\+cluster:\/\/host1:port1,host2:port2, got "127.0.0.1:6379"/,
    ],
    [
      { MEMORY_TYPE: "redis", MEMORY_REDIS_URL: "redis+cluster://127.0.0.1:7000,127.0.0.1" },
      /MEMORY_REDIS_URL: each cluster seed node must be host:port, got "127.0.0.1"/,
    ],
    [
      { MEMORY_TYPE: "redis", MEMORY_REDIS_URL: "redis+cluster://u:secret@127.0.0.1:7000/3" },
      /MEMORY_REDIS_URL: a cluster has only database 0, got the path "\/3"/,
    ],
    [
      { MEMORY_TYPE: "redis", MEMORY_REDIS_URL: "redis://u:secret@127.0.0.1:6379/cache" },
      /MEMORY_REDIS_URL: the path must be a database number/,
    ],
    [{ MEMORY_REDIS_WAIT_REPLICAS: "-1" }, /MEMORY_REDIS_WAIT_REPLICAS: expected a whole number/],
    [
      { MEMORY_HEADERS_TIMEOUT_MS: "20000", MEMORY_REQUEST_TIMEOUT_MS: "10000" },
      /MEMORY_HEADERS_TIMEOUT_MS \(20000\) must not exceed MEMORY_REQUEST_TIMEOUT_MS/,
    ],
    [
      { MEMORY_EMBEDDINGS_DIMENSIONS: "8" },
      /^MEMORY_EMBEDDINGS_DIMENSIONS needs MEMORY_EMBEDDINGS_URL \(the OpenAI-compatible API to call\)$/,
    ],
    [{ MEMORY_RERANK_MODEL: "m" }, /^MEMORY_RERANK_MODEL needs MEMORY_RERANK_URL \(the rerank endpoint to call\)$/],
    [{ MEMORY_RERANK_API_KEY: "k" }, /^MEMORY_RERANK_API_KEY needs MEMORY_RERANK_URL \(the rerank endpoint to call\)$/],
    [
      { MEMORY_RERANK_URL: "ftp://x" },
      /^MEMORY_RERANK_URL: expected an http\(s\) URL of a rerank endpoint such as http:\/\/127\.0\.0\.1:8080\/rerank, got "ftp:\/\/x"$/,
    ],
    [
      { MEMORY_EXTRACTION_API_KEY: "k" },
      /^MEMORY_EXTRACTION_API_KEY needs MEMORY_EXTRACTION_URL \(the OpenAI-compatible chat API to call\)$/,
    ],
    [
      { MEMORY_EXTRACTION_URL: "http://127.0.0.1:1/v1" },
      /^MEMORY_EXTRACTION_URL needs MEMORY_EXTRACTION_MODEL \(e\.g\. gpt-4o-mini, llama3\.1\)$/,
    ],
    [
      { MEMORY_EXTRACTION_URL: "not a url", MEMORY_EXTRACTION_MODEL: "m" },
      /^MEMORY_EXTRACTION_URL: expected an http\(s\) base URL such as https:\/\/api\.openai\.com\/v1, got "not a url"$/,
    ],
  ])("refuses %o", (env, message) => {
    expect(() => loadConfig([], env)).toThrow(ConfigError);
    expect(() => loadConfig([], env)).toThrow(message);
  });

  it("documents every setting in docs/configuration.md's table, with its flag and default", () => {
    const rows = readFileSync(path.join(REPO_ROOT, "docs/configuration.md"), "utf8")
      .split("\n")
      .filter((line) => line.startsWith("| `"));
    for (const setting of settingsList()) {
      const row = rows.find((line) => line.split("|")[1].includes(`\`${setting.env}\``));
      expect(row, setting.env).toBeDefined();
      expect(row, setting.env).toContain(`\`--${setting.flag}\``);
      if (setting.default !== undefined) expect(row!.split("|")[3], setting.env).toContain(`\`${setting.default}\``);
    }
  });

  it("0 is no cap; only the in-memory local store caps sessions and events by default", () => {
    expect(loadConfig(["--max-sessions", "0", "--max-session-events", "0"], {})).toMatchObject({
      maxSessions: 0,
      maxSessionEvents: 0,
      capsFromDefaults: false,
    });
    expect(loadConfig([], {})).toMatchObject({
      maxSessions: 1000,
      maxSessionEvents: 500,
      capsFromDefaults: true,
      sessionIdleMs: 0,
      dedupeWindowMs: 120_000,
      dedupeMaxIds: 1000,
    });
    for (const [memoryType, url] of [
      ["redis", { MEMORY_REDIS_URL: "redis://127.0.0.1:1" }],
      ["postgres", { MEMORY_POSTGRES_URL: "postgres://127.0.0.1:1/x" }],
    ] as const) {
      expect(loadConfig([], { MEMORY_TYPE: memoryType, ...url })).toMatchObject({
        maxSessions: 0,
        maxSessionEvents: 0,
        sessionIdleMs: 0,
        capsFromDefaults: false,
      });
    }
  });

  it("reads per-app retention as JSON, any app name included", () => {
    const config = loadConfig([], {
      MEMORY_RETENTION_APPS:
        '{"support-bot": {"max_session_events": 100, "max_sessions": 50, "session_idle_ms": 604800000}, "__proto__": {"max_sessions": 0}}',
    });
    expect([...config.retentionApps]).toEqual([
      ["support-bot", { maxSessionEvents: 100, maxSessions: 50, sessionIdleMs: 604_800_000 }],
      ["__proto__", { maxSessions: 0 }],
    ]);
  });

  it("reads a cluster's seed nodes and credentials from MEMORY_REDIS_URL, and never prints its password", () => {
    const config = loadConfig([], {
      MEMORY_TYPE: "redis",
      MEMORY_REDIS_URL: "rediss+cluster://app:s%40cret@10.0.0.1:7000,[::1]:7001/",
      MEMORY_REDIS_WAIT_REPLICAS: "1",
    });
    expect(config.redisWaitReplicas).toBe(1);
    expect(parseRedisUrl(config.redisUrl!)).toEqual({
      kind: "cluster",
      seeds: [
        { host: "10.0.0.1", port: 7000 },
        { host: "::1", port: 7001 },
      ],
      username: "app",
      password: "s@cret",
      tls: true,
    });
    expect(parseRedisUrl("redis://127.0.0.1:6379/2")).toEqual({ kind: "node", url: "redis://127.0.0.1:6379/2" });
    expect(() => loadConfig([], { MEMORY_REDIS_URL: "redis+cluster://app:hunter2@h1:1,h2" })).toThrow(
      /^(?!.*hunter2)/s,
    );
  });

  it("refuses unknown flags", () => {
    expect(() => loadConfig(["--prot", "1"], {})).toThrow(ConfigError);
  });

  it("a port already in use exits 2 with one human line naming the port and the setting", async () => {
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    const port = (holder.address() as net.AddressInfo).port;
    try {
      await expect(spawnServer({}, ["--port", String(port)])).rejects.toThrow(
        new RegExp(`exited with 2.*engram: port ${port} on 127\\.0\\.0\\.1 is in use \\(set PORT or --port\\)\\n`, "s"),
      );
    } finally {
      holder.close();
    }
  });

  it("a server with an unknown MEMORY_TYPE exits 2 with a clear message", async () => {
    await expect(spawnServer({ MEMORY_TYPE: "mongo" })).rejects.toThrow(/exited with 2.*unknown memory type "mongo"/s);
  });
});

describe("MEMORY_ENABLED=false (the null store)", () => {
  it("accepts every call and keeps nothing", async () => {
    const proc = await spawnServer({ MEMORY_ENABLED: "false" });
    try {
      const client = connectClient(proc.baseUrl);
      const id = sid();
      await client.createSession({ appName: "app", userId: "u", sessionId: id });
      const res = await client.addEvent({ sessionId: id, event: { eventType: "user_message" } });
      expect(res.event!.seq).toBe(1n);
      expect((await client.getSessionEvents({ sessionId: id })).events).toEqual([]);
      expect(await client.getStats({})).toMatchObject({ backend: "null", totalSessions: 0n, totalEvents: 0n });
      expect((await client.listSessions({})).sessions).toEqual([]);
      // As KAOS's NullMemory: a session created without an id is "null-session", and none is ever found.
      expect((await client.createSession({ appName: "app", userId: "u" })).session!.sessionId).toBe("null-session");
      expect((await errorOf(client.getSession({ sessionId: id }))).code).toBe(Code.NotFound);
      const events = await fetch(`${proc.baseUrl}/memory/events?session_id=${id}`);
      expect(await events.json()).toMatchObject({ events: [], total: 0 });
    } finally {
      await proc.kill();
    }
  });
});

/** Waits (polling, at most `withinMs`) until `done()`; fails with `why()` otherwise. */
async function until(done: () => boolean, withinMs: number, why: () => string): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(why());
    await new Promise((r) => setTimeout(r, 10));
  }
}
