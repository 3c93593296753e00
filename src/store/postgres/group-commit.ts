/**
 * Group commit for the PostgreSQL driver: appends that arrive while earlier
 * ones are being written wait, then go to the database together as one
 * statement and one transaction (append_many_checked, functions.sql). An append
 * that finds a free slot goes at once, alone, so a lone caller waits for no
 * timer; under load a batch grows to whatever arrived during one write.
 *
 * Why: on the benchmark box a round trip costs the Node process more CPU in
 * socket syscalls than the rest of an append, and PostgreSQL pays a commit,
 * a WAL flush and a notification wake-up per transaction; batching pays
 * them once for many appends (bench/README.md has the before and after).
 */

/** One queued request and how to answer it. */
export interface Pending<Request, Result> {
  request: Request;
  /** Epoch ms by which the caller needs an answer; undefined when it has none. */
  deadline: number | undefined;
  /** Size of the request in the unit `maxBatchSize` counts. */
  size: number;
  /** Requests with the same key never share a batch (the driver's: the session). */
  key: string | undefined;
  resolve(result: Result): void;
  reject(err: unknown): void;
}

export interface GroupCommitOptions<Request, Result> {
  /** Batches being written at once; further requests wait for one of them to finish. */
  maxInFlight: number;
  /** Largest batch in request `size` units; a larger single request still goes, alone. */
  maxBatchSize: number;
  /** Writes one batch and settles every request in it. */
  write(batch: Pending<Request, Result>[]): Promise<void>;
}

export class GroupCommit<Request, Result> {
  private waiting: Pending<Request, Result>[] = [];
  private inFlight = 0;
  /** Keys of the requests being written. */
  private readonly writing = new Set<string>();

  constructor(private readonly options: GroupCommitOptions<Request, Result>) {}

  /**
   * Queues one request; settles when its batch has been written. Requests
   * with the same key are written one batch after another, in arrival order:
   * one whose key is being written, or is already in the batch being formed,
   * waits for a later batch (the driver's key is the session, whose row lock
   * would serialize them anyway).
   */
  submit(request: Request, size: number, deadline: number | undefined, key?: string): Promise<Result> {
    return new Promise<Result>((resolve, reject) => {
      this.waiting.push({ request, size, deadline, key, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.options.maxInFlight && this.waiting.length > 0) {
      const batch = this.takeBatch();
      // Every waiting request's key is being written: the batch that settles them pumps again.
      if (batch.length === 0) return;
      this.inFlight++;
      this.options
        .write(batch)
        // write() settles each request itself; anything it let escape fails the batch rather than vanishing.
        .catch((err: unknown) => {
          for (const p of batch) p.reject(err);
        })
        .finally(() => {
          for (const p of batch) if (p.key !== undefined) this.writing.delete(p.key);
          this.inFlight--;
          this.pump();
        });
    }
  }

  /** Takes the next batch off the queue, oldest first, within the size bound, one request per key, none of a key being written. */
  private takeBatch(): Pending<Request, Result>[] {
    const batch: Pending<Request, Result>[] = [];
    const passedOver: Pending<Request, Result>[] = [];
    let size = 0;
    let i = 0;
    for (; i < this.waiting.length; i++) {
      const p = this.waiting[i];
      if (batch.length > 0 && size + p.size > this.options.maxBatchSize) break;
      if (p.key !== undefined && this.writing.has(p.key)) {
        passedOver.push(p);
        continue;
      }
      if (p.key !== undefined) this.writing.add(p.key);
      batch.push(p);
      size += p.size;
    }
    this.waiting = passedOver.length === 0 ? this.waiting.slice(i) : passedOver.concat(this.waiting.slice(i));
    return batch;
  }
}
