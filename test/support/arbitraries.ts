/** fast-check arbitraries shared by the property tests of the wire encoders and decoders. */
import type { JsonValue } from "@bufbuild/protobuf";
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
