/**
 * The append and flat requests' decoders without reflection must build exactly what
 * protobuf-es' fromBinary builds, or decline (undefined) and leave the bytes
 * to fromBinary; it must never accept bytes fromBinary refuses.
 */
import { create, fromBinary, fromJson, toBinary, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  AddEventRequestSchema,
  AddEventsRequestSchema,
  EventInputSchema,
  GetSessionEventsRequestSchema,
  GetSessionRequestSchema,
  MemoryService,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import {
  decodeAddEventRequest,
  decodeAddEventsRequest,
  FAST_REQUEST_DECODERS,
  fastBinaryDecoder,
} from "../../src/server/fastpath/request-decoding.js";
import { parseRequest, PROTO_RECURSION_LIMIT } from "../../src/server/parse-request.js";
import { flatMessage, jsonValue } from "../support/arbitraries.js";

const RUNS = Number(process.env.ENCODING_RUNS ?? 2000);
const text = fc.string({ unit: "binary", maxLength: 24 });
const json = jsonValue(text, { infinities: true });
const eventInput = fc.record(
  {
    eventId: text,
    eventType: text,
    content: json.map((j) => fromJson(ValueSchema, j)),
    metadata: fc.dictionary(text, json, { maxKeys: 4 }) as fc.Arbitrary<JsonObject>,
    timestamp: fc.record({
      seconds: fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }),
      nanos: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }),
    }),
  },
  { requiredKeys: [] },
);
const addEvent = fc.record(
  { sessionId: text, event: eventInput, expectedSeq: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }) },
  { requiredKeys: [] },
);

/** fromBinary's answer, or the error it throws. */
function reflective<T>(schema: Parameters<typeof fromBinary>[0], bytes: Uint8Array): T | Error {
  try {
    return fromBinary(schema, bytes, { recursionLimit: PROTO_RECURSION_LIMIT }) as T;
  } catch (err) {
    return err as Error;
  }
}

/** Either the fast decoder declines, or it agrees with fromBinary exactly (and fromBinary accepts the bytes). */
function agrees(
  schema: Parameters<typeof fromBinary>[0],
  decode: (b: Uint8Array) => unknown,
  bytes: Uint8Array,
): boolean {
  const fast = decode(bytes);
  if (fast === undefined) return false;
  const reference = reflective(schema, bytes);
  expect(reference).not.toBeInstanceOf(Error);
  expect(fast).toStrictEqual(reference);
  return true;
}

describe("decodeAddEventRequest", () => {
  it("decodes every request a client's encoder writes exactly as fromBinary does", () => {
    fc.assert(
      fc.property(addEvent, (init) => {
        const bytes = toBinary(AddEventRequestSchema, create(AddEventRequestSchema, init as never));
        // A well-formed request with no "__proto__" key is always on the fast path.
        const protoKey = JSON.stringify(init, (_k, v) => (typeof v === "bigint" ? String(v) : v)).includes(
          '"__proto__"',
        );
        expect(agrees(AddEventRequestSchema, decodeAddEventRequest, bytes) || protoKey).toBe(true);
      }),
      { numRuns: RUNS },
    );
  });

  it("never accepts mangled bytes differently from fromBinary (truncated, flipped, spliced)", () => {
    fc.assert(
      fc.property(addEvent, fc.nat(), fc.nat(255), fc.uint8Array({ maxLength: 8 }), (init, at, byte, extra) => {
        const bytes = toBinary(AddEventRequestSchema, create(AddEventRequestSchema, init as never));
        const i = bytes.length === 0 ? 0 : at % bytes.length;
        const variants = [
          bytes.subarray(0, i),
          Uint8Array.from(bytes, (b, j) => (j === i ? byte : b)),
          new Uint8Array([...bytes.subarray(0, i), ...extra, ...bytes.subarray(i)]),
        ];
        for (const v of variants) agrees(AddEventRequestSchema, decodeAddEventRequest, v);
      }),
      { numRuns: RUNS },
    );
  });

  it("declines what protobuf merges, keeps or quirks: a repeated event, an unknown field, a __proto__ key, deep nesting, bad UTF-8", () => {
    const one = toBinary(
      AddEventRequestSchema,
      create(AddEventRequestSchema, { sessionId: "s", event: { eventType: "a" } }),
    );
    const two = toBinary(AddEventRequestSchema, create(AddEventRequestSchema, { event: { eventId: "i" } }));
    const merged = new Uint8Array([...one, ...two]);
    expect(decodeAddEventRequest(merged)).toBeUndefined();
    expect(
      (parseRequest(AddEventRequestSchema, merged) as { event: { eventType: string; eventId: string } }).event,
    ).toMatchObject({ eventType: "a", eventId: "i" });

    const unknown = new BinaryWriter().tag(9, WireType.Varint).uint32(7).finish();
    expect(decodeAddEventRequest(new Uint8Array([...one, ...unknown]))).toBeUndefined();
    expect(parseRequest(AddEventRequestSchema, new Uint8Array([...one, ...unknown]))).toHaveProperty("$unknown");

    // protobuf-es' encoder never writes a "__proto__" key (it is no own key once assigned): written by hand.
    const number = new BinaryWriter().tag(2, WireType.Bit64).double(1).finish();
    const entry = new BinaryWriter()
      .tag(1, WireType.LengthDelimited)
      .string("__proto__")
      .tag(2, WireType.LengthDelimited)
      .bytes(number)
      .finish();
    const struct = new BinaryWriter().tag(1, WireType.LengthDelimited).bytes(entry).finish();
    const input = new BinaryWriter().tag(4, WireType.LengthDelimited).bytes(struct).finish();
    const proto = new BinaryWriter().tag(2, WireType.LengthDelimited).bytes(input).finish();
    expect(decodeAddEventRequest(proto)).toBeUndefined();
    expect(parseRequest(AddEventRequestSchema, proto)).toEqual(fromBinary(AddEventRequestSchema, proto));

    let deep: JsonValue = 1;
    for (let i = 0; i < 40; i++) deep = [deep];
    const nested = toBinary(
      AddEventRequestSchema,
      create(AddEventRequestSchema, { event: { content: fromJson(ValueSchema, deep) } }),
    );
    expect(decodeAddEventRequest(nested)).toBeUndefined();
    expect(parseRequest(AddEventRequestSchema, nested)).toEqual(fromBinary(AddEventRequestSchema, nested));

    // A padded tag (field 1, length-delimited, in two bytes) and one that overflows 32 bits: fromBinary's rules apply.
    for (const odd of [
      new Uint8Array([0x8a, 0x00, 1, 0x73]),
      new Uint8Array([0x8a, 0x80, 0x80, 0x80, 0x70, 1, 0x73]),
    ]) {
      expect(decodeAddEventRequest(odd)).toBeUndefined();
      const reference = reflective(AddEventRequestSchema, odd);
      if (reference instanceof Error) expect(() => parseRequest(AddEventRequestSchema, odd)).toThrow(/request/);
      else expect(parseRequest(AddEventRequestSchema, odd)).toEqual(reference);
    }

    const badUtf8 = new BinaryWriter()
      .tag(1, WireType.LengthDelimited)
      .bytes(new Uint8Array([0xc3, 0x28]))
      .finish();
    expect(decodeAddEventRequest(badUtf8)).toBeUndefined();
    expect(() => parseRequest(AddEventRequestSchema, badUtf8)).toThrow(/session_id|request/);
  });
});

describe("decodeAddEventsRequest", () => {
  it("decodes batches exactly as fromBinary does", () => {
    fc.assert(
      fc.property(
        text,
        fc.array(eventInput, { maxLength: 4 }),
        fc.option(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { nil: undefined }),
        (sessionId, events, expectedSeq) => {
          const bytes = toBinary(
            AddEventsRequestSchema,
            create(AddEventsRequestSchema, {
              sessionId,
              events: events.map((e) => create(EventInputSchema, e as never)),
              expectedSeq,
            }),
          );
          agrees(AddEventsRequestSchema, decodeAddEventsRequest, bytes);
        },
      ),
      { numRuns: RUNS },
    );
  });
});

/** MemoryService's request types the flat decoder takes: found from the descriptors, so a new flat request is tested too. */
const flatRequests = [...new Map(MemoryService.methods.map((m) => [m.input.typeName, m.input])).values()].filter(
  (desc) => FAST_REQUEST_DECODERS[desc.typeName] === undefined && fastBinaryDecoder(desc) !== undefined,
);

describe("the flat request decoder", () => {
  it("takes the read requests, and no request holding a message or an enum", () => {
    const names = flatRequests.map((d) => d.typeName);
    expect(names).toContain(GetSessionEventsRequestSchema.typeName);
    expect(names).toContain(GetSessionRequestSchema.typeName);
    expect(fastBinaryDecoder(MemoryService.method.searchMemories.input)).toBeUndefined();
  });

  it.each(flatRequests.map((d) => [d.typeName, d] as const))(
    "decodes %s exactly as fromBinary does, and mangled bytes alike or not at all",
    (_name, desc) => {
      const decode = fastBinaryDecoder(desc)!;
      fc.assert(
        fc.property(
          flatMessage(desc, text),
          fc.nat(),
          fc.nat(255),
          fc.uint8Array({ maxLength: 8 }),
          (init, at, byte, extra) => {
            const bytes = toBinary(desc, create(desc, init as never));
            // A well-formed request (valid UTF-8 throughout) is always on the fast path.
            const wellFormed = Object.values(init)
              .flat()
              .every((v) => typeof v !== "string" || v.isWellFormed());
            expect(agrees(desc, decode, bytes) || !wellFormed).toBe(true);
            const i = bytes.length === 0 ? 0 : at % bytes.length;
            const variants = [
              bytes.subarray(0, i),
              Uint8Array.from(bytes, (b, j) => (j === i ? byte : b)),
              new Uint8Array([...bytes.subarray(0, i), ...extra, ...bytes.subarray(i)]),
            ];
            for (const v of variants) agrees(desc, decode, v);
          },
        ),
        { numRuns: Math.ceil(RUNS / 4) },
      );
    },
  );

  it("declines what protobuf merges, keeps or reads its own way: a singular field twice, an unknown field, a wrong wire type", () => {
    const decode = fastBinaryDecoder(GetSessionEventsRequestSchema)!;
    const once = toBinary(
      GetSessionEventsRequestSchema,
      create(GetSessionEventsRequestSchema, { sessionId: "s", tail: 20 }),
    );
    expect(decode(once)).toStrictEqual(fromBinary(GetSessionEventsRequestSchema, once));
    const twice = new Uint8Array([
      ...once,
      ...toBinary(GetSessionEventsRequestSchema, create(GetSessionEventsRequestSchema, { tail: 5 })),
    ]);
    const unknown = new BinaryWriter().raw(once).tag(15, WireType.Varint).uint32(1).finish();
    const wrongType = new BinaryWriter().tag(6, WireType.LengthDelimited).string("20").finish();
    for (const bytes of [twice, unknown, wrongType]) expect(decode(bytes)).toBeUndefined();
    // The reflective path still answers them: last wins.
    expect(parseRequest(GetSessionEventsRequestSchema, twice)).toMatchObject({ sessionId: "s", tail: 5 });
  });
});
