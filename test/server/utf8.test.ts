/** Finding where bytes stop being UTF-8 (src/server/utf8.ts), for the offsets INVALID_ARGUMENT answers quote. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { invalidUtf8Offset } from "../../src/server/utf8.js";

describe("invalidUtf8Offset", () => {
  it.each([
    ["41 ff 42", 1, "a byte that never appears in UTF-8"],
    ["41 80", 1, "a continuation byte without a lead"],
    ["41 e2 41", 1, "a three-byte lead followed by ASCII"],
    ["41 42 e2 82", 2, "the body ends inside a character"],
    ["ed a0 80", 0, "an encoded surrogate"],
    ["c0 af", 0, "an overlong encoding"],
    ["f4 90 80 80", 0, "a code point past U+10FFFF"],
    ["f0 9f 92 a5 41 ff", 5, "a bad byte after a four-byte character"],
  ])("%s -> %i (%s)", (hex, offset) => {
    expect(invalidUtf8Offset(Buffer.from(hex.replaceAll(" ", ""), "hex"))).toBe(offset);
  });

  it("is undefined for any UTF-8, U+FFFD included", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), (text) => {
        expect(invalidUtf8Offset(Buffer.from(text + "\uFFFD"))).toBeUndefined();
      }),
    );
  });

  it("points at the first bad byte whatever valid text surrounds it", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme" }), fc.string({ unit: "grapheme" }), (before, after) => {
        const prefix = Buffer.from(before);
        expect(invalidUtf8Offset(Buffer.concat([prefix, Buffer.from([0xff]), Buffer.from(after)]))).toBe(prefix.length);
      }),
    );
  });
});
