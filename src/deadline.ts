/**
 * The deadline of the call being served, carried to the store drivers
 * without threading it through every signature: the CallGuard runs each
 * handler inside `callDeadline.run(epochMs, ...)`, and a driver bounds its
 * backend work by `remainingMs()`, so a call whose client has given up stops
 * holding a database connection.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { MemoryError } from "./errors.js";

/** Epoch milliseconds by which the current call must be answered. */
export const callDeadline = new AsyncLocalStorage<number>();

/** Milliseconds left before the current call's deadline; undefined when it has none. */
export function remainingMs(): number | undefined {
  const deadline = callDeadline.getStore();
  return deadline === undefined ? undefined : deadline - Date.now();
}

/** DEADLINE_EXCEEDED when the current call has no time left. */
export function checkDeadline(): void {
  const left = remainingMs();
  if (left !== undefined && left <= 0) throw new MemoryError("DEADLINE_EXCEEDED", "deadline exceeded before the store was called");
}
