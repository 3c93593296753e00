/**
 * Graceful shutdown of unary calls: once draining begins, new unary calls
 * are refused UNAVAILABLE (on connections still open; new connections are no
 * longer accepted) and the drain resolves when the last running one has
 * returned its answer. Streams are not counted: the server ends them itself.
 */
import { MemoryError } from "../../errors.js";
import { CallsInFlight } from "../calls-in-flight.js";
import type { StepFactory } from "./step.js";

/** Counts the unary calls running and refuses new ones once shutdown begins. */
export class UnaryDrain {
  /** Unary calls running now. */
  private readonly running = new CallsInFlight();
  /** Set once shutdown begins. */
  private draining = false;

  /** The step of every unary method; none for streams. */
  readonly step: StepFactory = ({ streaming }) =>
    streaming
      ? undefined
      : (next) => (call) => {
          this.running.started();
          call.whenEnded.push(this.running.ended);
          if (this.draining)
            throw new MemoryError("UNAVAILABLE", "the server is shutting down; retry on another replica");
          return next(call);
        };

  /** Refuses new unary calls from now on; resolves once every one already running has returned. */
  drain(): Promise<void> {
    this.draining = true;
    return this.running.idle();
  }
}
