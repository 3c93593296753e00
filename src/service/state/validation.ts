/**
 * Validation of state changes (EventInput's and UpdateSession's
 * state_delta, state_removals and state_nulls_are_values): keys, nesting,
 * size; temp: keys are dropped here, so no store ever sees them.
 */
import { invalidArgument } from "../../errors.js";
import { APP_PREFIX, MAX_STATE_KEYS, TEMP_PREFIX, USER_PREFIX } from "../../store/state.js";
import type { JsonObject, StateChange } from "../../store/types.js";
import { checkJson } from "../validation.js";

/** Most bytes of compact JSON one state delta may take (before temp: keys are dropped). */
export const MAX_STATE_DELTA_BYTES = 64 * 1024;
/** Most UTF-8 bytes of one state key, prefix included. */
export const MAX_STATE_KEY_BYTES = 256;

/**
 * The delta to store: checked, without its temp: keys; undefined when
 * nothing is left to apply. A null value stays: it deletes its key.
 */
export function parseStateDelta(
  field: string,
  delta: JsonObject | undefined,
  maxDepth: number,
): JsonObject | undefined {
  if (!delta) return undefined;
  checkJson(field, delta, maxDepth);
  const bytes = Buffer.byteLength(JSON.stringify(delta), "utf8");
  if (bytes > MAX_STATE_DELTA_BYTES)
    throw invalidArgument(field, `takes ${bytes} bytes of JSON, over the limit of ${MAX_STATE_DELTA_BYTES}`);
  const kept: JsonObject = {};
  let empty = true;
  for (const [key, value] of Object.entries(delta)) {
    if (!keptStateKey(field, key)) continue;
    kept[key] = value;
    empty = false;
  }
  return empty ? undefined : kept;
}

/** Checks one state key; false for a temp: key, which is dropped. */
function keptStateKey(field: string, key: string): boolean {
  if (key === "") throw invalidArgument(field, "keys must not be empty");
  if (Buffer.byteLength(key, "utf8") > MAX_STATE_KEY_BYTES)
    throw invalidArgument(field, `key ${JSON.stringify(key.slice(0, 32))}... is over ${MAX_STATE_KEY_BYTES} bytes`);
  for (const prefix of [APP_PREFIX, USER_PREFIX, TEMP_PREFIX]) {
    if (key === prefix) throw invalidArgument(field, `key ${JSON.stringify(key)} needs a name after the prefix`);
  }
  if (key.startsWith(TEMP_PREFIX)) return false;
  // A state is a JSON object: "__proto__" would become its prototype rather than one of its keys in JavaScript.
  if (key.replace(/^(app|user):/, "") === "__proto__")
    throw invalidArgument(field, `key ${JSON.stringify(key)} is reserved`);
  return true;
}

/** The state fields of a request or an event input, as the wire carries them. */
export interface WireStateChange {
  stateDelta?: JsonObject;
  stateRemovals: readonly string[];
  stateNullsAreValues: boolean;
}

/**
 * The state change to store: the delta as parseStateDelta keeps it, the
 * removals checked as its keys are (at most MAX_STATE_KEYS, none twice, none
 * also in the delta; temp: keys dropped), and stateNullsAreValues kept only
 * when the delta holds a null, the one case where it changes anything.
 * `prefix` is "" or the event's field with a dot ("events[2].").
 */
export function parseStateChange(prefix: string, wire: WireStateChange, maxDepth: number): StateChange {
  const change: StateChange = {};
  const delta = parseStateDelta(`${prefix}state_delta`, wire.stateDelta, maxDepth);
  if (delta) change.stateDelta = delta;
  const field = `${prefix}state_removals`;
  if (wire.stateRemovals.length > MAX_STATE_KEYS)
    throw invalidArgument(field, `lists ${wire.stateRemovals.length} keys, over the limit of ${MAX_STATE_KEYS}`);
  const removals: string[] = [];
  const seen = new Set<string>();
  wire.stateRemovals.forEach((key, i) => {
    const at = `${field}[${i}]`;
    if (!keptStateKey(at, key)) return;
    if (seen.has(key)) throw invalidArgument(at, `key ${JSON.stringify(key)} is listed twice`);
    if (wire.stateDelta && Object.hasOwn(wire.stateDelta, key))
      throw invalidArgument(at, `key ${JSON.stringify(key)} is also in ${prefix}state_delta`);
    seen.add(key);
    removals.push(key);
  });
  if (removals.length > 0) change.stateRemovals = removals;
  if (wire.stateNullsAreValues && delta && Object.values(delta).includes(null)) change.stateNullsAreValues = true;
  return change;
}
