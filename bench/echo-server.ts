/**
 * The transport ceiling: a bare grpc-js server (its own process) whose one
 * unary method does no work at all and answers a fixed buffer of the size of
 * the real response. Driven by the same load generator with requests of the
 * same size as the real ones, it shows what gRPC over h2c costs by itself on
 * this machine, with the same server options as Engram's listener.
 */
import * as grpc from "@grpc/grpc-js";
import { serveRequests } from "./lib/processes.js";

/** Path of the echo method. */
export const ECHO_METHOD = "/bench.Echo/Echo";

/** Spins for `us` microseconds: CPU spent per call and nothing else. */
function burn(us: number): void {
  const until = process.hrtime.bigint() + BigInt(Math.round(us * 1000));
  while (process.hrtime.bigint() < until);
}

/**
 * Starts the echo server; resolves with its port. With `burnUs`, each call
 * first spins that long: the calibration of how throughput at a given
 * concurrency falls with the server's CPU per call (bench/README.md).
 */
async function startEcho(responseBytes: number, burnUs = 0): Promise<number> {
  const server = new grpc.Server({
    "grpc.max_receive_message_length": 8 * 1024 * 1024,
    "grpc.max_send_message_length": 8 * 1024 * 1024,
    "grpc.keepalive_time_ms": 60_000,
    "grpc.keepalive_timeout_ms": 20_000,
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.enable_channelz": 0,
  });
  const response = Buffer.alloc(responseBytes, 0x61);
  const identity = (b: Buffer) => b;
  server.addService(
    {
      Echo: {
        path: ECHO_METHOD,
        requestStream: false,
        responseStream: false,
        requestSerialize: identity,
        requestDeserialize: identity,
        responseSerialize: identity,
        responseDeserialize: identity,
      },
    },
    {
      Echo: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
        if (burnUs > 0) burn(burnUs);
        callback(null, response);
      },
    },
  );
  return new Promise((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) =>
      err ? reject(err) : resolve(port),
    ),
  );
}

serveRequests((message: { responseBytes: number; burnUs?: number }) =>
  startEcho(message.responseBytes, message.burnUs),
);
