/**
 * The call deadline, for stores that read it (src/deadline.ts): the service
 * method of a unary call runs inside `withDeadline`, so a driver can bound
 * its backend work by the time the client still waits. Kept as its own,
 * innermost step so that passing the deadline explicitly replaces this file
 * and its one line in index.ts.
 */
import { honoursCallDeadline, withDeadline } from "../../deadline.js";
import type { StepFactory } from "./step.js";

/**
 * Unary calls only: a stream's reads run in the stream hub, shared by every
 * subscriber of the session, so no one caller's deadline may leak into
 * them. A store that ignores the deadline gets no closure per call either.
 */
export const enterDeadline: StepFactory = ({ streaming }, { store }) => {
  if (streaming || !honoursCallDeadline(store)) return undefined;
  return (next) => (call) => withDeadline(store, call.info.deadline, () => next(call));
};
