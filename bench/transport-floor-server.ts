/**
 * What a Node.js server costs before it does any work: the transport floors
 * of the Motorhead comparison (bench/peers/motorhead.ts). Bare servers in
 * one process of their own, each answering every request with the bytes
 * Engram answered that request's path with, and doing nothing else:
 *   - gRPC straight on node:http2 (h2c): response headers, the length-prefixed
 *     message, `grpc-status: 0` trailers; no grpc-js;
 *   - plain node:http (HTTP/1.1 keep-alive), the answer as Connect JSON gives it;
 *   - the same node:http and node:http2 servers making one Redis round trip
 *     (ioredis, as Engram's store) before they answer: LRANGE of the last 20
 *     of a list of 100-byte items for a read, LPUSH + LTRIM in one pipeline
 *     for an append. What no Node.js server that keeps its data in Redis can
 *     spend less than over that protocol, whatever its own code does: every
 *     call wakes it twice.
 * Driven by the same load generator clients as Engram's parties, their server
 * CPU per call is the least any Node.js server spends on the same calls over
 * the same protocols on this machine, so Engram's CPU minus it is what
 * Engram's own code costs.
 */
import http from "node:http";
import http2 from "node:http2";
import { Redis } from "ioredis";
import { serveRequests } from "./lib/processes.js";

/** Canned answers by request path, base64, and the run's redis-server. */
interface FloorAnswers {
  grpc: Record<string, string>;
  http1: Record<string, string>;
  redisUrl: string;
}

const FLOOR_LIST = `bench-floor:${process.pid}`;
const ITEM = "x".repeat(100);

async function listen(server: http.Server | http2.Http2Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as { port: number }).port;
}

/** The floor servers' ports. */
export interface FloorPorts {
  grpcPort: number;
  http1Port: number;
  http1RedisPort: number;
  grpcRedisPort: number;
}

/** Starts the four servers; resolves with their ports. */
async function startFloor(answers: FloorAnswers): Promise<FloorPorts> {
  const framed = new Map(
    Object.entries(answers.grpc).map(([path, b64]) => {
      const message = Buffer.from(b64, "base64");
      const frame = Buffer.alloc(5 + message.length);
      frame.writeUInt32BE(message.length, 1);
      message.copy(frame, 5);
      return [path, frame];
    }),
  );
  const redis = new Redis(answers.redisUrl, { enableAutoPipelining: false });
  await redis
    .pipeline()
    .del(FLOOR_LIST)
    .rpush(FLOOR_LIST, ...Array.from({ length: 20 }, () => ITEM))
    .exec();
  /** The one Redis round trip of a call to `path`. */
  const roundTrip = (path: string): Promise<unknown> =>
    path.endsWith("/AddEvent")
      ? redis.pipeline().lpush(FLOOR_LIST, ITEM).ltrim(FLOOR_LIST, 0, 19).exec()
      : redis.lrange(FLOOR_LIST, -20, -1);

  /** gRPC by hand on node:http2; after a Redis round trip when `withRedis`. */
  const grpcServer = (withRedis: boolean) => {
    const server = http2.createServer();
    server.on("stream", (stream, headers) => {
      const path = String(headers[":path"]);
      const frame = framed.get(path);
      stream.on("data", () => {});
      stream.on("end", () => {
        if (!frame) {
          stream.respond(
            { ":status": 200, "content-type": "application/grpc", "grpc-status": "12" },
            { endStream: true },
          );
          return;
        }
        const answer = () => {
          if (stream.destroyed) return;
          stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
          stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
          stream.end(frame);
        };
        if (!withRedis) answer();
        else
          roundTrip(path).then(
            answer,
            () =>
              stream.destroyed ||
              stream.respond(
                { ":status": 200, "content-type": "application/grpc", "grpc-status": "13" },
                { endStream: true },
              ),
          );
      });
    });
    return server;
  };

  const bodies = new Map(Object.entries(answers.http1).map(([path, b64]) => [path, Buffer.from(b64, "base64")]));
  /** The answer as Connect JSON gives it, on node:http; after a Redis round trip when `withRedis`. */
  const http1Server = (withRedis: boolean) => {
    const server = http.createServer((req, res) => {
      const path = req.url ?? "";
      const body = bodies.get(path);
      req.on("data", () => {});
      req.on("end", () => {
        if (!body) {
          res.writeHead(404).end();
          return;
        }
        const answer = () => {
          res.writeHead(200, { "content-type": "application/json", "content-length": body.length });
          res.end(body);
        };
        if (!withRedis) answer();
        else roundTrip(path).then(answer, () => res.writeHead(500).end());
      });
    });
    server.keepAliveTimeout = 60_000;
    return server;
  };

  return {
    grpcPort: await listen(grpcServer(false)),
    http1Port: await listen(http1Server(false)),
    http1RedisPort: await listen(http1Server(true)),
    grpcRedisPort: await listen(grpcServer(true)),
  };
}

serveRequests((answers: FloorAnswers) => startFloor(answers));
