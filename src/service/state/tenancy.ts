/**
 * Session state under scoped API keys: a key bound to one user changes that
 * user's sessions and user state, but never the app-wide state ("app:" keys),
 * which every other user's sessions read.
 */
import type {
  AddEventRequest,
  AddEventsRequest,
  UpdateSessionRequest,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { MemoryError } from "../../errors.js";
import { APP_PREFIX } from "../../store/state.js";
import type { JsonObject } from "../../store/types.js";

/** The state keys a write request changes (its deltas' and its removals'), with the field each list is at. */
function changedKeysOf(req: AddEventRequest | AddEventsRequest | UpdateSessionRequest): Array<[string, string[]]> {
  const of = (prefix: string, change: { stateDelta?: JsonObject; stateRemovals: string[] } | undefined) =>
    change
      ? [
          [`${prefix}state_delta`, Object.keys(change.stateDelta ?? {})] as [string, string[]],
          [`${prefix}state_removals`, change.stateRemovals] as [string, string[]],
        ]
      : [];
  switch (req.$typeName) {
    case "engram.v1.AddEventRequest":
      return of("event.", req.event);
    case "engram.v1.AddEventsRequest":
      return req.events.flatMap((e, i) => of(`events[${i}].`, e));
    case "engram.v1.UpdateSessionRequest":
      return of("", req);
  }
}

/** PERMISSION_DENIED when a key bound to a user would change (or remove) app-wide state. */
export function refuseAppStateForUserKey(req: AddEventRequest | AddEventsRequest | UpdateSessionRequest): void {
  for (const [field, keys] of changedKeysOf(req)) {
    for (const key of keys) {
      if (key.startsWith(APP_PREFIX)) {
        throw new MemoryError(
          "PERMISSION_DENIED",
          `${field}: an API key bound to one user may not change app-wide state (key ${JSON.stringify(key)})`,
          {},
          {
            field,
            reason: "APP_STATE_NOT_ALLOWED",
          },
        );
      }
    }
  }
}
