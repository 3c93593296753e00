/**
 * Listeners of store changes: registration and fan-out for every driver,
 * written once. A listener that throws is skipped, never allowed to reach the
 * caller: a notice follows a change that has already happened (an append or
 * a memory write that is stored), and must not turn it into an error or keep
 * the other listeners from hearing of it.
 */
import type { NoticeListener, SessionNotice } from "./types.js";

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

/** The notice listeners of one store. */
export class NoticeListeners {
  private readonly bySession = new Map<string, Set<NoticeListener>>();

  /** Adds `listener` for `sessionId`; returns the function that removes it. */
  subscribe(sessionId: string, listener: NoticeListener): () => void {
    let set = this.bySession.get(sessionId);
    if (!set) this.bySession.set(sessionId, (set = new Set()));
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0 && this.bySession.get(sessionId) === set) this.bySession.delete(sessionId);
    };
  }

  /** Tells every listener of the notice's session; a listener that throws does not stop the others. */
  notify(notice: SessionNotice): void {
    const set = this.bySession.get(notice.sessionId);
    if (set) notifyEach(set, notice);
  }

  /** True when someone listens to the session. */
  has(sessionId: string): boolean {
    return this.bySession.has(sessionId);
  }

  /** Sessions someone listens to. */
  sessionIds(): string[] {
    return [...this.bySession.keys()];
  }

  /** Number of sessions someone listens to. */
  get size(): number {
    return this.bySession.size;
  }

  /** Forgets every listener (the store is closing). */
  clear(): void {
    this.bySession.clear();
  }
}
