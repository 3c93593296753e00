/**
 * ConnectingStore forwards every call to the store it opened: the whole
 * conformance suite runs through it (over a local store), so a method or an
 * argument it fails to pass on shows here.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { MemoryError } from "../../src/errors.js";
import { StoreIncompatibleError } from "../../src/store/incompatible.js";
import { describeStoreConformance, rejection } from "./conformance.js";
import { describeMemoriesConformance, memory } from "./memories-conformance.js";
import type { MemoryStore } from "../../src/store/types.js";
import { ConnectingStore } from "../../src/store/connecting.js";
import { LocalStore } from "../../src/store/local.js";

describeStoreConformance(
  "connecting (once opened, over local)",
  async (limits) => {
    const store = new ConnectingStore("local", async () => new LocalStore(limits), {
      failed: () => {},
      opened: () => {},
    });
    await store.opened;
    return store;
  },
  { persistent: false, shared: false, retains: true },
);

describeMemoriesConformance("connecting (once opened, over local)", async () => {
  const store = new ConnectingStore("local", async () => new LocalStore({ maxSessions: 1000, maxSessionEvents: 500 }), {
    failed: () => {},
    opened: () => {},
  });
  await store.opened;
  return store;
});

describe("ConnectingStore and long-term memories", () => {
  it("answers UNAVAILABLE before the store opens, and the opened store's memories after", async () => {
    let open!: (store: MemoryStore) => void;
    const opening = new Promise<MemoryStore>((resolve) => (open = resolve));
    const store = new ConnectingStore("redis", () => opening, { failed: () => {}, opened: () => {} });
    try {
      const before = await rejection(store.memories.getMemory("app", "m"));
      expect(before.code).toBe("UNAVAILABLE");
      const local = new LocalStore({ maxSessions: 10, maxSessionEvents: 10 });
      await local.memories.writeMemories([memory({ memoryId: "m", text: "kept by the opened store" })]);
      open(local);
      await store.opened;
      expect((await store.memories.getMemory("app", "m"))?.text).toBe("kept by the opened store");
    } finally {
      await store.close();
    }
  });
});

describe("ConnectingStore and a store this release must not use", () => {
  it("stops retrying at the first StoreIncompatibleError and rejects `opened` with it", async () => {
    let attempts = 0;
    const failures: unknown[] = [];
    const refusal = new StoreIncompatibleError(
      'schema "x" is at migration 0099 but this Engram knows migrations up to 0008',
    );
    const store = new ConnectingStore(
      "postgres",
      async () => {
        attempts++;
        // An outage first, then the backend answers with a schema from a newer release.
        if (attempts === 1) throw new MemoryError("UNAVAILABLE", "PostgreSQL is unavailable");
        throw refusal;
      },
      { failed: (err) => failures.push(err), opened: () => {} },
      { initialMs: 10, maxMs: 20 },
    );
    try {
      await expect(store.opened).rejects.toBe(refusal);
      // A bounded wait in which a retry would have come several times over.
      await sleep(300);
      expect(attempts).toBe(2);
      expect(failures).toHaveLength(1);
    } finally {
      await store.close();
    }
  });
});
