/**
 * The hand-written Event encoder must write exactly what protobuf-es'
 * reflective toBinary writes, for every event the service can produce
 * (and for odd ones it never produces), and decode back to the same event.
 */
import { create, fromBinary, fromJson, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs, ValueSchema } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { EventSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { encodeEvent } from "../../src/server/fastpath/event-encoding.js";
import { toWireEvent } from "../../src/service/convert.js";
import { storedEvent as storedEventArbitrary } from "../support/arbitraries.js";

const text = fc.string({ unit: "binary", maxLength: 40 });
const storedEvent = storedEventArbitrary(text);

describe("toWireEvent", () => {
  it("builds what protobuf-es' create() and fromJson() build", () => {
    fc.assert(
      fc.property(storedEvent, (stored) => {
        const reference = create(EventSchema, {
          eventId: stored.eventId,
          eventType: stored.eventType,
          content: fromJson(ValueSchema, stored.content),
          metadata: stored.metadata,
          timestamp: timestampFromMs(stored.timestamp),
          seq: BigInt(stored.seq),
          sessionId: stored.sessionId,
          stateDelta: stored.stateDelta,
          stateRemovals: stored.stateRemovals,
          stateNullsAreValues: stored.stateNullsAreValues,
        });
        expect(toWireEvent(stored)).toEqual(reference);
      }),
      { numRuns: Number(process.env.ENCODING_RUNS ?? 2000) },
    );
  });
});

describe("encodeEvent", () => {
  it("writes toBinary's bytes for any stored event, and they decode to the same event", () => {
    fc.assert(
      fc.property(storedEvent, (stored) => {
        const event = toWireEvent(stored);
        const ours = encodeEvent(event);
        expect(Buffer.from(ours).toString("hex")).toBe(Buffer.from(toBinary(EventSchema, event)).toString("hex"));
        expect(fromBinary(EventSchema, ours)).toEqual(fromBinary(EventSchema, toBinary(EventSchema, event)));
      }),
      { numRuns: Number(process.env.ENCODING_RUNS ?? 2000) },
    );
  });

  it("handles what a stored event never has: absent content, metadata and timestamp; an unset Value; a seq past 2^53", () => {
    const cases = [
      create(EventSchema, {}),
      create(EventSchema, { eventId: "e", content: create(EventSchema, {}).content }),
      create(EventSchema, {
        eventId: "e",
        content: { $typeName: "google.protobuf.Value", kind: { case: undefined } } as never,
      }),
      create(EventSchema, { sessionId: "s", seq: 2n ** 63n + 5n }),
      create(EventSchema, { timestamp: { seconds: 0n, nanos: 0 } as never, metadata: {} }),
    ];
    for (const event of cases)
      expect(Buffer.from(encodeEvent(event)).toString("hex")).toBe(
        Buffer.from(toBinary(EventSchema, event)).toString("hex"),
      );
  });
});
