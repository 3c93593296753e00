/**
 * A closed-loop load run: `concurrency` workers each issue one operation at a
 * time until the time is up. A warm-up comes first; the measured window
 * opens and closes on timers, an operation counts when it completes inside
 * it, and the CPU of the named processes is read at both ends of the same
 * window, so throughput, latency and CPU per operation describe the same
 * operations.
 */
import { LatencyRecorder, round, type LatencySummary } from "./latency.js";
import { processTreeCpuSeconds } from "./processes.js";

/** Timing and CPU accounting of a run. */
export interface ClosedLoopOptions {
  concurrency: number;
  durationMs: number;
  warmupMs: number;
  /** Processes whose CPU time, with their children's, is charged per operation: name -> pids. */
  cpuPids: Record<string, number[]>;
}

/** What one run measured. */
export interface LoadResult extends LatencySummary {
  calls: number;
  errors: number;
  firstError?: string;
  seconds: number;
  /** Successful operations per second. */
  throughput: number;
  /** CPU microseconds per operation of each process group in cpuPids, and of this (client) process as "client". */
  cpuUsPerCall: Record<string, number>;
}

/** CPU seconds of each process with its children, by pid (NaN once a process is gone). */
function cpuOf(pids: number[]): Map<number, number> {
  return new Map(pids.map((pid) => [pid, processTreeCpuSeconds(pid)]));
}

/** CPU used between two readings by the processes alive at both (a vanished one drops out rather than turning the figure into NaN). */
function cpuBetween(start: Map<number, number> | undefined, end: Map<number, number> | undefined): number {
  let total = 0;
  for (const [pid, before] of start ?? []) {
    const after = end?.get(pid);
    if (Number.isFinite(before) && after !== undefined && Number.isFinite(after)) total += after - before;
  }
  return total;
}

/** Runs `operation(workerIndex, iteration)` in a closed loop and measures it. Errors are counted, not thrown (up to 1000). */
export async function closedLoop(
  options: ClosedLoopOptions,
  operation: (worker: number, iteration: number) => Promise<void>,
): Promise<LoadResult> {
  const latency = new LatencyRecorder();
  const stopAt = performance.now() + options.warmupMs + options.durationMs;
  let calls = 0;
  let errors = 0;
  let firstError: string | undefined;
  let measuring = false;
  const clientCpu = () => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
  };
  const readCpu = () => Object.fromEntries(Object.entries(options.cpuPids).map(([name, pids]) => [name, cpuOf(pids)]));
  let start = { at: 0, clientCpu: 0, cpu: {} as Record<string, Map<number, number>> };
  let end = { at: 0, clientCpu: 0, cpu: {} as Record<string, Map<number, number>> };
  const openTimer = setTimeout(() => {
    start = { at: performance.now(), clientCpu: clientCpu(), cpu: readCpu() };
    measuring = true;
  }, options.warmupMs);
  const closeTimer = setTimeout(() => {
    measuring = false;
    end = { at: performance.now(), clientCpu: clientCpu(), cpu: readCpu() };
  }, options.warmupMs + options.durationMs);

  const worker = async (index: number) => {
    for (let iteration = 0; ; iteration++) {
      const t0 = performance.now();
      if (t0 >= stopAt) return;
      try {
        await operation(index, iteration);
        if (measuring) {
          calls++;
          latency.add((performance.now() - t0) * 1000);
        }
      } catch (err) {
        errors++;
        firstError ??= err instanceof Error ? err.message : String(err);
        if (errors > 1000) throw new Error(`too many errors; first: ${firstError}`, { cause: err });
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: options.concurrency }, (_, i) => worker(i)));
    // The closing timer may fire a little after the last operation returned.
    while (end.at === 0) await new Promise((resolve) => setTimeout(resolve, 5));
  } finally {
    clearTimeout(openTimer);
    clearTimeout(closeTimer);
  }
  const seconds = (end.at - start.at) / 1000;
  const perCall = (spent: number) => (calls > 0 ? round((spent / calls) * 1e6) : Number.NaN);
  const cpuUsPerCall: Record<string, number> = {};
  for (const name of Object.keys(options.cpuPids))
    cpuUsPerCall[name] = perCall(cpuBetween(start.cpu[name], end.cpu[name]));
  cpuUsPerCall.client = perCall(end.clientCpu - start.clientCpu);
  return {
    calls,
    errors,
    firstError,
    seconds: round(seconds, 2),
    throughput: round(calls / seconds),
    ...latency.summary(),
    cpuUsPerCall,
  };
}
