/**
 * BM25 relevance ranking with MiniSearch. An index is built per ranked
 * section per call, over exactly the section's candidates, so scores depend
 * only on what the window holds: every store (and a warm or cold server)
 * ranks the same way.
 */
import MiniSearch from "minisearch";

/** Ranks texts by BM25 relevance to a query; returns the score of each text (0 when it does not match). */
export function bm25Scores(texts: readonly string[], query: string): Float64Array {
  const scores = new Float64Array(texts.length);
  const index = new MiniSearch<{ id: number; text: string }>({ fields: ["text"], storeFields: [], idField: "id" });
  index.addAll(texts.map((text, id) => ({ id, text })));
  // Exact terms, any of them (OR): BM25 does the weighting.
  for (const hit of index.search(query, { prefix: false, fuzzy: false, combineWith: "OR" })) scores[hit.id as number] = hit.score;
  return scores;
}
