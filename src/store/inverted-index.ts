/**
 * An in-process inverted index with exact BM25 over scopes: the local
 * store's search engine, for long-term memories and for events. Documents
 * live in scopes (a memory's exact scope, an event's user); a search names
 * the scopes the caller may see, and every BM25 statistic (document count,
 * average length, document frequency) is taken over those scopes alone, so
 * a caller's scores never reveal what other tenants wrote.
 *
 * Terms come from the shared analyzer (src/store/memories/analyzer.ts);
 * this module only counts them. Removal is lazy: a removed document is
 * marked dead and dropped from a posting list once the dead outnumber the
 * live, so add and remove cost O(distinct terms) amortized.
 */

/** BM25's term frequency saturation. */
const K1 = 1.2;
/** BM25's length normalization. */
const B = 0.75;

/** The documents of one term in one scope. */
interface Posting<V> {
  term: string;
  documents: Array<IndexedDocument<V>>;
  /** Occurrences of the term in each document, parallel to `documents`. */
  frequencies: number[];
  /** Live documents in `documents`: the term's document frequency in this scope. */
  live: number;
}

/** A document as the index keeps it. */
export interface IndexedDocument<V> {
  readonly value: V;
  readonly scope: IndexScope<V>;
  /** Terms of the document, repeats counted. */
  readonly length: number;
  /** Insertion order: among equal scores the newer document ranks first. */
  readonly order: number;
  readonly postings: Array<Posting<V>>;
  alive: boolean;
  /** The search that last scored the document, and its score there (NaN: refused by that search's filter). */
  searchedBy: number;
  score: number;
}

/** One scope's documents and the BM25 aggregates over them. */
export class IndexScope<V> {
  documentCount = 0;
  totalLength = 0;
  readonly documents = new Set<IndexedDocument<V>>();
  readonly postings = new Map<string, Posting<V>>();

  constructor(readonly key: string) {}
}

/** A document found by a search. */
export interface ScoredValue<V> {
  value: V;
  score: number;
}

/** An inverted index of values of type V under keys of type K, in scopes named by strings. */
export class InvertedIndex<K, V> {
  private readonly byKey = new Map<K, IndexedDocument<V>>();
  private readonly scopesByKey = new Map<string, IndexScope<V>>();
  private added = 0;
  private searches = 0;

  /** Every scope holding a document. */
  scopes(): IterableIterator<IndexScope<V>> {
    return this.scopesByKey.values();
  }

  /** The scope of that key, if it holds a document. */
  scope(key: string): IndexScope<V> | undefined {
    return this.scopesByKey.get(key);
  }

  /** Documents indexed. */
  get size(): number {
    return this.byKey.size;
  }

  /** Indexes a value with its analyzed terms (repeats kept); a key already present is replaced. */
  add(key: K, scopeKey: string, value: V, terms: readonly string[]): void {
    this.remove(key);
    let scope = this.scopesByKey.get(scopeKey);
    if (!scope) this.scopesByKey.set(scopeKey, (scope = new IndexScope<V>(scopeKey)));
    const counts = new Map<string, number>();
    for (const term of terms) counts.set(term, (counts.get(term) ?? 0) + 1);
    const document: IndexedDocument<V> = {
      value,
      scope,
      length: terms.length,
      order: this.added++,
      postings: [],
      alive: true,
      searchedBy: 0,
      score: 0,
    };
    for (const [term, count] of counts) {
      let posting = scope.postings.get(term);
      if (!posting) scope.postings.set(term, (posting = { term, documents: [], frequencies: [], live: 0 }));
      posting.documents.push(document);
      posting.frequencies.push(count);
      posting.live++;
      document.postings.push(posting);
    }
    scope.documentCount++;
    scope.totalLength += terms.length;
    scope.documents.add(document);
    this.byKey.set(key, document);
  }

  /** The value kept under a key. */
  get(key: K): V | undefined {
    return this.byKey.get(key)?.value;
  }

  /** Forgets a key; false when absent. */
  remove(key: K): boolean {
    const document = this.byKey.get(key);
    if (!document) return false;
    this.byKey.delete(key);
    document.alive = false;
    const scope = document.scope;
    scope.documentCount--;
    scope.totalLength -= document.length;
    scope.documents.delete(document);
    for (const posting of document.postings) {
      posting.live--;
      if (posting.live === 0) scope.postings.delete(posting.term);
      else if (posting.documents.length > 2 * posting.live + 8) compact(posting);
    }
    if (scope.documentCount === 0) this.scopesByKey.delete(scope.key);
    return true;
  }

  /**
   * The best `limit` values of the scopes that `accept` admits, by BM25 of
   * the (distinct) query terms, best first; values matching no term are left
   * out. The statistics are those of `scopes` alone.
   */
  search(
    scopes: readonly IndexScope<V>[],
    terms: readonly string[],
    limit: number,
    accept: (value: V) => boolean,
  ): Array<ScoredValue<V>> {
    let documentCount = 0;
    let totalLength = 0;
    for (const scope of scopes) {
      documentCount += scope.documentCount;
      totalLength += scope.totalLength;
    }
    if (documentCount === 0 || limit <= 0) return [];
    const averageLength = totalLength / documentCount || 1;
    // Scores accumulate on the documents themselves, stamped with this search's number:
    // a Map from document to score cost ~0.5 µs a posting. NaN marks a document `accept` refused.
    const search = ++this.searches;
    const touched: Array<IndexedDocument<V>> = [];
    for (const term of new Set(terms)) {
      const postings: Array<Posting<V>> = [];
      let frequency = 0;
      for (const scope of scopes) {
        const posting = scope.postings.get(term);
        if (posting) {
          postings.push(posting);
          frequency += posting.live;
        }
      }
      if (frequency === 0) continue;
      const idf = Math.log(1 + (documentCount - frequency + 0.5) / (frequency + 0.5));
      const lengthWeight = (K1 * B) / averageLength;
      const baseWeight = K1 * (1 - B);
      for (const posting of postings) {
        const { documents, frequencies } = posting;
        for (let i = 0; i < documents.length; i++) {
          const document = documents[i];
          if (!document.alive) continue;
          if (document.searchedBy !== search) {
            document.searchedBy = search;
            document.score = accept(document.value) ? 0 : NaN;
            touched.push(document);
          }
          const tf = frequencies[i];
          document.score += (idf * tf * (K1 + 1)) / (tf + baseWeight + lengthWeight * document.length);
        }
      }
    }
    const best = new TopK<IndexedDocument<V>>(limit, (a, b) => a.order - b.order);
    for (const document of touched) if (document.score > 0) best.offer(document, document.score);
    return best.sorted().map(({ item, score }) => ({ value: item.value, score }));
  }
}

/** Drops a posting list's dead documents. */
function compact<V>(posting: Posting<V>): void {
  const documents: Array<IndexedDocument<V>> = [];
  const frequencies: number[] = [];
  for (let i = 0; i < posting.documents.length; i++) {
    if (!posting.documents[i].alive) continue;
    documents.push(posting.documents[i]);
    frequencies.push(posting.frequencies[i]);
  }
  posting.documents = documents;
  posting.frequencies = frequencies;
}

/**
 * The best `limit` items offered, by score and then by `tieBreak` (greater
 * is better): a binary min-heap, so picking k of n costs O(n log k).
 */
export class TopK<T> {
  private readonly heap: Array<{ item: T; score: number }> = [];

  constructor(
    private readonly limit: number,
    private readonly tieBreak: (a: T, b: T) => number,
  ) {}

  /** Negative when a ranks below b. */
  private compare(a: { item: T; score: number }, b: { item: T; score: number }): number {
    return a.score - b.score || this.tieBreak(a.item, b.item);
  }

  offer(item: T, score: number): void {
    const heap = this.heap;
    const entry = { item, score };
    if (heap.length < this.limit) {
      heap.push(entry);
      let i = heap.length - 1;
      while (i > 0) {
        const parent = (i - 1) >> 1;
        if (this.compare(heap[i], heap[parent]) >= 0) break;
        [heap[i], heap[parent]] = [heap[parent], heap[i]];
        i = parent;
      }
      return;
    }
    if (this.limit === 0 || this.compare(entry, heap[0]) <= 0) return;
    heap[0] = entry;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let least = i;
      if (left < heap.length && this.compare(heap[left], heap[least]) < 0) least = left;
      if (right < heap.length && this.compare(heap[right], heap[least]) < 0) least = right;
      if (least === i) break;
      [heap[i], heap[least]] = [heap[least], heap[i]];
      i = least;
    }
  }

  /** The items kept, best first. */
  sorted(): Array<{ item: T; score: number }> {
    return [...this.heap].sort((a, b) => this.compare(b, a));
  }
}
