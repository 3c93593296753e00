/**
 * The long-term memory contract (LongTermMemoryStore) and its records: what
 * every memory driver (src/store/memories/<backend>.ts) implements, exposed
 * as MemoryStore.memories (src/store/types.ts).
 */
import type { JsonObject, StoreCall } from "../base-types.js";

/** A fact as subject, predicate and object. */
export interface MemoryFactRecord {
  subject: string;
  predicate: string;
  object: string;
}

/** The events a memory was drawn from. */
export interface MemorySourceRecord {
  sessionId: string;
  /** 0 when unknown. */
  fromSeq: number;
  /** 0 when unknown. */
  toSeq: number;
}

/**
 * A long-term memory as stores keep it. Times are epoch milliseconds; an
 * absent scope dimension (userId, agentId, sessionId) means "shared across
 * it". Unique by (appName, memoryId).
 */
export interface MemoryRecord {
  memoryId: string;
  appName: string;
  userId?: string;
  agentId?: string;
  sessionId?: string;
  text: string;
  fact?: MemoryFactRecord;
  /** The explicit supersession key; "" when none was given. */
  key: string;
  topics: string[];
  /** 0..1. */
  importance: number;
  pinned: boolean;
  metadata: JsonObject;
  source?: MemorySourceRecord;
  createdAt: number;
  validFrom: number;
  /** Exclusive end of validity; absent while the memory holds. */
  invalidAt?: number;
  /** The memory whose write closed this one's validity. */
  supersededBy?: string;
  embedding?: number[];
  /**
   * Identity of what the client wrote (src/store/memories/rules.ts): a retry
   * of the same memory_id is the same memory exactly when this matches.
   */
  fingerprint: string;
}

/** How a scope filter selects memories (ScopeMatch in memories.proto). */
export type ScopeMatch = "visible" | "within" | "exact";

/** A scope filter: one app and any of user, agent and session, matched as `match` says. */
export interface MemoryScopeFilter {
  appName: string;
  userId?: string;
  agentId?: string;
  sessionId?: string;
  match: ScopeMatch;
}

/** Which memories a search or listing covers besides the scope; every given field must hold. */
export interface MemoryFilter {
  scope: MemoryScopeFilter;
  /** At least one of these topics, when non-empty. */
  topics?: readonly string[];
  /** Only memories valid at this time (validFrom <= asOf < invalidAt); any validity when absent. */
  asOf?: number;
  pinned?: boolean;
  /** Only memories with this explicit key. */
  key?: string;
  subject?: string;
  predicate?: string;
  /**
   * The caller will not show the records' embeddings (the ranking reads
   * vectors through nearestMemories): a store that ships each record's
   * vector from its backend may leave them out. Selects nothing.
   */
  omitEmbeddings?: boolean;
}

/** Where a listing of memories resumes: after this memory, newest first (createdAt, then memoryId, descending). */
export interface MemoryCursor {
  createdAt: number;
  memoryId: string;
}

/** A memory and its score in one ranking (BM25, cosine similarity). */
export interface RankedMemory {
  memory: MemoryRecord;
  score: number;
}

/** What writeMemories stored. */
export interface MemoryWriteResult {
  /** The stored memories in input order (the originals of retried ids). */
  memories: MemoryRecord[];
  /** Memories whose validity the write closed, as they are now. */
  superseded: MemoryRecord[];
}

/**
 * A change to one app's memories, for watches. `seq` is the change's number
 * in the app's change log (one more than the change before it). Carries the
 * records, so a live watch never reads back; `remote` says only that another
 * replica made the app's changes up to `seq` (a watch reads them from the log).
 */
export type MemoryChange =
  | { seq: number; kind: "written"; memory: MemoryRecord }
  | { seq: number; kind: "superseded"; memory: MemoryRecord }
  | { seq: number; kind: "deleted"; memories: readonly MemoryRecord[] }
  | { seq: number; kind: "remote" };

/** Where an app's change log stands: changes numbered floor+1..head are retained (head 0: no change yet). */
export interface MemoryChangeWindow {
  head: number;
  floor: number;
}

/** A page of an app's change log. */
export interface MemoryChangePage {
  /** The retained changes read, oldest first (see readMemoryChanges). */
  changes: MemoryChange[];
  /** The number of the last change the page covers (`after` when it covers none): read on after it. */
  through: number;
}

/** Receives the changes of one app's memories. */
export type MemoryChangeListener = (change: MemoryChange) => void;

/**
 * Long-term memories (proto/engram/v1/memories.proto), kept apart from the
 * session contract: a MemoryStore offers them through `memories` when its
 * driver implements them. The same conformance suite
 * (test/store/memories-conformance.ts) runs against every implementation.
 */
export interface LongTermMemoryStore {
  // Each method that waits on a backend takes the call's StoreCall last, as the session methods do.
  /**
   * Stores a batch atomically: all or none. A memoryId already stored in the
   * app with the same fingerprint is a retry (its stored record is returned,
   * nothing changes); with another fingerprint, ALREADY_EXISTS and nothing
   * of the batch is stored. A new memory with a supersession key
   * (src/store/memories/rules.ts) closes the validity of every memory of the
   * same key and exactly the same scope that is valid at its validFrom (their
   * invalidAt becomes that validFrom, their supersededBy its id); when a
   * memory of that key starts later, the new one's validity ends there.
   * Memories of one batch apply in order. Every embedding of an app has the
   * dimension of the first one stored: another is INVALID_ARGUMENT
   * (`memories[i].embedding`) and nothing of the batch is stored.
   */
  writeMemories(memories: readonly MemoryRecord[], call?: StoreCall): Promise<MemoryWriteResult>;
  /** One memory or undefined. */
  getMemory(appName: string, memoryId: string, call?: StoreCall): Promise<MemoryRecord | undefined>;
  /** The best `limit` memories matching the filter by BM25 relevance to `query`, best first; memories the query does not match are left out. */
  searchMemories(filter: MemoryFilter, query: string, limit: number, call?: StoreCall): Promise<RankedMemory[]>;
  /**
   * The `limit` memories matching the filter whose embedding (of the same
   * dimension) is most similar to `embedding` by cosine, best first.
   * Optional: stores without vector search leave it out and ranking is lexical.
   */
  nearestMemories?(
    filter: MemoryFilter,
    embedding: readonly number[],
    limit: number,
    call?: StoreCall,
  ): Promise<RankedMemory[]>;
  /** Memories matching the filter, newest first (createdAt, then memoryId, descending), after the cursor; at most `limit`. */
  listMemories(filter: MemoryFilter, limit: number, after?: MemoryCursor, call?: StoreCall): Promise<MemoryRecord[]>;
  /** Removes these memories of the app; returns those it removed (absent ids are skipped). */
  deleteMemories(appName: string, memoryIds: readonly string[], call?: StoreCall): Promise<MemoryRecord[]>;
  /** Removes every memory the scope selects, whatever its validity; returns them. */
  deleteMemoriesInScope(scope: MemoryScopeFilter, call?: StoreCall): Promise<MemoryRecord[]>;
  /** Calls `listener` on every change to the app's memories, on this replica (and others sharing the store). Returns the unsubscribe function. */
  subscribeMemories(appName: string, listener: MemoryChangeListener): () => void;
  /**
   * Resolves once the changes other replicas make to the app reach this
   * replica's subscribers; a watch waits for it after subscribing, before it
   * reads the change window. Optional: stores that hear every app from the
   * start leave it out (a Redis Cluster subscribes per app, in its shard).
   */
  listening?(appName: string): Promise<void>;
  /** The app's change log window: its newest change number and what is retained (the last MEMORY_CHANGES_RETAINED changes). */
  memoryChangeWindow(appName: string, call?: StoreCall): Promise<MemoryChangeWindow>;
  /**
   * The app's retained changes numbered after `after`, oldest first, at most
   * `limit` of them. Written and superseded changes carry the memory as it
   * is now; one deleted since is left out (its deletion follows), and a
   * deletion carries its memories' ids and scope only. OUT_OF_RANGE (field
   * `after`) when changes after it are no longer retained, or `after` is
   * beyond the newest change.
   */
  readMemoryChanges(appName: string, after: number, limit: number, call?: StoreCall): Promise<MemoryChangePage>;
}
