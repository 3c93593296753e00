/**
 * Relevance first, over real sockets on the local store: a memory that is
 * clearly the best match for a query ranks first however many newer (and
 * more important) memories were written after it, by keyword and by a
 * near-exact query vector. Importance and recency only break near-ties
 * (src/service/memories/ranking.ts).
 */
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ScopeMatch } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { grpcJsClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { seededRandom } from "../../bench/lib/seeded-random.js";

const APP = `ranking-${process.pid}`;
const DIMENSIONS = 16;
/** Newer memories written after each needle: more than the fusion's candidate list holds. */
const NEWER = 600;
const DAY_MS = 86_400_000;

let server: TestServer;
let client: MemoryClient;
beforeAll(async () => {
  server = await startTestServer();
  client = grpcJsClient(server.address);
});
afterAll(async () => {
  client?.close();
  await server?.stop();
});

function unit(v: number[]): number[] {
  const norm = Math.hypot(...v);
  return v.map((x) => x / norm);
}

/** Writes `needle` a year ago with importance 0.1, then NEWER memories, each newer and more important than it. */
async function writeNeedleThenNewer(
  userId: string,
  needle: { text: string; embedding?: number[] },
  newer: (i: number) => { text: string; embedding?: number[] },
) {
  const now = Date.now();
  await client.writeMemories({
    memories: [
      {
        memoryId: `${userId}-needle`,
        appName: APP,
        userId,
        ...needle,
        importance: 0.1,
        validFrom: timestampFromMs(now - 365 * DAY_MS),
      },
    ],
  });
  for (let first = 0; first < NEWER; first += 100) {
    await client.writeMemories({
      memories: Array.from({ length: 100 }, (_, j) => ({
        memoryId: `${userId}-newer-${first + j}`,
        appName: APP,
        userId,
        ...newer(first + j),
        importance: 0.9,
        validFrom: timestampFromMs(now - DAY_MS + first + j),
      })),
    });
  }
}

describe("a clear best match ranks first, whatever its age and importance", () => {
  it("by keyword: the only memory with every query word beats newer ones sharing one of them", async () => {
    await writeNeedleThenNewer("kira", { text: "Kira keeps her passport in the blue folder for the renewal" }, (i) => ({
      text: `Kira parked the blue car at spot ${i}`,
    }));
    const { results } = await client.searchMemories({
      appName: APP,
      userId: "kira",
      scopeMatch: ScopeMatch.EXACT,
      query: "passport blue folder renewal",
      topK: 5,
    });
    expect(results.map((r) => r.memory?.memoryId)[0]).toBe("kira-needle");
    expect(results[0].lexicalScore).toBeGreaterThan(results[1].lexicalScore);
  });

  it("by a near-exact query vector: the nearest memory beats newer ones farther away", async () => {
    const random = seededRandom(35);
    const vector = () => unit(Array.from({ length: DIMENSIONS }, () => random() * 2 - 1));
    const needle = vector();
    await writeNeedleThenNewer("lev", { text: "Lev's locker code", embedding: needle }, (i) => ({
      text: `Lev note ${i}`,
      embedding: vector(),
    }));
    const query = unit(needle.map((x) => x + (random() * 2 - 1) * 0.02));
    const { results } = await client.searchMemories({
      appName: APP,
      userId: "lev",
      scopeMatch: ScopeMatch.EXACT,
      queryEmbedding: query,
      topK: 5,
    });
    expect(results.map((r) => r.memory?.memoryId)[0]).toBe("lev-needle");
    expect(results[0].vectorScore).toBeGreaterThan(0.99);
  });

  it("by both: a keyword and vector match beats newer memories that match only one of the two as well", async () => {
    const random = seededRandom(36);
    const vector = () => unit(Array.from({ length: DIMENSIONS }, () => random() * 2 - 1));
    const needle = vector();
    await writeNeedleThenNewer("mo", { text: "Mo's allergy is to penicillin", embedding: needle }, (i) => ({
      text: `Mo mentioned an allergy at visit ${i}`,
      embedding: vector(),
    }));
    const query = unit(needle.map((x) => x + (random() * 2 - 1) * 0.02));
    const { results } = await client.searchMemories({
      appName: APP,
      userId: "mo",
      scopeMatch: ScopeMatch.EXACT,
      query: "penicillin allergy",
      queryEmbedding: query,
      topK: 5,
    });
    expect(results.map((r) => r.memory?.memoryId)[0]).toBe("mo-needle");
  });

  it("the priors still settle a tie: of two equally relevant memories, the more important ranks first", async () => {
    await client.writeMemories({
      memories: [
        { memoryId: "tie-low", appName: APP, userId: "nia", text: "Nia likes oolong tea", importance: 0.2 },
        { memoryId: "tie-high", appName: APP, userId: "nia", text: "Nia likes oolong tea", importance: 0.8 },
      ],
    });
    const { results } = await client.searchMemories({
      appName: APP,
      userId: "nia",
      scopeMatch: ScopeMatch.EXACT,
      query: "oolong tea",
    });
    expect(results.map((r) => r.memory?.memoryId)).toEqual(["tie-high", "tie-low"]);
  });
});
