/**
 * The optional reranker stage (MEMORY_RERANK_URL): the best fused candidates
 * of a search go to a cross-encoder's `/rerank` endpoint, which reads the
 * query and each text together, and come back in its order.
 *
 * Two request shapes, the two the common servers speak:
 * - without MEMORY_RERANK_MODEL, Hugging Face TEI's: POST {query, texts},
 *   answered [{index, score}];
 * - with it, Cohere's (also Jina, vLLM, Infinity): POST {model, query,
 *   documents}, answered {results: [{index, relevance_score}]}.
 * Either answer shape is read whichever was sent.
 *
 * A reranker makes results better, never makes them fail: when it is down,
 * slow (MEMORY_RERANK_TIMEOUT_MS), refuses or answers something else, the
 * search keeps the fused order, the failure is logged and counted
 * (engram_memory_rerank_failures_total), and the call succeeds.
 */
import type { Config } from "../../config.js";

/** How to reach the reranker (the MEMORY_RERANK_* settings). */
export interface RerankSettings {
  /** The endpoint itself, e.g. http://127.0.0.1:8080/rerank or https://api.cohere.com/v2/rerank. */
  url: string;
  /** Sent as `model` with Cohere's request shape; absent: TEI's shape. */
  model?: string;
  /** Sent as `authorization: Bearer <key>`; never logged. */
  apiKey?: string;
  /** Longest one request may take before the fused order is kept. */
  timeoutMs: number;
  /** Fused candidates sent to be reranked; the rest follow in fused order. */
  topN: number;
}

/** What the reranker did, for the metrics. */
export interface RerankCounts {
  reranked: number;
  failed: number;
}

/** Where a failure is told (the server's logger). */
export type RerankFailureLog = (err: unknown, message: string) => void;

/** One score of the endpoint's answer. */
interface Scored {
  index: number;
  score: number;
}

/** Calls a TEI- or Cohere-compatible `/rerank` endpoint. */
export class Reranker {
  readonly counts: RerankCounts = { reranked: 0, failed: 0 };

  constructor(
    readonly settings: RerankSettings,
    private readonly logFailure: RerankFailureLog = () => {},
  ) {}

  /**
   * The order of `texts` by relevance to `query`, best first, as indexes
   * into `texts`; texts the endpoint did not score follow in their given
   * order. Undefined when the endpoint failed (logged and counted): keep the
   * order you had.
   */
  async order(query: string, texts: readonly string[], signal?: AbortSignal): Promise<number[] | undefined> {
    if (texts.length < 2) return texts.map((_, i) => i);
    try {
      const scores = await this.request(query, texts, signal);
      const seen = new Set<number>();
      const ranked = scores
        .filter((s) => !seen.has(s.index) && seen.add(s.index))
        .sort((a, b) => b.score - a.score || a.index - b.index)
        .map((s) => s.index);
      this.counts.reranked++;
      return [...ranked, ...texts.map((_, i) => i).filter((i) => !seen.has(i))];
    } catch (err) {
      if (signal?.aborted) return undefined; // the caller went away: not the reranker's failure
      this.counts.failed++;
      this.logFailure(err, "the reranker failed; the memories keep their fused order");
      return undefined;
    }
  }

  private async request(query: string, texts: readonly string[], signal?: AbortSignal): Promise<Scored[]> {
    const { url, model, apiKey, timeoutMs } = this.settings;
    const body = model === undefined ? { query, texts } : { model, query, documents: texts };
    const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
    if (apiKey !== undefined) headers.authorization = `Bearer ${apiKey}`;
    const timeout = AbortSignal.timeout(timeoutMs);
    const response = await fetch(url, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
    if (!response.ok) {
      await response.body?.cancel();
      throw new Error(`the reranker answered HTTP ${response.status}`);
    }
    return scoresOf(await response.json(), texts.length);
  }
}

/** The scores of a TEI ([{index, score}]) or Cohere ({results: [{index, relevance_score}]}) answer; throws on anything else. */
export function scoresOf(answer: unknown, count: number): Scored[] {
  const list = Array.isArray(answer) ? answer : (answer as { results?: unknown })?.results;
  if (!Array.isArray(list)) throw new Error("the reranker's answer is neither a list nor {results: [...]}");
  return list.map((item: unknown) => {
    const {
      index,
      score,
      relevance_score: relevance,
    } = (item ?? {}) as { index?: unknown; score?: unknown; relevance_score?: unknown };
    const value = score ?? relevance;
    if (
      typeof index !== "number" ||
      !Number.isInteger(index) ||
      index < 0 ||
      index >= count ||
      typeof value !== "number" ||
      !Number.isFinite(value)
    ) {
      throw new Error(
        `the reranker's answer has an entry without a valid index (0..${count - 1}) and score: ${JSON.stringify(item)?.slice(0, 200)}`,
      );
    }
    return { index, score: value };
  });
}

/** The reranker of the MEMORY_RERANK_* settings; undefined when MEMORY_RERANK_URL is unset. */
export function rerankerFromConfig(config: Config, logFailure?: RerankFailureLog): Reranker | undefined {
  if (config.rerankUrl === undefined) return undefined;
  return new Reranker(
    {
      url: config.rerankUrl,
      model: config.rerankModel,
      apiKey: config.rerankApiKey,
      timeoutMs: config.rerankTimeoutMs,
      topN: config.rerankTopN,
    },
    logFailure,
  );
}
