/** Runs the memory measurement (bench/memory-worker.ts) in its own process. */
import { forkWorker } from "./lib/processes.js";
import type { MemoryResult } from "./types.js";
import { CONTENT_100B } from "./workloads.js";

/** Bytes per stored event for `events` events of 100-byte content on the local store. */
export async function measureMemory(events: number, log: (message: string) => void): Promise<MemoryResult> {
  const worker = forkWorker("memory-worker.ts", ["--expose-gc", "--max-old-space-size=4096"]);
  try {
    const result = await worker.request<MemoryResult>({ events, content: CONTENT_100B });
    log(`memory: ${result.heapBytesPerEvent} heap bytes per event (${events} events of ${result.contentBytes} bytes)`);
    return result;
  } finally {
    await worker.stop();
  }
}
