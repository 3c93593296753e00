/**
 * Fuzzing every method over gRPC (grpc-js, h2c) and the Connect protocol
 * (JSON and binary): random bytes, mutated valid messages, and adversarial
 * JSON values (NUL, lone surrogates, huge and negative numbers, deep nesting,
 * pattern characters, wrong types). The server runs as its own process with
 * the Redis store (so a crash would show as an exit, and store paths see the
 * inputs too); it must answer every input with a client-error code, never
 * INTERNAL or UNKNOWN; every answer that blames the input must say what in it
 * is wrong in its google.rpc.Status details (a BadRequest field violation
 * naming a field path or request part, which the message starts with, or an
 * ErrorInfo reason; see namesItsSubject); and the
 * server must be healthy with every earlier event intact at the end (unless a
 * fuzzed Cleanup removed its session). Counts are bounded; the seed is
 * printed so a failure can be replayed.
 */
import * as grpc from "@grpc/grpc-js";
import { create, fromJsonString, toBinary, type DescMessage, type DescMethod } from "@bufbuild/protobuf";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fromBinary } from "@bufbuild/protobuf";
import { base64Decode } from "@bufbuild/protobuf/wire";
import { MemoryService } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { BadRequestSchema, ErrorInfoSchema } from "@engram-memory/client/gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "@engram-memory/client/gen/google/rpc/status_pb.js";
import { grpcJsClient, type MemoryClient } from "../support/clients.js";
import { spawnServer, type ServerProcess } from "../support/engram.js";

const RUNS_PER_METHOD = Number(process.env.ENGRAM_FUZZ_RUNS ?? 60);
const SEED = Number(process.env.ENGRAM_FUZZ_SEED ?? Date.now() % 2 ** 31);
/** Codes a client's bad input may earn; anything else (INTERNAL 13, UNKNOWN 2, DATA_LOSS 15) fails. */
const CLIENT_CODES = new Set([0, 1, 3, 4, 5, 6, 7, 8, 9, 11, 12, 16]);
const CONNECT_CODES: Record<string, number> = {
  canceled: 1,
  invalid_argument: 3,
  deadline_exceeded: 4,
  not_found: 5,
  already_exists: 6,
  permission_denied: 7,
  resource_exhausted: 8,
  failed_precondition: 9,
  out_of_range: 11,
  unimplemented: 12,
  unauthenticated: 16,
  internal: 13,
  unknown: 2,
  unavailable: 14,
};

let server: ServerProcess;
let grpcClient: grpc.Client;
let typed: MemoryClient;
const SESSION = `fuzz-${process.pid}`;

beforeAll(async () => {
  server = await spawnServer({
    MEMORY_TYPE: "redis",
    MEMORY_REDIS_URL: process.env.MEMORY_TEST_REDIS_URL!,
    MEMORY_KEY_PREFIX: `fuzz${process.pid}`,
    MEMORY_MAX_MESSAGE_BYTES: String(256 * 1024),
  });
  grpcClient = new grpc.Client(server.address, grpc.credentials.createInsecure());
  typed = grpcJsClient(server.address);
  // A session the inputs can hit (ids are drawn from a pool that includes it).
  await typed.createSession({ appName: "fuzz", userId: "u", sessionId: SESSION });
  await typed.addEvent({ sessionId: SESSION, event: { eventId: "anchor", eventType: "user_message" } });
  console.log(
    `fuzz seed ${SEED} (ENGRAM_FUZZ_SEED=${SEED} replays it), ${RUNS_PER_METHOD} runs per method and input kind`,
  );
});

afterAll(async () => {
  grpcClient?.close();
  typed?.close();
  await server?.kill();
});

const identity = (b: Buffer) => b;

/** A call's answer: status code (0 for OK), message, and what its google.rpc.Status details name. */
interface Outcome {
  code: number;
  details: string;
  /** BadRequest field violations. */
  violations?: { field: string; description: string }[];
  /** ErrorInfo reasons. */
  reasons?: string[];
}

/** The violations and reasons of google.rpc.Status details, given as (type name, bytes) pairs. */
function readDetails(details: { type: string; value: Uint8Array }[]): Pick<Outcome, "violations" | "reasons"> {
  const violations = details
    .filter((d) => d.type === BadRequestSchema.typeName)
    .flatMap((d) => fromBinary(BadRequestSchema, d.value).fieldViolations);
  const reasons = details
    .filter((d) => d.type === ErrorInfoSchema.typeName)
    .map((d) => fromBinary(ErrorInfoSchema, d.value).reason);
  return { violations, reasons };
}

function fromGrpcError(err: grpc.ServiceError): Outcome {
  const bytes = err.metadata?.get("grpc-status-details-bin")[0];
  const details =
    bytes instanceof Buffer
      ? fromBinary(StatusSchema, bytes).details.map((a) => ({ type: a.typeUrl.replace(/^.*\//, ""), value: a.value }))
      : [];
  return { code: err.code, details: err.details, ...readDetails(details) };
}

/** One raw gRPC call; resolves with its status code (0 for OK), message and details. */
function grpcCall(method: DescMethod, body: Buffer): Promise<Outcome> {
  const path = `/engram.v1.MemoryService/${method.name}`;
  const deadline = new Date(Date.now() + 5000);
  return new Promise((resolve) => {
    if (method.methodKind === "unary") {
      grpcClient.makeUnaryRequest(path, identity, identity, body, new grpc.Metadata(), { deadline }, (err) =>
        resolve(err ? fromGrpcError(err) : { code: 0, details: "" }),
      );
      return;
    }
    const call = grpcClient.makeServerStreamRequest(path, identity, identity, body, new grpc.Metadata(), { deadline });
    // The first frame (or the status) is the answer; then leave.
    call.on("data", () => {
      call.cancel();
      resolve({ code: 0, details: "" });
    });
    call.on("error", (err: grpc.ServiceError) =>
      resolve(err.code === grpc.status.CANCELLED ? { code: 0, details: err.details } : fromGrpcError(err)),
    );
    call.on("end", () => resolve({ code: 0, details: "" }));
  });
}

/** One Connect call over HTTP/1.1 (unary methods); resolves with the gRPC-numbered code. */
async function connectCall(method: DescMethod, body: Uint8Array | string, contentType: string): Promise<Outcome> {
  const res = await fetch(`${server.baseUrl}/engram.v1.MemoryService/${method.name}`, {
    method: "POST",
    headers: { "content-type": contentType },
    body,
    signal: AbortSignal.timeout(5000),
  });
  if (res.status === 200) {
    await res.arrayBuffer();
    return { code: 0, details: "" };
  }
  const text = await res.text();
  let parsed: { code?: string; message?: string; details?: { type: string; value: string }[] };
  try {
    parsed = JSON.parse(text);
  } catch {
    return { code: res.status === 415 ? 12 : -res.status, details: text };
  }
  const details = (parsed.details ?? []).map((d) => ({ type: d.type, value: base64Decode(d.value) }));
  return {
    code: CONNECT_CODES[parsed.code ?? ""] ?? -res.status,
    details: parsed.message ?? "",
    ...readDetails(details),
  };
}

/** A valid request of each method, as a base for mutation. */
function validRequest(method: DescMethod): Uint8Array {
  const samples: Record<string, object> = {
    CreateSession: { appName: "fuzz", userId: "u" },
    GetOrCreateSession: { sessionId: SESSION, appName: "fuzz", userId: "u" },
    AddEvent: {
      sessionId: SESSION,
      event: { eventType: "tool_call", content: { kind: { case: "stringValue", value: "x" } }, metadata: { a: 1 } },
    },
    AddEvents: { sessionId: SESSION, events: [{ eventType: "user_message" }, { eventType: "agent_response" }] },
    Cleanup: { maxAge: { seconds: 86_400_000n } },
    DeleteUserData: { appName: "fuzz", userId: "u" },
    ListSessions: { pageSize: 3 },
    ListEvents: { limit: 3 },
    GetStats: {},
  };
  return toBinary(
    method.input,
    create(method.input as DescMessage, (samples[method.name] ?? { sessionId: SESSION }) as never),
  );
}

const nasty = fc.constantFrom(
  "",
  "\0",
  "a\0b",
  "\uD800",
  "x\uDFFFy",
  "*",
  "?",
  "%",
  "_",
  "'",
  "\n",
  "a:b",
  "s:*",
  "../../etc",
  "💥".repeat(70),
  "a".repeat(300),
  SESSION,
  "anchor",
  "user_message",
  "tool_call",
  "-1",
  "18446744073709551616",
  "1e309",
  "NaN",
  "null",
  "{}",
  "1970-01-01T00:00:00Z",
  "9999-12-31T23:59:59Z",
);
const nastyNumber = fc.oneof(
  fc.constantFrom(-1, 0, 1, 2 ** 31, 2 ** 32, 2 ** 53, -(2 ** 63), 1e308, 0.5, -0),
  fc.double({ noNaN: true }),
  fc.integer(),
);
const deep = (depth: number): unknown => (depth === 0 ? "bottom" : { d: deep(depth - 1) });
const nastyValue: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    nasty,
    nastyNumber,
    fc.boolean(),
    fc.constant(null),
    fc.constantFrom(deep(70), [deep(66)], { fields: deep(65) }),
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(fc.oneof(nasty, fc.string()), tie("value"), { maxKeys: 4 }),
  ),
})).value;

/** A JSON object using the method's real field names (both spellings) and some strangers. */
function adversarialJson(method: DescMethod): fc.Arbitrary<string> {
  const names = method.input.fields.flatMap((f) => [f.name, f.jsonName]);
  return fc
    .dictionary(
      fc.oneof(
        fc.constantFrom(...names, "event", "events", "content", "metadata", "timestamp"),
        fc.string({ maxLength: 8 }),
      ),
      nastyValue,
      { maxKeys: 6 },
    )
    .map((o) => JSON.stringify(o));
}

/** An adversarial JSON body as sent: whole, truncated, or with one byte replaced (possibly by one that is not UTF-8). */
function adversarialJsonBody(method: DescMethod): fc.Arbitrary<Uint8Array> {
  return adversarialJson(method).chain((json) => {
    const bytes = Buffer.from(json);
    return fc.oneof(
      fc.constant(bytes),
      fc.nat({ max: bytes.length }).map((n) => bytes.subarray(0, n)),
      fc.tuple(fc.nat({ max: bytes.length - 1 }), fc.integer({ min: 0, max: 255 })).map(([i, byte]) => {
        const copy = Buffer.from(bytes);
        copy[i] = byte;
        return copy;
      }),
    );
  });
}

/** Bytes: random, or a valid request truncated / bit-flipped / extended. */
function adversarialBytes(method: DescMethod): fc.Arbitrary<Uint8Array> {
  const base = validRequest(method);
  return fc.oneof(
    fc.uint8Array({ maxLength: 200 }),
    fc.nat({ max: Math.max(base.length - 1, 0) }).map((n) => base.slice(0, n)),
    fc.tuple(fc.nat({ max: Math.max(base.length - 1, 0) }), fc.integer({ min: 1, max: 255 })).map(([i, x]) => {
      const copy = Uint8Array.from(base);
      if (copy.length > 0) copy[i] ^= x;
      return copy;
    }),
    fc.uint8Array({ minLength: 1, maxLength: 40 }).map((tail) => Uint8Array.from([...base, ...tail])),
  );
}

/** Parts of a request an answer may name instead of a field: the whole body or message, a query parameter, a header. */
const REQUEST_PARTS = /^(body|request|query parameter [\w.-]+|query parameter name|header [\w-]+)$/;
/** A field path: proto field names, list indices and (JSON-quoted) map keys, e.g. section_budgets["plan"]. */
const FIELD_PATH =
  /^([a-z][a-z0-9_]*)(\[(?:\d+|"(?:[^"\\]|\\.)*")\])?(\.[a-z][a-z0-9_]*(\[(?:\d+|"(?:[^"\\]|\\.)*")\])?)*$/;

/**
 * Whether an answer says, for machines, what in the request it is about: a
 * BadRequest violation naming a request part, a field path of this method,
 * or an unknown JSON key (the message starting with the same field); or an
 * ErrorInfo reason (an expected_seq conflict, a taken id).
 */
function namesItsSubject(method: DescMethod, outcome: Outcome): boolean {
  const violations = outcome.violations ?? [];
  if (violations.length === 0) return (outcome.reasons ?? []).length > 0;
  return violations.every((v) => {
    if (!outcome.details.startsWith(`${v.field}: `)) return false;
    if (v.description === "unknown field" || REQUEST_PARTS.test(v.field)) return true;
    const topField = FIELD_PATH.exec(v.field)?.[1];
    return topField !== undefined && method.input.fields.some((f) => f.name === topField);
  });
}

/** Codes that answer a client's input without blaming it: the call was cut short, or the server is busy. */
const NOT_ABOUT_THE_INPUT = new Set([0, 1, 4, 14]);

function check(method: DescMethod, outcome: Outcome, what: string): void {
  expect(
    CLIENT_CODES.has(outcome.code) || outcome.code === 14 /* store briefly busy is no crash */,
    `${what} answered code ${outcome.code}: ${outcome.details}`,
  ).toBe(true);
  if (!NOT_ABOUT_THE_INPUT.has(outcome.code)) {
    expect(
      namesItsSubject(method, outcome),
      `${what}: code ${outcome.code} must name the field or request part in its details: ${outcome.details} ${JSON.stringify(outcome.violations)} ${JSON.stringify(outcome.reasons)}`,
    ).toBe(true);
  }
}

describe.each(MemoryService.methods.map((m) => [m.name, m] as const))("fuzzing %s", (_name, method) => {
  it("gRPC: random and mutated bytes, and adversarial typed values, earn client-error codes only", async () => {
    await fc.assert(
      fc.asyncProperty(adversarialBytes(method), async (bytes) =>
        check(method, await grpcCall(method, Buffer.from(bytes)), `gRPC ${method.name} bytes`),
      ),
      { numRuns: RUNS_PER_METHOD, seed: SEED },
    );
    await fc.assert(
      fc.asyncProperty(adversarialJson(method), async (json) => {
        let message;
        try {
          message = fromJsonString(method.input, json, { ignoreUnknownFields: true });
        } catch {
          return; // not representable as this message: the Connect JSON run covers it
        }
        check(
          method,
          await grpcCall(method, Buffer.from(toBinary(method.input, message))),
          `gRPC ${method.name} ${json.slice(0, 200)}`,
        );
      }),
      { numRuns: RUNS_PER_METHOD, seed: SEED },
    );
  }, 120_000);

  it.skipIf(method.methodKind !== "unary")(
    "Connect: adversarial (and broken) JSON and random binary bodies earn client-error codes only",
    async () => {
      await fc.assert(
        fc.asyncProperty(adversarialJsonBody(method), async (body) =>
          check(
            method,
            await connectCall(method, body, "application/json"),
            `Connect ${method.name} ${Buffer.from(body).toString("latin1").slice(0, 200)}`,
          ),
        ),
        { numRuns: RUNS_PER_METHOD, seed: SEED },
      );
      await fc.assert(
        fc.asyncProperty(adversarialBytes(method), async (bytes) =>
          check(method, await connectCall(method, bytes, "application/proto"), `Connect ${method.name} binary`),
        ),
        { numRuns: RUNS_PER_METHOD, seed: SEED },
      );
    },
    120_000,
  );
});

describe("after the fuzzing", () => {
  it("the server is alive, healthy, logged no internal error, and the fuzzed session's log is intact", async () => {
    expect(server.child.exitCode).toBeNull();
    const ready = await fetch(`${server.baseUrl}/readyz`);
    expect(ready.status).toBe(200);
    expect(server.lines.filter((l) => l.includes('"msg":"internal error"'))).toEqual([]);
    // Fuzzed Cleanup and DeleteUserData calls may legitimately remove the session; if it is there, its log is whole.
    const session = await typed.getSession({ sessionId: SESSION }).catch(() => undefined);
    if (session) {
      const { events, headSeq } = await typed.getSessionEvents({ sessionId: SESSION, limit: 1000 });
      const seqs = events.map((e) => Number(e.seq));
      expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => Number(headSeq) - seqs.length + 1 + i));
      if (seqs[0] === 1) expect(events[0]).toMatchObject({ eventId: "anchor", eventType: "user_message" });
    }
  });
});
