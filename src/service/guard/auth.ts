/** Authentication: the API key in `authorization` becomes the call's principal. */
import { MemoryError } from "../../errors.js";
import type { StepFactory } from "./step.js";

/** UNAUTHENTICATED (counted in engram_auth_failures_total) unless the call carries a valid key; absent while auth is off. */
export const authenticate: StepFactory = (_plan, { authenticator, metrics }) => {
  if (!authenticator) return undefined;
  return (next) => async (call) => {
    try {
      call.principal = await authenticator.authenticate(call.info.authorization);
    } catch (err) {
      if (err instanceof MemoryError && err.code === "UNAUTHENTICATED") metrics.authFailures.inc();
      throw err;
    }
    return next(call);
  };
};
