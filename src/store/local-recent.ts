/**
 * The local store's recent-event lists (ListRecentEvents): every session with
 * events sits in four lists by its last append (all, its app, its user, its
 * app and user), and a listing merges the tails of the newest sessions of
 * its scope, O(limit log limit), in ingest order (a store-wide counter
 * stamped on each stored event, never the client's timestamp).
 */
import type Denque from "denque";
import TinyQueue from "tinyqueue";
import { recentScopes, scopesOfSession, type RecentScope } from "./rules.js";
import type { RecentEventsFilter, SessionRecord, StoredEvent } from "./types.js";

/** What the lists need of a session. */
export interface RecentSession {
  record: SessionRecord;
  events: Denque<StoredEvent>;
  /** Ingest position of each retained event (parallel to `events`): when this store stored it, store-wide. */
  ingests: Denque<number>;
  /** Its place in the by-last-append list of each recent scope it belongs to; empty until its first append. */
  appendLinks: AppendLink[];
}

/** A session's place in one recent scope's list of sessions by last append. */
interface AppendLink {
  session: RecentSession;
  order: AppendOrder;
  /** Appended to less recently; undefined at the list's oldest end. */
  older?: AppendLink;
  newer?: AppendLink;
}

/** The sessions of one recent scope that hold events, by their last append (newest at the head). */
class AppendOrder {
  newest?: AppendLink;
  oldest?: AppendLink;

  /** `key`: its key in the map of lists (scopeKey). */
  constructor(readonly key: string) {}

  /** Makes `link` (linked here or not yet) the most recently appended. */
  moveToNewest(link: AppendLink): void {
    if (this.newest === link) return;
    this.unlink(link);
    link.older = this.newest;
    if (this.newest) this.newest.newer = link;
    else this.oldest = link;
    this.newest = link;
  }

  unlink(link: AppendLink): void {
    if (link.older) link.older.newer = link.newer;
    else if (this.oldest === link) this.oldest = link.newer;
    if (link.newer) link.newer.older = link.older;
    else if (this.newest === link) this.newest = link.older;
    link.older = link.newer = undefined;
  }
}

/** Key of a recent scope in the map of lists. */
const scopeKey = (scope: RecentScope) => JSON.stringify([scope.appName ?? null, scope.userId ?? null]);

/** One session's events not yet taken by a recent listing, newest first. */
interface TailCursor {
  session: RecentSession;
  /** Position in `events` of the next event to take. */
  index: number;
  /** Its ingest position. */
  ingest: number;
}

/** Ingest position of a session's newest event; -1 when it holds none. */
const lastIngest = (s: RecentSession) => s.ingests.peekBack() ?? -1;

/** Each recent scope's sessions by last append; a list goes when its last session does. */
export class RecentEventLists {
  private readonly appendOrders = new Map<string, AppendOrder>();

  /** Makes `s` the most recently appended session of each of its recent scopes (joining them at its first append). */
  markAppended(s: RecentSession): void {
    if (s.appendLinks.length === 0) {
      for (const scope of scopesOfSession(s.record.appName, s.record.userId)) {
        const key = scopeKey(scope);
        let order = this.appendOrders.get(key);
        if (!order) this.appendOrders.set(key, (order = new AppendOrder(key)));
        s.appendLinks.push({ session: s, order });
      }
    }
    for (const link of s.appendLinks) link.order.moveToNewest(link);
  }

  /** Takes a removed session out of every list. */
  remove(s: RecentSession): void {
    for (const link of s.appendLinks) {
      link.order.unlink(link);
      if (!link.order.newest) this.appendOrders.delete(link.order.key);
    }
  }

  /** The newest `limit` events of the filter's scope (no session filter), oldest first. */
  newest(limit: number, filter: RecentEventsFilter): StoredEvent[] {
    // A k-way merge of session tails, newest first. Sessions join the merge
    // in last-append order, each only once its newest event could be next:
    // every session not yet joined holds nothing newer than the next one of
    // its list, so the heap's top is always the newest event left.
    const lists = recentScopes(filter).map((scope) => this.appendOrders.get(scopeKey(scope))?.newest);
    const heap = new TinyQueue<TailCursor>([], (a, b) => b.ingest - a.ingest);
    const out: StoredEvent[] = [];
    while (out.length < limit) {
      for (let i = 0; i < lists.length; i++) {
        for (
          let link = lists[i];
          link && (heap.length === 0 || lastIngest(link.session) > heap.peek()!.ingest);
          link = lists[i]
        ) {
          const index = link.session.events.length - 1;
          if (index >= 0) heap.push({ session: link.session, index, ingest: link.session.ingests.peekAt(index)! });
          lists[i] = link.older;
        }
      }
      const next = heap.pop();
      if (!next) break;
      out.push(next.session.events.peekAt(next.index)!);
      if (next.index > 0)
        heap.push({
          session: next.session,
          index: next.index - 1,
          ingest: next.session.ingests.peekAt(next.index - 1)!,
        });
    }
    return out.reverse();
  }
}
