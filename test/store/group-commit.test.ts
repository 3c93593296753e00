/**
 * The PostgreSQL driver's group-commit queue on its own: batches stay within
 * their size bound (a single oversized request goes alone), no more batches
 * are written at once than allowed, requests keep their arrival order (per
 * key, when keyed: one key is never written twice at once), and every
 * request is settled, also when a write throws.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { GroupCommit, type Pending } from "../../src/store/postgres/group-commit.js";

describe("GroupCommit", () => {
  it("bounds batches by size and by batches in flight, keeps arrival order, and answers every request", async () => {
    const batches: number[][] = [];
    let inFlight = 0;
    let maxSeen = 0;
    const queue = new GroupCommit<number, string>({
      maxInFlight: 2,
      maxBatchSize: 100,
      write: async (batch: Pending<number, string>[]) => {
        inFlight++;
        maxSeen = Math.max(maxSeen, inFlight);
        batches.push(batch.map((p) => p.request));
        await sleep(5);
        inFlight--;
        for (const p of batch) p.resolve(`done ${p.request}`);
      },
    });
    // Sizes: mostly 30 (three fit in a batch), one oversized (250) that must go alone.
    const sizes = Array.from({ length: 40 }, (_, i) => (i === 17 ? 250 : 30));
    const results = await Promise.all(sizes.map((size, i) => queue.submit(i, size, undefined)));
    expect(results).toEqual(sizes.map((_, i) => `done ${i}`));
    expect(maxSeen).toBeLessThanOrEqual(2);
    expect(batches.flat()).toEqual(sizes.map((_, i) => i)); // every request once, in arrival order
    for (const batch of batches) {
      const total = batch.reduce((sum, i) => sum + sizes[i], 0);
      if (batch.length > 1) expect(total).toBeLessThanOrEqual(100);
    }
    expect(batches.some((b) => b.length === 1 && b[0] === 17)).toBe(true);
    expect(batches.some((b) => b.length > 1)).toBe(true); // requests did wait and go together
  });

  it("writes requests with the same key one batch after another, in arrival order, never two at once", async () => {
    const batches: string[][] = [];
    const writing = new Set<string>();
    let overlapped = false;
    const queue = new GroupCommit<string, string>({
      maxInFlight: 2,
      maxBatchSize: 100,
      write: async (batch) => {
        batches.push(batch.map((p) => p.request));
        for (const p of batch) {
          if (writing.has(p.request[0])) overlapped = true;
          writing.add(p.request[0]);
        }
        await sleep(2);
        for (const p of batch) writing.delete(p.request[0]);
        for (const p of batch) p.resolve(p.request);
      },
    });
    // Key = the letter. a1 and b1 take the two slots as they arrive (a2 and a3 cannot: a is being written); the rest wait and go together.
    const requests = ["a1", "a2", "a3", "b1", "b2", "c1", "a4"];
    const results = await Promise.all(requests.map((r) => queue.submit(r, 1, undefined, r[0])));
    expect(results).toEqual(requests);
    expect(overlapped).toBe(false);
    for (const key of ["a", "b", "c"]) {
      expect(batches.flat().filter((r) => r[0] === key)).toEqual(requests.filter((r) => r[0] === key));
    }
    expect(batches.slice(0, 2)).toEqual([["a1"], ["b1"]]);
    expect(batches.some((b) => b.length > 1)).toBe(true);
    expect(batches.flat().sort()).toEqual([...requests].sort());
  });

  it("rejects every request of a batch whose write throws, and keeps serving", async () => {
    let calls = 0;
    const queue = new GroupCommit<number, number>({
      maxInFlight: 1,
      maxBatchSize: 10,
      write: async (batch) => {
        if (calls++ === 0) throw new Error("boom");
        for (const p of batch) p.resolve(p.request * 2);
      },
    });
    const first = await Promise.allSettled([queue.submit(1, 1, undefined)]);
    expect(first[0]).toMatchObject({ status: "rejected", reason: new Error("boom") });
    await expect(queue.submit(21, 1, undefined)).resolves.toBe(42);
  });
});
