/**
 * Graceful shutdown of unary calls: once draining begins, new unary calls
 * are refused UNAVAILABLE (on connections still open; new connections are no
 * longer accepted) and the drain resolves when the last running one has
 * returned its answer. Streams are not counted: the server ends them itself.
 */
import { MemoryError } from "../../errors.js";
import type { StepFactory } from "./step.js";

/** Counts the unary calls running and refuses new ones once shutdown begins. */
export class UnaryDrain {
  /** Unary calls running now. */
  private inFlight = 0;
  /** Set once shutdown begins: `settle` runs when the last running call returns. */
  private draining?: { idle: Promise<void>; settle: () => void };

  /** The step of every unary method; none for streams. */
  readonly step: StepFactory = ({ streaming }) =>
    streaming
      ? undefined
      : (next) => (call) => {
          this.inFlight++;
          call.whenEnded.push(this.ended);
          if (this.draining)
            throw new MemoryError("UNAVAILABLE", "the server is shutting down; retry on another replica");
          return next(call);
        };

  /** Refuses new unary calls from now on; resolves once every one already running has returned. */
  drain(): Promise<void> {
    if (!this.draining) {
      let settle!: () => void;
      const idle = new Promise<void>((resolve) => (settle = resolve));
      this.draining = { idle, settle };
      if (this.inFlight === 0) settle();
    }
    return this.draining.idle;
  }

  /** One hook for every call (no closure per call). */
  private readonly ended = (): void => {
    if (--this.inFlight === 0) this.draining?.settle();
  };
}
