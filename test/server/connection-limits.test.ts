/**
 * Every connection has a deadline to prove itself, and the connections one
 * address (or everyone) may hold are capped: idle, half-sent and trickling
 * connections are closed, floods are contained, and legitimate gRPC and
 * Connect calls, and live streams, carry on meanwhile. Attackers connect from
 * 127.0.0.2 and up (still loopback), legitimate clients from 127.0.0.1.
 */
import { execFileSync } from "node:child_process";
import http2 from "node:http2";
import net from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import type { StreamSessionEventsResponse } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { connectClient, grpcJsClient, type MemoryClient } from "../support/clients.js";
import { spawnServer, startTestServer, type TestServer } from "../support/engram.js";

/** A raw TCP connection and whether (and when) the server closed it. */
interface HeldConnection {
  socket: net.Socket;
  closed: Promise<void>;
  isClosed(): boolean;
}

const held: net.Socket[] = [];

async function hold(port: number, from: string, firstBytes?: string | Buffer): Promise<HeldConnection> {
  const socket = net.connect({ port, host: "127.0.0.1", localAddress: from });
  held.push(socket);
  socket.on("error", () => {});
  socket.on("data", () => {}); // read whatever the server says (a 408), so its close is seen
  let closed = false;
  const whenClosed = new Promise<void>((resolve) => socket.once("close", () => ((closed = true), resolve())));
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("close", () => reject(new Error(`connection from ${from} closed before it was established`)));
  }).catch(() => {});
  if (firstBytes !== undefined) socket.write(firstBytes);
  return { socket, closed: whenClosed, isClosed: () => closed };
}

/** Headers of an HTTP/1.1 request sent one byte every `gapMs`; stops on close or after `maxBytes`. */
function trickle(connection: HeldConnection, gapMs: number, maxBytes = 400): void {
  const headers = Buffer.from(`X-Padding: ${"a".repeat(maxBytes)}\r\n`);
  let i = 0;
  const timer = setInterval(() => {
    if (connection.isClosed() || i >= headers.length) return clearInterval(timer);
    connection.socket.write(headers.subarray(i, ++i));
  }, gapMs);
  timer.unref();
}

async function closedWithin(connections: HeldConnection[], ms: number): Promise<number> {
  await Promise.race([Promise.all(connections.map((c) => c.closed)), sleep(ms)]);
  return connections.filter((c) => c.isClosed()).length;
}

async function metric(baseUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " ") || l.startsWith(name + "{"));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

/** Server-side TCP connections on `port` (any state but LISTEN), as the kernel sees them. */
function serverConnections(port: number): number {
  return execFileSync("ss", ["-tanH", "state", "all", "exclude", "listening", `( sport = :${port} )`], {
    encoding: "utf8",
  })
    .split("\n")
    .filter(Boolean).length;
}

/** One unary call on each protocol through fresh clients (so fresh connections). */
async function legitimateCalls(server: { address: string; baseUrl: string }): Promise<void> {
  const grpc = grpcJsClient(server.address);
  try {
    await grpc.getStats({}, { timeoutMs: 5_000 });
  } finally {
    grpc.close();
  }
  await connectClient(server.baseUrl).getStats({}, { timeoutMs: 5_000 });
}

afterEach(() => {
  for (const socket of held.splice(0)) socket.destroy();
});

describe("connection deadlines", () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({
      config: {
        firstBytesTimeoutMs: 300,
        headersTimeoutMs: 400,
        requestTimeoutMs: 800,
        idleTimeoutMs: 500,
        pingIntervalMs: 300,
        // No heartbeats: a live stream is silent at the byte level for longer than every timeout.
        heartbeatMs: 60_000,
      },
    });
  });
  afterAll(() => server.stop());

  it("closes idle connections, partial HTTP/2 prefaces and slowloris HTTP/1.1 headers, while gRPC and Connect calls carry on", async () => {
    const idle = await Promise.all(Array.from({ length: 30 }, () => hold(server.port, "127.0.0.2")));
    const partialPreface = await Promise.all(
      Array.from({ length: 30 }, () => hold(server.port, "127.0.0.2", "PRI * HTTP/2.0\r\n\r\nSM")),
    );
    const slowloris = await Promise.all(
      Array.from({ length: 30 }, () => hold(server.port, "127.0.0.2", "GET /healthz HTTP/1.1\r\nHost: engram\r\n")),
    );
    for (const connection of slowloris) trickle(connection, 50);

    for (let i = 0; i < 3; i++) await legitimateCalls(server);

    // Deadlines of 300 and 400 ms: a few seconds is generous.
    expect(await closedWithin(idle, 5_000)).toBe(idle.length);
    expect(await closedWithin(partialPreface, 5_000)).toBe(partialPreface.length);
    expect(await closedWithin(slowloris, 5_000)).toBe(slowloris.length);
    expect(await metric(server.baseUrl, "engram_connections_rejected_total")).toBeGreaterThanOrEqual(60);
    await legitimateCalls(server);
  });

  it("answers a slowloris request 408 before closing it", async () => {
    const connection = await hold(server.port, "127.0.0.2", "GET /healthz HTTP/1.1\r\nHost: engram\r\n");
    let answer = "";
    connection.socket.on("data", (d: Buffer) => (answer += d.toString("latin1")));
    trickle(connection, 50);
    expect(await closedWithin([connection], 5_000)).toBe(1);
    expect(answer).toMatch(/^HTTP\/1\.1 408/);
  });

  it("keeps a gRPC stream and a Connect stream open while they idle past the idle and request timeouts", async () => {
    const writer = connectClient(server.baseUrl);
    const { session } = await writer.createSession({ appName: "app", userId: "user" });
    const grpc = grpcJsClient(server.address);
    const clients: MemoryClient[] = [grpc, connectClient(server.baseUrl)];
    const controller = new AbortController();
    try {
      const streams = clients.map((client) =>
        client
          .streamSessionEvents({ sessionId: session!.sessionId }, { signal: controller.signal })
          [Symbol.asyncIterator](),
      );
      const nextEvent = async (stream: AsyncIterator<StreamSessionEventsResponse>) => {
        for (let i = 0; i < 10; i++) {
          const { value, done } = await stream.next();
          if (done) return "ended";
          if (value.frame.case === "event") return Number(value.frame.value.seq);
        }
        return "no event";
      };
      await writer.addEvent({ sessionId: session!.sessionId, event: { eventType: "user_message" } });
      expect(await Promise.all(streams.map(nextEvent))).toEqual([1, 1]);
      // Silent for 4× the idle timeout and 2.5× the request timeout.
      await sleep(2_000);
      await writer.addEvent({ sessionId: session!.sessionId, event: { eventType: "user_message" } });
      expect(await Promise.all(streams.map(nextEvent))).toEqual([2, 2]);
    } finally {
      controller.abort();
      grpc.close();
    }
  });

  it("closes a gRPC connection that stays without streams past the idle timeout, and the client reconnects", async () => {
    const session = http2.connect(server.baseUrl);
    session.on("error", () => {});
    const closed = new Promise<void>((resolve) => session.once("close", resolve));
    const started = Date.now();
    await Promise.race([closed, sleep(5_000)]);
    expect(session.closed || session.destroyed).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
    session.destroy();
    await legitimateCalls(server);
  });
});

describe("an HTTP/2 rapid-reset flood", () => {
  let server: TestServer;

  beforeAll(async () => {
    // A long idle timeout, so that only the pings can find the sessions nghttp2 shut.
    server = await startTestServer({ config: { pingIntervalMs: 300, idleTimeoutMs: 600_000 } });
  });
  afterAll(() => server.stop());

  it("releases the sockets of an HTTP/2 rapid-reset flood once the flooding client is gone", async () => {
    const baseline = serverConnections(server.port);
    for (let c = 0; c < 3; c++) {
      const session = http2.connect(server.baseUrl, { peerMaxConcurrentStreams: 100_000 });
      session.on("error", () => {});
      await new Promise((resolve) => session.once("connect", resolve));
      // HEADERS then RST_STREAM, far past nghttp2's reset budget (it answers GOAWAY and stops reading).
      for (let i = 0; i < 3_000 && !session.closed && !session.destroyed; i++) {
        try {
          const stream = session.request({
            ":method": "POST",
            ":path": "/engram.v1.MemoryService/GetStats",
            "content-type": "application/grpc",
            te: "trailers",
          });
          stream.on("error", () => {});
          stream.close(http2.constants.NGHTTP2_CANCEL);
        } catch {
          break; // the session went away under us
        }
      }
      await sleep(50);
      session.destroy();
    }
    const deadline = Date.now() + 5_000;
    while (serverConnections(server.port) > baseline && Date.now() < deadline) await sleep(100);
    expect(serverConnections(server.port)).toBeLessThanOrEqual(baseline);
    await legitimateCalls(server);
  });
});

describe("connection caps", () => {
  let server: TestServer;

  beforeAll(async () => {
    server = await startTestServer({
      config: { maxConnections: 40, maxConnectionsPerAddress: 10, firstBytesTimeoutMs: 60_000 },
    });
  });
  afterAll(() => server.stop());

  it("holds one address to its cap by closing its oldest idle connections first", async () => {
    const openBefore = await metric(server.baseUrl, "engram_connections_open");
    const first = await Promise.all(Array.from({ length: 10 }, () => hold(server.port, "127.0.0.2")));
    // The server has accepted all ten (this scrape's own connection aside) before the newer ones come.
    await vi.waitFor(
      async () =>
        expect(await metric(server.baseUrl, "engram_connections_open")).toBeGreaterThanOrEqual(openBefore + 10),
      { timeout: 10_000, interval: 20 },
    );
    const more = await Promise.all(Array.from({ length: 5 }, () => hold(server.port, "127.0.0.2")));
    expect(await closedWithin(first.slice(0, 5), 5_000)).toBe(5);
    // No further closes within 200 ms: the absence of more evictions is what is checked.
    await sleep(200);
    expect(first.slice(5).filter((c) => c.isClosed())).toHaveLength(0);
    expect(more.filter((c) => c.isClosed())).toHaveLength(0);
    await legitimateCalls(server);
  });

  it("refuses a new connection from an address whose connections have all shown their protocol", async () => {
    // Ten HTTP/1.1 connections with a request in flight (never completed): proven, so never evicted.
    const busy = await Promise.all(
      Array.from({ length: 10 }, () =>
        hold(server.port, "127.0.0.3", "POST /engram.v1.MemoryService/GetStats HTTP/1.1\r\nHost: engram\r\n"),
      ),
    );
    // No signal says the server has read each request head; 100 ms is ample for ten on loopback.
    await sleep(100);
    const refused = await hold(server.port, "127.0.0.3");
    expect(await closedWithin([refused], 5_000)).toBe(1);
    expect(busy.filter((c) => c.isClosed())).toHaveLength(0);
    expect(
      await metric(server.baseUrl, 'engram_connections_rejected_total{reason="max_connections_per_address"}'),
    ).toBeGreaterThanOrEqual(1);
    await legitimateCalls(server);
  });

  it("keeps the replica under its cap across many addresses, making room for legitimate calls", async () => {
    const flood = await Promise.all(Array.from({ length: 60 }, (_, i) => hold(server.port, `127.0.0.${10 + (i % 6)}`)));
    await vi.waitFor(() => expect(flood.filter((c) => !c.isClosed()).length).toBeLessThanOrEqual(40), {
      timeout: 10_000,
      interval: 20,
    });
    for (let i = 0; i < 3; i++) await legitimateCalls(server);
    expect(await metric(server.baseUrl, "engram_connections_open")).toBeLessThanOrEqual(40);
  });
});

describe("a low open-file limit", () => {
  it("keeps legitimate calls working while one address holds more idle connections than the process has descriptors", async () => {
    // ulimit -n 256; no first-bytes deadline within the test, so only the caps can protect the process.
    const server = await spawnServer({ MEMORY_FIRST_BYTES_TIMEOUT_MS: "600000" }, [], { openFiles: 256 });
    try {
      const idle: HeldConnection[] = [];
      for (let i = 0; i < 300; i++) idle.push(await hold(server.port, "127.0.0.2"));
      // Time for the server to accept and refuse the flood while it runs short of descriptors: that is the fault.
      await sleep(200);
      for (let i = 0; i < 5; i++) await legitimateCalls(server);
      expect(server.child.exitCode).toBeNull();
    } finally {
      await server.kill("SIGKILL");
    }
  });
});

/** A keep-alive HTTP/1.1 connection from `from` after one answered request, left open and idle. */
async function keptAlive(port: number, from: string): Promise<HeldConnection> {
  const connection = await hold(port, from);
  const answered = new Promise<void>((resolve) => {
    let answer = "";
    const onData = (d: Buffer) => {
      answer += d.toString("latin1");
      if (answer.endsWith("}")) resolve(); // the whole JSON answer
    };
    connection.socket.on("data", onData);
    connection.closed.then(() => resolve());
  });
  connection.socket.write(
    "POST /engram.v1.MemoryService/GetStats HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
  );
  await answered;
  return connection;
}

/** An HTTP/2 connection from `from` with one gRPC call open (headers sent, no message yet): a stream in flight. */
async function openGrpcStream(
  port: number,
  from: string,
): Promise<{ session: http2.ClientHttp2Session; closed(): boolean }> {
  const session = http2.connect(`http://127.0.0.1:${port}`, { localAddress: from } as http2.SecureClientSessionOptions);
  session.on("error", () => {});
  const stream = session.request(
    {
      ":method": "POST",
      ":path": "/engram.v1.MemoryService/GetStats",
      "content-type": "application/grpc",
      te: "trailers",
    },
    { endStream: false },
  );
  stream.on("error", () => {});
  // Frames are read in order: once the ping is answered, the server has read the stream's headers.
  await new Promise<void>((resolve, reject) =>
    stream.once("ready", () => session.ping((err) => (err ? reject(err) : resolve()))),
  );
  return { session, closed: () => session.closed || session.destroyed || stream.closed };
}

/** An HTTP/1.1 request from `from` whose body never comes: the server has read its headers (it answered 100 Continue), so it is in flight. */
async function inFlightRequest(port: number, from: string): Promise<HeldConnection> {
  const connection = await hold(port, from);
  const continued = new Promise<void>((resolve) => {
    connection.socket.once("data", () => resolve());
    connection.closed.then(() => resolve());
  });
  connection.socket.write(
    "POST /engram.v1.MemoryService/GetStats HTTP/1.1\r\nHost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 100\r\nexpect: 100-continue\r\n\r\n",
  );
  await continued;
  return connection;
}

describe("an address whose connections are all kept alive or busy", () => {
  let server: TestServer;

  beforeAll(async () => {
    // The default per-address cap (256); streams limited only by it.
    server = await startTestServer({ config: { maxStreamsPerKey: 1_000, maxStreams: 1_000 } });
  });
  afterAll(() => server.stop());

  it("keeps serving calls from an address holding 300 idle keep-alive connections, each after one answered request", async () => {
    const kept: HeldConnection[] = [];
    for (let i = 0; i < 300; i++) kept.push(await keptAlive(server.port, "127.0.0.1"));
    // At the cap, the connections at rest the longest made room for the newer ones.
    expect(kept.filter((c) => !c.isClosed()).length).toBeLessThanOrEqual(256);
    expect(kept.slice(-200).filter((c) => c.isClosed())).toHaveLength(0);
    for (let i = 0; i < 10; i++) await legitimateCalls(server);
    expect(
      await metric(server.baseUrl, 'engram_connections_rejected_total{reason="max_connections_per_address"}'),
    ).toBeGreaterThanOrEqual(44);
  });

  it("keeps serving calls from an address holding 255 calls in flight, and cuts none of them", async () => {
    // The previous test's connections are gone, so that these 255 are all the address holds.
    const deadline = Date.now() + 5_000;
    while ((await metric(server.baseUrl, "engram_connections_open")) > 1 && Date.now() < deadline) await sleep(50);
    const streams = [];
    for (let i = 0; i < 200; i++) streams.push(await openGrpcStream(server.port, "127.0.0.1"));
    const requests: HeldConnection[] = [];
    for (let i = 0; i < 55; i++) requests.push(await inFlightRequest(server.port, "127.0.0.1"));
    try {
      for (let i = 0; i < 10; i++) await legitimateCalls(server);
      expect(streams.filter((s) => s.closed())).toHaveLength(0);
      expect(requests.filter((c) => c.isClosed())).toHaveLength(0);
    } finally {
      for (const { session } of streams) session.destroy();
    }
  });
});
