/**
 * Serves MemoryService through @grpc/grpc-js (gRPC over HTTP/2), the fast
 * path for generated clients. Requests are parsed here rather than by
 * grpc-js, so a malformed message answers INVALID_ARGUMENT instead of
 * INTERNAL; writes wait for 'drain', so a slow reader never grows our buffers.
 */
import { once } from "node:events";
import type * as grpc from "@grpc/grpc-js";
import { ScalarType, toBinary, type DescField, type DescMessage, type DescMethod } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { FeatureSet_FieldPresence } from "@bufbuild/protobuf/wkt";
import {
  EventSchema,
  MemoryService as MemoryServiceDesc,
  type Event,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { rpcName, type CallGuard } from "../service/guard/index.js";
import { encodeEvent } from "./event-encoding.js";
import { parseRequest } from "./parse-request.js";
import { toGrpcStatus, type InternalErrorReporter } from "./status.js";
import { bodyBuffer } from "./body-buffer.js";

/** A response type's binary encoder: toBinary's bytes, events from their cached encoding (shared by the Connect unary fast path). */
export function binaryResponseSerializer(desc: DescMessage): (msg: unknown) => Buffer {
  const events = desc.fields.find((f) => f.number === 1 && f.message?.typeName === EventSchema.typeName);
  if (events) return eventsFirstSerializer(desc, events.localName, events.fieldKind === "list");
  return (msg: unknown) => Buffer.from(toBinary(desc, msg as never));
}

/**
 * Bytes of recent events: the service shares one wire Event per stored event
 * (a bounded recent cache), so a tail read repeated by many callers encodes
 * each event once instead of once per call (20 events by reflection were
 * most of a GetSessionEvents call's CPU; src/server/event-encoding.ts now
 * encodes without it).
 */
const eventBytes = new WeakMap<object, Uint8Array>();

function encodedEvent(event: object): Uint8Array {
  let bytes = eventBytes.get(event);
  if (!bytes) eventBytes.set(event, (bytes = encodeEvent(event as Event)));
  return bytes;
}

/**
 * Serializes a response whose field 1 holds Event(s): the events' cached
 * bytes first (field order is free on the wire; repeated fields keep their
 * order), then the other fields.
 */
function eventsFirstSerializer(desc: DescMessage, field: string, repeated: boolean) {
  // AddEvent's, AddEvents' and ListEvents' responses hold nothing else: no second encoding pass.
  const restOf =
    desc.fields.length === 1
      ? undefined
      : (scalarFieldsWriter(desc.fields.filter((f) => f.localName !== field)) ??
        ((message: Record<string, unknown>) =>
          toBinary(desc, { ...message, [field]: repeated ? [] : undefined } as never)));
  return (msg: unknown) => {
    const message = msg as Record<string, unknown>;
    const value = message[field];
    const list = repeated ? (value as object[]) : value === undefined ? [] : [value as object];
    const encoded = list.map(encodedEvent);
    const rest = restOf?.(message);
    let size = rest?.length ?? 0;
    for (const bytes of encoded) size += 1 + varintSize(bytes.length) + bytes.length;
    // One buffer of the exact size: a BinaryWriter's chunks and its final copy showed in every append's profile.
    const out = bodyBuffer(size);
    let pos = 0;
    for (const bytes of encoded) {
      out[pos++] = EVENTS_TAG;
      for (let n = bytes.length; ; n >>>= 7) {
        if (n < 128) {
          out[pos++] = n;
          break;
        }
        out[pos++] = (n & 127) | 128;
      }
      out.set(bytes, pos);
      pos += bytes.length;
    }
    if (rest) out.set(rest, pos);
    return out;
  };
}

/**
 * Writes `fields` as toBinary does, when they are all strings and unsigned
 * integers (GetSessionEventsResponse's page token and head seq); undefined
 * otherwise. toBinary's reflective pass over the response was ~1.7% of a
 * gRPC read's busy time at c=16.
 */
function scalarFieldsWriter(
  fields: readonly DescField[],
): ((message: Record<string, unknown>) => Uint8Array) | undefined {
  const writers: ((writer: BinaryWriter, message: Record<string, unknown>) => void)[] = [];
  for (const f of [...fields].sort((a, b) => a.number - b.number)) {
    if (f.fieldKind !== "scalar" || f.longAsString || f.oneof) return undefined;
    const { localName, number } = f;
    // Implicit presence: written unless the zero value; explicit (`optional`): written when set.
    const implicit = f.presence === FeatureSet_FieldPresence.IMPLICIT;
    switch (f.scalar) {
      case ScalarType.STRING:
        writers.push((w, m) => {
          const v = m[localName] as string | undefined;
          if (v !== undefined && !(implicit && v === "")) w.tag(number, WireType.LengthDelimited).string(v);
        });
        break;
      case ScalarType.UINT32:
        writers.push((w, m) => {
          const v = m[localName] as number | undefined;
          if (v !== undefined && !(implicit && v === 0)) w.tag(number, WireType.Varint).uint32(v);
        });
        break;
      case ScalarType.UINT64:
        writers.push((w, m) => {
          const v = m[localName] as bigint | undefined;
          if (v !== undefined && !(implicit && v === 0n)) w.tag(number, WireType.Varint).uint64(v);
        });
        break;
      default:
        return undefined;
    }
  }
  return (message) => {
    const writer = new BinaryWriter();
    for (const write of writers) write(writer, message);
    return writer.finish();
  };
}

/** Field 1, length-delimited. */
const EVENTS_TAG = (1 << 3) | WireType.LengthDelimited;

/** Bytes of the varint of a length (below 2^32). */
function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n >>>= 7;
    size++;
  }
  return size;
}

/**
 * A stream's serializer: the service hands every subscriber of a session the
 * same frame object for the same event, so its bytes are made once and
 * written to every stream, instead of once per subscriber.
 */
function sharedFrameSerializer(desc: DescMessage) {
  const bytes = new WeakMap<object, Buffer>();
  return (msg: unknown) => {
    let out = bytes.get(msg as object);
    if (!out) bytes.set(msg as object, (out = Buffer.from(toBinary(desc, msg as never))));
    return out;
  };
}

/** Aborts when the call is cancelled by the client or its deadline passes. */
function callSignal(
  call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerWritableStream<unknown, unknown>,
): AbortController {
  const controller = new AbortController();
  call.on("cancelled", () => controller.abort());
  return controller;
}

/** The call's first value of a metadata key, as a string. */
function header(
  call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerWritableStream<unknown, unknown>,
  key: string,
): string | undefined {
  const value = call.metadata.get(key)[0];
  return typeof value === "string" ? value : undefined;
}

/** The call's deadline as epoch ms, or undefined when the client set none. */
function deadlineOf(
  call: grpc.ServerUnaryCall<unknown, unknown> | grpc.ServerWritableStream<unknown, unknown>,
): number | undefined {
  const deadline = call.getDeadline();
  const ms = deadline instanceof Date ? deadline.getTime() : deadline;
  return Number.isFinite(ms) ? ms : undefined;
}

/** Builds the grpc-js service definition and implementation for MemoryService. */
export function grpcMemoryService(
  guard: CallGuard,
  report: InternalErrorReporter,
): { definition: grpc.ServiceDefinition; implementation: grpc.UntypedServiceImplementation } {
  const definition: Record<string, grpc.MethodDefinition<Buffer, unknown>> = {};
  const implementation: grpc.UntypedServiceImplementation = {};
  for (const method of MemoryServiceDesc.methods as DescMethod[]) {
    const streaming = method.methodKind === "server_streaming";
    const handler = guard.handler(rpcName(method.localName));
    definition[method.name] = {
      path: `/${MemoryServiceDesc.typeName}/${method.name}`,
      requestStream: false,
      responseStream: streaming,
      requestSerialize: (b: Buffer) => b,
      requestDeserialize: (b: Buffer) => b,
      responseSerialize: streaming ? sharedFrameSerializer(method.output) : binaryResponseSerializer(method.output),
      responseDeserialize: (b: Buffer) => b,
      originalName: method.localName,
    };
    implementation[method.name] = streaming
      ? async (call: grpc.ServerWritableStream<Buffer, unknown>) => {
          const controller = callSignal(call);
          try {
            const req = parseRequest(method.input, call.request);
            const info = {
              signal: controller.signal,
              authorization: header(call, "authorization"),
              traceparent: header(call, "traceparent"),
              requestId: header(call, "x-request-id"),
              protocol: "grpc",
            };
            for await (const frame of handler(req, info) as AsyncIterable<unknown>) {
              if (controller.signal.aborted) break;
              // One wait that removes its own listeners: a race of two once() calls left the loser's
              // listener behind, one per wait, on a stream that may wait thousands of times.
              // An abort rejects it (AbortError), ending the loop; the catch below stays quiet then.
              if (!call.write(frame)) await once(call, "drain", { signal: controller.signal });
            }
            if (!controller.signal.aborted) call.end();
          } catch (err) {
            if (!controller.signal.aborted) call.emit("error", toGrpcStatus(err, report));
          } finally {
            controller.abort();
          }
        }
      : (call: grpc.ServerUnaryCall<Buffer, unknown>, callback: grpc.sendUnaryData<unknown>) => {
          let answer: Promise<unknown>;
          try {
            // No abort signal: unary handlers never read one (see CallInfo.signal).
            answer = handler(parseRequest(method.input, call.request), {
              authorization: header(call, "authorization"),
              traceparent: header(call, "traceparent"),
              protocol: "grpc",
              deadline: deadlineOf(call),
              requestId: header(call, "x-request-id"),
            }) as Promise<unknown>;
          } catch (err) {
            // A request that does not parse: answered in this turn, never thrown into grpc-js.
            callback(toGrpcStatus(err, report) as grpc.ServiceError);
            return;
          }
          // Inline callbacks, not a named per-call closure: tsx (esbuild keepNames) names each with a defineProperty.
          answer.then(
            (res) => callback(null, res),
            (err) => callback(toGrpcStatus(err, report) as grpc.ServiceError),
          );
        };
  }
  return { definition, implementation };
}
