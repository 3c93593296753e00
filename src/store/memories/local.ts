/**
 * Long-term memories of the in-process store. Per app: memories by id, a
 * B+tree in listing order (newest first), the groups that supersede each
 * other (same exact scope, same supersession key), and an inverted index by
 * exact scope (src/store/inverted-index.ts) holding each memory's analyzed
 * terms and its embedding as a unit Float32Array. Searches are exact: BM25
 * and cosine over every memory of the scopes the filter selects, with BM25's
 * statistics taken over those scopes alone. A write or delete runs in one
 * synchronous pass, so a batch is atomic and nothing interleaves. Nothing
 * survives a restart.
 */
import { createRequire } from "node:module";
import type SortedBTree from "sorted-btree";
import type {
  LongTermMemoryStore,
  MemoryChange,
  MemoryChangeListener,
  MemoryChangePage,
  MemoryChangeWindow,
  MemoryCursor,
  MemoryFilter,
  MemoryRecord,
  MemoryScopeFilter,
  MemoryWriteResult,
  RankedMemory,
} from "../types.js";
import { notifyEach } from "../notices.js";
import { type IndexScope, InvertedIndex, TopK } from "../inverted-index.js";
import { queryTerms } from "./analyzer.js";
import { lexicalTerms } from "./lexical.js";
import {
  deletedStub,
  embeddingDimensionMismatch,
  exactScopeKey,
  filterSelects,
  MEMORY_CHANGES_RETAINED,
  memoryIdTaken,
  requireRetained,
  scopeSelects,
  supersessionKey,
} from "./rules.js";

// sorted-btree is CommonJS with `exports.default` (see src/store/local.ts).
const BTree: typeof SortedBTree.default = createRequire(import.meta.url)("sorted-btree").default;

/** Listing order: newest first, i.e. ascending in this order is oldest first. */
function compareCursor(a: MemoryCursor, b: MemoryCursor): number {
  if (a.createdAt !== b.createdAt) return a.createdAt - b.createdAt;
  return a.memoryId < b.memoryId ? -1 : a.memoryId > b.memoryId ? 1 : 0;
}

/** One app's memories. */
class AppMemories {
  readonly byId = new Map<string, MemoryRecord>();
  readonly order = new BTree<MemoryCursor, MemoryRecord>(undefined, compareCursor);
  /**
   * The pinned memories alone, in the same order: Recall lists them on
   * every call, and walking the whole app for them cost ~19 ms of CPU at
   * 100,000 memories (1% pinned; bench/memories-scale.ts local).
   */
  readonly pinned = new BTree<MemoryCursor, MemoryRecord>(undefined, compareCursor);
  /** Memories that supersede each other, by exact scope and supersession key. */
  readonly groups = new Map<string, MemoryRecord[]>();
  /** Every memory by exact scope: its terms for BM25, its embedding for cosine. */
  readonly index = new InvertedIndex<string, IndexedMemory>();
  readonly listeners = new Set<MemoryChangeListener>();
  /** The change log: references to written and superseded memories (read as they are now), ids and scope of deleted ones. */
  readonly log: LoggedChange[] = [];
  /** The newest change number, and the newest no longer in the log. */
  head = 0;
  floor = 0;
  /** The dimension of the app's embeddings, set by the first one written. */
  dimension?: number;

  /** Replaces a stored record by a changed copy everywhere it is kept (records handed out never change). */
  replace(old: MemoryRecord, next: MemoryRecord): void {
    this.byId.set(next.memoryId, next);
    this.order.set(old, next);
    if (next.pinned) this.pinned.set(old, next);
    const key = groupKey(old);
    const group = key === undefined ? undefined : this.groups.get(key);
    if (group) group[group.indexOf(old)] = next;
    const indexed = this.index.get(next.memoryId);
    if (indexed) indexed.memory = next;
  }

  add(m: MemoryRecord): void {
    this.byId.set(m.memoryId, m);
    this.order.set(m, m);
    if (m.pinned) this.pinned.set(m, m);
    const key = groupKey(m);
    if (key !== undefined) {
      const group = this.groups.get(key);
      if (group) group.push(m);
      else this.groups.set(key, [m]);
    }
    this.index.add(
      m.memoryId,
      exactScopeKey(m),
      { memory: m, unit: m.embedding && unitVector(m.embedding) },
      lexicalTerms(m),
    );
  }

  remove(m: MemoryRecord): void {
    this.byId.delete(m.memoryId);
    this.order.delete(m);
    this.pinned.delete(m);
    const key = groupKey(m);
    const group = key === undefined ? undefined : this.groups.get(key);
    if (group) {
      group.splice(group.indexOf(m), 1);
      if (group.length === 0) this.groups.delete(key!);
    }
    this.index.remove(m.memoryId);
  }

  /** Numbers a change, keeps it in the change log (the newest MEMORY_CHANGES_RETAINED) and tells the listeners. */
  emit(change: UnnumberedChange): void {
    const seq = ++this.head;
    if (change.kind === "deleted") {
      const stubs = change.memories.map((m) => deletedStub(m.appName, m.memoryId, m.userId, m.agentId, m.sessionId));
      this.log.push({ seq, kind: "deleted", stubs });
    } else {
      this.log.push({ seq, kind: change.kind, memoryId: change.memory.memoryId });
    }
    if (this.log.length > MEMORY_CHANGES_RETAINED) this.floor = this.log.shift()!.seq;
    notifyEach(this.listeners, { ...change, seq } as MemoryChange);
  }
}

/** A change before the app numbers it. */
type UnnumberedChange =
  | { kind: "written" | "superseded"; memory: MemoryRecord }
  | { kind: "deleted"; memories: readonly MemoryRecord[] };

/** One entry of an app's change log. */
type LoggedChange =
  | { seq: number; kind: "written" | "superseded"; memoryId: string }
  | { seq: number; kind: "deleted"; stubs: MemoryRecord[] };

/** The group a memory supersedes within, or undefined when it has no supersession key. */
function groupKey(m: MemoryRecord): string | undefined {
  const key = supersessionKey(m);
  return key === "" ? undefined : `${exactScopeKey(m)}\u0001${key}`;
}

/** A memory as the index keeps it: the record as it is now, and its embedding scaled to length 1 (zeros stay zeros). */
interface IndexedMemory {
  memory: MemoryRecord;
  unit?: Float32Array;
}

/** The vector scaled to length 1, so a dot product is the cosine; all zeros when it is. */
function unitVector(v: readonly number[]): Float32Array {
  let norm = 0;
  for (const x of v) norm += x * x;
  norm = Math.sqrt(norm);
  const unit = new Float32Array(v.length);
  if (norm > 0) for (let i = 0; i < v.length; i++) unit[i] = v[i] / norm;
  return unit;
}

/** The dot product of two vectors of the same length; four sums at once let the CPU overlap the additions. */
function dot(a: Float32Array, b: Float32Array): number {
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  const n = a.length - (a.length % 4);
  for (let i = 0; i < n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (let i = n; i < a.length; i++) s0 += a[i] * b[i];
  return s0 + s1 + s2 + s3;
}

/** Among equal scores, the newer memory first. */
function newerFirst(a: MemoryRecord, b: MemoryRecord): number {
  return compareCursor(a, b);
}

/** Values a scope dimension of a selected memory may take: undefined stands for "absent". */
function allowedValues(match: MemoryScopeFilter["match"], want: string | undefined): Array<string | undefined> | "any" {
  switch (match) {
    case "exact":
      return [want];
    case "visible":
      return want === undefined ? [undefined] : [undefined, want];
    case "within":
      return want === undefined ? "any" : [want];
  }
}

/**
 * The index scopes (exact scopes) the scope filter selects: looked up by key
 * when each dimension allows a value or two, else every scope of the app
 * checked against the filter.
 */
function scopesOf(
  index: InvertedIndex<string, IndexedMemory>,
  filter: MemoryScopeFilter,
): Array<IndexScope<IndexedMemory>> {
  const users = allowedValues(filter.match, filter.userId);
  const agents = allowedValues(filter.match, filter.agentId);
  const sessions = allowedValues(filter.match, filter.sessionId);
  if (users === "any" || agents === "any" || sessions === "any") {
    const selected: Array<IndexScope<IndexedMemory>> = [];
    for (const scope of index.scopes()) {
      const [first] = scope.documents;
      if (first && scopeSelects(filter, first.value.memory)) selected.push(scope);
    }
    return selected;
  }
  const selected: Array<IndexScope<IndexedMemory>> = [];
  for (const userId of users)
    for (const agentId of agents)
      for (const sessionId of sessions) {
        const scope = index.scope(exactScopeKey({ userId, agentId, sessionId }));
        if (scope) selected.push(scope);
      }
  return selected;
}

/** What the filter asks of a memory of a selected scope: nothing when it names no more than a scope, else the whole filter. */
function besidesScope(filter: MemoryFilter): (m: MemoryRecord) => boolean {
  const { scope: _scope, omitEmbeddings: _omit, ...rest } = filter;
  const scopeOnly = Object.values(rest).every((v) => v === undefined || (Array.isArray(v) && v.length === 0));
  return scopeOnly ? () => true : (m) => filterSelects(filter, m);
}

/** The in-process LongTermMemoryStore. */
export class LocalMemories implements LongTermMemoryStore {
  private readonly apps = new Map<string, AppMemories>();

  private app(appName: string): AppMemories {
    let app = this.apps.get(appName);
    if (!app) this.apps.set(appName, (app = new AppMemories()));
    return app;
  }

  async writeMemories(memories: readonly MemoryRecord[]): Promise<MemoryWriteResult> {
    // First every check, then every change: a refused batch changes nothing.
    const dimensions = new Map<string, number>();
    const retries = memories.map((m, i) => {
      if (m.embedding) {
        const app = this.apps.get(m.appName);
        const dimension = dimensions.get(m.appName) ?? app?.dimension ?? m.embedding.length;
        if (m.embedding.length !== dimension)
          throw embeddingDimensionMismatch(`memories[${i}].embedding`, m.embedding.length, dimension);
        dimensions.set(m.appName, dimension);
      }
      const stored = this.apps.get(m.appName)?.byId.get(m.memoryId);
      if (stored && stored.fingerprint !== m.fingerprint) throw memoryIdTaken(`memories[${i}].memory_id`, m.memoryId);
      const earlier = memories.findIndex((o) => o.appName === m.appName && o.memoryId === m.memoryId);
      if (earlier !== i && memories[earlier].fingerprint !== m.fingerprint)
        throw memoryIdTaken(`memories[${i}].memory_id`, m.memoryId);
      return stored;
    });
    const stored: MemoryRecord[] = [];
    const superseded = new Map<string, MemoryRecord>();
    const changes: Array<{ app: AppMemories; change: UnnumberedChange }> = [];
    memories.forEach((input, i) => {
      const app = this.app(input.appName);
      const existing = retries[i] ?? app.byId.get(input.memoryId);
      if (existing) {
        stored.push(existing);
        return;
      }
      let memory = input;
      const key = groupKey(input);
      for (const peer of key === undefined ? [] : [...(app.groups.get(key) ?? [])]) {
        if (peer.validFrom <= input.validFrom) {
          // Valid when the new one starts: its validity ends there.
          if (peer.invalidAt === undefined || peer.invalidAt > input.validFrom) {
            const closed = { ...peer, invalidAt: input.validFrom, supersededBy: input.memoryId };
            app.replace(peer, closed);
            superseded.set(`${closed.appName}\u0000${closed.memoryId}`, closed);
            changes.push({ app, change: { kind: "superseded", memory: closed } });
          }
        } else if (memory.invalidAt === undefined || memory.invalidAt > peer.validFrom) {
          // A later memory of the same key already exists: the new one held only until it began.
          memory = { ...memory, invalidAt: peer.validFrom, supersededBy: peer.memoryId };
        }
      }
      app.add(memory);
      if (memory.embedding) app.dimension ??= memory.embedding.length;
      stored.push(memory);
      changes.push({ app, change: { kind: "written", memory } });
    });
    for (const { app, change } of changes) app.emit(change);
    // Each in its latest state: a memory of the batch may have been closed by a later one of it.
    const latest = (m: MemoryRecord) => this.apps.get(m.appName)!.byId.get(m.memoryId)!;
    return { memories: stored.map(latest), superseded: [...superseded.values()].map(latest) };
  }

  async getMemory(appName: string, memoryId: string): Promise<MemoryRecord | undefined> {
    return this.apps.get(appName)?.byId.get(memoryId);
  }

  async searchMemories(filter: MemoryFilter, query: string, limit: number): Promise<RankedMemory[]> {
    const app = this.apps.get(filter.scope.appName);
    const terms = queryTerms(query);
    if (!app || terms.length === 0) return [];
    const selects = besidesScope(filter);
    return app.index
      .search(scopesOf(app.index, filter.scope), terms, limit, (m) => selects(m.memory))
      .map(({ value, score }) => ({ memory: value.memory, score }));
  }

  async nearestMemories(filter: MemoryFilter, embedding: readonly number[], limit: number): Promise<RankedMemory[]> {
    const app = this.apps.get(filter.scope.appName);
    if (!app || limit <= 0) return [];
    const query = unitVector(embedding);
    const dimension = query.length;
    const selects = besidesScope(filter);
    const best = new TopK<MemoryRecord>(limit, newerFirst);
    for (const scope of scopesOf(app.index, filter.scope)) {
      for (const { value } of scope.documents) {
        const unit = value.unit;
        if (!unit || unit.length !== dimension || !selects(value.memory)) continue;
        best.offer(value.memory, dot(query, unit));
      }
    }
    return best.sorted().map(({ item, score }) => ({ memory: item, score }));
  }

  async listMemories(filter: MemoryFilter, limit: number, after?: MemoryCursor): Promise<MemoryRecord[]> {
    const app = this.apps.get(filter.scope.appName);
    if (!app) return [];
    const out: MemoryRecord[] = [];
    const walked = filter.pinned === true ? app.pinned : app.order;
    for (const [, memory] of walked.entriesReversed(after, undefined, after !== undefined)) {
      if (!filterSelects(filter, memory)) continue;
      out.push(memory);
      if (out.length === limit) break;
    }
    return out;
  }

  async deleteMemories(appName: string, memoryIds: readonly string[]): Promise<MemoryRecord[]> {
    const app = this.apps.get(appName);
    if (!app) return [];
    const removed: MemoryRecord[] = [];
    for (const id of memoryIds) {
      const memory = app.byId.get(id);
      if (!memory) continue;
      app.remove(memory);
      removed.push(memory);
    }
    if (removed.length > 0) app.emit({ kind: "deleted", memories: removed });
    return removed;
  }

  async deleteMemoriesInScope(scope: MemoryScopeFilter): Promise<MemoryRecord[]> {
    const app = this.apps.get(scope.appName);
    if (!app) return [];
    const removed = [...app.byId.values()].filter((m) => scopeSelects(scope, m));
    for (const memory of removed) app.remove(memory);
    if (removed.length > 0) app.emit({ kind: "deleted", memories: removed });
    return removed;
  }

  subscribeMemories(appName: string, listener: MemoryChangeListener): () => void {
    const app = this.app(appName);
    app.listeners.add(listener);
    return () => {
      app.listeners.delete(listener);
      // A watch of an app with no memories (and no change log to resume from) must not leave an empty app behind.
      if (app.listeners.size === 0 && app.byId.size === 0 && app.head === 0 && this.apps.get(appName) === app)
        this.apps.delete(appName);
    };
  }

  async memoryChangeWindow(appName: string): Promise<MemoryChangeWindow> {
    const app = this.apps.get(appName);
    return { head: app?.head ?? 0, floor: app?.floor ?? 0 };
  }

  async readMemoryChanges(appName: string, after: number, limit: number): Promise<MemoryChangePage> {
    const app = this.apps.get(appName);
    requireRetained(after, { head: app?.head ?? 0, floor: app?.floor ?? 0 });
    if (!app) return { changes: [], through: after };
    // The log holds floor+1..head in order: change n sits at n - floor - 1.
    const entries = app.log.slice(after - app.floor, after - app.floor + limit);
    const changes: MemoryChange[] = [];
    for (const entry of entries) {
      if (entry.kind === "deleted") {
        changes.push({ seq: entry.seq, kind: "deleted", memories: entry.stubs });
        continue;
      }
      const memory = app.byId.get(entry.memoryId);
      if (memory) changes.push({ seq: entry.seq, kind: entry.kind, memory });
    }
    return { changes, through: entries.length > 0 ? entries[entries.length - 1].seq : after };
  }

  /** Every memory of (appName, userId), whatever its agent, session or validity: DeleteUserData's share. */
  eraseUser(appName: string, userId: string): number {
    const app = this.apps.get(appName);
    if (!app) return 0;
    const removed = [...app.byId.values()].filter((m) => m.userId === userId);
    for (const memory of removed) app.remove(memory);
    if (removed.length > 0) app.emit({ kind: "deleted", memories: removed });
    return removed.length;
  }

  /** Forgets every listener (the store is closing). */
  close(): void {
    for (const app of this.apps.values()) app.listeners.clear();
  }
}
