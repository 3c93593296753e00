/**
 * Validation of state deltas (EventInput.state_delta, UpdateSession's
 * state_delta): keys, nesting, size; temp: keys are dropped here, so no store
 * ever sees them.
 */
import { invalidArgument } from "../../errors.js";
import { APP_PREFIX, TEMP_PREFIX, USER_PREFIX } from "../../store/state.js";
import type { JsonObject } from "../../store/types.js";
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
    if (key === "") throw invalidArgument(field, "keys must not be empty");
    if (Buffer.byteLength(key, "utf8") > MAX_STATE_KEY_BYTES)
      throw invalidArgument(field, `key ${JSON.stringify(key.slice(0, 32))}... is over ${MAX_STATE_KEY_BYTES} bytes`);
    for (const prefix of [APP_PREFIX, USER_PREFIX, TEMP_PREFIX]) {
      if (key === prefix) throw invalidArgument(field, `key ${JSON.stringify(key)} needs a name after the prefix`);
    }
    if (key.startsWith(TEMP_PREFIX)) continue;
    // A state is a JSON object: "__proto__" would become its prototype rather than one of its keys in JavaScript.
    if (key.replace(/^(app|user):/, "") === "__proto__")
      throw invalidArgument(field, `key ${JSON.stringify(key)} is reserved`);
    kept[key] = value;
    empty = false;
  }
  return empty ? undefined : kept;
}
