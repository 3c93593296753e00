/**
 * A bounded map that forgets its oldest entries first. It holds derived
 * forms of recent events (their wire messages, their stream frames), which
 * are asked for again soon after an event is stored (the append's response,
 * then every live stream) and rarely later; a WeakMap keyed by stored events
 * would instead keep one for every event the store holds.
 *
 * Bounded by entries and by the (estimated) bytes of the events it keeps
 * alive: 4,096 entries of 64 KB events would otherwise pin 256 MB of a
 * server whose store (Redis, PostgreSQL) holds nothing in its heap.
 */
import { LRUCache } from "lru-cache";

/** A recent-events cache of at most `capacity` entries and about `maxBytes` of keys' payloads. */
export class RecentCache<K extends object, V extends object> {
  private readonly entries: LRUCache<K, V>;

  constructor(capacity: number, maxBytes: number, sizeOf: (key: K) => number) {
    this.entries = new LRUCache<K, V>({
      max: capacity,
      maxSize: maxBytes,
      sizeCalculation: (_value, key) => Math.max(1, sizeOf(key)),
    });
  }

  /** The cached value, or the one `make` returns (then cached, unless it is larger than the whole cache). */
  get(key: K, make: (key: K) => V): V {
    let value = this.entries.get(key);
    if (value === undefined) {
      value = make(key);
      this.entries.set(key, value);
    }
    return value;
  }
}

/**
 * Rough heap bytes of a JSON value (UTF-16 strings, small fixed costs), cheap
 * enough for every append; stops counting once past `limit`.
 */
export function jsonBytes(value: unknown, limit = 1 << 24): number {
  let total = 0;
  const stack: unknown[] = [value];
  while (stack.length > 0 && total <= limit) {
    const v = stack.pop();
    if (typeof v === "string") total += 16 + 2 * v.length;
    else if (v === null || typeof v !== "object") total += 8;
    else if (Array.isArray(v)) {
      total += 16 + 8 * v.length;
      for (const item of v) stack.push(item);
    } else {
      for (const [k, item] of Object.entries(v)) {
        total += 24 + 2 * k.length;
        stack.push(item);
      }
    }
  }
  return total;
}
