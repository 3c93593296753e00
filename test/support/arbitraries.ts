/** fast-check arbitraries shared by the property tests of the wire encoders and decoders. */
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import fc from "fast-check";

/**
 * Any JSON value of small depth and size, with strings drawn from `text`;
 * numbers include negative zero, and ±Infinity with `infinities` (a Value can
 * carry them on the wire, JSON cannot).
 */
export function jsonValue(text: fc.Arbitrary<string>, { infinities = false } = {}): fc.Arbitrary<JsonValue> {
  return fc.letrec<{ value: JsonValue }>((tie) => ({
    value: fc.oneof(
      { depthSize: "small", withCrossShrink: true },
      fc.constant(null),
      fc.boolean(),
      fc.double({ noNaN: true, noDefaultInfinity: !infinities }),
      fc.integer(),
      text,
      fc.array(tie("value"), { maxLength: 4 }),
      fc.dictionary(text, tie("value"), { maxKeys: 4 }),
    ),
  })).value;
}

/**
 * A stored event as a store returns it, every field drawn (strings from
 * `text`): the input of the wire encoders' property tests (binary and JSON).
 */
export function storedEvent(text: fc.Arbitrary<string>) {
  const json = jsonValue(text);
  const jsonObject = fc.dictionary(text, json, { maxKeys: 5 }) as fc.Arbitrary<JsonObject>;
  return fc.record({
    sessionId: text,
    seq: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2 ** 40 }), fc.constant(Number.MAX_SAFE_INTEGER)),
    eventId: text,
    eventType: text,
    content: json,
    metadata: jsonObject,
    // Years 1..9999, before and after 1970, with and without milliseconds.
    timestamp: fc.integer({ min: -62135596800000, max: 253402300799999 }),
    stateDelta: fc.option(jsonObject, { nil: undefined }),
  });
}
