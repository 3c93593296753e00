/**
 * Embeddings for long-term memory: texts become vectors through the
 * operator's OpenAI-compatible endpoint (MEMORY_EMBEDDINGS_URL: OpenAI,
 * Ollama, vLLM, TEI…), through the official `openai` client, so request
 * shape, retries with backoff and error parsing are theirs, not ours. Vectors
 * a client sends with a write are checked by `validateEmbedding`
 * (./similarity.ts).
 *
 * Whatever goes wrong at the endpoint becomes one MemoryError the RPC edge
 * can answer: UNAVAILABLE when it is down, slow or overloaded (retry later),
 * FAILED_PRECONDITION when the operator's settings do not fit it (wrong key,
 * model or dimension: retrying will not help), INVALID_ARGUMENT naming the
 * caller's field when it refuses the input itself. Never INTERNAL, and the
 * endpoint's own words are passed on only where they are about the input
 * (an auth error's text may quote the key).
 */
import OpenAI from "openai";
import { openAICompatibleClient } from "./openai-endpoint.js";
import type { Config } from "../../config.js";
import { MemoryError } from "../../errors.js";
import { EMBEDDING_DIMENSION_MISMATCH, MAX_EMBEDDING_DIMENSION } from "./similarity.js";

/** How to reach the embeddings endpoint (the MEMORY_EMBEDDINGS_* settings). */
export interface EmbeddingsSettings {
  /** Base URL of the OpenAI-compatible API, e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1; requests go to <url>/embeddings. */
  url: string;
  /** The model name sent with every request. */
  model: string;
  /** Sent as `authorization: Bearer <key>`; none: no authorization header at all. */
  apiKey?: string;
  /** The length every vector must have; unset: whatever the endpoint's first answer has, from then on. */
  dimensions?: number;
  /** Longest one request may take, retries included. */
  timeoutMs: number;
  /** At most this many texts per request; longer lists go as several requests, one after another. */
  batchSize: number;
  /** Retries of a request that failed for a reason worth retrying (connection, 408, 409, 429, 5xx), with backoff. */
  maxRetries: number;
}

/** Options of one `embed` call. */
export interface EmbedOptions {
  /** The request field the texts come from, named by INVALID_ARGUMENT errors ("query", "memories[0].text"). */
  field?: string;
  /** Aborts the requests (the call was cancelled): CANCELLED. */
  signal?: AbortSignal;
  /** Epoch ms by which the caller wants its answer (the call's deadline): DEADLINE_EXCEEDED past it. */
  deadline?: number;
}

/** Reason (ErrorInfo) of every failure to reach the endpoint or to read its answer: UNAVAILABLE. */
export const EMBEDDINGS_UNAVAILABLE = "EMBEDDINGS_UNAVAILABLE";
/** Reason of an endpoint that refuses the server's key, model or path: FAILED_PRECONDITION, for the operator. */
export const EMBEDDINGS_MISCONFIGURED = "EMBEDDINGS_MISCONFIGURED";
/** Reason of an input the endpoint refused (too long for the model, say): INVALID_ARGUMENT. */
export const EMBEDDING_INPUT_REFUSED = "EMBEDDING_INPUT_REFUSED";

/** Turns texts into vectors through an OpenAI-compatible `/embeddings` endpoint. */
export class EmbeddingsClient {
  private readonly openai: OpenAI;
  private learntDimension: number | undefined;

  constructor(readonly settings: EmbeddingsSettings) {
    this.openai = openAICompatibleClient(settings);
  }

  /** The length of this endpoint's vectors: the configured one, else the one its first answer had; undefined before any. */
  get dimension(): number | undefined {
    return this.settings.dimensions ?? this.learntDimension;
  }

  /**
   * One unit of meaning per text, in order. Requests go out `batchSize`
   * texts at a time; the whole call is bounded by `opts.deadline` when
   * given, each request by `timeoutMs`.
   */
  async embed(texts: readonly string[], opts: EmbedOptions = {}): Promise<number[][]> {
    const field = opts.field ?? "text";
    const vectors: number[][] = [];
    for (let start = 0; start < texts.length; start += this.settings.batchSize) {
      vectors.push(...(await this.embedBatch(texts.slice(start, start + this.settings.batchSize), field, opts)));
    }
    return vectors;
  }

  /** The vector of one text (a search query, say). */
  async embedOne(text: string, opts: EmbedOptions = {}): Promise<number[]> {
    const [vector] = await this.embed([text], opts);
    return vector!;
  }

  private async embedBatch(texts: string[], field: string, opts: EmbedOptions): Promise<number[][]> {
    const callerSignal = opts.signal;
    const left = opts.deadline === undefined ? undefined : opts.deadline - Date.now();
    if (left !== undefined && left <= 0)
      throw new MemoryError("DEADLINE_EXCEEDED", "deadline exceeded before the embeddings endpoint was called");
    // The library's timeout is per attempt; this one bounds the attempts and the waits between them together.
    const timeout = AbortSignal.timeout(this.settings.timeoutMs);
    const deadline = left === undefined ? undefined : AbortSignal.timeout(left);
    const signals = [timeout, deadline, callerSignal].filter((s): s is AbortSignal => s !== undefined);
    let response: OpenAI.CreateEmbeddingResponse;
    try {
      response = await this.openai.embeddings.create(
        // float, not the library's default base64: every OpenAI-compatible server speaks float.
        { model: this.settings.model, input: texts, encoding_format: "float" },
        { signal: AbortSignal.any(signals), timeout: Math.min(this.settings.timeoutMs, left ?? Infinity) },
      );
    } catch (err) {
      if (callerSignal?.aborted)
        throw new MemoryError(
          "CANCELLED",
          "the call was cancelled while waiting for the embeddings endpoint",
          {},
          { cause: err },
        );
      if (deadline?.aborted)
        throw new MemoryError(
          "DEADLINE_EXCEEDED",
          "deadline exceeded while waiting for the embeddings endpoint",
          {},
          { cause: err },
        );
      if (timeout.aborted)
        throw unavailable(
          `the embeddings endpoint did not answer within ${this.settings.timeoutMs} ms (MEMORY_EMBEDDINGS_TIMEOUT_MS)`,
          err,
        );
      throw endpointError(err, field, this.settings.model);
    }
    return this.readVectors(response, texts.length);
  }

  /** The vectors of an answer, in input order, each checked; a malformed answer is UNAVAILABLE (the endpoint's fault). */
  private readVectors(response: OpenAI.CreateEmbeddingResponse, count: number): number[][] {
    const data: unknown = (response as { data?: unknown }).data;
    if (!Array.isArray(data) || data.length !== count) {
      throw unavailable(
        `the embeddings endpoint answered ${Array.isArray(data) ? data.length : "no"} vectors for ${count} inputs`,
      );
    }
    const vectors: number[][] = new Array(count);
    for (const item of data as Array<{ index?: unknown; embedding?: unknown }>) {
      const index = item?.index;
      if (!Number.isInteger(index) || (index as number) < 0 || (index as number) >= count || vectors[index as number]) {
        throw unavailable(
          `the embeddings endpoint answered a vector with index ${JSON.stringify(index)} for ${count} inputs`,
        );
      }
      const vector = item.embedding;
      if (
        !Array.isArray(vector) ||
        vector.length === 0 ||
        vector.length > MAX_EMBEDDING_DIMENSION ||
        !vector.every(Number.isFinite)
      ) {
        throw unavailable(
          `the embeddings endpoint answered something other than a vector of 1-${MAX_EMBEDDING_DIMENSION} finite numbers at index ${index}`,
        );
      }
      this.checkDimension(vector.length);
      vectors[index as number] = vector as number[];
    }
    return vectors;
  }

  private checkDimension(actual: number): void {
    const expected = this.dimension;
    if (expected === undefined) {
      this.learntDimension = actual;
      return;
    }
    if (actual === expected) return;
    const source = this.settings.dimensions !== undefined ? "MEMORY_EMBEDDINGS_DIMENSIONS" : "its earlier answers";
    throw new MemoryError(
      "FAILED_PRECONDITION",
      `the embeddings endpoint returned ${actual}-dimensional vectors but ${expected} are expected (${source}); check MEMORY_EMBEDDINGS_MODEL`,
      {},
      {
        reason: EMBEDDING_DIMENSION_MISMATCH,
        info: { expected_dimension: String(expected), actual_dimension: String(actual) },
      },
    );
  }
}

/** The client of the configured endpoint; undefined when MEMORY_EMBEDDINGS_URL is unset (ranking is then lexical only). */
export function embeddingsClientFromConfig(config: Config): EmbeddingsClient | undefined {
  if (!config.embeddingsUrl || !config.embeddingsModel) return undefined;
  return new EmbeddingsClient({
    url: config.embeddingsUrl,
    model: config.embeddingsModel,
    apiKey: config.embeddingsApiKey,
    dimensions: config.embeddingsDimensions,
    timeoutMs: config.embeddingsTimeoutMs,
    batchSize: config.embeddingsBatchSize,
    maxRetries: config.embeddingsMaxRetries,
  });
}

function unavailable(message: string, cause?: unknown, retryAfterMs?: number): MemoryError {
  return new MemoryError("UNAVAILABLE", message, {}, { cause, reason: EMBEDDINGS_UNAVAILABLE, retryAfterMs });
}

function misconfigured(message: string, cause: unknown): MemoryError {
  return new MemoryError("FAILED_PRECONDITION", message, {}, { cause, reason: EMBEDDINGS_MISCONFIGURED });
}

/** The endpoint's words, short: they may reach the client. */
function endpointMessage(err: InstanceType<typeof OpenAI.APIError>): string {
  const message = (err.error as { message?: unknown } | undefined)?.message;
  const text = typeof message === "string" ? message : err.message;
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

/** A failed request as a MemoryError (see the module comment for the policy). */
function endpointError(err: unknown, field: string, model: string): MemoryError {
  if (err instanceof OpenAI.APIConnectionTimeoutError) return unavailable("the embeddings endpoint timed out", err);
  if (err instanceof OpenAI.APIConnectionError) return unavailable("the embeddings endpoint is unreachable", err);
  if (err instanceof OpenAI.APIError && err.status !== undefined) {
    const status = err.status;
    if (status === 400 || status === 413 || status === 422) {
      const problem = `the embeddings endpoint refused it (HTTP ${status}): ${endpointMessage(err)}`;
      return new MemoryError(
        "INVALID_ARGUMENT",
        `${field}: ${problem}`,
        {},
        { cause: err, field, fieldProblem: problem, reason: EMBEDDING_INPUT_REFUSED },
      );
    }
    if (status === 401 || status === 403) {
      return misconfigured(
        `the embeddings endpoint refused the server's credentials (HTTP ${status}); check MEMORY_EMBEDDINGS_API_KEY`,
        err,
      );
    }
    if (status === 404) {
      return misconfigured(
        `the embeddings endpoint has no model ${JSON.stringify(model)} or no /embeddings path (HTTP 404); check MEMORY_EMBEDDINGS_URL and MEMORY_EMBEDDINGS_MODEL`,
        err,
      );
    }
    if (status === 408 || status === 409 || status === 429 || status >= 500) {
      return unavailable(`the embeddings endpoint is unavailable (HTTP ${status})`, err, retryAfter(err.headers));
    }
    return misconfigured(`the embeddings endpoint answered HTTP ${status}; check MEMORY_EMBEDDINGS_URL`, err);
  }
  // A body that is not the JSON we asked for, or any other failure inside the library.
  return unavailable("the embeddings endpoint's answer could not be read", err);
}

/** Retry-After (seconds) in ms, when the endpoint said. */
function retryAfter(headers: Headers | undefined): number | undefined {
  const seconds = Number(headers?.get("retry-after"));
  return Number.isFinite(seconds) && seconds > 0 ? seconds * 1000 : undefined;
}
