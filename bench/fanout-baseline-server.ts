/**
 * The fan-out ceiling: a bare grpc-js server (its own process) holding open
 * server streams and writing one ready-made frame to every one of them per
 * Publish call. No store, no notices, no per-subscriber work beyond the
 * write itself: what delivering one event to N streams costs at the least.
 */
import * as grpc from "@grpc/grpc-js";
import { create, toBinary } from "@bufbuild/protobuf";
import { StreamSessionEventsResponseSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { serveRequests } from "./lib/processes.js";

/** Method paths of the baseline. */
export const FANOUT_SUBSCRIBE = "/bench.Fanout/Subscribe";
export const FANOUT_PUBLISH = "/bench.Fanout/Publish";

async function start(): Promise<number> {
  const server = new grpc.Server({ "grpc.keepalive_permit_without_calls": 1, "grpc.enable_channelz": 0 }); // Engram's listener has channelz off too
  const identity = (b: Buffer) => b;
  const method = (path: string, responseStream: boolean) => ({
    path,
    requestStream: false,
    responseStream,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  });
  const streams = new Set<grpc.ServerWritableStream<Buffer, Buffer>>();
  // Tells the subscriber it is registered, as Engram's caught_up frame does.
  const caughtUp = Buffer.from(
    toBinary(
      StreamSessionEventsResponseSchema,
      create(StreamSessionEventsResponseSchema, { frame: { case: "caughtUp", value: { headSeq: 0n } } }),
    ),
  );
  server.addService(
    { Subscribe: method(FANOUT_SUBSCRIBE, true), Publish: method(FANOUT_PUBLISH, false) },
    {
      Subscribe: (call: grpc.ServerWritableStream<Buffer, Buffer>) => {
        streams.add(call);
        call.on("cancelled", () => streams.delete(call));
        call.write(caughtUp);
      },
      Publish: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
        for (const stream of streams) stream.write(call.request);
        callback(null, Buffer.alloc(0));
      },
    },
  );
  return new Promise((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, port) =>
      err ? reject(err) : resolve(port),
    ),
  );
}

serveRequests(() => start());
