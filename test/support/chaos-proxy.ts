/**
 * A loopback TCP proxy for fault tests: forwards 127.0.0.1:<port> to a
 * target, and on command adds latency, blackholes traffic (connections stay
 * open, bytes go nowhere: only timeouts can notice), or resets every
 * connection. New connections during a blackhole are accepted and held;
 * "refuse" lets the open ones pass but closes new ones at once (a client
 * reconnecting meanwhile fails fast and retries).
 */
import net from "node:net";

/** What the proxy does with traffic. */
export type ChaosMode = { kind: "pass" } | { kind: "latency"; ms: number } | { kind: "blackhole" } | { kind: "refuse" };

/** A running proxy. */
export interface ChaosProxy {
  port: number;
  /** Changes how traffic (on existing and new connections) is treated. */
  set(mode: ChaosMode): void;
  /** Destroys every open connection with a TCP RST. */
  resetAll(): void;
  /** Open client connections. */
  readonly connections: number;
  /** Counts, from now on, the times `text` arrives from clients (split across chunks too); call the result to read the count. */
  countFromClients(text: string): () => number;
  close(): Promise<void>;
}

/** Starts a proxy to targetHost:targetPort on a free loopback port. */
export async function startChaosProxy(targetPort: number, targetHost = "127.0.0.1"): Promise<ChaosProxy> {
  let mode: ChaosMode = { kind: "pass" };
  const pairs = new Set<{ client: net.Socket; upstream: net.Socket }>();
  const taps = new Set<(chunk: Buffer) => void>();

  /** Forwards one chunk according to the mode at the time it arrived. */
  const forward = (to: net.Socket) => (chunk: Buffer) => {
    if (mode.kind === "blackhole") return;
    if (mode.kind === "latency") {
      const ms = mode.ms;
      setTimeout(() => to.writable && to.write(chunk), ms);
      return;
    }
    if (to.writable) to.write(chunk);
  };

  const server = net.createServer((client) => {
    if (mode.kind === "refuse") {
      client.resetAndDestroy();
      return;
    }
    const upstream = net.connect(targetPort, targetHost);
    const pair = { client, upstream };
    pairs.add(pair);
    const end = () => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    const toUpstream = forward(upstream);
    client.on("data", (chunk: Buffer) => {
      for (const tap of taps) tap(chunk);
      toUpstream(chunk);
    });
    upstream.on("data", forward(client));
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    set: (next) => {
      mode = next;
    },
    resetAll: () => {
      for (const { client, upstream } of [...pairs]) {
        client.resetAndDestroy();
        upstream.resetAndDestroy();
      }
      pairs.clear();
    },
    get connections() {
      return pairs.size;
    },
    countFromClients: (text) => {
      let count = 0;
      // The last text.length - 1 characters seen, so an occurrence split between two chunks is counted too.
      let carry = "";
      taps.add((chunk) => {
        const seen = carry + chunk.toString("latin1");
        for (let at = seen.indexOf(text); at !== -1; at = seen.indexOf(text, at + text.length)) count++;
        carry = seen.slice(-(text.length - 1));
      });
      return () => count;
    },
    close: async () => {
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
