/**
 * The reranker stage (MEMORY_RERANK_URL) over real sockets: the protocol
 * (TEI's and Cohere's request and answer shapes) and the failure behaviour
 * (down, refusing, slow, malformed: the fused order is kept and counted).
 *
 * The reranker here is a local HTTP server whose scores are SCRIPTED, not a
 * model: it ranks texts by whether they contain a marker word. No
 * cross-encoder shipped in a registry package was found, so the stage is
 * untested against a real model (docs/memories.md, "Reranking").
 */
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ScopeMatch } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { grpcJsClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";

const APP = `rerank-${process.pid}`;
/** Texts with this word get the scripted reranker's top score. */
const MARKER = "umbrella";

/** How the scripted reranker answers the next requests. */
type Behaviour = "tei" | "cohere" | "error" | "hang" | "malformed";

interface ScriptedReranker {
  url: string;
  behaviour: Behaviour;
  requests: Record<string, unknown>[];
  close(): Promise<void>;
}

/** A local /rerank endpoint with scripted scores: 1 for a text containing MARKER, else 0.5 − index/1000. */
async function startScriptedReranker(): Promise<ScriptedReranker> {
  const held: http.ServerResponse[] = [];
  const state: ScriptedReranker = { url: "", behaviour: "tei", requests: [], close: async () => {} };
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      const request = JSON.parse(body) as { texts?: string[]; documents?: string[] };
      state.requests.push(request);
      const texts = request.texts ?? request.documents ?? [];
      const scores = texts.map((t, index) => ({ index, score: t.includes(MARKER) ? 1 : 0.5 - index / 1000 }));
      switch (state.behaviour) {
        case "hang":
          held.push(res);
          return;
        case "error":
          res.writeHead(503).end("overloaded");
          return;
        case "malformed":
          res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ scores: [1, 2] }));
          return;
        case "cohere":
          res
            .writeHead(200, { "content-type": "application/json" })
            .end(JSON.stringify({ results: scores.map((s) => ({ index: s.index, relevance_score: s.score })) }));
          return;
        default:
          res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(scores));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/rerank`;
  state.close = async () => {
    for (const res of held) res.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return state;
}

/** Ten memories matching "rain coat"; only the oldest, worst lexical match mentions the marker. */
async function writeMemories(client: MemoryClient, userId: string) {
  await client.writeMemories({
    memories: [
      {
        memoryId: `${userId}-marker`,
        appName: APP,
        userId,
        text: `${userId} keeps an ${MARKER} by the door for rain and a coat in the car boot near the spare wheel`,
      },
      ...Array.from({ length: 9 }, (_, i) => ({
        memoryId: `${userId}-plain-${i}`,
        appName: APP,
        userId,
        text: `${userId} bought a rain coat ${i}`,
      })),
    ],
  });
}

describe("the reranker stage", () => {
  let reranker: ScriptedReranker;
  let server: TestServer;
  let client: MemoryClient;
  beforeAll(async () => {
    reranker = await startScriptedReranker();
    // Long enough for a busy machine to answer in time; the hang case waits it out once.
    server = await startTestServer({ config: { rerankUrl: reranker.url, rerankTimeoutMs: 5000, rerankTopN: 10 } });
    client = grpcJsClient(server.address);
    await writeMemories(client, "ada");
  });
  afterAll(async () => {
    client?.close();
    await server?.stop();
    await reranker?.close();
  });
  const search = () =>
    client.searchMemories({ appName: APP, userId: "ada", scopeMatch: ScopeMatch.EXACT, query: "rain coat", topK: 5 });

  it("reorders the best fused memories by the reranker's scores (TEI: {query, texts} → [{index, score}])", async () => {
    reranker.behaviour = "tei";
    const before = reranker.requests.length;
    const { results } = await search();
    expect(results[0].memory?.memoryId).toBe("ada-marker");
    const request = reranker.requests[before] as { query: string; texts: string[] };
    expect(Object.keys(request).sort()).toEqual(["query", "texts"]);
    expect(request.query).toBe("rain coat");
    // The top N (10) fused candidates are sent, more than top_k: the reranker may lift the fused 10th to first.
    expect(request.texts).toHaveLength(10);
    expect(server.service.longTerm.reranker?.counts.reranked).toBeGreaterThan(0);
  });

  it.each<[Behaviour, string]>([
    ["error", "answers 503"],
    ["malformed", "answers another shape"],
    ["hang", "does not answer within MEMORY_RERANK_TIMEOUT_MS"],
  ])("keeps the fused order and counts a failure when the reranker %s (%s)", async (behaviour) => {
    reranker.behaviour = behaviour;
    const failed = server.service.longTerm.reranker!.counts.failed;
    const { results } = await search();
    expect(results).toHaveLength(5);
    // Fused order: the marker memory matches "rain coat" worst (longest text) and is not first.
    expect(results[0].memory?.memoryId).not.toBe("ada-marker");
    expect(results[0].score).toBeGreaterThanOrEqual(results[1].score);
    expect(server.service.longTerm.reranker!.counts.failed).toBe(failed + 1);
  });
});

describe("the reranker stage with MEMORY_RERANK_MODEL", () => {
  it("speaks Cohere's shape: {model, query, documents} → {results: [{index, relevance_score}]}", async () => {
    const reranker = await startScriptedReranker();
    reranker.behaviour = "cohere";
    const server = await startTestServer({
      config: {
        rerankUrl: reranker.url,
        rerankModel: "rerank-test",
        rerankApiKey: "k-1",
        rerankTimeoutMs: 5000,
        rerankTopN: 50,
      },
    });
    const client = grpcJsClient(server.address);
    try {
      await writeMemories(client, "bo");
      const { results } = await client.searchMemories({
        appName: APP,
        userId: "bo",
        scopeMatch: ScopeMatch.EXACT,
        query: "rain coat",
        topK: 3,
      });
      expect(results.map((r) => r.memory?.memoryId)[0]).toBe("bo-marker");
      expect(results).toHaveLength(3);
      const request = reranker.requests.at(-1) as { model: string; query: string; documents: string[] };
      expect(Object.keys(request).sort()).toEqual(["documents", "model", "query"]);
      expect(request.model).toBe("rerank-test");
      expect(request.documents).toHaveLength(10);
    } finally {
      client.close();
      await server.stop();
      await reranker.close();
    }
  });
});
