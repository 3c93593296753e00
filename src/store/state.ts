/**
 * Session state rules every driver shares (ADK's model): how a state delta
 * splits into the session's, the user's and the app's state, how a change
 * applies, and the caps a state may not pass. Drivers apply the changes
 * inside their append (or update) step, so a refused step changes no state.
 */
import { invalidArgument, type MemoryError } from "../errors.js";
import type { JsonObject, JsonValue, SharedState, StateChange } from "./types.js";

/** Prefix of keys that go to the app-wide state. */
export const APP_PREFIX = "app:";
/** Prefix of keys that go to the user's state, shared by every session of that app and user. */
export const USER_PREFIX = "user:";
/** Prefix of keys that are never stored. */
export const TEMP_PREFIX = "temp:";

/** Most keys one state (a session's, a user's or an app's) may hold. */
export const MAX_STATE_KEYS = 1000;
/**
 * Most bytes one state may hold: the sum over its keys of the key's UTF-8
 * bytes and its value's compact JSON bytes (PostgreSQL measures its own JSON
 * text, which may differ by a space per member).
 */
export const MAX_STATE_BYTES = 1024 * 1024;

/** Changes to one state: key (without prefix) to its new value (null among them), or undefined to delete it. */
export type StateChanges = Map<string, JsonValue | undefined>;

/** A state delta split by the state it changes. */
export interface ScopedChanges {
  session: StateChanges;
  user: StateChanges;
  app: StateChanges;
}

/** Sets one change of a prefixed key in the scope its prefix names (temp: keys go nowhere). */
function setScoped(changes: ScopedChanges, key: string, value: JsonValue | undefined): void {
  if (key.startsWith(APP_PREFIX)) changes.app.set(key.slice(APP_PREFIX.length), value);
  else if (key.startsWith(USER_PREFIX)) changes.user.set(key.slice(USER_PREFIX.length), value);
  else if (!key.startsWith(TEMP_PREFIX)) changes.session.set(key, value);
}

/**
 * Splits a stored change (no temp: keys) by prefix; the user and app keys
 * lose their prefix. Removals come first, so the delta's change of a key
 * wins; a null in the delta deletes its key unless stateNullsAreValues.
 */
export function splitStateChange(change: StateChange | undefined): ScopedChanges {
  const changes: ScopedChanges = { session: new Map(), user: new Map(), app: new Map() };
  if (!change) return changes;
  for (const key of change.stateRemovals ?? []) setScoped(changes, key, undefined);
  const nullDeletes = !change.stateNullsAreValues;
  for (const [key, value] of Object.entries(change.stateDelta ?? {})) {
    setScoped(changes, key, value === null && nullDeletes ? undefined : value);
  }
  return changes;
}

/** True when an event or an update carries a state change (a delta or removals). */
export function hasStateChange(change: StateChange): boolean {
  return change.stateDelta !== undefined || change.stateRemovals !== undefined;
}

/** Copies the state change fields that are set from `from` onto `to` (an event as stored); returns `to`. */
export function copyStateChange<T extends StateChange>(to: T, from: StateChange): T {
  if (from.stateDelta) to.stateDelta = from.stateDelta;
  if (from.stateRemovals) to.stateRemovals = from.stateRemovals;
  if (from.stateNullsAreValues) to.stateNullsAreValues = true;
  return to;
}

/** Adds `next`'s changes after `into`'s (a later change of a key wins), for the deltas of a batch applied in order. */
export function addChanges(into: ScopedChanges, next: ScopedChanges): ScopedChanges {
  for (const scope of ["session", "user", "app"] as const) {
    for (const [key, value] of next[scope]) into[scope].set(key, value);
  }
  return into;
}

/** True when the changes touch no state. */
export function noChanges(changes: ScopedChanges): boolean {
  return changes.session.size === 0 && changes.user.size === 0 && changes.app.size === 0;
}

/** Bytes a key and its value count towards MAX_STATE_BYTES. */
export function entryBytes(key: string, value: JsonValue): number {
  return Buffer.byteLength(key, "utf8") + Buffer.byteLength(JSON.stringify(value), "utf8");
}

/** Bytes a whole state counts towards MAX_STATE_BYTES. */
export function stateBytes(state: JsonObject): number {
  let bytes = 0;
  for (const [key, value] of Object.entries(state)) bytes += entryBytes(key, value);
  return bytes;
}

/** The state after the changes (a new object; `state` is left as it was). */
export function applyChanges(state: JsonObject, changes: StateChanges): JsonObject {
  const next: JsonObject = { ...state };
  for (const [key, value] of changes) {
    if (value === undefined) delete next[key];
    else next[key] = value;
  }
  return next;
}

/** Which state a cap was passed in, as the error names it. */
export type StateScope = "session" | "user" | "app";

/** INVALID_ARGUMENT for a change that would pass a state cap; `field` is the request field that carried it. */
export function stateTooLarge(field: string, scope: StateScope, keys: number, bytes: number): MemoryError {
  if (keys > MAX_STATE_KEYS)
    return invalidArgument(field, `would make the ${scope} state hold ${keys} keys (at most ${MAX_STATE_KEYS})`);
  return invalidArgument(field, `would make the ${scope} state hold ${bytes} bytes (at most ${MAX_STATE_BYTES})`);
}

/** Throws stateTooLarge when a state passes a cap. */
export function checkStateCaps(field: string, scope: StateScope, state: JsonObject): void {
  const keys = Object.keys(state).length;
  const bytes = stateBytes(state);
  if (keys > MAX_STATE_KEYS || bytes > MAX_STATE_BYTES) throw stateTooLarge(field, scope, keys, bytes);
}

/** The merged state as ADK shows it: the session's keys, then the app's as "app:<key>" and the user's as "user:<key>". */
export function mergeState(session: JsonObject, shared: SharedState): JsonObject {
  const merged: JsonObject = { ...session };
  for (const [key, value] of Object.entries(shared.app)) merged[APP_PREFIX + key] = value;
  for (const [key, value] of Object.entries(shared.user)) merged[USER_PREFIX + key] = value;
  return merged;
}
