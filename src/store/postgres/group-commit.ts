/**
 * Group commit for the PostgreSQL driver: appends that arrive while earlier
 * ones are being written wait, then go to the database together as one
 * statement and one transaction (append_batch, migration 0003). An append
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
  private readonly waiting: Pending<Request, Result>[] = [];
  private inFlight = 0;

  constructor(private readonly options: GroupCommitOptions<Request, Result>) {}

  /** Queues one request; settles when its batch has been written. */
  submit(request: Request, size: number, deadline: number | undefined): Promise<Result> {
    return new Promise<Result>((resolve, reject) => {
      this.waiting.push({ request, size, deadline, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.options.maxInFlight && this.waiting.length > 0) {
      let size = this.waiting[0].size;
      let count = 1;
      while (count < this.waiting.length && size + this.waiting[count].size <= this.options.maxBatchSize) size += this.waiting[count++].size;
      const batch = this.waiting.splice(0, count);
      this.inFlight++;
      this.options
        .write(batch)
        // write() settles each request itself; anything it let escape fails the batch rather than vanishing.
        .catch((err: unknown) => {
          for (const p of batch) p.reject(err);
        })
        .finally(() => {
          this.inFlight--;
          this.pump();
        });
    }
  }
}
