/**
 * What a Node.js server costs before it does any work: the transport floor
 * of the Motorhead comparison (bench/peers/motorhead.ts). Two bare servers in
 * one process of their own, each answering every request with the bytes
 * Engram answered that request's path with, and doing nothing else:
 *   - gRPC straight on node:http2 (h2c): response headers, the length-prefixed
 *     message, `grpc-status: 0` trailers; no grpc-js;
 *   - plain node:http (HTTP/1.1 keep-alive), the answer as Connect JSON gives it;
 *   - the same node:http server making one Redis round trip (ioredis, as
 *     Engram's store) before it answers: LRANGE of the last 20 of a list of
 *     100-byte items for a read, LPUSH + LTRIM in one pipeline for an
 *     append. What no Node.js server that keeps its data in Redis can spend
 *     less than, whatever its own code does: every call wakes it twice.
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

/** Starts the three servers; resolves with their ports. */
async function startFloor(answers: FloorAnswers): Promise<{ grpcPort: number; http1Port: number; http1RedisPort: number }> {
  const framed = new Map(
    Object.entries(answers.grpc).map(([path, b64]) => {
      const message = Buffer.from(b64, "base64");
      const frame = Buffer.alloc(5 + message.length);
      frame.writeUInt32BE(message.length, 1);
      message.copy(frame, 5);
      return [path, frame];
    }),
  );
  const grpc = http2.createServer();
  grpc.on("stream", (stream, headers) => {
    const frame = framed.get(String(headers[":path"]));
    stream.on("data", () => {});
    stream.on("end", () => {
      if (!frame) {
        stream.respond({ ":status": 200, "content-type": "application/grpc", "grpc-status": "12" }, { endStream: true });
        return;
      }
      stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
      stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
      stream.end(frame);
    });
  });
  const bodies = new Map(Object.entries(answers.http1).map(([path, b64]) => [path, Buffer.from(b64, "base64")]));
  const plain = http.createServer((req, res) => {
    const body = bodies.get(req.url ?? "");
    req.on("data", () => {});
    req.on("end", () => {
      if (!body) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { "content-type": "application/json", "content-length": body.length });
      res.end(body);
    });
  });
  plain.keepAliveTimeout = 60_000;
  const redis = new Redis(answers.redisUrl, { enableAutoPipelining: false });
  await redis.pipeline().del(FLOOR_LIST).rpush(FLOOR_LIST, ...Array.from({ length: 20 }, () => ITEM)).exec();
  const withRedis = http.createServer((req, res) => {
    const path = req.url ?? "";
    const body = bodies.get(path);
    req.on("data", () => {});
    req.on("end", () => {
      if (!body) {
        res.writeHead(404).end();
        return;
      }
      const roundTrip = path.endsWith("/AddEvent") ? redis.pipeline().lpush(FLOOR_LIST, ITEM).ltrim(FLOOR_LIST, 0, 19).exec() : redis.lrange(FLOOR_LIST, -20, -1);
      roundTrip.then(
        () => {
          res.writeHead(200, { "content-type": "application/json", "content-length": body.length });
          res.end(body);
        },
        () => res.writeHead(500).end(),
      );
    });
  });
  withRedis.keepAliveTimeout = 60_000;
  return { grpcPort: await listen(grpc), http1Port: await listen(plain), http1RedisPort: await listen(withRedis) };
}

serveRequests((answers: FloorAnswers) => startFloor(answers));
