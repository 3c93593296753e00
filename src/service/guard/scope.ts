/** Tenancy's door: every call is held to its key's role and scope (src/service/tenancy.ts) before the service runs it. */
import { holdToScope } from "../tenancy.js";
import { allowedRule } from "./rules.js";
import type { StepFactory } from "./step.js";

/** The key's role must be enough for the method, and the request within the key's apps and user; absent while auth is off. */
export const scope: StepFactory = ({ method }, { authenticator, store }) => {
  if (!authenticator) return undefined;
  return (next) => (call) => {
    const principal = call.principal!;
    return holdToScope(allowedRule(principal, method).scope, call, principal, () => next(call), store);
  };
};
