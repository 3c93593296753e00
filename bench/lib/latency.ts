/**
 * Latency samples and their summary. Samples are kept whole (a few seconds of
 * calls fit easily in memory), so percentiles are exact, not bucketed.
 */

/** Collects latencies in microseconds. */
export class LatencyRecorder {
  private samples = new Float64Array(1 << 16);
  private n = 0;

  /** Adds one latency, in microseconds. */
  add(us: number): void {
    if (this.n === this.samples.length) {
      const grown = new Float64Array(this.samples.length * 2);
      grown.set(this.samples);
      this.samples = grown;
    }
    this.samples[this.n++] = us;
  }

  /** Number of samples. */
  get count(): number {
    return this.n;
  }

  /** p50, p99 and mean in microseconds (NaN when empty). */
  summary(): LatencySummary {
    return summarize(this.samples.subarray(0, this.n));
  }
}

/** Percentiles of a set of latencies, in microseconds. */
export interface LatencySummary {
  p50Us: number;
  p99Us: number;
  meanUs: number;
}

/** Exact nearest-rank percentiles of the samples. */
export function summarize(samples: Float64Array | number[]): LatencySummary {
  const sorted = Float64Array.from(samples).sort();
  if (sorted.length === 0) return { p50Us: Number.NaN, p99Us: Number.NaN, meanUs: Number.NaN };
  const rank = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
  let sum = 0;
  for (const v of sorted) sum += v;
  return { p50Us: round(rank(0.5)), p99Us: round(rank(0.99)), meanUs: round(sum / sorted.length) };
}

/** Rounds to 0.1. */
export function round(v: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(v * f) / f;
}
