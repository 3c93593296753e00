/** Generated event ids: random version-4 UUIDs, distinct, across refills of the random pool. */
import { describe, expect, it } from "vitest";
import { newEventId } from "../../src/service/event-id.js";

describe("newEventId", () => {
  it("makes distinct RFC 9562 version-4 UUIDs in lower-case hex, past many refills of its pool", () => {
    const ids = Array.from({ length: 20_000 }, newEventId);
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it("spreads every random hex digit over all sixteen values", () => {
    const ids = Array.from({ length: 4000 }, newEventId);
    for (const position of [0, 7, 9, 15, 20, 35]) {
      const seen = new Set(ids.map((id) => id[position]));
      expect(seen.size, `position ${position}`).toBe(16);
    }
    // The variant digit takes exactly 8, 9, a and b.
    expect(new Set(ids.map((id) => id[19]))).toEqual(new Set(["8", "9", "a", "b"]));
  });
});
