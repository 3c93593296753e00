/**
 * The needle bench (issue 35): can a memory still be found once many newer
 * ones share its user's scope? On any store, opened by the server's own
 * settings (--memory-type and its URL, as `npm start` takes them):
 *
 * 1. NEEDLES hand-written memories (each with one rare word, a real
 *    all-MiniLM-L6-v2 embedding from the test embedding server) are written
 *    first, a year back;
 * 2. then filler up to `--count` memories in the same user's scope, newer
 *    and more important: the evaluation set's memory and dialog texts, cycled
 *    and numbered (real lexical distractors), each with a synthetic vector
 *    (one of 1,000 random unit vectors, as the issue allows, so loading 1M
 *    does not wait on the model); `--filler-vectors real` gives each the
 *    real MiniLM vector of its text instead (the model embeds each distinct
 *    text once): then the filler holds paraphrases of its own, and the
 *    figure measures the model as much as the store;
 * 3. each needle is searched through the service's ranking (what
 *    SearchMemories returns), top 5: by a keyword query (its rare word and a
 *    common one) and by a paraphrase sharing no rare word, with the
 *    paraphrase's MiniLM embedding as the query vector (hybrid).
 * It prints the share of needles in the top 5 for each, the write time and
 * the search latency.
 *
 *   node --import tsx bench/memories-needles.ts [--count 100000] [--memory-type local|redis|postgres]
 *     [--redis-url URL | --postgres-url URL] [--key-prefix P] [server flags…]
 *
 * `npm run bench -- --only needles [--needles-count 100k] [--backends local,redis,postgres]`
 * runs it on each backend the run starts.
 */
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { WriteMemoriesRequestSchema } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { loadConfig } from "../src/config.js";
import { DEFAULT_SERVICE_LIMITS } from "../src/service/limits.js";
import { EmbeddingsClient } from "../src/service/memories/embeddings.js";
import { LongTermMemoryService } from "../src/service/memories/service.js";
import { openStore } from "../src/store/index.js";
import type { MemoryFilter } from "../src/store/types.js";
import { startEmbeddingsServer } from "../test/support/embeddings-server.js";
import { seededRandom } from "./lib/seeded-random.js";
import { allMemories, loadMemoriesEval } from "./memories-eval/dataset.js";

const APP = "needles";
const USER = "nora";
const WRITE_BATCH = 100;
const TOP = 5;
const DAY_MS = 86_400_000;

/** Each needle: its text, a keyword query (its rare word and a common one), a paraphrase sharing no rare word. */
const NEEDLES: { text: string; keyword: string; paraphrase: string }[] = [
  {
    text: "Nora's spare house key is hidden under the blue Quillfeather flowerpot",
    keyword: "Quillfeather key",
    paraphrase: "where can I find a backup way into her home?",
  },
  {
    text: "Nora is allergic to Zembrosil, a common antibiotic",
    keyword: "Zembrosil allergy",
    paraphrase: "which medicine must her doctor avoid prescribing?",
  },
  {
    text: "Nora's grandmother was born in the village of Ostravelka",
    keyword: "Ostravelka born",
    paraphrase: "what is the birthplace of her gran?",
  },
  {
    text: "Nora keeps her passport in the Hallowmere filing cabinet",
    keyword: "Hallowmere passport",
    paraphrase: "where is her travel document stored?",
  },
  {
    text: "Nora's cat Pimblewick needs thyroid tablets twice a day",
    keyword: "Pimblewick tablets",
    paraphrase: "what medication does her pet take?",
  },
  {
    text: "Nora's wifi password is written on the back of the Trellinor router",
    keyword: "Trellinor password",
    paraphrase: "how does a guest get onto the internet at her place?",
  },
  {
    text: "Nora ordered a Vantaskel standing desk that arrives on Friday",
    keyword: "Vantaskel desk",
    paraphrase: "what office furniture is being delivered?",
  },
  {
    text: "Nora's dentist is Dr Okonkwo-Brisbane at the harbour clinic",
    keyword: "Okonkwo-Brisbane dentist",
    paraphrase: "who looks after her teeth?",
  },
  {
    text: "Nora wants her ashes scattered at Glenvarrow bay",
    keyword: "Glenvarrow ashes",
    paraphrase: "what are her wishes after she dies?",
  },
  {
    text: "Nora's daughter plays the Marimbula in the school band",
    keyword: "Marimbula band",
    paraphrase: "which instrument does her child perform with?",
  },
  {
    text: "Nora paid the Fenwiddle plumber 340 pounds for the boiler repair",
    keyword: "Fenwiddle plumber",
    paraphrase: "how much did fixing the heating cost?",
  },
  {
    text: "Nora's running club meets at Brackenthorpe park on Sundays",
    keyword: "Brackenthorpe club",
    paraphrase: "where does she go jogging with a group at the weekend?",
  },
  {
    text: "Nora cannot eat Sorvelline cheese because of lactose",
    keyword: "Sorvelline cheese",
    paraphrase: "which dairy product makes her ill?",
  },
  {
    text: "Nora's car registration is KX19 Dravel",
    keyword: "Dravel registration",
    paraphrase: "what number plate does her vehicle have?",
  },
  {
    text: "Nora's favourite novel is The Lanternwright of Sesk",
    keyword: "Lanternwright novel",
    paraphrase: "which book does she love most?",
  },
  {
    text: "Nora's landlord Mr Abernethy-Quoll raises the rent every April",
    keyword: "Abernethy-Quoll rent",
    paraphrase: "when does the cost of her flat go up?",
  },
  {
    text: "Nora learnt to sail on the Yarrowmede reservoir as a teenager",
    keyword: "Yarrowmede sail",
    paraphrase: "where did she first take a boat out when young?",
  },
  {
    text: "Nora's brother Teodric works night shifts at the bakery",
    keyword: "Teodric shifts",
    paraphrase: "what hours does her sibling work?",
  },
  {
    text: "Nora's bike lock combination is stored in the Ferncastle app",
    keyword: "Ferncastle lock",
    paraphrase: "how does she unlock her bicycle?",
  },
  {
    text: "Nora's wedding anniversary dinner is booked at Calloway Vesk restaurant",
    keyword: "Vesk anniversary",
    paraphrase: "where is the celebration meal for her marriage?",
  },
];

const OWN_FLAGS = ["count", "filler-vectors"];
const { values, tokens } = parseArgs({
  options: { count: { type: "string", default: "100000" }, "filler-vectors": { type: "string", default: "synthetic" } },
  strict: false,
  tokens: true,
});
const realFillerVectors = values["filler-vectors"] === "real";
if (!realFillerVectors && values["filler-vectors"] !== "synthetic")
  throw new Error(`--filler-vectors: expected synthetic or real, got ${String(values["filler-vectors"])}`);
const count = Number(String(values.count).replace(/k$/i, "000").replace(/m$/i, "000000"));
if (!Number.isInteger(count) || count < NEEDLES.length)
  throw new Error(
    `--count: expected a count of at least ${NEEDLES.length} (e.g. 100k, 1m), got ${String(values.count)}`,
  );
// Every other flag is the server's own: the store and its URL, as `npm start` takes them.
const serverArgs = process.argv
  .slice(2)
  .filter(
    (_, i) =>
      !tokens!.some(
        (t) =>
          t.kind === "option" &&
          OWN_FLAGS.includes(t.name) &&
          (t.index === i || (t.value !== undefined && t.inlineValue === false && t.index + 1 === i)),
      ),
  );
const config = loadConfig(serverArgs, process.env);

/** `n` random unit vectors of `dimensions`, from a fixed seed. */
function syntheticVectors(n: number, dimensions: number): number[][] {
  const random = seededRandom(35);
  return Array.from({ length: n }, () => {
    const v = Array.from({ length: dimensions }, () => random() * 2 - 1);
    const norm = Math.hypot(...v);
    return v.map((x) => x / norm);
  });
}

const embeddingServer = await startEmbeddingsServer();
const store = await openStore(config);
try {
  const embeddings = new EmbeddingsClient({
    url: embeddingServer.url,
    model: embeddingServer.model,
    timeoutMs: 120_000,
    batchSize: 64,
    maxRetries: 0,
  });
  const service = new LongTermMemoryService(store, { limits: DEFAULT_SERVICE_LIMITS, heartbeatMs: 1000 });
  const set = loadMemoriesEval();
  const fillerTexts = [
    ...new Set([
      ...allMemories(set).map((m) => m.text),
      ...set.conversations.flatMap((c) => c.sessions.flatMap((s) => s.events.map((e) => e.text))),
    ]),
  ];
  console.log(
    `store ${config.memoryType}: ${NEEDLES.length} needles, then ${count - NEEDLES.length} filler memories (${fillerTexts.length} distinct texts, ${realFillerVectors ? "their MiniLM vectors" : "synthetic vectors"}) in one user's scope`,
  );
  const fillerVectors = realFillerVectors ? await embeddings.embed(fillerTexts) : syntheticVectors(1000, 384);
  const needleVectors = await embeddings.embed(NEEDLES.map((n) => n.text));
  const paraphraseVectors = await embeddings.embed(NEEDLES.map((n) => n.paraphrase));
  const now = Date.now();
  let started = performance.now();
  await service.writeMemories(
    create(WriteMemoriesRequestSchema, {
      memories: NEEDLES.map((n, i) => ({
        memoryId: `needle-${i}`,
        appName: APP,
        userId: USER,
        text: n.text,
        importance: 0.1,
        embedding: needleVectors[i],
        validFrom: timestampFromMs(now - 365 * DAY_MS + i),
      })),
    }),
  );
  for (let first = 0; first < count - NEEDLES.length; first += WRITE_BATCH) {
    const n = Math.min(WRITE_BATCH, count - NEEDLES.length - first);
    await service.writeMemories(
      create(WriteMemoriesRequestSchema, {
        memories: Array.from({ length: n }, (_, j) => {
          const i = first + j;
          const k = i % fillerTexts.length;
          const embedding = fillerVectors[i % fillerVectors.length];
          return {
            memoryId: `filler-${i}`,
            appName: APP,
            userId: USER,
            text: `${fillerTexts[k]} (${i})`,
            importance: 0.9,
            embedding,
            validFrom: timestampFromMs(now - 300 * DAY_MS + i),
          };
        }),
      }),
    );
    if ((first / WRITE_BATCH) % 200 === 0 && first > 0)
      console.log(`  ${first + NEEDLES.length} written (${((performance.now() - started) / 1000).toFixed(0)} s)`);
  }
  const writeSeconds = (performance.now() - started) / 1000;
  const filter: MemoryFilter = {
    scope: { appName: APP, userId: USER, match: "visible" },
    asOf: Date.now(),
    omitEmbeddings: true,
  };
  const found = { keyword: 0, paraphrase: 0 };
  const ms: number[] = [];
  const misses: string[] = [];
  for (const [i, needle] of NEEDLES.entries()) {
    for (const kind of ["keyword", "paraphrase"] as const) {
      started = performance.now();
      const ranked = await service.rank({
        filter,
        query: kind === "keyword" ? needle.keyword : needle.paraphrase,
        topK: TOP,
        embedding: kind === "paraphrase" ? paraphraseVectors[i] : undefined,
      });
      ms.push(performance.now() - started);
      if (ranked.some((r) => r.memory.memoryId === `needle-${i}`)) found[kind]++;
      else
        misses.push(
          `${kind} "${kind === "keyword" ? needle.keyword : needle.paraphrase}" (top: ${ranked[0]?.memory.text.slice(0, 60)})`,
        );
    }
  }
  ms.sort((a, b) => a - b);
  const pct = (n: number) => `${((100 * n) / NEEDLES.length).toFixed(0)}%`;
  console.log(
    `needles ${config.memoryType} at ${count} (${realFillerVectors ? "real" : "synthetic"} filler vectors): keyword top ${TOP} ${found.keyword}/${NEEDLES.length} (${pct(found.keyword)}), ` +
      `paraphrase (MiniLM, hybrid) top ${TOP} ${found.paraphrase}/${NEEDLES.length} (${pct(found.paraphrase)}); ` +
      `written in ${writeSeconds.toFixed(0)} s; search p50 ${ms[Math.floor(ms.length / 2)].toFixed(1)} ms, max ${ms[ms.length - 1].toFixed(1)} ms`,
  );
  for (const miss of misses) console.log(`  missed: ${miss}`);
} finally {
  await store.close();
  await embeddingServer.stop();
}
