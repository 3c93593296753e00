/**
 * A reference lexical ranking over the evaluation set, without a server: for
 * each question, the memories a correct search may consider (visible to the
 * asker, valid at as_of or now) ranked by the context assembler's BM25
 * (Bm25Ranker). It is the floor the bench's lexical figure should reach, and it
 * shows that lexical overlap alone does not answer the set.
 *
 *   node --import tsx bench/memories-eval/lexical-reference.ts
 */
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Bm25Ranker } from "../../src/service/context/retrieval.js";
import {
  QUESTION_CATEGORIES,
  allMemories,
  allQuestions,
  appOfQuestion,
  invalidAtOf,
  isValidAt,
  isVisibleTo,
  loadMemoriesEval,
  recallByCategory,
  type MemoriesEvalSet,
} from "./dataset.js";

/** For each question of allQuestions(set), the ids BM25 ranks (matching memories only, best first). */
export function lexicalReferenceRanking(set: MemoriesEvalSet): string[][] {
  const memories = allMemories(set);
  const invalidAt = invalidAtOf(memories);
  const ranker = new Bm25Ranker();
  return allQuestions(set).map((question) => {
    const app = appOfQuestion(set, question) ?? "";
    const candidates = memories.filter(
      (m) => isVisibleTo(m, app, question.asker) && isValidAt(m, invalidAt.get(m.memory_id), question.as_of),
    );
    const scores = ranker.scores(
      candidates.map((m) => m.text),
      question.query,
    );
    return candidates
      .map((m, i) => ({ id: m.memory_id, score: scores[i] }))
      .filter((c) => c.score > 0)
      .sort((a, b) => b.score - a.score)
      .map((c) => c.id);
  });
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const set = loadMemoriesEval();
  const recall = recallByCategory(allQuestions(set), lexicalReferenceRanking(set));
  console.log(`recall@5, BM25 over scope- and validity-filtered candidates: ${recall.all.toFixed(3)}`);
  for (const category of QUESTION_CATEGORIES) console.log(`  ${category.padEnd(12)} ${recall[category].toFixed(3)}`);
}
