/**
 * joinUtf8 (src/server/fastpath/body-buffer.ts): the bytes Buffer.from gives for the
 * joined text, whatever the pieces, and no body overwritten by a later one
 * cut from the same slab.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { joinUtf8, type Utf8Piece } from "../../src/server/fastpath/body-buffer.js";

const text = fc.oneof(
  fc.string({ maxLength: 60 }),
  fc.string({ unit: "grapheme", maxLength: 60 }),
  fc.string({ unit: "binary", maxLength: 200 }),
);
/** A piece, with the text it stands for. */
const piece: fc.Arbitrary<{ piece: Utf8Piece; text: string }> = fc.oneof(
  text.map((t) => ({ piece: t, text: t })),
  text.map((t) => ({ piece: Buffer.from(t), text: t })),
);

describe("joinUtf8", () => {
  it("writes what Buffer.from writes for each piece, in order", () => {
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 30 }), (pieces) => {
        const joined = joinUtf8(pieces.map((p) => p.piece));
        expect(Buffer.compare(joined, Buffer.concat(pieces.map((p) => Buffer.from(p.text))))).toBe(0);
      }),
      { numRuns: 2000 },
    );
  });

  it("leaves every earlier body as it was, across slabs and past the slab's size limit", () => {
    const bodies: Array<{ body: Buffer; expected: Buffer }> = [];
    // 5 kB bodies through several 128 kB slabs, with bodies too large for a slab among them.
    for (let i = 0; i < 100; i++) {
      const size = i % 10 === 9 ? 40_000 : 5_000 + i;
      const fill = String.fromCharCode(97 + (i % 26));
      const expected = Buffer.from(`{"n":${i},"text":"${fill.repeat(size)}"}`);
      bodies.push({ body: joinUtf8([`{"n":${i},`, Buffer.from('"text":"'), fill.repeat(size), '"}']), expected });
    }
    for (const { body, expected } of bodies) expect(Buffer.compare(body, expected)).toBe(0);
  });
});
