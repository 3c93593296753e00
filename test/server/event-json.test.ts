/**
 * The hand-written Connect JSON of events and event responses must be the
 * text protobuf-es' toJsonString writes with the server's JSON options, for
 * every event the service can produce and for odd ones it never produces.
 */
import { create, toJsonString, type DescMessage } from "@bufbuild/protobuf";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  AddEventResponseSchema,
  AddEventsResponseSchema,
  EventSchema,
  GetSessionEventsResponseSchema,
  GetSessionResponseSchema,
  ListEventsResponseSchema,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { eventJson, jsonResponseEncoder } from "../../src/server/fastpath/event-json.js";
import { JSON_WRITE_OPTIONS } from "../../src/server/status.js";
import { toWireEvent } from "../../src/service/convert.js";
import { storedEvent as storedEventArbitrary } from "../support/arbitraries.js";

// Keys include "__proto__", which toJson drops (it builds objects by assignment).
const text = fc.oneof(
  { weight: 9, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
  { weight: 1, arbitrary: fc.constantFrom("__proto__", "0", "10", "-1") },
);
const storedEvent = storedEventArbitrary(text);

const RUNS = Number(process.env.ENCODING_RUNS ?? 2000);

const reference = (desc: DescMessage, message: unknown) => toJsonString(desc, message as never, JSON_WRITE_OPTIONS);

describe("eventJson", () => {
  it("writes toJsonString's text for any stored event", () => {
    fc.assert(
      fc.property(storedEvent, (stored) => {
        const event = toWireEvent(stored);
        expect(eventJson(event)).toBe(reference(EventSchema, event));
      }),
      { numRuns: RUNS },
    );
  });

  it("handles what a stored event never has: absent fields, nanoseconds, a seq past 2^53", () => {
    const cases = [
      create(EventSchema, {}),
      create(EventSchema, { eventId: "e", timestamp: { seconds: 1n, nanos: 5 } as never, metadata: {} }),
      create(EventSchema, { timestamp: { seconds: 1n, nanos: 120_000 } as never }),
      create(EventSchema, { sessionId: "s", seq: 2n ** 63n + 5n }),
    ];
    for (const event of cases) expect(eventJson(event)).toBe(reference(EventSchema, event));
  });

  it("leaves to toJsonString what it refuses (an unset Value, a non-finite number, a timestamp out of range)", () => {
    const cases = [
      create(EventSchema, {
        eventId: "e",
        content: { $typeName: "google.protobuf.Value", kind: { case: undefined } } as never,
      }),
      create(EventSchema, {
        eventId: "e",
        content: { $typeName: "google.protobuf.Value", kind: { case: "numberValue", value: Number.NaN } } as never,
      }),
      create(EventSchema, { timestamp: { seconds: -62135596801n, nanos: 0 } as never }),
    ];
    for (const event of cases) expect(() => eventJson(event)).toThrow(/NaN|must have a value|0001-01-01/);
  });
});

/** Text as it goes on the wire (a lone surrogate as U+FFFD), read back: both sides of a comparison alike. */
const utf8 = (value: string | Uint8Array) => Buffer.from(value).toString("utf8");

describe("jsonResponseEncoder", () => {
  const responses = fc.record({
    events: fc.array(storedEvent.map(toWireEvent), { maxLength: 4 }),
    nextPageToken: text,
    headSeq: fc.bigInt({ min: 0n, max: 2n ** 64n - 1n }),
  });

  it("writes toJsonString's text for every response that carries events", () => {
    fc.assert(
      fc.property(responses, ({ events, nextPageToken, headSeq }) => {
        const messages: Array<[DescMessage, unknown]> = [
          [AddEventResponseSchema, create(AddEventResponseSchema, { event: events[0] })],
          [AddEventsResponseSchema, create(AddEventsResponseSchema, { events })],
          [ListEventsResponseSchema, create(ListEventsResponseSchema, { events })],
          [GetSessionEventsResponseSchema, create(GetSessionEventsResponseSchema, { events, nextPageToken, headSeq })],
        ];
        for (const [desc, message] of messages)
          expect(utf8(jsonResponseEncoder(desc)(message))).toBe(utf8(reference(desc, message)));
      }),
      { numRuns: Math.ceil(RUNS / 4) },
    );
  });

  it("encodes any other response by reflection", () => {
    const message = create(GetSessionResponseSchema, {
      session: { sessionId: "s", appName: "a", userId: "u", state: { k: 1 } },
    });
    expect(utf8(jsonResponseEncoder(GetSessionResponseSchema)(message))).toBe(
      reference(GetSessionResponseSchema, message),
    );
  });
});
