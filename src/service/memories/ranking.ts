/**
 * Hybrid ranking of memories: reciprocal rank fusion (RRF, Cormack et al.
 * 2009) of the lexical (BM25) ranking and the vector ranking where
 * embeddings exist, then a small bounded boost from importance and recency.
 * RRF needs no calibration between BM25 scores and cosine similarities: only
 * ranks count, so a new signal (an embedding endpoint, a store's own vector
 * index) plugs in as one more list. The lists are weighted (vectors more
 * than words, as measured) and the sum divided by the weights present.
 *
 * Relevance comes first. The priors add at most MAX_PRIOR_BOOST, less than
 * the gap between the first and second place of any relevance list, so a
 * memory that leads the others in relevance stays ahead of every newer or
 * more important one; the priors decide near-ties (equal or almost equal
 * fused scores, deeper in the lists where ranks lie closer together) and
 * order an empty query's memories. Two half-weight rank lists of importance
 * and recency, as before, added up to a full extra vote: an old memory that
 * matched best lost to newer ones that matched worse.
 */
import type { MemoryRecord, RankedMemory } from "../../store/types.js";

/** RRF's k: damps the weight of the first ranks (60, as in the paper and most engines). */
export const RRF_K = 60;
/**
 * Weights of the relevance rankings. Vectors weigh more than words: on the
 * evaluation set (bench/memories-eval/retrieval.ts, all-MiniLM-L6-v2 and
 * stemmed BM25) lexical weight 0.3 beat plain RRF (1 and 1), the vectors
 * alone and BM25 alone at recall@5, @10 and @25, on the dialog turns and on
 * the memories; 1 and 0.5 each lost to the vectors alone on the turns.
 */
export const LEXICAL_WEIGHT = 0.3;
export const VECTOR_WEIGHT = 1;
/**
 * The most importance and recency together add to a fused score. Scores are
 * divided by the weights of the lists present (one list alone scores as
 * plain RRF), so the smallest step between ranks 1 and 2 of one list is the
 * lexical one next to vectors: 0.3/1.3 · (1/61 − 1/62) ≈ 0.000061. Below it,
 * the priors never lift a memory past one that ranks ahead of it in a list
 * and no worse in the other.
 */
export const MAX_PRIOR_BOOST = 0.00005;
/** Shares of the boost: importance (0–1 as written) and recency (newest candidate 1, oldest 0). */
const IMPORTANCE_SHARE = 0.5;
const RECENCY_SHARE = 0.5;

/** A memory with its fused score and the scores it was fused from. */
export interface FusedMemory {
  memory: MemoryRecord;
  score: number;
  /** BM25 score; 0 when the query did not match it. */
  lexicalScore: number;
  /** Cosine similarity to the query embedding; 0 when not ranked by vector. */
  vectorScore: number;
}

/** The rankings to fuse: each best first. */
export interface Rankings {
  lexical: readonly RankedMemory[];
  /** Present when the query had an embedding and the store vector search. */
  vector?: readonly RankedMemory[];
  /** Candidates with no relevance ranking (an empty query): ranked by the priors alone. */
  unranked?: readonly MemoryRecord[];
}

/** Ranks 1.. by a value, higher first; equal values share a rank (dense), so a signal nobody differs in changes nothing. */
function denseRanks(memories: readonly MemoryRecord[], value: (m: MemoryRecord) => number): Map<MemoryRecord, number> {
  const distinct = [...new Set(memories.map(value))].sort((a, b) => b - a);
  const rankOf = new Map(distinct.map((v, i) => [v, i + 1]));
  return new Map(memories.map((m) => [m, rankOf.get(value(m))!]));
}

/** A ranking's score by memory, for denseRanks. */
function scoreOf(ranking: readonly RankedMemory[]): (m: MemoryRecord) => number {
  const scores = new Map(ranking.map((r) => [r.memory, r.score]));
  return (m) => scores.get(m)!;
}

/** Fuses the rankings into the best `topK`, best first; ties go to the newer memory, then the smaller id. */
export function fuseRankings(rankings: Rankings, topK: number): FusedMemory[] {
  const byId = new Map<string, FusedMemory>();
  const entry = (memory: MemoryRecord) => {
    let fused = byId.get(memory.memoryId);
    if (!fused) byId.set(memory.memoryId, (fused = { memory, score: 0, lexicalScore: 0, vectorScore: 0 }));
    return fused;
  };
  // Equal scores share a rank: which of two equally relevant memories a store lists first must not decide.
  const lexicalRanks = denseRanks(
    rankings.lexical.map((r) => r.memory),
    scoreOf(rankings.lexical),
  );
  for (const r of rankings.lexical) {
    const fused = entry(r.memory);
    fused.lexicalScore = r.score;
    fused.score += LEXICAL_WEIGHT / (RRF_K + lexicalRanks.get(r.memory)!);
  }
  const vector = rankings.vector ?? [];
  const vectorRanks = denseRanks(
    vector.map((r) => r.memory),
    scoreOf(vector),
  );
  for (const r of vector) {
    const fused = entry(r.memory);
    fused.vectorScore = r.score;
    fused.score += VECTOR_WEIGHT / (RRF_K + vectorRanks.get(r.memory)!);
  }
  const weights = (rankings.lexical.length > 0 ? LEXICAL_WEIGHT : 0) + (vector.length > 0 ? VECTOR_WEIGHT : 0);
  if (weights > 0) for (const fused of byId.values()) fused.score /= weights;
  for (const m of rankings.unranked ?? []) entry(m);
  const candidates = [...byId.values()].map((f) => f.memory);
  // Recency by rank among the candidates, not by age: a scope written years ago still has a newest memory.
  const recency = denseRanks(candidates, (m) => m.validFrom);
  const oldest = Math.max(1, ...recency.values());
  for (const fused of byId.values()) {
    const importance = Math.min(1, Math.max(0, fused.memory.importance));
    const newness = oldest === 1 ? 1 : (oldest - recency.get(fused.memory)!) / (oldest - 1);
    fused.score += MAX_PRIOR_BOOST * (IMPORTANCE_SHARE * importance + RECENCY_SHARE * newness);
  }
  return [...byId.values()]
    .sort(
      (a, b) =>
        b.score - a.score ||
        b.memory.validFrom - a.memory.validFrom ||
        (a.memory.memoryId < b.memory.memoryId ? -1 : 1),
    )
    .slice(0, topK);
}
