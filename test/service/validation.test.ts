/** The event size limit: text events skip serialization when they are surely under it, and are never let through over it. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DEFAULT_SERVICE_LIMITS } from "../../src/service/limits.js";
import { checkEventSize } from "../../src/service/validation.js";

const jsonBytes = (content: unknown, metadata: object) =>
  Buffer.byteLength(JSON.stringify(content) ?? "null") + Buffer.byteLength(JSON.stringify(metadata));
const limits = (maxEventBytes: number) => ({ ...DEFAULT_SERVICE_LIMITS, maxEventBytes });

describe("checkEventSize", () => {
  it("refuses exactly the events whose content and metadata take more bytes of JSON than the limit", () => {
    const text = fc.oneof(
      fc.string({ unit: "binary", maxLength: 40 }),
      fc.string({ unit: fc.constantFrom("\u0001", "\n", "é", "😀", "\ud800", "a"), maxLength: 40 }),
    );
    fc.assert(
      fc.property(
        text,
        fc.option(fc.dictionary(fc.string({ maxLength: 4 }), fc.string({ maxLength: 8 }), { maxKeys: 2 }), {
          nil: undefined,
        }),
        fc.integer({ min: 1, max: 300 }),
        (content, metadata, max) => {
          const meta = metadata ?? {};
          const over = jsonBytes(content, meta) > max;
          const check = () => checkEventSize("event", content, meta, limits(max));
          if (over)
            expect(check).toThrow(/^event: content and metadata take \d+ bytes of JSON, over the limit of \d+$/);
          else expect(check).not.toThrow();
        },
      ),
      { numRuns: 5000 },
    );
  });

  it("counts six bytes per control character at the edge of the limit", () => {
    // 16 control characters: 96 bytes escaped + 2 quotes + "{}" = 100.
    expect(() => checkEventSize("event", "\u0001".repeat(16), {}, limits(100))).not.toThrow();
    expect(() => checkEventSize("event", "\u0001".repeat(17), {}, limits(105))).toThrow(/take 106 bytes/);
  });
});
