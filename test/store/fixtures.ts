/**
 * What the store suites share besides the suites themselves: events and
 * sessions as the service would make them, and waiting on conditions. Kept
 * apart so that the suites can import them without importing each other.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { expect } from "vitest";
import { MemoryError } from "../../src/errors.js";
import { eventFingerprint } from "../../src/store/fingerprint.js";
import { copyStateChange } from "../../src/store/state.js";
import type { JsonObject, JsonValue, MemoryStore, NewEvent, StateChange } from "../../src/store/types.js";

let counter = 0;

/** A NewEvent as the service would build it; a client-chosen id when `eventId` is given. */
export function newEvent(
  eventType: string,
  content: JsonValue,
  opts: { eventId?: string; metadata?: JsonObject; timestamp?: number } & StateChange = {},
): NewEvent {
  const metadata = opts.metadata ?? {};
  const state = copyStateChange({}, opts);
  const event: NewEvent = {
    eventId: opts.eventId ?? `gen-${process.pid}-${++counter}-${Math.random().toString(36).slice(2)}`,
    eventType,
    content,
    metadata,
    timestamp: opts.timestamp ?? Date.now(),
    fingerprint: opts.eventId ? eventFingerprint(eventType, content, metadata, state) : "",
  };
  return copyStateChange(event, state);
}

/** Creates a session with defaults. */
export async function makeSession(store: MemoryStore, sessionId: string, appName = "app", userId = "user") {
  return store.createSession({ sessionId, appName, userId, metadata: {}, now: Date.now() });
}

/** The MemoryError a call rejects with; fails the test when it resolves. */
export async function rejection(p: Promise<unknown>): Promise<MemoryError> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(MemoryError);
    return err as MemoryError;
  }
  throw new Error("expected a MemoryError, but the call succeeded");
}

/** Polls `check` every 10 ms for up to 5 s. */
export async function waitFor(check: () => boolean, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await sleep(10);
  }
}
