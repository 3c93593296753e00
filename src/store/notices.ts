/**
 * Listeners of store changes: registration and fan-out for every driver,
 * written once. A listener that throws is skipped, never allowed to reach the
 * caller: a notice follows a change that has already happened (an append or
 * a memory write that is stored), and must not turn it into an error or keep
 * the other listeners from hearing of it.
 */
import type { SessionNotice } from "./types.js";

/** Tells each listener of `event`; a listener that throws does not stop the others. */
export function notifyEach<E>(listeners: Iterable<(event: E) => void>, event: E): void {
  // A copy: a listener may unsubscribe (itself or another) while it runs.
  for (const listener of [...listeners]) {
    try {
      listener(event);
    } catch {
      // The change happened; one faulty listener must not undo that for the caller or the others.
    }
  }
}

/** Listeners by key (a session, an app) of one store. */
export class KeyedListeners<E> {
  private readonly byKey = new Map<string, Set<(event: E) => void>>();

  /** Adds `listener` for `key`; returns the function that removes it. */
  subscribe(key: string, listener: (event: E) => void): () => void {
    let set = this.byKey.get(key);
    if (!set) this.byKey.set(key, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.byKey.get(key) === set) this.byKey.delete(key);
    };
  }

  /** Tells every listener of `key`; a listener that throws does not stop the others. */
  emit(key: string, event: E): void {
    const set = this.byKey.get(key);
    if (set) notifyEach(set, event);
  }

  /** True when someone listens to `key`. */
  has(key: string): boolean {
    return this.byKey.has(key);
  }

  /** Keys someone listens to. */
  keys(): string[] {
    return [...this.byKey.keys()];
  }

  /** Number of keys someone listens to. */
  get size(): number {
    return this.byKey.size;
  }

  /** Forgets every listener (the store is closing). */
  clear(): void {
    this.byKey.clear();
  }
}

/** The session notice listeners of one store, by session. */
export class NoticeListeners extends KeyedListeners<SessionNotice> {
  /** Tells every listener of the notice's session. */
  notify(notice: SessionNotice): void {
    this.emit(notice.sessionId, notice);
  }

  /** Sessions someone listens to. */
  sessionIds(): string[] {
    return this.keys();
  }
}
