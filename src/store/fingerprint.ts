import { createHash } from "node:crypto";
import stableStringify from "safe-stable-stringify";
import type { JsonObject, JsonValue } from "./types.js";

/**
 * Identity of an event's payload for idempotent retries: a hash of the
 * canonical JSON (sorted keys) of event_type, content and metadata. The
 * timestamp is left out on purpose: a retry that lets the server stamp the
 * time again is still the same event.
 */
export function eventFingerprint(eventType: string, content: JsonValue, metadata: JsonObject): string {
  const canonical = stableStringify([eventType, content, metadata]) ?? "";
  return createHash("sha256").update(canonical).digest("base64url");
}
