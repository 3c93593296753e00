/**
 * The append requests' JSON decoder without reflection must build exactly
 * what protobuf-es' fromJsonString builds (with the server's
 * JSON_READ_OPTIONS), or decline (undefined) and leave the body to it; it
 * must never accept a body fromJsonString refuses.
 */
import {
  create,
  fromJson,
  fromJsonString,
  toJsonString,
  type DescMessage,
  type JsonObject,
  type JsonValue,
} from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it, vi } from "vitest";
import {
  AddEventRequestSchema,
  AddEventsRequestSchema,
  EventInputSchema,
  GetSessionEventsRequestSchema,
  ListEventsRequestSchema,
  MemoryService,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import {
  decodeAddEventRequestJson,
  decodeAddEventsRequestJson,
  FAST_JSON_REQUEST_DECODERS,
  fastJsonDecoder,
} from "../../src/server/fastpath/json-request-decoding.js";
import { JSON_READ_OPTIONS, parseJsonRequest } from "../../src/server/parse-request.js";
import { flatMessage, jsonValue } from "../support/arbitraries.js";

const RUNS = Number(process.env.ENCODING_RUNS ?? 2000);
const text = fc.oneof(fc.string({ maxLength: 24 }), fc.string({ unit: "binary", maxLength: 24 }));
const json = jsonValue(text);
const eventInput = fc.record(
  {
    eventId: text,
    eventType: text,
    content: json.map((j) => fromJson(ValueSchema, j)),
    metadata: fc.dictionary(text, json, { maxKeys: 4 }) as fc.Arbitrary<JsonObject>,
    stateDelta: fc.dictionary(text, json, { maxKeys: 3 }) as fc.Arbitrary<JsonObject>,
    timestamp: fc.record({
      seconds: fc.bigInt({ min: 0n, max: 253402300799n }),
      nanos: fc.integer({ min: 0, max: 999_999_999 }),
    }),
  },
  { requiredKeys: [] },
);
const addEvent = fc.record(
  { sessionId: text, event: eventInput, expectedSeq: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }) },
  { requiredKeys: [] },
);
/** Both field-name styles a client may write. */
const protoNames = fc.boolean();

/** fromJsonString's answer, or the error it throws. */
function reflective(schema: DescMessage, body: string): unknown {
  try {
    return fromJsonString(schema, body, JSON_READ_OPTIONS);
  } catch (err) {
    return err as Error;
  }
}

/** Either the fast decoder declines, or it agrees with fromJsonString exactly (and fromJsonString accepts the body). */
function agrees(schema: DescMessage, decode: (body: string) => unknown, body: string): boolean {
  const fast = decode(body);
  if (fast === undefined) return false;
  const reference = reflective(schema, body);
  expect(reference).not.toBeInstanceOf(Error);
  expect(fast).toStrictEqual(reference);
  return true;
}

/** What keeps a compact body off the fast path by design (see the module's doc), or looks like a spaced-out body in a string. */
function declinedByDesign(body: string, init: { event?: { timestamp?: unknown } }): boolean {
  return offByText(body) || init.event?.timestamp !== undefined;
}

/** A body the fast path declines by its text alone. */
function offByText(body: string): boolean {
  return body.includes("\\u") || body.includes('"__proto__"') || body.includes('": ') || body.includes(', "');
}

describe("decodeAddEventRequestJson", () => {
  it("decodes every request toJsonString writes exactly as fromJsonString does, under either field name", () => {
    fc.assert(
      fc.property(addEvent, protoNames, (init, useProtoFieldName) => {
        const body = toJsonString(AddEventRequestSchema, create(AddEventRequestSchema, init as never), {
          useProtoFieldName,
        });
        // Compact, with no lone surrogate, timestamp or "__proto__" key: always on the fast path.
        expect(agrees(AddEventRequestSchema, decodeAddEventRequestJson, body) || declinedByDesign(body, init)).toBe(
          true,
        );
      }),
      { numRuns: RUNS },
    );
  });

  it("never accepts a mangled body differently from fromJsonString (a key twice, both names, null, whitespace, cut, spliced)", () => {
    const keys = [
      "sessionId",
      "session_id",
      "event",
      "expectedSeq",
      "expected_seq",
      "eventType",
      "event_type",
      "content",
      "metadata",
      "stateDelta",
      "x",
      "__proto__",
    ];
    const odd = fc.oneof(json, fc.constantFrom<JsonValue>(null, "7", 7, -1, "18446744073709551616", 1.5, {}, []));
    fc.assert(
      fc.property(
        addEvent,
        fc.nat(),
        fc.constantFrom(...keys),
        odd,
        fc.constantFrom(" ", "\n", "", ","),
        (init, at, key, value, junk) => {
          const body = toJsonString(AddEventRequestSchema, create(AddEventRequestSchema, init as never));
          const i = body.length === 0 ? 0 : at % body.length;
          const member = `${JSON.stringify(key)}:${JSON.stringify(value)}`;
          const variants = [
            // A member added at the top level and inside the event (a duplicate when the key is there already).
            body.replace(/^\{/, `{${member}${body === "{}" ? "" : ","}`),
            body.replace(/"event":\{/, `"event":{${member},`).replace(/"event":\{([^}]*),\}/, '"event":{$1}'),
            body.slice(0, i) + junk + body.slice(i),
            body.slice(0, i),
          ];
          for (const v of variants) agrees(AddEventRequestSchema, decodeAddEventRequestJson, v);
        },
      ),
      { numRuns: RUNS },
    );
  });

  it("declines what fromJsonString refuses or reads its own way, and parseJsonRequest answers as before", () => {
    const declined: Array<[string, RegExp | "accepted"]> = [
      ['{"sessionId":"a","sessionId":"b"}', /session_id|body/],
      ['{"sessionId":"a","session_id":"b"}', /session_id|body/],
      ['{"sessionId":"\\ud800"}', /session_id/],
      ['{"event":{"contnet":"x"}}', /event\.contnet/],
      ['{"sessionId":null,"event":{"eventType":"a"}}', "accepted"],
      ['{"event":{"timestamp":"2026-11-28T10:00:00Z"}}', "accepted"],
      ['{"expectedSeq":"18446744073709551616"}', /expected_seq/],
      ['{"expectedSeq":1.5}', /expected_seq/],
      ['{"sessionId": "a"}', "accepted"],
      ['{"session_id": "a", "event": {"event_type": "x", "content": "y"}}', "accepted"],
      ['{"sessionId":"a","event":{"content":"quoted\\": here, \\"too"}}', "accepted"],
      ['{"event":{"metadata":{"__proto__":1}}}', "accepted"],
    ];
    for (const [body, outcome] of declined) {
      expect(decodeAddEventRequestJson(body), body).toBeUndefined();
      const bytes = new TextEncoder().encode(body);
      if (outcome === "accepted")
        expect(parseJsonRequest(AddEventRequestSchema, bytes)).toStrictEqual(
          fromJsonString(AddEventRequestSchema, body, JSON_READ_OPTIONS),
        );
      else expect(() => parseJsonRequest(AddEventRequestSchema, bytes)).toThrow(outcome);
    }
    // A spaced-out body is declined from its text, before it is parsed (fromJsonString parses it once more).
    const parse = vi.spyOn(JSON, "parse");
    try {
      expect(decodeAddEventRequestJson('{"session_id": "a", "event": {"event_type": "x"}}')).toBeUndefined();
      expect(decodeAddEventRequestJson('{"session_id":"a", "event":{"event_type":"x"}}')).toBeUndefined();
      expect(parse).not.toHaveBeenCalled();
    } finally {
      parse.mockRestore();
    }
    let deep: JsonValue = 1;
    for (let i = 0; i < 40; i++) deep = [deep];
    const nested = JSON.stringify({ event: { content: deep } });
    expect(decodeAddEventRequestJson(nested)).toBeUndefined();
    // And the bench's append is on the fast path.
    expect(
      decodeAddEventRequestJson('{"sessionId":"s","event":{"eventType":"user_message","content":"hello"}}'),
    ).toStrictEqual(
      fromJsonString(
        AddEventRequestSchema,
        '{"sessionId":"s","event":{"eventType":"user_message","content":"hello"}}',
        JSON_READ_OPTIONS,
      ),
    );
  });
});

describe("decodeAddEventsRequestJson", () => {
  it("decodes batches exactly as fromJsonString does", () => {
    fc.assert(
      fc.property(
        text,
        fc.array(eventInput, { maxLength: 4 }),
        fc.option(fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }), { nil: undefined }),
        protoNames,
        (sessionId, events, expectedSeq, useProtoFieldName) => {
          const message = create(AddEventsRequestSchema, {
            sessionId,
            events: events.map((e) => create(EventInputSchema, e as never)),
            expectedSeq,
          });
          const body = toJsonString(AddEventsRequestSchema, message, { useProtoFieldName });
          const fast = agrees(AddEventsRequestSchema, decodeAddEventsRequestJson, body);
          expect(fast || offByText(body) || events.some((e) => e.timestamp !== undefined)).toBe(true);
        },
      ),
      { numRuns: RUNS },
    );
  });
});

/** MemoryService's request types the flat decoder takes: found from the descriptors, so a new flat request is tested too. */
const flatRequests = [...new Map(MemoryService.methods.map((m) => [m.input.typeName, m.input])).values()].filter(
  (desc) => FAST_JSON_REQUEST_DECODERS[desc.typeName] === undefined && fastJsonDecoder(desc) !== undefined,
);

describe("the flat request decoder", () => {
  it("takes the read requests", () => {
    const names = flatRequests.map((d) => d.typeName);
    expect(names).toContain(GetSessionEventsRequestSchema.typeName);
    expect(names).toContain(ListEventsRequestSchema.typeName);
    // A request holding a message or an enum is never flat.
    expect(fastJsonDecoder(MemoryService.method.searchMemories.input)).toBeUndefined();
  });

  it.each(flatRequests.map((d) => [d.typeName, d] as const))(
    "decodes %s exactly as fromJsonString does, or declines",
    (_name, desc) => {
      const decode = fastJsonDecoder(desc)!;
      const keys = [...desc.fields.flatMap((f) => [f.name, f.jsonName]), "x", "__proto__"];
      const odd = fc.oneof(
        json,
        fc.constantFrom<JsonValue>(
          null,
          "7",
          7,
          -1,
          2 ** 53,
          "18446744073709551616",
          "-9223372036854775809",
          1.5,
          true,
          [],
          ["a", 1],
        ),
      );
      fc.assert(
        fc.property(
          flatMessage(desc, text),
          protoNames,
          fc.constantFrom(...keys),
          odd,
          fc.nat(),
          (init, useProtoFieldName, key, value, at) => {
            const body = toJsonString(desc, create(desc, init as never), { useProtoFieldName });
            expect(agrees(desc, decode, body) || offByText(body)).toBe(true);
            const i = at % body.length;
            const member = `${JSON.stringify(key)}:${JSON.stringify(value)}`;
            for (const v of [
              body.replace(/^\{/, `{${member}${body === "{}" ? "" : ","}`),
              body.slice(0, i) + " " + body.slice(i),
            ])
              agrees(desc, decode, v);
          },
        ),
        { numRuns: Math.ceil(RUNS / 4) },
      );
    },
  );
});
