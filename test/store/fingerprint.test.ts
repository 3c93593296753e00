/** Fingerprints are stored with events (Redis, PostgreSQL): the same payload must hash the same across versions. */
import { describe, expect, it } from "vitest";
import { eventFingerprint } from "../../src/store/fingerprint.js";

describe("eventFingerprint", () => {
  it("is sha256 (base64url) of the canonical JSON of type, content and metadata, as stored by earlier versions", () => {
    // Computed with createHash("sha256").update(stableStringify([...])).digest("base64url"), the earlier implementation.
    expect(eventFingerprint("tool_call", { b: [1, null, "é"], a: true }, { z: 1, y: { x: "\n" } })).toBe(
      "ApXf8NsSAqbd8IChcZM4le5ZpbVzw4DG5imLp2kTqKA",
    );
  });

  it("ignores key order and the trace context fields", () => {
    const a = eventFingerprint("user_message", { q: 1, r: 2 }, { k: "v", trace_id: "t", span_id: "s" });
    expect(a).toBe(eventFingerprint("user_message", { r: 2, q: 1 }, { k: "v" }));
    expect(a).not.toBe(eventFingerprint("user_message", { r: 2, q: 1 }, { k: "w" }));
  });

  it("hashes an event with a state delta alone as before removals existed; removals and the nulls flag change it", () => {
    // Computed by the release before removals, for the same event.
    const deltaOnly = eventFingerprint("agent_response", "ok", {}, { stateDelta: { a: null, b: 1 } });
    expect(deltaOnly).toBe("wE8cq53BL_IUSGUa3BAuYj5TSiI2zdOx1zftxGLC1v0");
    const stored = eventFingerprint(
      "agent_response",
      "ok",
      {},
      { stateDelta: { a: null, b: 1 }, stateNullsAreValues: true },
    );
    const removing = eventFingerprint("agent_response", "ok", {}, { stateDelta: { b: 1 }, stateRemovals: ["a"] });
    expect(new Set([deltaOnly, stored, removing]).size).toBe(3);
    expect(eventFingerprint("agent_response", "ok", {}, { stateRemovals: ["a"] })).not.toBe(
      eventFingerprint("agent_response", "ok", {}, { stateRemovals: ["b"] }),
    );
  });
});
