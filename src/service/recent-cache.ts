/**
 * A bounded map that forgets its oldest entries first. It holds derived
 * forms of recent events (their wire messages, their stream frames), which
 * are asked for again soon after an event is stored (the append's response,
 * then every live stream) and rarely later; a WeakMap keyed by stored events
 * would instead keep one for every event the store holds.
 */
export class RecentCache<K, V> {
  private readonly entries = new Map<K, V>();

  constructor(private readonly capacity: number) {}

  /** The cached value, or the one `make` returns (then cached). */
  get(key: K, make: (key: K) => V): V {
    let value = this.entries.get(key);
    if (value === undefined) {
      value = make(key);
      this.entries.set(key, value);
      if (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value as K);
    }
    return value;
  }
}
