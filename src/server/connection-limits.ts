/**
 * Every connection has a deadline to prove itself, and no one address (nor
 * all of them together) may hold more connections than the process has file
 * descriptors to spare. The listener hands sockets to node:http and grpc-js
 * itself (one port, sniffed), so the timeouts those servers apply only when
 * they listen must be switched on here: the protocol sniff has its own
 * deadline, node:http's headers/request checks are started explicitly, and
 * grpc-js gets its idle and keepalive options.
 */
import { readFileSync } from "node:fs";
import type http from "node:http";
import type net from "node:net";
import { ServerInterceptingCall, type ServerInterceptor } from "@grpc/grpc-js";
import type * as grpc from "@grpc/grpc-js";
import type { Config } from "../config.js";
import type { Logger } from "../log.js";
import type { Metrics } from "../service/metrics.js";

/** The settings this file enforces. */
export type ConnectionSettings = Pick<
  Config,
  | "firstBytesTimeoutMs"
  | "headersTimeoutMs"
  | "requestTimeoutMs"
  | "idleTimeoutMs"
  | "pingIntervalMs"
  | "maxConnections"
  | "maxConnectionsPerAddress"
>;

/** Why a connection was closed before it could serve a call (the metric's `reason` label). */
export type RejectReason = "max_connections" | "max_connections_per_address" | "first_bytes_timeout" | "accept_failed";

/** The soft limit on open files of this process (Linux's /proc), or undefined where it cannot be read. */
export function openFileLimit(): number | undefined {
  try {
    const line = readFileSync("/proc/self/limits", "utf8")
      .split("\n")
      .find((l) => l.startsWith("Max open files"));
    const soft = line?.split(/\s{2,}/)[1];
    return soft && /^\d+$/.test(soft) ? Number(soft) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The per-replica connection cap: as configured, else 90% of the open-file
 * limit less 64 descriptors for the store's pool, logs and files, so that
 * connections can never starve the rest of the process of descriptors.
 */
export function resolveMaxConnections(configured: number | undefined, fileLimit = openFileLimit()): number {
  if (configured !== undefined) return configured;
  if (fileLimit === undefined) return 10_000;
  return Math.max(16, Math.floor(fileLimit * 0.9) - 64);
}

/** node:http options that bound how long a request may take to arrive and how long a kept-alive connection may idle. */
export function http1ServerOptions(settings: ConnectionSettings): http.ServerOptions {
  const checked = [settings.headersTimeoutMs, settings.requestTimeoutMs].filter((ms) => ms > 0);
  return {
    headersTimeout: settings.headersTimeoutMs,
    requestTimeout: settings.requestTimeoutMs,
    keepAliveTimeout: settings.idleTimeoutMs,
    // Node checks the deadlines on this interval, so one may be overrun by up to it: a quarter of the shortest, at most 1 s.
    connectionsCheckingInterval: checked.length
      ? Math.max(10, Math.min(1_000, Math.floor(Math.min(...checked) / 4)))
      : 30_000,
  };
}

/**
 * Starts node:http's headers/request deadline checks on a server that is fed
 * sockets by `emit("connection")` and never listens itself. Node starts them
 * (and the connection list that closeIdleConnections reads) on "listening"
 * only; without this an injected connection may trickle headers forever.
 */
export function enforceHttp1Deadlines(server: http.Server): void {
  server.emit("listening");
}

/** grpc-js server options: idle HTTP/2 connections are closed, and pings find connections whose peer stopped answering. */
export function grpcConnectionOptions(settings: ConnectionSettings): grpc.ServerOptions {
  return {
    // A ping that is not answered closes the connection. This also frees a connection whose HTTP/2 session
    // nghttp2 shut down on its own (e.g. its rapid-reset guard): Node stops reading it but never closes it.
    "grpc.keepalive_time_ms": settings.pingIntervalMs,
    "grpc.keepalive_timeout_ms": Math.min(settings.pingIntervalMs, 10_000),
    "grpc.keepalive_permit_without_calls": 1,
    ...(settings.idleTimeoutMs > 0 ? { "grpc.max_connection_idle_ms": settings.idleTimeoutMs } : {}),
  };
}

const HTTP2_PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");

/**
 * Reads just enough of a new connection to tell HTTP/2 (the whole client
 * preface) from HTTP/1.x, puts the bytes back and routes it. A connection
 * that has not told within `timeoutMs` (0: no limit) is closed and reported
 * through `onTimeout`.
 */
export function sniffProtocol(
  socket: net.Socket,
  timeoutMs: number,
  route: (isHttp2: boolean) => void,
  onTimeout: () => void,
): void {
  let seen = Buffer.alloc(0);
  const timer =
    timeoutMs > 0
      ? setTimeout(() => {
          socket.off("data", onData);
          onTimeout();
          socket.destroy();
        }, timeoutMs)
      : undefined;
  timer?.unref();
  socket.once("close", () => clearTimeout(timer));
  const onData = (chunk: Buffer) => {
    seen = Buffer.concat([seen, chunk]);
    const n = Math.min(seen.length, HTTP2_PREFACE.length);
    const matches = seen.subarray(0, n).equals(HTTP2_PREFACE.subarray(0, n));
    if (matches && n < HTTP2_PREFACE.length) return; // need more bytes to decide
    clearTimeout(timer);
    socket.off("data", onData);
    socket.pause();
    socket.unshift(seen);
    route(matches);
  };
  socket.on("data", onData);
}

function peerOf(socket: net.Socket): string {
  return `${socket.remoteAddress}:${socket.remotePort}`;
}

interface Tracked {
  socket: net.Socket;
  address: string;
  /** "address:port", read at admission (a closed socket no longer knows its peer). */
  peer: string;
  proven: boolean;
  /** HTTP/1.1 requests or HTTP/2 streams being served. */
  calls: number;
  /**
   * The socket's bytesRead when it last came to rest (its last call answered),
   * or undefined while a request may be arriving on it. An HTTP/1.1 connection
   * that read bytes since is receiving its next request, and is not at rest.
   */
  readAtRest: number | undefined;
  http2: boolean;
}

const LOG_EVERY_MS = 10_000;

/**
 * Admits new connections under a per-replica and a per-address cap. When a
 * cap is reached, a connection is closed to make room, in this order:
 * - the oldest that has not yet shown its protocol (an idle or half-sent one,
 *   the kind a flood is made of);
 * - else the one at rest the longest: no request in flight and none arriving
 *   (an HTTP/1.1 keep-alive connection between requests, an HTTP/2 connection
 *   without open streams), as nginx reuses its idle keep-alive connections
 *   when it runs out of them. Its client reconnects, as it must whenever a
 *   server closes an idle connection;
 * only if there is neither is the new connection refused: requests in flight
 * and open streams are never cut. Refusals and closes are counted in
 * engram_connections_rejected_total and logged at most every 10 s, without
 * addresses.
 */
export class ConnectionGate {
  private readonly open = new Map<net.Socket, Tracked>();
  /** Admitted sockets by "address:port", so that a TLS socket (a wrapper of the admitted one) and a gRPC call find their connection. */
  private readonly byPeer = new Map<string, net.Socket>();
  /** The TLS socket wrapping an admitted one, to its admitted socket. */
  private readonly wrappers = new WeakMap<net.Socket, net.Socket>();
  /** Unproven connections in arrival order (Map keeps insertion order), overall and per address. */
  private readonly unproven = new Map<net.Socket, string>();
  /** Connections at rest, least recently active first, overall and per address. */
  private readonly resting = new Set<Tracked>();
  private readonly perAddress = new Map<string, { open: number; unproven: Set<net.Socket>; resting: Set<Tracked> }>();
  private readonly pendingLog = new Map<RejectReason, number>();
  private logTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly maxConnections: number,
    private readonly maxPerAddress: number,
    private readonly metrics: Metrics,
    private readonly log: Logger,
  ) {}

  /** Admits `socket` (true) or destroys it (false); admitted sockets are forgotten when they close. */
  admit(socket: net.Socket): boolean {
    const address = socket.remoteAddress ?? "unknown";
    let entry = this.perAddress.get(address);
    if (this.maxPerAddress > 0 && entry && entry.open >= this.maxPerAddress) {
      const victim = entry.unproven.values().next().value ?? this.longestAtRest(entry.resting);
      if (!victim) return this.refuse(socket, "max_connections_per_address");
      this.evict(victim, "max_connections_per_address");
    }
    if (this.maxConnections > 0 && this.open.size >= this.maxConnections) {
      const victim = this.unproven.keys().next().value ?? this.longestAtRest(this.resting);
      if (!victim) return this.refuse(socket, "max_connections");
      this.evict(victim, "max_connections");
    }
    entry = this.perAddress.get(address); // an eviction may have removed it
    if (!entry) this.perAddress.set(address, (entry = { open: 0, unproven: new Set(), resting: new Set() }));
    entry.open++;
    entry.unproven.add(socket);
    const peer = peerOf(socket);
    this.open.set(socket, { socket, address, peer, proven: false, calls: 0, readAtRest: undefined, http2: false });
    this.byPeer.set(peer, socket);
    this.unproven.set(socket, address);
    this.metrics.connectionsOpen.inc();
    socket.once("close", () => this.forget(socket));
    return true;
  }

  /**
   * The connection showed its protocol (or finished its TLS handshake): it is
   * no longer the first to go when a cap is reached. `http2`: it went to
   * gRPC, where a connection without streams is at rest whatever it reads
   * (pings, settings). A plain HTTP/1.1 connection showed the start of a
   * request, so comes to rest only once that is answered; a TLS one (proven
   * by its handshake) is at rest until it reads more.
   */
  proven(socket: net.Socket, http2: boolean): void {
    const admitted = this.admittedOf(socket) ?? this.byPeer.get(peerOf(socket));
    if (!admitted) return;
    if (admitted !== socket) this.wrappers.set(socket, admitted);
    const tracked = this.open.get(admitted);
    if (!tracked || tracked.proven) return;
    tracked.proven = true;
    tracked.http2 = http2;
    this.unproven.delete(admitted);
    const entry = this.perAddress.get(tracked.address)!;
    entry.unproven.delete(admitted);
    if (http2 || socket !== admitted) this.rest(tracked, entry);
  }

  /** A request or stream started on `socket` (the admitted socket or its TLS wrapper): its connection is not at rest. */
  callStarted(socket: net.Socket): void {
    const tracked = this.trackedOf(socket);
    if (!tracked || tracked.calls++ > 0) return;
    this.resting.delete(tracked);
    this.perAddress.get(tracked.address)?.resting.delete(tracked);
  }

  /** A request or stream on `socket` ended: with none left, its connection is at rest, the most recently active. */
  callEnded(socket: net.Socket): void {
    const tracked = this.trackedOf(socket);
    if (!tracked || tracked.calls === 0 || --tracked.calls > 0) return;
    const entry = this.perAddress.get(tracked.address);
    if (entry) this.rest(tracked, entry);
  }

  /** A grpc-js server interceptor that counts every call as a started and ended stream of its connection. */
  readonly grpcInterceptor: ServerInterceptor = (_method, call) => {
    const socket = this.byPeer.get(call.getPeer());
    if (!socket) return new ServerInterceptingCall(call);
    this.callStarted(socket);
    let ended = false;
    const end = () => {
      if (ended) return;
      ended = true;
      this.callEnded(socket);
    };
    return new ServerInterceptingCall(call, {
      start: (next) => next({ onCancel: end }),
      sendStatus: (status, next) => {
        end();
        next(status);
      },
    });
  };

  /** Counts (and logs, rate-limited) a connection closed for `reason`. */
  rejected(reason: RejectReason): void {
    this.metrics.connectionsRejected.labels(reason).inc();
    this.pendingLog.set(reason, (this.pendingLog.get(reason) ?? 0) + 1);
    this.logTimer ??= setTimeout(() => {
      this.logTimer = undefined;
      this.log.warn(
        { closed: Object.fromEntries(this.pendingLog) },
        "connections closed by a connection limit or deadline",
      );
      this.pendingLog.clear();
    }, LOG_EVERY_MS).unref();
  }

  /** Stops the pending log line (at shutdown). */
  close(): void {
    clearTimeout(this.logTimer);
  }

  private admittedOf(socket: net.Socket): net.Socket | undefined {
    return this.open.has(socket) ? socket : this.wrappers.get(socket);
  }

  private trackedOf(socket: net.Socket): Tracked | undefined {
    const admitted = this.admittedOf(socket);
    return admitted && this.open.get(admitted);
  }

  private rest(tracked: Tracked, entry: { resting: Set<Tracked> }): void {
    tracked.readAtRest = tracked.socket.bytesRead;
    // Deleted first so that the set's order stays least recently active first.
    this.resting.delete(tracked);
    this.resting.add(tracked);
    entry.resting.delete(tracked);
    entry.resting.add(tracked);
  }

  /** The connection at rest the longest, if any. An HTTP/1.1 one that read bytes since is receiving a request: it is skipped. */
  private longestAtRest(resting: Set<Tracked>): net.Socket | undefined {
    for (const tracked of resting) {
      if (tracked.http2 || tracked.socket.bytesRead === tracked.readAtRest) return tracked.socket;
    }
    return undefined;
  }

  private refuse(socket: net.Socket, reason: RejectReason): false {
    this.rejected(reason);
    socket.destroy();
    return false;
  }

  private evict(socket: net.Socket, reason: RejectReason): void {
    this.forget(socket);
    this.rejected(reason);
    socket.destroy();
  }

  private forget(socket: net.Socket): void {
    const tracked = this.open.get(socket);
    if (!tracked) return;
    this.open.delete(socket);
    if (this.byPeer.get(tracked.peer) === socket) this.byPeer.delete(tracked.peer);
    this.unproven.delete(socket);
    this.resting.delete(tracked);
    const entry = this.perAddress.get(tracked.address)!;
    entry.unproven.delete(socket);
    entry.resting.delete(tracked);
    if (--entry.open === 0) this.perAddress.delete(tracked.address);
    this.metrics.connectionsOpen.dec();
  }
}
