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

/** The state deltas a write request carries, with the field each one is at. */
function deltasOf(
  req: AddEventRequest | AddEventsRequest | UpdateSessionRequest,
): Array<[string, JsonObject | undefined]> {
  switch (req.$typeName) {
    case "engram.v1.AddEventRequest":
      return [["event.state_delta", req.event?.stateDelta]];
    case "engram.v1.AddEventsRequest":
      return req.events.map((e, i) => [`events[${i}].state_delta`, e.stateDelta]);
    case "engram.v1.UpdateSessionRequest":
      return [["state_delta", req.stateDelta]];
  }
}

/** PERMISSION_DENIED when a key bound to a user would change app-wide state. */
export function refuseAppStateForUserKey(req: AddEventRequest | AddEventsRequest | UpdateSessionRequest): void {
  for (const [field, delta] of deltasOf(req)) {
    if (!delta) continue;
    for (const key of Object.keys(delta)) {
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
