/**
 * The long-term memory section of `npm run bench` (issue 18, "Quality and
 * speed"), on the local store:
 *
 * - Quality: recall@5 on the labelled evaluation set (bench/memories-eval/),
 *   scored exactly as its README says, once with lexical ranking (no
 *   embeddings) and once hybrid (MEMORY_EMBEDDINGS_URL pointing at the test
 *   model server: all-MiniLM-L6-v2 from a PyPI package). Each run is a fresh
 *   Engram process: every app's memories are written with WriteMemories in
 *   valid_from order (so the server closes superseded ones, checked against
 *   invalidAtOf()), then every question is asked with SearchMemories in the
 *   asker's scope, as_of when it has one, top_k 5.
 * - Speed: SearchMemories and Recall (4k-token budget) latency and server
 *   CPU per call over `memoriesPerApp` synthetic memories of one app, through
 *   the load generator: lexical, hybrid with the client's query vector (the
 *   server's own ranking cost), and hybrid with the endpoint embedding each
 *   query (the model's time included).
 * - The same SearchMemories and Recall points on the shared stores the run
 *   has (PostgreSQL, Redis), at each of `memoriesBackendCounts`: one server
 *   per store, the memories written up to each count in turn. Only the first
 *   `memoriesPerApp` memories carry a vector (embedding 100k texts with the
 *   model takes longer than the run), so the hybrid points run only at counts
 *   where every memory has one; above, the points are lexical.
 */
import { execFileSync } from "node:child_process";
import path from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { SearchMemoriesRequestSchema } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { MemoryService, RecallRequestSchema } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { EmbeddingsClient } from "../src/service/memories/embeddings.js";
import type { LoadResult } from "./lib/closed-loop.js";
import { REPO_ROOT, startEngram, type EngramProcess } from "./lib/processes.js";
import type { LoadSpec } from "./loadgen.js";
import {
  allMemories,
  allQuestions,
  appOfQuestion,
  invalidAtOf,
  isHitAtK,
  loadMemoriesEval,
  recallByCategory,
  wireMemory,
  type EvalQuestion,
  type LoadedMemory,
  type MemoriesEvalSet,
} from "./memories-eval/dataset.js";
import { ensureMem0Venv, ensureVenv, MEM0_PYTHON, PYTHON } from "./peers/peers.js";
import type { MemoriesPeer, MemoriesRecall, MemoriesResult, Point, Profile } from "./types.js";
import { SERVICE } from "./workloads.js";
import { seededRandom } from "./lib/seeded-random.js";

/** The k of recall@k, as the evaluation set's README scores it. */
const TOP_K = 5;
/** Memories per WriteMemories call (the server's MAX_BATCH_MEMORIES). */
const WRITE_BATCH = 100;
/** Distinct queries the speed points cycle through. */
const SPEED_QUERIES = 32;
/** Users the synthetic memories are spread over; half the memories are app-wide. */
const SPEED_USERS = 50;
/** The app of the synthetic memories. */
const SPEED_APP = "bench-memories";
/** Recall's budget in the speed points (the issue's goal is stated for 4k). */
const RECALL_BUDGET = 4000;

/** What the section needs from the runner. */
export interface MemoriesBenchDeps {
  /** The shared stores to measure besides local: the server flags that select each, and the store's processes charged per call. */
  stores: { backend: string; args: string[]; cpuPids: Record<string, number[]> }[];
  /** Runs one closed-loop point through the runner's load generator. */
  load: (spec: Omit<LoadSpec, "durationMs" | "warmupMs">) => Promise<LoadResult>;
  log: (message: string) => void;
  serverNodeArgs: string[];
}

type MemoryClient = Client<typeof MemoryService>;

/** A typed gRPC client of one Engram process (writes and questions; the speed points use the load generator). */
function clientOf(engram: EngramProcess): MemoryClient {
  return createClient(MemoryService, createGrpcTransport({ baseUrl: `http://${engram.address}` }));
}

/** The set cut to its first `n` conversations, with only the questions whose labels all name memories written. */
export function evalSubset(
  set: MemoriesEvalSet,
  n: number | undefined,
): { memories: LoadedMemory[]; questions: EvalQuestion[]; set: MemoriesEvalSet } {
  const cut: MemoriesEvalSet =
    n === undefined ? set : { conversations: set.conversations.slice(0, n), appWideQuestions: set.appWideQuestions };
  const memories = allMemories(cut);
  const written = new Set(memories.map((m) => m.memory_id));
  const questions = allQuestions(cut).filter((q) =>
    [...q.gold.memory_ids, ...(q.gold.not_valid_ids ?? [])].every((id) => written.has(id)),
  );
  return { memories, questions, set: cut };
}

/** Writes the memories app by app in valid_from order; counts the closures against invalidAtOf(), and the memories stored with a vector. */
async function writeEvalMemories(
  client: MemoryClient,
  memories: LoadedMemory[],
): Promise<Pick<MemoriesRecall, "supersededAsPredicted" | "embeddedMemories">> {
  const predicted = invalidAtOf(memories);
  let embeddedMemories = 0;
  const closed = new Map<string, number>();
  const byApp = new Map<string, LoadedMemory[]>();
  for (const m of memories) byApp.set(m.app_name, [...(byApp.get(m.app_name) ?? []), m]);
  for (const appMemories of byApp.values()) {
    // Stable: memories of the same instant keep the set's order.
    const ordered = [...appMemories].sort((a, b) => Date.parse(a.valid_from) - Date.parse(b.valid_from));
    for (let start = 0; start < ordered.length; start += WRITE_BATCH) {
      const written = await client.writeMemories(
        { memories: ordered.slice(start, start + WRITE_BATCH).map(wireMemory) },
        { timeoutMs: 120_000 },
      );
      embeddedMemories += written.memories.filter((m) => m.embedding.length > 0).length;
      const superseded = written.superseded;
      for (const m of superseded) closed.set(m.memoryId, m.invalidAt ? Number(timestampMs(m.invalidAt)) : Number.NaN);
    }
  }
  let ok = 0;
  for (const [id, at] of predicted) if (closed.get(id) === Date.parse(at)) ok++;
  const unexpected = [...closed.keys()].filter((id) => !predicted.has(id)).length;
  return { supersededAsPredicted: { ok, of: predicted.size, unexpected }, embeddedMemories };
}

/** Asks every question; the ids each search returned, best first. */
async function askEvalQuestions(
  client: MemoryClient,
  set: MemoriesEvalSet,
  questions: EvalQuestion[],
): Promise<string[][]> {
  const ranked: string[][] = [];
  for (const q of questions) {
    const { results } = await client.searchMemories(
      {
        appName: appOfQuestion(set, q) ?? "",
        userId: q.asker.user_id,
        agentId: q.asker.agent_id,
        sessionId: q.asker.session_id,
        query: q.query,
        topK: TOP_K,
        asOf: q.as_of ? timestampFromMs(Date.parse(q.as_of)) : undefined,
        includeInvalid: false,
      },
      { timeoutMs: 60_000 },
    );
    ranked.push(results.map((r) => r.memory?.memoryId ?? ""));
  }
  return ranked;
}

/** recall@5 over the questions of odd- (or even-) numbered conversations. */
function recallOfHalf(questions: EvalQuestion[], ranked: string[][], odd: boolean): number {
  const picked = questions.flatMap((q, i) => {
    const number = q.conversation ? Number(/^c(\d+)/.exec(q.conversation)?.[1]) : Number.NaN;
    return Number.isFinite(number) && number % 2 === (odd ? 1 : 0) ? [i] : [];
  });
  if (picked.length === 0) return 0;
  return picked.filter((i) => isHitAtK(ranked[i], questions[i].gold, TOP_K)).length / picked.length;
}

/** One ranking's pass over the set on a fresh server. */
async function measureRecall(
  ranking: MemoriesRecall["ranking"],
  env: Record<string, string>,
  subset: ReturnType<typeof evalSubset>,
  deps: MemoriesBenchDeps,
): Promise<MemoriesRecall> {
  const engram = await startEngram(["--memory-type", "local"], env, deps.serverNodeArgs);
  const client = clientOf(engram);
  try {
    let started = Date.now();
    const { supersededAsPredicted, embeddedMemories } = await writeEvalMemories(client, subset.memories);
    const writeSeconds = (Date.now() - started) / 1000;
    started = Date.now();
    const ranked = await askEvalQuestions(client, subset.set, subset.questions);
    const askSeconds = (Date.now() - started) / 1000;
    const withNotValid = subset.questions.flatMap((q, i) => ((q.gold.not_valid_ids ?? []).length > 0 ? [i] : []));
    const avoided = withNotValid.filter(
      (i) => !subset.questions[i].gold.not_valid_ids!.some((id) => ranked[i].includes(id)),
    ).length;
    const result: MemoriesRecall = {
      ranking,
      recall: recallByCategory(subset.questions, ranked, TOP_K),
      oddConversations: recallOfHalf(subset.questions, ranked, true),
      evenConversations: recallOfHalf(subset.questions, ranked, false),
      notValidAvoided: { ok: avoided, of: withNotValid.length },
      supersededAsPredicted,
      embeddedMemories,
      writeSeconds: Math.round(writeSeconds * 10) / 10,
      askSeconds: Math.round(askSeconds * 10) / 10,
    };
    const r = result.recall;
    deps.log(
      `memories ${ranking}: recall@5 ${r.all.toFixed(3)} (odd ${result.oddConversations.toFixed(3)}, even ${result.evenConversations.toFixed(3)}); ` +
        Object.entries(r)
          .filter(([k]) => k !== "all")
          .map(([k, v]) => `${k} ${v.toFixed(3)}`)
          .join(", ") +
        `; not-valid avoided ${avoided}/${withNotValid.length}; superseded as predicted ${supersededAsPredicted.ok}/${supersededAsPredicted.of} (${supersededAsPredicted.unexpected} unexpected); ${embeddedMemories} stored with a vector`,
    );
    return result;
  } finally {
    await engram.stop();
  }
}

const PEOPLE = ["Maria", "Kenji", "Aisha", "Tom", "Priya", "Lars", "Chen", "Fatima", "Diego", "Noor", "Olga", "Sam"];
const VERBS = [
  "prefers",
  "booked",
  "dislikes",
  "is learning",
  "bought",
  "cancelled",
  "recommended",
  "is allergic to",
  "moved",
  "visited",
  "asked about",
  "forgot",
];
const THINGS = [
  "green tea",
  "a window seat",
  "the Lisbon flight",
  "Spanish verbs",
  "a road bike",
  "the dentist appointment",
  "sourdough bread",
  "peanuts",
  "the team standup",
  "the Porto office",
  "the quarterly budget",
  "a beagle puppy",
  "the router firmware",
  "night shifts",
  "the gym membership",
  "vegetarian recipes",
];
const WHEN = [
  "last week",
  "on Monday",
  "in March",
  "for the conference",
  "after the release",
  "before the holidays",
  "this morning",
  "every Friday",
];

/** Synthetic memory texts: person, verb, thing, time; reproducible. */
export function syntheticTexts(count: number, seed: number): string[] {
  const random = seededRandom(seed);
  const pick = <T>(list: readonly T[]) => list[Math.floor(random() * list.length)]!;
  return Array.from(
    { length: count },
    (_, i) => `${pick(PEOPLE)} ${pick(VERBS)} ${pick(THINGS)} ${pick(WHEN)} (note ${i})`,
  );
}

/** Writes synthetic memories `from` onwards (half app-wide, half over SPEED_USERS users) with the given vectors, where there is one. */
async function writeSynthetic(
  client: MemoryClient,
  texts: string[],
  vectors: number[][] | undefined,
  from = 0,
): Promise<void> {
  for (let start = from; start < texts.length; start += WRITE_BATCH) {
    const memories = texts.slice(start, start + WRITE_BATCH).map((text, j) => {
      const i = start + j;
      return {
        memoryId: `syn-${i}`,
        appName: SPEED_APP,
        userId: i % 2 === 0 ? undefined : `user-${i % SPEED_USERS}`,
        text,
        importance: (i % 10) / 10,
        embedding: vectors?.[i],
      };
    });
    await client.writeMemories({ memories }, { timeoutMs: 120_000 });
  }
}

/** The texts, queries and vectors the speed points share. */
interface SpeedCorpus {
  texts: string[];
  queries: string[];
  vectors: number[][];
  queryVectors: number[][];
}

/** A count as the points name it: 10k, 100k. */
function countLabel(count: number): string {
  return count >= 1000 ? `${count / 1000}k` : String(count);
}

/** The Recall session (20 events of user-1) the Recall points ask in. */
async function createRecallSession(client: MemoryClient, queries: string[]): Promise<string> {
  const sessionId = "bench-recall";
  await client.getOrCreateSession({ sessionId, appName: SPEED_APP, userId: "user-1" });
  await client.addEvents({
    sessionId,
    events: queries.slice(0, 20).map((q, i) => ({
      eventType: i % 2 === 0 ? "user_message" : "agent_response",
      content: { kind: { case: "stringValue", value: q } },
    })),
  });
  return sessionId;
}

/** Encoded SearchMemories / Recall requests, one a query, with or without the client's query vector. */
function speedRequests(corpus: SpeedCorpus, sessionId: string) {
  return {
    search: (withVector: boolean) =>
      corpus.queries.map((query, i) =>
        Buffer.from(
          toBinary(
            SearchMemoriesRequestSchema,
            create(SearchMemoriesRequestSchema, {
              appName: SPEED_APP,
              query,
              topK: 10,
              queryEmbedding: withVector ? corpus.queryVectors[i] : [],
            }),
          ),
        ).toString("base64"),
      ),
    recall: (withVector: boolean) =>
      corpus.queries.map((query, i) =>
        Buffer.from(
          toBinary(
            RecallRequestSchema,
            create(RecallRequestSchema, {
              sessionId,
              query,
              tokenBudget: RECALL_BUDGET,
              topK: 10,
              queryEmbedding: withVector ? corpus.queryVectors[i] : [],
            }),
          ),
        ).toString("base64"),
      ),
  };
}

/** Runs each workload at each concurrency (after one unmeasured call) against one server. */
async function runSpeedPoints(
  engram: EngramProcess,
  backend: string,
  cpuPids: Record<string, number[]>,
  workloads: { name: string; method: string; requests: string[] }[],
  concurrencies: number[],
  deps: MemoriesBenchDeps,
): Promise<Point[]> {
  const points: Point[] = [];
  for (const workload of workloads) {
    // One call first: what a method loads on first use (the tokenizer) is not what is measured.
    await deps.load({
      target: engram.address,
      method: SERVICE + workload.method,
      requests: workload.requests.slice(0, 1),
      cpuPids: {},
      concurrency: 1,
    });
    for (const concurrency of concurrencies) {
      const result = await deps.load({
        target: engram.address,
        method: SERVICE + workload.method,
        requests: workload.requests,
        cycle: true,
        cpuPids: { server: [engram.pid], ...cpuPids },
        concurrency,
      });
      const point: Point = { kind: "server", backend, workload: workload.name, concurrency, ...result };
      points.push(point);
      const backendCpu = result.cpuUsPerCall.postgres ?? result.cpuUsPerCall.redis;
      deps.log(
        `${backend.padEnd(18)} ${workload.name.padEnd(60)} c=${String(concurrency).padEnd(3)} ${String(result.throughput).padStart(7)}/s p50 ${result.p50Us}µs p99 ${result.p99Us}µs server cpu ${result.cpuUsPerCall.server}µs` +
          `${backendCpu !== undefined ? ` ${backend} cpu ${backendCpu}µs` : ""}${result.errors ? ` errors ${result.errors}: ${result.firstError}` : ""}`,
      );
    }
  }
  return points;
}

/** The speed workloads at one count: lexical, and hybrid with the client's query vector where every memory written has a vector. */
function countWorkloads(label: string, hybrid: boolean, requests: ReturnType<typeof speedRequests>) {
  const { search, recall } = requests;
  return [
    { name: `SearchMemories lexical (${label} memories)`, method: "SearchMemories", requests: search(false) },
    ...(hybrid
      ? [
          {
            name: `SearchMemories hybrid, client query vector (${label} memories)`,
            method: "SearchMemories",
            requests: search(true),
          },
        ]
      : []),
    { name: `Recall 4k budget lexical (${label} memories)`, method: "Recall", requests: recall(false) },
    ...(hybrid
      ? [
          {
            name: `Recall 4k budget hybrid, client query vector (${label} memories)`,
            method: "Recall",
            requests: recall(true),
          },
        ]
      : []),
  ];
}

/**
 * SearchMemories and Recall points on the local store: at each of
 * `memoriesLocalCounts` on one server without the endpoint (the memories
 * written up to each count in turn), then at `memoriesPerApp` on one with
 * the endpoint embedding each query.
 */
async function measureLocalSpeed(
  profile: Profile,
  corpus: SpeedCorpus,
  embeddings: { url: string; model: string },
  deps: MemoriesBenchDeps,
): Promise<Point[]> {
  const concurrencies = profile.concurrencies.filter((c) => c <= 16);
  const points: Point[] = [];
  let engram = await startEngram(["--memory-type", "local"], {}, deps.serverNodeArgs);
  try {
    const client = clientOf(engram);
    const requests = speedRequests(corpus, await createRecallSession(client, corpus.queries));
    let written = 0;
    for (const count of [...profile.memoriesLocalCounts].sort((a, b) => a - b)) {
      const started = Date.now();
      await writeSynthetic(client, corpus.texts.slice(0, count), corpus.vectors, written);
      written = count;
      deps.log(
        `memories speed: local now has ${count} memories (written in ${((Date.now() - started) / 1000).toFixed(1)} s)`,
      );
      points.push(
        ...(await runSpeedPoints(
          engram,
          "local",
          {},
          countWorkloads(countLabel(count), count <= corpus.vectors.length, requests),
          concurrencies,
          deps,
        )),
      );
    }
  } finally {
    await engram.stop();
  }
  const count = profile.memoriesPerApp;
  const label = countLabel(count);
  engram = await startEngram(
    ["--memory-type", "local"],
    { MEMORY_EMBEDDINGS_URL: embeddings.url, MEMORY_EMBEDDINGS_MODEL: embeddings.model },
    deps.serverNodeArgs,
  );
  try {
    const client = clientOf(engram);
    await writeSynthetic(client, corpus.texts.slice(0, count), corpus.vectors);
    const { search, recall } = speedRequests(corpus, await createRecallSession(client, corpus.queries));
    const workloads = [
      {
        name: `SearchMemories hybrid, query embedded by the endpoint (${label} memories)`,
        method: "SearchMemories",
        requests: search(false),
      },
      {
        name: `Recall 4k budget hybrid, query embedded by the endpoint (${label} memories)`,
        method: "Recall",
        requests: recall(false),
      },
    ];
    points.push(...(await runSpeedPoints(engram, "local", {}, workloads, concurrencies, deps)));
  } finally {
    await engram.stop();
  }
  return points;
}

/** The same points on one shared store, at each of the profile's counts: one server, memories written up to each count in turn. */
async function measureStoreSpeed(
  store: MemoriesBenchDeps["stores"][number],
  profile: Profile,
  corpus: SpeedCorpus,
  deps: MemoriesBenchDeps,
): Promise<Point[]> {
  const concurrencies = profile.concurrencies.filter((c) => c <= 16);
  const points: Point[] = [];
  const engram = await startEngram(store.args, {}, deps.serverNodeArgs);
  const client = clientOf(engram);
  try {
    const requests = speedRequests(corpus, await createRecallSession(client, corpus.queries));
    let written = 0;
    for (const count of [...profile.memoriesBackendCounts].sort((a, b) => a - b)) {
      const started = Date.now();
      await writeSynthetic(client, corpus.texts.slice(0, count), corpus.vectors, written);
      written = count;
      deps.log(
        `memories speed: ${store.backend} now has ${count} memories (written in ${((Date.now() - started) / 1000).toFixed(1)} s)`,
      );
      const workloads = countWorkloads(countLabel(count), count <= corpus.vectors.length, requests);
      points.push(...(await runSpeedPoints(engram, store.backend, store.cpuPids, workloads, concurrencies, deps)));
    }
  } finally {
    await engram.stop();
  }
  return points;
}

/** Every speed point: local at `memoriesPerApp`, then each shared store at each of `memoriesBackendCounts`. */
async function measureSpeed(
  profile: Profile,
  embeddings: { url: string; model: string },
  deps: MemoriesBenchDeps,
): Promise<Point[]> {
  const largest = Math.max(
    profile.memoriesPerApp,
    ...profile.memoriesLocalCounts,
    ...(deps.stores.length > 0 ? profile.memoriesBackendCounts : []),
  );
  const texts = syntheticTexts(largest, 18);
  const queries = syntheticTexts(SPEED_QUERIES, 81).map((t) => t.replace(/ \(note \d+\)$/, "?"));
  const embedder = new EmbeddingsClient({
    url: embeddings.url,
    model: embeddings.model,
    timeoutMs: 120_000,
    batchSize: 256,
    maxRetries: 2,
  });
  const started = Date.now();
  const vectors = await embedder.embed(texts.slice(0, profile.memoriesPerApp));
  const queryVectors = await embedder.embed(queries);
  deps.log(
    `memories speed: ${vectors.length} synthetic memories embedded in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  const corpus: SpeedCorpus = { texts, queries, vectors, queryVectors };
  const points = await measureLocalSpeed(profile, corpus, embeddings, deps);
  for (const store of deps.stores) points.push(...(await measureStoreSpeed(store, profile, corpus, deps)));
  return points;
}

/**
 * Google ADK's InMemoryMemoryService on the same questions
 * (bench/peers/adk_memories.py, in bench/.venv with the session peer's
 * google-adk pin): its recall@5 and in-process search latency.
 */
function runAdkMemoriesPeer(deps: MemoriesBenchDeps): MemoriesPeer {
  const peer = "google-adk InMemoryMemoryService";
  if (!ensureVenv(deps.log))
    return { peer, note: "bench/.venv could not be created (pip install of google-adk failed)" };
  try {
    const out = execFileSync(PYTHON, [path.join(REPO_ROOT, "bench/peers/adk_memories.py")], {
      encoding: "utf8",
      timeout: 300_000,
    });
    const result = JSON.parse(out.trim().split("\n").pop()!) as MemoriesPeer;
    deps.log(
      `memories peer ${peer}: recall@5 ${JSON.stringify(result.recall_at_5)}; search p50 ${result.search_p50_us}µs p99 ${result.search_p99_us}µs`,
    );
    return result;
  } catch (err) {
    return { peer, note: `did not run: ${err instanceof Error ? err.message : String(err)}` };
  }
}

/**
 * The mem0 library on the same questions (bench/peers/mem0_memories.py, in
 * .tmp/mem0-venv with the MEM0_REQUIREMENTS pins): infer=False, local Qdrant,
 * and the section's own embeddings server as its embedder, so it ranks with
 * the model Engram's hybrid run uses. Its recall@5 and in-process search latency.
 */
function runMem0MemoriesPeer(
  embeddings: { url: string; model: string; dimension: number },
  deps: MemoriesBenchDeps,
): MemoriesPeer {
  const peer = "mem0 Memory (infer=False, local Qdrant)";
  if (!ensureMem0Venv(deps.log))
    return { peer, note: ".tmp/mem0-venv could not be created (pip install of mem0ai failed)" };
  try {
    const args = [
      path.join(REPO_ROOT, "bench/peers/mem0_memories.py"),
      "--embeddings-url",
      embeddings.url,
      "--model",
      embeddings.model,
      "--dims",
      String(embeddings.dimension),
    ];
    const out = execFileSync(MEM0_PYTHON, args, { encoding: "utf8", timeout: 900_000 });
    const result = JSON.parse(out.trim().split("\n").pop()!) as MemoriesPeer;
    deps.log(
      `memories peer ${peer}: recall@5 ${JSON.stringify(result.recall_at_5)}; search p50 ${result.search_p50_us}µs p99 ${result.search_p99_us}µs`,
    );
    return result;
  } catch (err) {
    return { peer, note: `did not run: ${err instanceof Error ? err.message : String(err)}` };
  }
}

/** The whole section; starts (and stops) its own embeddings model server. */
export async function runMemoriesBench(profile: Profile, deps: MemoriesBenchDeps): Promise<MemoriesResult> {
  const { startEmbeddingsServer } = await import("../test/support/embeddings-server.js");
  const model = await startEmbeddingsServer();
  try {
    const subset = evalSubset(loadMemoriesEval(), profile.memoriesEvalConversations);
    deps.log(
      `memories: ${subset.set.conversations.length} conversations, ${subset.memories.length} memories, ${subset.questions.length} questions; embeddings ${model.model} at ${model.url}`,
    );
    const recall = [
      await measureRecall("lexical", {}, subset, deps),
      await measureRecall(
        "hybrid",
        { MEMORY_EMBEDDINGS_URL: model.url, MEMORY_EMBEDDINGS_MODEL: model.model },
        subset,
        deps,
      ),
    ];
    // The peer only on the whole set: the cut sets of the small profiles (and npm test) install nothing.
    const peers =
      profile.memoriesEvalConversations === undefined
        ? [runAdkMemoriesPeer(deps), runMem0MemoriesPeer(model, deps)]
        : [];
    const speed = await measureSpeed(profile, model, deps);
    return {
      conversations: subset.set.conversations.length,
      memories: subset.memories.length,
      questions: subset.questions.length,
      embeddingModel: model.model,
      recall,
      memoriesPerApp: profile.memoriesPerApp,
      speed,
      peers,
    };
  } finally {
    await model.stop();
  }
}
