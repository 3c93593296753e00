/** fast-check arbitraries shared by the property tests of the wire encoders and decoders. */
import { ScalarType, type DescField, type DescMessage, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
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
    stateRemovals: fc.option(fc.array(text, { minLength: 1, maxLength: 3 }), { nil: undefined }),
    stateNullsAreValues: fc.option(fc.constant(true), { nil: undefined }),
  });
}

/** A value of a flat request's scalar field, over the field's whole range; strings from `text`. */
export function scalarValue(
  field: DescField & { fieldKind: "scalar" },
  text: fc.Arbitrary<string>,
): fc.Arbitrary<unknown> {
  switch (field.scalar) {
    case ScalarType.STRING:
      return text;
    case ScalarType.BOOL:
      return fc.boolean();
    case ScalarType.INT32:
    case ScalarType.SINT32:
    case ScalarType.SFIXED32:
      return fc.integer();
    case ScalarType.UINT32:
    case ScalarType.FIXED32:
      return fc.nat({ max: 2 ** 32 - 1 });
    case ScalarType.UINT64:
    case ScalarType.FIXED64:
      return fc.bigInt({ min: 0n, max: 2n ** 64n - 1n });
    default:
      return fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n });
  }
}

/** Any message of a flat request type (scalars and lists of strings), each field set or not. */
export function flatMessage(desc: DescMessage, text: fc.Arbitrary<string>): fc.Arbitrary<Record<string, unknown>> {
  const fields: Record<string, fc.Arbitrary<unknown>> = {};
  for (const field of desc.fields)
    fields[field.localName] =
      field.fieldKind === "scalar" ? scalarValue(field, text) : fc.array(text, { maxLength: 3 });
  return fc.record(fields, { requiredKeys: [] });
}
