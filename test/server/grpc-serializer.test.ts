/**
 * The gRPC edge writes responses holding events from the events' cached
 * bytes; the result must be exactly protobuf-es' toBinary of the response.
 */
import { create, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  AddEventResponseSchema,
  AddEventsResponseSchema,
  GetSessionEventsResponseSchema,
  EventSchema,
  MemoryService,
  type Event,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { scalarValue } from "../support/arbitraries.js";
import { CallsInFlight } from "../../src/service/calls-in-flight.js";
import { grpcMemoryService } from "../../src/server/grpc-adapter.js";
import type { CallGuard } from "../../src/service/guard/index.js";

const guard = { handler: () => () => Promise.resolve(undefined) } as unknown as CallGuard;
const { definition } = grpcMemoryService(guard, () => {}, new CallsInFlight());
const serialize = (method: string, message: unknown) =>
  Buffer.from(definition[method].responseSerialize(message as never)).toString("hex");

/** An event whose encoding is `contentBytes` long or so: lengths of 1, 2 and 3 varint bytes. */
function event(seq: number, contentBytes: number): Event {
  return create(EventSchema, {
    eventId: `e-${seq}`,
    eventType: "user_message",
    content: { kind: { case: "stringValue", value: "x".repeat(contentBytes) } },
    timestamp: timestampFromMs(1_700_000_000_123 + seq),
    seq: BigInt(seq),
    sessionId: "s",
  });
}

describe("gRPC response serializers", () => {
  const sizes = [0, 50, 100, 200, 20_000, 70_000];

  it("AddEvent: toBinary's bytes, with and without an event", () => {
    for (const size of sizes) {
      const message = create(AddEventResponseSchema, { event: event(1, size) });
      expect(serialize("AddEvent", message)).toBe(
        Buffer.from(toBinary(AddEventResponseSchema, message)).toString("hex"),
      );
    }
    const empty = create(AddEventResponseSchema, {});
    expect(serialize("AddEvent", empty)).toBe("");
  });

  it("AddEvents and GetSessionEvents: toBinary's bytes, events first then the other fields", () => {
    const events = sizes.map((size, i) => event(i + 1, size));
    const batch = create(AddEventsResponseSchema, { events });
    expect(serialize("AddEvents", batch)).toBe(Buffer.from(toBinary(AddEventsResponseSchema, batch)).toString("hex"));
    for (const page of [
      create(GetSessionEventsResponseSchema, { events, headSeq: 99n, nextPageToken: "tok" }),
      create(GetSessionEventsResponseSchema, { headSeq: 3n }),
      create(GetSessionEventsResponseSchema, {}),
    ]) {
      expect(serialize("GetSessionEvents", page)).toBe(
        Buffer.from(toBinary(GetSessionEventsResponseSchema, page)).toString("hex"),
      );
    }
  });

  /** Unary methods whose response holds Event(s) in field 1 and other fields: found from the descriptors. */
  const withOtherFields = MemoryService.methods.filter(
    (m) =>
      m.methodKind === "unary" &&
      m.output.fields.length > 1 &&
      m.output.fields.some((f) => f.number === 1 && f.message?.typeName === EventSchema.typeName),
  );

  it("every events response with other scalar fields: toBinary's bytes for any values of them, set or not", () => {
    expect(withOtherFields.map((m) => m.name)).toContain("GetSessionEvents");
    for (const method of withOtherFields) {
      const desc: DescMessage = method.output;
      const scalars: Record<string, fc.Arbitrary<unknown>> = {};
      for (const f of desc.fields)
        if (f.fieldKind === "scalar" && !f.oneof)
          scalars[f.localName] = scalarValue(f, fc.string({ unit: "grapheme", maxLength: 12 }));
      fc.assert(
        fc.property(fc.record(scalars, { requiredKeys: [] }), fc.nat(3), (init, n) => {
          const message = create(desc, {
            ...init,
            events: Array.from({ length: n }, (_, i) => event(i + 1, 10 * i)),
          } as never);
          expect(serialize(method.name, message)).toBe(Buffer.from(toBinary(desc, message)).toString("hex"));
        }),
        { numRuns: 300 },
      );
    }
  });
});
