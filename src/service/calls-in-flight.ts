/**
 * A count of calls still running, for graceful shutdown: the guard counts
 * unary handlers until they return; the edges count calls until their last
 * bytes (a stream's final status, a unary answer) are handed to the
 * transport, since closing the connection first would lose them.
 */
export class CallsInFlight {
  private count = 0;
  private readonly idleWaiters: Array<() => void> = [];

  started(): void {
    this.count++;
  }

  /** Bound, so that it can be a listener without a closure per call. */
  readonly ended = (): void => {
    if (--this.count === 0) for (const wake of this.idleWaiters.splice(0)) wake();
  };

  /** Resolves once every call started so far has ended. */
  idle(): Promise<void> {
    return this.count === 0 ? Promise.resolve() : new Promise((resolve) => this.idleWaiters.push(resolve));
  }
}
