import { hash } from "node:crypto";
import stableStringify from "safe-stable-stringify";
import type { JsonObject, JsonValue, StateChange } from "./types.js";

/**
 * Identity of an event's payload for idempotent retries: a hash of the
 * canonical JSON (sorted keys) of event_type, content and metadata. The
 * timestamp is left out on purpose: a retry that lets the server stamp the
 * time again is still the same event. So are the trace context fields
 * (`trace_id`, `span_id`), which the server fills in from a `traceparent`
 * header: a retry runs in a new span, yet it is the same event. The state
 * change is part of the identity; an event without one hashes as before
 * state existed, and one with a delta alone as before removals existed, so
 * stored fingerprints stay valid.
 */
export function eventFingerprint(
  eventType: string,
  content: JsonValue,
  metadata: JsonObject,
  state: StateChange = {},
): string {
  let identity = metadata;
  if ("trace_id" in metadata || "span_id" in metadata) {
    const { trace_id: _trace, span_id: _span, ...rest } = metadata;
    identity = rest;
  }
  const { stateDelta, stateRemovals, stateNullsAreValues } = state;
  const parts: unknown[] = [eventType, content, identity];
  if (stateRemovals || stateNullsAreValues) parts.push(stateDelta ?? null, stateRemovals ?? [], !!stateNullsAreValues);
  else if (stateDelta) parts.push(stateDelta);
  const canonical = stableStringify(parts) ?? "";
  // One-shot hash: no Hash object per event (~0.35 against ~0.9 µs for createHash().update().digest()).
  return hash("sha256", canonical, "base64url");
}
