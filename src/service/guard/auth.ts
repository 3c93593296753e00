/** Authentication: the API key in `authorization` becomes the call's principal. */
import type { Principal } from "../../auth/api-keys.js";
import type { Authenticator } from "../../auth/index.js";
import { MemoryError } from "../../errors.js";
import type { Metrics } from "../metrics.js";
import type { StepFactory } from "./step.js";

/** UNAUTHENTICATED (counted in engram_auth_failures_total) unless the call carries a valid key; absent while auth is off. */
export const authenticate: StepFactory = (_plan, { authenticator, metrics }) => {
  if (!authenticator) return undefined;
  return (next) => async (call) => {
    call.principal = await principalOf(authenticator, metrics, call.context.authorization);
    return next(call);
  };
};

/** The key's principal; UNAUTHENTICATED, counted in engram_auth_failures_total, for a missing, unknown or revoked key. */
export async function principalOf(
  authenticator: Authenticator,
  metrics: Metrics,
  authorization: string | undefined,
): Promise<Principal> {
  try {
    return await authenticator.authenticate(authorization);
  } catch (err) {
    if (err instanceof MemoryError && err.code === "UNAUTHENTICATED") metrics.authFailures.inc();
    throw err;
  }
}
