/**
 * Retrieval quality of the evaluation set, in one run, on the local store in
 * this process: recall@5/10/25 of the evidence for Engram's lexical ranking
 * (the store's searchMemories), its vector ranking (nearestMemories), its
 * fused ranking (the service's rank: what SearchMemories returns), and three
 * baselines computed here over exactly the memories the search may consider
 * (visible to the asker, valid at as_of or now): plain BM25 (k1 1.2, b 0.75)
 * over the shared analyzer's stemmed terms, exact cosine over the same
 * vectors, and plain RRF (k 60) of those two.
 *
 * Two corpora:
 * - memories: the set's 820 memories as written (supersession by key/fact),
 *   each question's evidence its gold memories;
 * - turns: every dialog turn of the set written as one app-wide memory
 *   ("<speaker>: <text>", valid from its timestamp), the app's five
 *   conversations in one pool (~310 turns), each question's evidence the
 *   turns its gold memories were extracted from (source from_seq..to_seq);
 *   this is how long-conversation benchmarks (LoCoMo) score retrieval.
 * Recall of the evidence at k: the share of a question's evidence in the top
 * k, averaged over questions. Vectors: all-MiniLM-L6-v2 through the test
 * embedding server (test/support/embeddings-server.ts).
 *
 *   node --import tsx bench/memories-eval/retrieval.ts [turns|memories|both]
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { WriteMemoriesRequestSchema, type MemorySchema } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { DEFAULT_SERVICE_LIMITS } from "../../src/service/limits.js";
import { EmbeddingsClient } from "../../src/service/memories/embeddings.js";
import { LongTermMemoryService } from "../../src/service/memories/service.js";
import { cosine } from "../../src/store/memories/rules.js";
import { RRF_K } from "../../src/service/memories/ranking.js";
import { analyze, queryTerms } from "../../src/store/memories/analyzer.js";
import { LocalStore } from "../../src/store/local.js";
import type { MemoryFilter, MemoryRecord } from "../../src/store/types.js";
import { startEmbeddingsServer } from "../../test/support/embeddings-server.js";
import { REPO_ROOT } from "../lib/processes.js";
import {
  allMemories,
  allQuestions,
  appOfQuestion,
  loadMemoriesEval,
  wireMemory,
  type EvalQuestion,
  type MemoriesEvalSet,
} from "./dataset.js";

/** The k of recall@k reported. */
const KS = [5, 10, 25] as const;
const DEPTH = Math.max(...KS);
const WRITE_BATCH = 100;

/** One ranking's ids per question, best first. */
type Ranked = string[][];
/** The rankings compared, in report order. */
const RANKINGS = [
  "BM25 (stemmed), baseline",
  "vectors, baseline",
  "RRF of the two, baseline",
  "Engram lexical",
  "Engram vector",
  "Engram fused",
] as const;

interface Corpus {
  name: string;
  /** Written to the store in order, with their vectors. */
  memories: MessageInitShape<typeof MemorySchema>[];
  questions: { question: EvalQuestion; filter: MemoryFilter; evidence: Set<string> }[];
}

/** BM25 over analyzed terms: the baseline lexical ranking of a pool. */
function bm25(pool: readonly MemoryRecord[], query: string): string[] {
  const k1 = 1.2;
  const b = 0.75;
  const docs = pool.map((m) =>
    analyze(m.fact ? `${m.text} ${m.fact.subject} ${m.fact.predicate} ${m.fact.object}` : m.text),
  );
  const avg = docs.reduce((s, d) => s + d.length, 0) / Math.max(1, docs.length);
  const terms = queryTerms(query);
  const df = new Map(terms.map((t) => [t, docs.filter((d) => d.includes(t)).length]));
  return pool
    .map((m, i) => {
      const d = docs[i];
      let score = 0;
      for (const t of terms) {
        const tf = d.filter((x) => x === t).length;
        if (tf === 0) continue;
        const n = df.get(t)!;
        const idf = Math.log(1 + (pool.length - n + 0.5) / (n + 0.5));
        score += (idf * tf * (k1 + 1)) / (tf + k1 * (1 - b + (b * d.length) / avg));
      }
      return { id: m.memoryId, score };
    })
    .filter((r) => r.score > 0)
    .sort((x, y) => y.score - x.score || (x.id < y.id ? -1 : 1))
    .map((r) => r.id);
}

function byCosine(pool: readonly MemoryRecord[], query: readonly number[]): string[] {
  return pool
    .filter((m) => m.embedding)
    .map((m) => ({ id: m.memoryId, score: cosine(m.embedding!, query) }))
    .sort((x, y) => y.score - x.score || (x.id < y.id ? -1 : 1))
    .map((r) => r.id);
}

/** Plain RRF (k 60) of ranked id lists. */
function rrf(...lists: readonly string[][]): string[] {
  const scores = new Map<string, number>();
  for (const list of lists) list.forEach((id, i) => scores.set(id, (scores.get(id) ?? 0) + 1 / (RRF_K + i + 1)));
  return [...scores].sort((x, y) => y[1] - x[1] || (x[0] < y[0] ? -1 : 1)).map(([id]) => id);
}

/** Mean share of each question's evidence in its top k. */
function evidenceRecall(ranked: Ranked, evidence: readonly Set<string>[], k: number): number {
  let sum = 0;
  ranked.forEach((ids, i) => {
    const top = new Set(ids.slice(0, k));
    sum += [...evidence[i]].filter((id) => top.has(id)).length / evidence[i].size;
  });
  return sum / ranked.length;
}

function askerFilter(set: MemoriesEvalSet, q: EvalQuestion): MemoryFilter {
  return {
    scope: {
      appName: appOfQuestion(set, q) ?? "",
      userId: q.asker.user_id,
      agentId: q.asker.agent_id,
      sessionId: q.asker.session_id,
      match: "visible",
    },
    asOf: q.as_of ? Date.parse(q.as_of) : Date.now(),
  };
}

function memoriesCorpus(set: MemoriesEvalSet): Corpus {
  const ordered = [...allMemories(set)].sort((a, b) => Date.parse(a.valid_from) - Date.parse(b.valid_from));
  return {
    name: "memories",
    memories: ordered.map(wireMemory),
    questions: allQuestions(set).map((question) => ({
      question,
      filter: askerFilter(set, question),
      evidence: new Set(question.gold.memory_ids),
    })),
  };
}

function turnsCorpus(set: MemoriesEvalSet): Corpus {
  const turns: MessageInitShape<typeof MemorySchema>[] = [];
  for (const c of set.conversations) {
    for (const s of c.sessions) {
      for (const e of s.events) {
        turns.push({
          memoryId: `${s.session_id}#${e.seq}`,
          appName: `turns-${c.app_name}`,
          text: `${e.role === "user" ? s.user_id : s.agent_id}: ${e.text}`,
          validFrom: timestampFromMs(Date.parse(e.timestamp)),
          source: { sessionId: s.session_id, fromSeq: BigInt(e.seq), toSeq: BigInt(e.seq) },
        });
      }
    }
  }
  turns.sort((a, b) => Number(a.validFrom!.seconds) - Number(b.validFrom!.seconds));
  const memories = new Map(allMemories(set).map((m) => [m.memory_id, m]));
  const questions = allQuestions(set).flatMap((question) => {
    const evidence = new Set<string>();
    for (const id of question.gold.memory_ids) {
      const source = memories.get(id)!.source;
      for (let seq = source.from_seq; seq <= source.to_seq; seq++) evidence.add(`${source.session_id}#${seq}`);
    }
    if (evidence.size === 0) return [];
    const app = `turns-${appOfQuestion(set, question) ?? ""}`;
    const filter: MemoryFilter = {
      scope: { appName: app, match: "within" },
      asOf: question.as_of ? Date.parse(question.as_of) : Date.now(),
    };
    return [{ question, filter, evidence }];
  });
  return { name: "turns", memories: turns, questions };
}

/** Vectors of texts, kept in .tmp between runs (the model is the run's slowest part). */
async function embedCached(embeddings: EmbeddingsClient, texts: readonly string[]): Promise<number[][]> {
  const file = path.join(REPO_ROOT, ".tmp", "memories-eval-vectors.json");
  const cache: Record<string, number[]> = existsSync(file) ? JSON.parse(readFileSync(file, "utf8")) : {};
  const missing = [...new Set(texts.filter((t) => !(t in cache)))];
  if (missing.length > 0) {
    const vectors = await embeddings.embed(missing);
    missing.forEach((t, i) => (cache[t] = vectors[i]));
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, JSON.stringify(cache));
  }
  return texts.map((t) => cache[t]);
}

async function measure(
  corpus: Corpus,
  embeddings: EmbeddingsClient,
): Promise<Record<(typeof RANKINGS)[number], number[]>> {
  const store = new LocalStore({ maxSessions: 0, maxSessionEvents: 0 });
  const service = new LongTermMemoryService(store, { limits: DEFAULT_SERVICE_LIMITS, heartbeatMs: 1000 });
  const vectors = await embedCached(
    embeddings,
    corpus.memories.map((m) => m.text!),
  );
  corpus.memories.forEach((m, i) => (m.embedding = vectors[i]));
  for (let start = 0; start < corpus.memories.length; start += WRITE_BATCH) {
    await service.writeMemories(
      create(WriteMemoriesRequestSchema, { memories: corpus.memories.slice(start, start + WRITE_BATCH) }),
    );
  }
  const queryVectors = await embedCached(
    embeddings,
    corpus.questions.map((q) => q.question.query),
  );
  const ranked = Object.fromEntries(RANKINGS.map((r) => [r, [] as Ranked])) as Record<
    (typeof RANKINGS)[number],
    Ranked
  >;
  for (const [i, { question, filter }] of corpus.questions.entries()) {
    const qv = queryVectors[i];
    const pool = await store.memories.listMemories(filter, 1_000_000);
    const lexicalBaseline = bm25(pool, question.query);
    const vectorBaseline = byCosine(pool, qv);
    ranked["BM25 (stemmed), baseline"].push(lexicalBaseline);
    ranked["vectors, baseline"].push(vectorBaseline);
    ranked["RRF of the two, baseline"].push(rrf(lexicalBaseline, vectorBaseline));
    const ids = (rows: readonly { memory: MemoryRecord }[]) => rows.map((r) => r.memory.memoryId);
    ranked["Engram lexical"].push(ids(await store.memories.searchMemories(filter, question.query, DEPTH)));
    ranked["Engram vector"].push(ids(await store.memories.nearestMemories!(filter, qv, DEPTH)));
    ranked["Engram fused"].push(ids(await service.rank({ filter, query: question.query, topK: DEPTH, embedding: qv })));
  }
  await store.close();
  const evidence = corpus.questions.map((q) => q.evidence);
  return Object.fromEntries(RANKINGS.map((r) => [r, KS.map((k) => evidenceRecall(ranked[r], evidence, k))])) as Record<
    (typeof RANKINGS)[number],
    number[]
  >;
}

const which = process.argv[2] ?? "both";
const set = loadMemoriesEval();
const server = await startEmbeddingsServer();
try {
  const embeddings = new EmbeddingsClient({
    url: server.url,
    model: server.model,
    timeoutMs: 120_000,
    batchSize: 64,
    maxRetries: 0,
  });
  const corpora = [
    which !== "memories" ? turnsCorpus(set) : undefined,
    which !== "turns" ? memoriesCorpus(set) : undefined,
  ].filter((c): c is Corpus => c !== undefined);
  for (const corpus of corpora) {
    const started = Date.now();
    const result = await measure(corpus, embeddings);
    console.log(
      `\n${corpus.name}: ${corpus.memories.length} written, ${corpus.questions.length} questions (${((Date.now() - started) / 1000).toFixed(0)} s)`,
    );
    console.log(`| Ranking | ${KS.map((k) => `recall@${k}`).join(" | ")} |`);
    console.log(`| --- | ${KS.map(() => "---").join(" | ")} |`);
    for (const r of RANKINGS) console.log(`| ${r} | ${result[r].map((v) => (100 * v).toFixed(1)).join(" | ")} |`);
  }
} finally {
  await server.stop();
}
