/**
 * The embeddings client against a real small model: all-MiniLM-L6-v2 from a
 * PyPI package, served on 127.0.0.1 by the OpenAI-compatible test server
 * (test/support/embeddings-server.py). Similarities below are the model's
 * own; nothing here is a random or scripted vector. Faults come from a real
 * proxy in front of it (test/support/chaos-proxy.ts) or a port nobody
 * listens on.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, describeConfig, loadConfig } from "../../src/config.js";
import { MemoryError } from "../../src/errors.js";
import {
  EmbeddingsClient,
  embeddingsClientFromConfig,
  type EmbeddingsSettings,
} from "../../src/service/memories/embeddings.js";
import { cosineSimilarity, MAX_EMBEDDING_DIMENSION, validateEmbedding } from "../../src/service/memories/similarity.js";
import { startChaosProxy, type ChaosMode } from "../support/chaos-proxy.js";
import { startEmbeddingsServer, type EmbeddingsServer } from "../support/embeddings-server.js";
import { freePort } from "../support/host.js";

/** The MemoryError a promise rejects with (fails the test if it resolves or throws anything else). */
async function memoryErrorOf(p: Promise<unknown>): Promise<MemoryError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(MemoryError);
  return err as MemoryError;
}

// A first run installs the model's Python environment (about 20 s, see test/support/embeddings-venv.sh).
const SETUP_TIMEOUT_MS = 600_000;

let server: EmbeddingsServer;
let startedInMs = 0;

function client(overrides: Partial<EmbeddingsSettings> = {}): EmbeddingsClient {
  return new EmbeddingsClient({
    url: server.url,
    model: server.model,
    timeoutMs: 20_000,
    batchSize: 64,
    maxRetries: 0,
    ...overrides,
  });
}

beforeAll(async () => {
  const started = Date.now();
  server = await startEmbeddingsServer();
  startedInMs = Date.now() - started;
}, SETUP_TIMEOUT_MS);

afterAll(async () => {
  await server?.stop();
});

describe("embeddings from a real model (all-MiniLM-L6-v2)", () => {
  it("starts the model server (venv check and model load) in reasonable time", () => {
    // Recorded, not asserted against a goal: the box is shared and noisy.
    console.info(`embedding server ready in ${startedInMs} ms`);
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
  });

  it("scores close sentences higher than unrelated ones", async () => {
    const [dogs, puppies, invoice] = await client().embed(["I love dogs", "I adore puppies", "The invoice is overdue"]);
    const close = cosineSimilarity(dogs!, puppies!);
    const unrelated = cosineSimilarity(dogs!, invoice!);
    expect(close).toBeGreaterThan(unrelated + 0.3);
  });

  it("ranks the memory that answers a question first", async () => {
    const memories = [
      "Invoice 42 is due on Friday",
      "The user prefers a window seat on long flights",
      "The user has a golden retriever called Max",
      "Quarterly revenue grew by four percent",
    ];
    const embeddings = client();
    const [query, ...vectors] = await embeddings.embed(["Which pet does the user have?", ...memories], {
      field: "query",
    });
    const ranked = memories
      .map((text, i) => ({ text, score: cosineSimilarity(query!, vectors[i]!) }))
      .sort((a, b) => b.score - a.score);
    expect(ranked[0]!.text).toBe("The user has a golden retriever called Max");
    // Clearly first, not by a hair (random vectors in 384 dimensions sit within about 0.1 of one another).
    expect(ranked[0]!.score).toBeGreaterThan(ranked[1]!.score + 0.2);
  });

  it("makes 384-dimensional unit vectors, and learns the dimension from the first answer", async () => {
    const embeddings = client();
    expect(embeddings.dimension).toBeUndefined();
    const vector = await embeddings.embedOne("Engram remembers across sessions");
    expect(vector).toHaveLength(384);
    expect(embeddings.dimension).toBe(384);
    expect(Math.hypot(...vector)).toBeCloseTo(1, 4);
  });

  it("embeds the same text to the same vector however it is batched", async () => {
    const [alone] = await client().embed(["The user lives in Lisbon"]);
    const inBatch = await client().embed(["Something else entirely", "The user lives in Lisbon"]);
    expect(cosineSimilarity(alone!, inBatch[1]!)).toBeGreaterThan(0.999);
  });

  it("returns an empty list for no texts without calling the endpoint", async () => {
    const unreachable = client({ url: `http://127.0.0.1:${await freePort()}/v1` });
    await expect(unreachable.embed([])).resolves.toEqual([]);
  });
});

describe("batching", () => {
  let small: EmbeddingsServer;
  beforeAll(async () => {
    small = await startEmbeddingsServer({ maxInputs: 10 });
  }, SETUP_TIMEOUT_MS);
  afterAll(async () => {
    await small?.stop();
  });

  it("splits a long list into requests of batch_size texts and keeps the input order", async () => {
    const texts = Array.from(
      { length: 25 },
      (_, i) =>
        `Memory number ${i}: the user mentioned topic ${i % 3 === 0 ? "cats" : i % 3 === 1 ? "taxes" : "tennis"}`,
    );
    const batched = new EmbeddingsClient({
      url: small.url,
      model: small.model,
      timeoutMs: 20_000,
      batchSize: 10,
      maxRetries: 0,
    });
    const vectors = await batched.embed(texts);
    expect(vectors).toHaveLength(25);
    // Each vector is its own text's: the same as embedding that text alone.
    for (const i of [0, 9, 10, 19, 20, 24]) {
      const alone = await batched.embedOne(texts[i]!);
      expect(cosineSimilarity(vectors[i]!, alone), `text ${i}`).toBeGreaterThan(0.999);
    }
  });

  it("answers INVALID_ARGUMENT naming the field when the endpoint refuses the input (here: too many at once)", async () => {
    const unbatched = new EmbeddingsClient({
      url: small.url,
      model: small.model,
      timeoutMs: 20_000,
      batchSize: 64,
      maxRetries: 0,
    });
    const err = await memoryErrorOf(
      unbatched.embed(
        Array.from({ length: 25 }, (_, i) => `text ${i}`),
        { field: "memories" },
      ),
    );
    expect(err.code).toBe("INVALID_ARGUMENT");
    expect(err.field).toBe("memories");
    expect(err.reason).toBe("EMBEDDING_INPUT_REFUSED");
    expect(err.message).toMatch(
      /^memories: the embeddings endpoint refused it \(HTTP 400\): 'input' holds 25 items; at most 10/,
    );
  });
});

describe("dimension", () => {
  it("refuses vectors from the endpoint whose dimension is not the configured one", async () => {
    const err = await memoryErrorOf(client({ dimensions: 768 }).embedOne("I love dogs"));
    expect(err.code).toBe("FAILED_PRECONDITION");
    expect(err.reason).toBe("EMBEDDING_DIMENSION_MISMATCH");
    expect(err.info).toEqual({ expected_dimension: "768", actual_dimension: "384" });
    expect(err.message).toContain(
      "returned 384-dimensional vectors but 768 are expected (MEMORY_EMBEDDINGS_DIMENSIONS)",
    );
  });

  it("accepts them when the configured dimension is the model's", async () => {
    await expect(client({ dimensions: 384 }).embedOne("I love dogs")).resolves.toHaveLength(384);
  });

  it("refuses a client's vector of another dimension than the app's, naming the field", () => {
    const vector = new Array(383).fill(0.1);
    let err: unknown;
    try {
      validateEmbedding(vector, "memories[2].embedding", 384);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(MemoryError);
    expect(err).toMatchObject({
      code: "INVALID_ARGUMENT",
      field: "memories[2].embedding",
      reason: "EMBEDDING_DIMENSION_MISMATCH",
      message: "memories[2].embedding: has 383 dimensions but this app's embeddings have 384",
      info: { expected_dimension: "384", actual_dimension: "383" },
    });
  });

  it.each([
    [[], /an embedding has 1-4096 dimensions, got 0/],
    [new Array(MAX_EMBEDDING_DIMENSION + 1).fill(0), /an embedding has 1-4096 dimensions, got 4097/],
    [[0.1, Number.NaN], /value 1 is NaN; every value must be a finite number/],
    [[Number.POSITIVE_INFINITY], /value 0 is Infinity/],
  ])("refuses a client's vector that is not one (%#)", (vector, message) => {
    expect(() => validateEmbedding(vector, "embedding")).toThrow(message);
  });

  it("accepts a client's vector of the app's dimension, or any when the app has none yet", () => {
    expect(() => validateEmbedding(new Array(384).fill(0.5), "embedding", 384)).not.toThrow();
    expect(() => validateEmbedding([0.1, 0.2, 0.3], "embedding")).not.toThrow();
  });
});

describe("endpoint failures", () => {
  /**
   * Runs `fn` with a fresh proxy to the model server in `mode`: its own port,
   * so no kept-alive connection of another test (the HTTP client pools them
   * per origin) can pass or fail in its place.
   */
  async function withProxy(
    mode: ChaosMode,
    fn: (proxied: (overrides?: Partial<EmbeddingsSettings>) => EmbeddingsClient) => Promise<void>,
  ): Promise<void> {
    const proxy = await startChaosProxy(Number(new URL(server.url).port));
    proxy.set(mode);
    try {
      await fn((overrides = {}) => client({ url: `http://127.0.0.1:${proxy.port}/v1`, ...overrides }));
    } finally {
      await proxy.close();
    }
  }

  it("answers UNAVAILABLE when nothing listens at the URL", async () => {
    const err = await memoryErrorOf(
      client({ url: `http://127.0.0.1:${await freePort()}/v1`, maxRetries: 1 }).embedOne("hello"),
    );
    expect(err.code).toBe("UNAVAILABLE");
    expect(err.reason).toBe("EMBEDDINGS_UNAVAILABLE");
    expect(err.message).toBe("the embeddings endpoint is unreachable");
  });

  it("answers through a proxy that passes traffic (the control of the faults below)", async () => {
    await withProxy({ kind: "pass" }, async (proxied) => {
      await expect(proxied({ timeoutMs: 300 }).embedOne("answered in time")).resolves.toHaveLength(384);
    });
  });

  it("answers UNAVAILABLE when the endpoint does not answer within the timeout, retries included", async () => {
    await withProxy({ kind: "blackhole" }, async (proxied) => {
      const started = Date.now();
      const err = await memoryErrorOf(proxied({ timeoutMs: 300, maxRetries: 2 }).embedOne("never answered"));
      expect(err.code).toBe("UNAVAILABLE");
      expect(err.reason).toBe("EMBEDDINGS_UNAVAILABLE");
      expect(err.message).toBe("the embeddings endpoint did not answer within 300 ms (MEMORY_EMBEDDINGS_TIMEOUT_MS)");
      // The timeout bounds the attempts and the waits between them (a generous margin for a noisy box).
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  });

  it("answers UNAVAILABLE when the endpoint resets connections", async () => {
    await withProxy({ kind: "refuse" }, async (proxied) => {
      const err = await memoryErrorOf(proxied().embedOne("reset"));
      expect(err.code).toBe("UNAVAILABLE");
      expect(err.message).toBe("the embeddings endpoint is unreachable");
    });
  });

  it("answers DEADLINE_EXCEEDED when the call's deadline passes first", async () => {
    await withProxy({ kind: "blackhole" }, async (proxied) => {
      const err = await memoryErrorOf(proxied({ timeoutMs: 20_000 }).embedOne("slow", { deadline: Date.now() + 300 }));
      expect(err.code).toBe("DEADLINE_EXCEEDED");
      expect(err.message).toBe("deadline exceeded while waiting for the embeddings endpoint");
    });
  });

  it("answers CANCELLED as soon as the caller aborts, not at the timeout", async () => {
    await withProxy({ kind: "blackhole" }, async (proxied) => {
      const abort = new AbortController();
      const started = Date.now();
      const pending = proxied({ timeoutMs: 20_000 }).embedOne("cancelled", { signal: abort.signal });
      setTimeout(() => abort.abort(), 100);
      expect((await memoryErrorOf(pending)).code).toBe("CANCELLED");
      // Far below the 20 s timeout, with a generous margin for a noisy box.
      expect(Date.now() - started).toBeLessThan(5_000);
    });
  });

  it("answers FAILED_PRECONDITION naming the setting for a model the endpoint does not have", async () => {
    const err = await memoryErrorOf(client({ model: "text-embedding-3-small" }).embedOne("hello"));
    expect(err.code).toBe("FAILED_PRECONDITION");
    expect(err.reason).toBe("EMBEDDINGS_MISCONFIGURED");
    expect(err.message).toContain('no model "text-embedding-3-small"');
    expect(err.message).toContain("MEMORY_EMBEDDINGS_MODEL");
  });
});

describe("API key", () => {
  let keyed: EmbeddingsServer;
  beforeAll(async () => {
    keyed = await startEmbeddingsServer({ apiKey: "sk-test-right" });
  }, SETUP_TIMEOUT_MS);
  afterAll(async () => {
    await keyed?.stop();
  });
  const keyedClient = (apiKey?: string) =>
    new EmbeddingsClient({
      url: keyed.url,
      model: keyed.model,
      apiKey,
      timeoutMs: 20_000,
      batchSize: 64,
      maxRetries: 0,
    });

  it("sends the configured key as a bearer token", async () => {
    await expect(keyedClient("sk-test-right").embedOne("hello")).resolves.toHaveLength(384);
  });

  it("answers FAILED_PRECONDITION naming the setting, without echoing the key, when the endpoint refuses it", async () => {
    const err = await memoryErrorOf(keyedClient("sk-test-wrong").embedOne("hello"));
    expect(err.code).toBe("FAILED_PRECONDITION");
    expect(err.reason).toBe("EMBEDDINGS_MISCONFIGURED");
    expect(err.message).toContain("MEMORY_EMBEDDINGS_API_KEY");
    expect(err.message).not.toContain("sk-test");
  });

  it("sends no authorization header at all without a key, even with OPENAI_API_KEY in the environment", async () => {
    const saved = process.env.OPENAI_API_KEY;
    process.env.OPENAI_API_KEY = "sk-test-right";
    try {
      const err = await memoryErrorOf(keyedClient(undefined).embedOne("hello"));
      expect(err.code).toBe("FAILED_PRECONDITION");
      // The endpoint's own answer (kept as the cause, for the server log) says no header came at all.
      expect((err.cause as { error?: { message?: string } }).error?.message).toBe("You didn't provide an API key");
    } finally {
      if (saved === undefined) delete process.env.OPENAI_API_KEY;
      else process.env.OPENAI_API_KEY = saved;
    }
    // And an endpoint that needs none is served without one.
    await expect(client({ apiKey: undefined }).embedOne("hello")).resolves.toHaveLength(384);
  });
});

describe("cosine similarity", () => {
  it("is 1 for one direction, -1 for opposite ones, 0 for orthogonal ones and for a zero vector", () => {
    expect(cosineSimilarity([1, 2, 3], [2, 4, 6])).toBeCloseTo(1, 12);
    expect(cosineSimilarity([1, 2, 3], [-1, -2, -3])).toBeCloseTo(-1, 12);
    expect(cosineSimilarity([1, 0], [0, 5])).toBe(0);
    expect(cosineSimilarity([0, 0], [1, 1])).toBe(0);
  });

  it("refuses vectors of different lengths", () => {
    expect(() => cosineSimilarity([1, 2], [1, 2, 3])).toThrow(RangeError);
  });
});

describe("configuration (MEMORY_EMBEDDINGS_*)", () => {
  it("builds no client without MEMORY_EMBEDDINGS_URL (ranking is then lexical only)", () => {
    expect(embeddingsClientFromConfig(loadConfig([], {}))).toBeUndefined();
  });

  it("builds a client from the settings, with the documented defaults", () => {
    const config = loadConfig([], {
      MEMORY_EMBEDDINGS_URL: "http://127.0.0.1:11434/v1",
      MEMORY_EMBEDDINGS_MODEL: "nomic-embed-text",
    });
    expect(embeddingsClientFromConfig(config)?.settings).toEqual({
      url: "http://127.0.0.1:11434/v1",
      model: "nomic-embed-text",
      apiKey: undefined,
      dimensions: undefined,
      timeoutMs: 10_000,
      batchSize: 64,
      maxRetries: 2,
    });
  });

  it("never prints the API key", () => {
    const config = loadConfig([], {
      MEMORY_EMBEDDINGS_URL: "https://user:pw@example.test/v1",
      MEMORY_EMBEDDINGS_MODEL: "m",
      MEMORY_EMBEDDINGS_API_KEY: "sk-secret",
    });
    const printed = JSON.stringify(describeConfig(config));
    expect(printed).not.toContain("sk-secret");
    expect(printed).not.toContain(":pw@");
    expect(describeConfig(config).embeddingsApiKey).toBe("***");
  });

  it.each([
    [{ MEMORY_EMBEDDINGS_URL: "http://127.0.0.1:11434/v1" }, /MEMORY_EMBEDDINGS_URL needs MEMORY_EMBEDDINGS_MODEL/],
    [{ MEMORY_EMBEDDINGS_MODEL: "m" }, /MEMORY_EMBEDDINGS_MODEL needs MEMORY_EMBEDDINGS_URL/],
    [{ MEMORY_EMBEDDINGS_API_KEY: "k" }, /MEMORY_EMBEDDINGS_API_KEY needs MEMORY_EMBEDDINGS_URL/],
    [
      { MEMORY_EMBEDDINGS_URL: "ftp://example.test", MEMORY_EMBEDDINGS_MODEL: "m" },
      /MEMORY_EMBEDDINGS_URL: expected an http\(s\) base URL/,
    ],
    [
      { MEMORY_EMBEDDINGS_URL: "not a url", MEMORY_EMBEDDINGS_MODEL: "m" },
      /MEMORY_EMBEDDINGS_URL: expected an http\(s\) base URL/,
    ],
    [
      { MEMORY_EMBEDDINGS_URL: "http://h/v1", MEMORY_EMBEDDINGS_MODEL: "m", MEMORY_EMBEDDINGS_DIMENSIONS: "4097" },
      /MEMORY_EMBEDDINGS_DIMENSIONS: must be at most 4096, got 4097/,
    ],
    [{ MEMORY_EMBEDDINGS_BATCH_SIZE: "0" }, /MEMORY_EMBEDDINGS_BATCH_SIZE: must be at least 1, got 0/],
    [{ MEMORY_EMBEDDINGS_BATCH_SIZE: "2049" }, /MEMORY_EMBEDDINGS_BATCH_SIZE: must be at most 2048, got 2049/],
    [{ MEMORY_EMBEDDINGS_TIMEOUT_MS: "50" }, /MEMORY_EMBEDDINGS_TIMEOUT_MS: must be at least 100, got 50/],
  ])("refuses %o", (env, message) => {
    expect(() => loadConfig([], env)).toThrow(ConfigError);
    expect(() => loadConfig([], env)).toThrow(message);
  });
});
