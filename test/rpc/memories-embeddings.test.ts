/**
 * Long-term memory with MEMORY_EMBEDDINGS_URL set, over real sockets, against
 * a real small model (all-MiniLM-L6-v2 from a PyPI package, served on
 * 127.0.0.1 by test/support/embeddings-server.py): written memories and
 * queries without client vectors are embedded by the server, so a paraphrase
 * finds what no shared word would; an endpoint that is down fails the call
 * UNAVAILABLE and stores nothing; the call's deadline bounds the endpoint.
 */
import { Code } from "@connectrpc/connect";
import { ErrorInfoSchema } from "@engram-memory/client/gen/google/rpc/error_details_pb.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startChaosProxy, type ChaosProxy } from "../support/chaos-proxy.js";
import { errorOf, PROTOCOLS, type MemoryClient } from "../support/clients.js";
import { startEmbeddingsServer, type EmbeddingsServer } from "../support/embeddings-server.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { freePort } from "../support/host.js";

// A first run installs the model's Python environment (see test/support/embeddings-venv.sh).
const SETUP_TIMEOUT_MS = 600_000;

/** What Maria's app remembers: one memory about her pet, others about her that share no word with the question. */
const MARIA = [
  { memoryId: "pet", text: "Maria adopted a beagle named Rex" },
  { memoryId: "job", text: "Maria works night shifts as a nurse in Lisbon" },
  { memoryId: "colour", text: "Maria's favourite colour is green" },
  { memoryId: "sister", text: "Maria's sister lives in Porto" },
  { memoryId: "meetings", text: "The team meets on Mondays at nine" },
];
/** Shares no content word with the pet memory (its lexical terms: pet, does, she, have). */
const PARAPHRASE = "What pet does she have?";

let model: EmbeddingsServer;
let hybrid: TestServer;
let lexical: TestServer;

beforeAll(async () => {
  model = await startEmbeddingsServer();
  [hybrid, lexical] = await Promise.all([
    startTestServer({
      config: {
        embeddingsUrl: model.url,
        embeddingsModel: model.model,
        embeddingsMaxRetries: 0,
        embeddingsTimeoutMs: 30_000,
      },
    }),
    startTestServer(),
  ]);
}, SETUP_TIMEOUT_MS);

afterAll(async () => {
  await Promise.all([hybrid?.stop(), lexical?.stop()]);
  await model?.stop();
});

describe.each(PROTOCOLS)("memories embedded by MEMORY_EMBEDDINGS_URL over %s", (protocol, clientFor) => {
  const app = `embedded-${protocol.length}-${process.pid}`;
  let withModel: MemoryClient;
  let withoutModel: MemoryClient;
  beforeAll(async () => {
    withModel = clientFor(hybrid);
    withoutModel = clientFor(lexical);
    for (const client of [withModel, withoutModel]) {
      await client.writeMemories({ memories: MARIA.map((m) => ({ ...m, appName: app, userId: "maria" })) });
    }
  });
  afterAll(() => {
    withModel?.close();
    withoutModel?.close();
  });

  it("stores the endpoint's vector with each memory written without one", async () => {
    const { memory } = await withModel.getMemory({ appName: app, memoryId: "pet" });
    expect(memory?.embedding).toHaveLength(model.dimension);
    const { memory: plain } = await withoutModel.getMemory({ appName: app, memoryId: "pet" });
    expect(plain?.embedding).toEqual([]);
  });

  it("finds the memory a paraphrase asks about by vector, where lexical ranking alone finds nothing", async () => {
    const { results } = await withModel.searchMemories({ appName: app, userId: "maria", query: PARAPHRASE, topK: 3 });
    expect(results[0]?.memory?.text).toBe("Maria adopted a beagle named Rex");
    expect(results[0]?.lexicalScore).toBe(0);
    expect(results[0]?.vectorScore).toBeGreaterThan(results[1]?.vectorScore ?? 1);
    const { results: lexicalOnly } = await withoutModel.searchMemories({
      appName: app,
      userId: "maria",
      query: PARAPHRASE,
      topK: 3,
    });
    expect(lexicalOnly.map((r) => r.memory?.memoryId)).not.toContain("pet");
  });

  it("recalls the memory a paraphrase asks about within a session's budget", async () => {
    const sessionId = `embedded-recall-${protocol.length}-${process.pid}`;
    await withModel.createSession({ appName: app, userId: "maria", sessionId });
    const recall = await withModel.recall({ sessionId, query: PARAPHRASE, topK: 1, tokenizer: "chars4" });
    expect(recall.memories.map((r) => r.memory?.memoryId)).toEqual(["pet"]);
    expect(recall.text).toContain("Maria adopted a beagle named Rex");
  });

  it("uses the client's query_embedding as given, without asking the endpoint", async () => {
    const { memory } = await withModel.getMemory({ appName: app, memoryId: "colour" });
    const { results } = await withModel.searchMemories({
      appName: app,
      userId: "maria",
      query: PARAPHRASE,
      queryEmbedding: memory!.embedding,
      topK: 1,
    });
    expect(results[0]?.memory?.memoryId).toBe("colour");
    expect(results[0]?.vectorScore).toBeCloseTo(1, 5);
  });
});

describe("memories when the embeddings endpoint is down", () => {
  let server: TestServer;
  let client: MemoryClient;
  const app = `embeddings-down-${process.pid}`;
  beforeAll(async () => {
    // A port nobody listens on: every request is refused at once.
    const port = await freePort();
    server = await startTestServer({
      config: { embeddingsUrl: `http://127.0.0.1:${port}/v1`, embeddingsModel: model.model, embeddingsMaxRetries: 0 },
    });
    client = PROTOCOLS[0][1](server);
  });
  afterAll(async () => {
    client?.close();
    await server?.stop();
  });

  it("fails a write of memories without vectors UNAVAILABLE (EMBEDDINGS_UNAVAILABLE) and stores none of the batch", async () => {
    const err = await errorOf(
      client.writeMemories({
        memories: [
          { appName: app, memoryId: "a", text: "Maria adopted a beagle named Rex" },
          { appName: app, memoryId: "b", text: "Maria is a nurse" },
        ],
      }),
    );
    expect(err.code).toBe(Code.Unavailable);
    expect(err.rawMessage).toBe("the embeddings endpoint is unreachable");
    expect(err.findDetails(ErrorInfoSchema)[0]?.reason).toBe("EMBEDDINGS_UNAVAILABLE");
    const { memories } = await client.listMemories({ appName: app });
    expect(memories).toEqual([]);
  });

  it("stores memories that bring their own vectors, and searches with a client query_embedding", async () => {
    await client.writeMemories({
      memories: [{ appName: app, memoryId: "own", text: "Maria adopted a beagle named Rex", embedding: [1, 0, 0] }],
    });
    const { results } = await client.searchMemories({ appName: app, query: PARAPHRASE, queryEmbedding: [1, 0, 0] });
    expect(results.map((r) => r.memory?.memoryId)).toEqual(["own"]);
  });

  it("fails a search without query_embedding UNAVAILABLE rather than quietly ranking lexically", async () => {
    const err = await errorOf(client.searchMemories({ appName: app, query: PARAPHRASE }));
    expect(err.code).toBe(Code.Unavailable);
    expect(err.findDetails(ErrorInfoSchema)[0]?.reason).toBe("EMBEDDINGS_UNAVAILABLE");
  });

  it("lists memories without an empty-query search touching the endpoint", async () => {
    const { results } = await client.searchMemories({ appName: app, query: "" });
    expect(results.map((r) => r.memory?.memoryId)).toEqual(["own"]);
  });
});

describe("the call's deadline bounds the embeddings endpoint", () => {
  let proxy: ChaosProxy;
  let server: TestServer;
  let client: MemoryClient;
  const app = `embeddings-deadline-${process.pid}`;
  beforeAll(async () => {
    proxy = await startChaosProxy(Number(new URL(model.url).port));
    // The endpoint's own timeout is far longer than the call's deadline: only the deadline can end the wait.
    server = await startTestServer({
      config: {
        embeddingsUrl: `http://127.0.0.1:${proxy.port}/v1`,
        embeddingsModel: model.model,
        embeddingsMaxRetries: 0,
        embeddingsTimeoutMs: 60_000,
      },
    });
    client = PROTOCOLS[0][1](server);
  });
  afterAll(async () => {
    client?.close();
    await server?.stop();
    await proxy?.close();
  });

  it("answers DEADLINE_EXCEEDED soon after a 500 ms deadline while the endpoint is silent, and stores nothing", async () => {
    proxy.set({ kind: "blackhole" });
    const started = Date.now();
    const err = await errorOf(
      client.writeMemories(
        { memories: [{ appName: app, memoryId: "late", text: "Maria adopted a beagle named Rex" }] },
        { timeoutMs: 500 },
      ),
    );
    expect(err.code).toBe(Code.DeadlineExceeded);
    expect(Date.now() - started).toBeLessThan(10_000);
    // The client gives up at its deadline whatever the server does; the server abandoning its request to the endpoint
    // (the proxy sees the connection close) is what shows the deadline reached the embeddings client.
    for (let i = 0; i < 50 && proxy.connections > 0; i++) await new Promise((r) => setTimeout(r, 100));
    expect(proxy.connections).toBe(0);
    proxy.set({ kind: "pass" });
    const { memories } = await client.listMemories({ appName: app });
    expect(memories).toEqual([]);
  });

  it("answers when the endpoint does, within the same deadline (the control)", async () => {
    proxy.set({ kind: "pass" });
    const { memories } = await client.writeMemories(
      { memories: [{ appName: app, memoryId: "on-time", text: "Maria adopted a beagle named Rex" }] },
      { timeoutMs: 20_000 },
    );
    expect(memories[0]?.embedding).toHaveLength(model.dimension);
  });
});
