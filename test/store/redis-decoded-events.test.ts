/**
 * The Redis store's cache of decoded events (src/store/redis/codec.ts): one
 * object per stored event while its bytes are unchanged, a new one when they
 * change (a session recreated under its id), and bounded in bytes and
 * events however the runs come.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DecodedEvents, encodeEvent, type EncodedEvent } from "../../src/store/redis/codec.js";

function encoded(seq: number, content: string): Buffer {
  return Buffer.from(
    encodeEvent({
      eventType: "user_message",
      eventId: `e${seq}`,
      content,
      metadata: {},
      timestamp: 1_700_000_000_000 + seq,
      fingerprint: "",
    }),
  );
}

/** The run's events as views of one buffer, as a reply or a notice hands them over. */
function viewsOf(run: Array<{ seq: number; content: string }>): EncodedEvent[] {
  const parts = run.map(({ seq, content }) => encoded(seq, content));
  const whole = Buffer.concat(parts);
  let offset = 0;
  return run.map(({ seq }, i) => {
    const view = whole.subarray(offset, offset + parts[i].length);
    offset += parts[i].length;
    return { seq, encoded: view };
  });
}

/** What the LRU counts against what its sessions hold. */
function sizes(decoded: DecodedEvents): { counted: number; held: number } {
  const sessions = (
    decoded as unknown as {
      sessions: {
        calculatedSize: number;
        entries(): IterableIterator<[string, { bySeq: Map<number, { encoded: Buffer }> }]>;
      };
    }
  ).sessions;
  let held = 0;
  for (const [sessionId, { bySeq }] of sessions.entries()) {
    held += 200 + 2 * sessionId.length;
    for (const { encoded } of bySeq.values()) held += 200 + 2 * encoded.length;
  }
  return { counted: sessions.calculatedSize, held };
}

describe("DecodedEvents", () => {
  it("hands out one object per event while its bytes are the same, and decodes changed bytes anew", () => {
    const decoded = new DecodedEvents();
    const first = decoded.decodeRun(
      "s1",
      viewsOf([
        { seq: 1, content: "a" },
        { seq: 2, content: "b" },
      ]),
    );
    expect(first.map((e) => e.content)).toEqual(["a", "b"]);
    const again = decoded.decodeRun(
      "s1",
      viewsOf([
        { seq: 1, content: "a" },
        { seq: 2, content: "b" },
      ]),
    );
    expect(again[0]).toBe(first[0]);
    expect(again[1]).toBe(first[1]);
    // The same session and seq with other bytes (recreated under its id): not the old object.
    const recreated = decoded.decodeRun("s1", viewsOf([{ seq: 1, content: "c" }]));
    expect(recreated[0]).not.toBe(first[0]);
    expect(recreated[0].content).toBe("c");
    // Another session's seq 1 is its own.
    expect(decoded.decodeRun("s2", viewsOf([{ seq: 1, content: "a" }]))[0]).not.toBe(first[0]);
  });

  it("keeps a copy of the bytes, not the reply buffer they were a view of", () => {
    const decoded = new DecodedEvents();
    const run = viewsOf([{ seq: 1, content: "kept" }]);
    const event = decoded.decodeRun("s1", run)[0];
    run[0].encoded.fill(0x20); // the reply's buffer reused for something else
    expect(decoded.decodeRun("s1", viewsOf([{ seq: 1, content: "kept" }]))[0]).toBe(event);
  });

  it("keeps a session's newest-decoded events when it holds too many", () => {
    const decoded = new DecodedEvents();
    for (let first = 1; first <= 5000; first += 500) {
      decoded.decodeRun("long", viewsOf(Array.from({ length: 500 }, (_, i) => ({ seq: first + i, content: "x" }))));
    }
    const held = Array.from({ length: 5000 }, (_, i) => i + 1).filter((seq) => decoded.has("long", seq));
    // At most 4096, cut to 7/8 of that at once when over: the newest decoded, none older missing.
    expect(held.length).toBeLessThanOrEqual(4096);
    expect(held.length).toBeGreaterThanOrEqual(3584);
    expect(held).toEqual(Array.from({ length: held.length }, (_, i) => 5001 - held.length + i));
  });

  it("counts exactly what it holds, and stays within its bytes, for any runs", () => {
    const run = fc.record({
      session: fc.constantFrom("s1", "s2", "a-longer-session-id"),
      events: fc.array(
        fc.record({ seq: fc.integer({ min: 1, max: 40 }), size: fc.constantFrom(1, 50, 1000, 300_000) }),
        { maxLength: 30 },
      ),
    });
    fc.assert(
      fc.property(fc.array(run, { maxLength: 25 }), (runs) => {
        const decoded = new DecodedEvents();
        for (const { session, events } of runs) {
          const unique = [...new Map(events.map((e) => [e.seq, e])).values()];
          const out = decoded.decodeRun(
            session,
            viewsOf(unique.map(({ seq, size }) => ({ seq, content: "y".repeat(size) }))),
          );
          expect(out.map((e) => e.seq)).toEqual(unique.map((e) => e.seq));
          const { counted, held } = sizes(decoded);
          expect(counted).toBe(held);
          expect(counted).toBeLessThanOrEqual(16 * 1024 * 1024);
        }
      }),
      { numRuns: 60 },
    );
  });
});
