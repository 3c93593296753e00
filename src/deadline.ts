/**
 * The deadline of the call being served, carried to the store drivers
 * without threading it through every signature: the CallGuard runs each
 * unary handler inside `withDeadline(store, epochMs, ...)`, and a driver
 * bounds its backend work by `remainingMs()`, so a call whose client has
 * given up stops holding a database connection.
 *
 * It rides an AsyncLocalStorage, which on Node 20 turns on promise hooks for
 * the whole process from its first use (measured: ~5 µs more per call, and a
 * quarter of stream fan-out throughput). So only a store that declares it
 * reads the deadline (`honoursCallDeadline`, today PostgreSQL, whose calls
 * cost hundreds of µs anyway) ever enters it; the others never pay.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { MemoryError } from "./errors.js";

const callDeadline = new AsyncLocalStorage<number>();

/** A store driver that bounds its backend calls by `remainingMs()`. */
export interface DeadlineAware {
  readonly honoursCallDeadline: true;
}

/** True when `store` reads the call deadline (see DeadlineAware). */
export function honoursCallDeadline(store: object): boolean {
  return (store as Partial<DeadlineAware>).honoursCallDeadline === true;
}

/** Runs `fn` with `deadline` (epoch ms) as the current call's deadline when `store` reads it; plainly otherwise. */
export function withDeadline<T>(store: object, deadline: number | undefined, fn: () => T): T {
  return deadline === undefined || !honoursCallDeadline(store) ? fn() : callDeadline.run(deadline, fn);
}

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
