/**
 * BM25 relevance ranking with MiniSearch. An index holds exactly the ranked
 * section's candidates, so scores depend only on what the window holds: every
 * store (and a warm or cold server) ranks the same way. Indexes are kept by a
 * digest of their texts, so asking again over an unchanged window (another
 * query, another budget) only searches.
 */
import { createHash } from "node:crypto";
import { LRUCache } from "lru-cache";
import MiniSearch from "minisearch";

type Index = MiniSearch<{ id: number; text: string }>;

/** Builds a BM25 index over texts (ids are their positions). */
function buildIndex(texts: readonly string[]): Index {
  const index: Index = new MiniSearch({ fields: ["text"], storeFields: [], idField: "id" });
  index.addAll(texts.map((text, id) => ({ id, text })));
  return index;
}

/** Scores texts by BM25 relevance to a query, reusing indexes of texts seen before. */
export class Bm25Ranker {
  private readonly indexes = new LRUCache<string, Index>({ max: 8 });
  /** By the caller's candidate list, when it hands the same list again (a cached window): no digest needed. */
  private readonly byList = new WeakMap<object, Index>();

  /**
   * The score of each text (0 when it does not match the query). `list`, when
   * given, is an immutable object standing for exactly these texts.
   */
  scores(texts: readonly string[], query: string, list?: object): Float64Array {
    let index = list ? this.byList.get(list) : undefined;
    if (!index) {
      const digest = createHash("sha256");
      for (const t of texts) digest.update(t).update("\u0000");
      const key = digest.digest("base64");
      index = this.indexes.get(key);
      if (!index) this.indexes.set(key, (index = buildIndex(texts)));
      if (list) this.byList.set(list, index);
    }
    const scores = new Float64Array(texts.length);
    // Exact terms, any of them (OR): BM25 does the weighting.
    for (const hit of index.search(query, { prefix: false, fuzzy: false, combineWith: "OR" }))
      scores[hit.id as number] = hit.score;
    return scores;
  }
}
