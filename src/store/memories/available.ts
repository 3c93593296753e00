/** Where a store without long-term memories says so. */
import { MemoryError } from "../../errors.js";
import type { LongTermMemoryStore, MemoryStore } from "../types.js";

/**
 * The store's long-term memories, or FAILED_PRECONDITION naming the store
 * when its driver keeps none yet (the PostgreSQL driver today):
 * never a silent success.
 */
export function memoriesOf(store: MemoryStore): LongTermMemoryStore {
  if (store.memories) return store.memories;
  throw new MemoryError("FAILED_PRECONDITION", `long-term memory is not yet available on the ${store.backend} store`, {}, {
    reason: "MEMORIES_NOT_AVAILABLE",
    info: { backend: store.backend },
  });
}
