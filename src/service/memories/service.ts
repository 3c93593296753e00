/**
 * The long-term memory service: validation, tenancy, hybrid ranking and live
 * watches over a store's memories (LongTermMemoryStore), free of any
 * protocol. MemoryService (src/service/memory-service.ts) hands the memory
 * RPCs to it, so both edges serve them through the same call guard.
 */
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import {
  DeleteMemoriesResponseSchema,
  GetMemoryResponseSchema,
  ListMemoriesResponseSchema,
  MemoriesDeletedSchema,
  SearchMemoriesResponseSchema,
  WatchHeartbeatSchema,
  WatchMemoriesResponseSchema,
  WatchStartedSchema,
  WriteMemoriesResponseSchema,
  type DeleteMemoriesRequest,
  type DeleteMemoriesResponse,
  type GetMemoryRequest,
  type GetMemoryResponse,
  type ListMemoriesRequest,
  type ListMemoriesResponse,
  type SearchMemoriesRequest,
  type SearchMemoriesResponse,
  type WatchMemoriesRequest,
  type WatchMemoriesResponse,
  type WriteMemoriesRequest,
  type WriteMemoriesResponse,
} from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { invalidArgument } from "../../errors.js";
import { requireRetained, scopeSelects } from "../../store/memories/rules.js";
import type {
  LongTermMemoryStore,
  MemoryChange,
  MemoryCursor,
  MemoryFilter,
  MemoryRecord,
  MemoryStore,
} from "../../store/types.js";
import type { ServiceLimits } from "../limits.js";
import { decodePageToken, encodePageToken } from "../page-token.js";
import { pageSize, requireEventType, requireId, requireName } from "../validation.js";
import { toWireEvent } from "../convert.js";
import {
  EventHitSchema,
  SearchEventsResponseSchema,
  type SearchEventsRequest,
  type SearchEventsResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { searchEvents } from "./event-search.js";
import { toWireMemory, toWireScored } from "./convert.js";
import type { EmbeddingsClient } from "./embeddings.js";
import { fuseRankings, type FusedMemory } from "./ranking.js";
import type { Reranker } from "./reranker.js";
import type { CallContext } from "../call-context.js";
import { appAllowed, mayForget, mayRead, memoryNotFound, ownUser, readableUser, requireApp } from "../tenancy.js";
import {
  checkQuery,
  MAX_BATCH_MEMORIES,
  MAX_DELETE_IDS,
  memoryFilter,
  newMemory,
  optionalName,
  queryEmbedding,
  scopeFilter,
  topK,
} from "./validation.js";

/** Candidates each relevance ranking contributes to the fusion, per result asked for… */
const CANDIDATES_PER_RESULT = 5;
/** …and at least / at most this many. An empty query ranks the newest MAX_CANDIDATES memories of the scope. */
const MIN_CANDIDATES = 50;
const MAX_CANDIDATES = 500;
/** Live changes a watch holds for a reader that does not keep up; past them it reads on from the change log. */
export const MAX_WATCH_BACKLOG = 1000;
/** Changes a watch reads from the change log at a time. */
const REPLAY_PAGE = 500;

/** What a ranked search needs. */
export interface MemoryQuery {
  filter: MemoryFilter;
  query: string;
  topK: number;
  /** An embedding of the query from the client; without one, the server embeds the query when MEMORY_EMBEDDINGS_URL is set. */
  embedding?: readonly number[];
}

/** Settings of the memory service. */
export interface LongTermMemoryOptions {
  limits: ServiceLimits;
  /** Idle time between watch heartbeats. */
  heartbeatMs: number;
  /**
   * The MEMORY_EMBEDDINGS_URL endpoint: embeds written memories that come
   * without a vector and queries that come without one. Absent: only
   * client vectors exist, and ranking without them is lexical.
   */
  embeddings?: EmbeddingsClient;
  /** The MEMORY_RERANK_URL endpoint: reorders the best fused candidates of each ranking (./reranker.ts). */
  reranker?: Reranker;
}

/** The long-term memory service; one per process. */
export class LongTermMemoryService {
  constructor(
    private readonly store: MemoryStore,
    private readonly options: LongTermMemoryOptions,
  ) {}

  /** The MEMORY_RERANK_URL reranker, when set (its counts feed the metrics). */
  get reranker(): Reranker | undefined {
    return this.options.reranker;
  }

  /** The store's memories, or FAILED_PRECONDITION naming a store that keeps none. */
  private get memories(): LongTermMemoryStore {
    return this.store.memories;
  }

  async writeMemories(req: WriteMemoriesRequest, ctx?: CallContext): Promise<WriteMemoriesResponse> {
    if (req.memories.length === 0) throw invalidArgument("memories", "must hold at least one memory");
    if (req.memories.length > MAX_BATCH_MEMORIES)
      throw invalidArgument("memories", `must hold at most ${MAX_BATCH_MEMORIES} memories`);
    const now = Date.now();
    const seen = new Set<string>();
    const records = req.memories.map((input, i) => {
      const field = `memories[${i}]`;
      requireApp(ctx?.tenant, `${field}.app_name`, requireName(`${field}.app_name`, input.appName));
      const userId = ownUser(ctx?.tenant, `${field}.user_id`, optionalName(`${field}.user_id`, input.userId));
      const record = newMemory(field, { ...input, userId }, now, this.options.limits, randomUUID);
      const id = `${record.appName}\u0000${record.memoryId}`;
      if (seen.has(id)) throw invalidArgument(`${field}.memory_id`, "repeats a memory_id of the same batch");
      seen.add(id);
      return record;
    });
    await this.embedMemories(records, ctx);
    const result = await this.memories.writeMemories(records, ctx);
    return create(WriteMemoriesResponseSchema, {
      memories: result.memories.map((m) => toWireMemory(m)),
      superseded: result.superseded.map((m) => toWireMemory(m)),
    });
  }

  async getMemory(req: GetMemoryRequest, ctx?: CallContext): Promise<GetMemoryResponse> {
    const appName = requireName("app_name", req.appName);
    const memoryId = requireId("memory_id", req.memoryId);
    const memory = await this.memories.getMemory(appName, memoryId, ctx);
    if (!memory || !mayRead(ctx?.tenant, memory)) throw memoryNotFound(memoryId);
    return create(GetMemoryResponseSchema, { memory: toWireMemory(memory) });
  }

  async searchMemories(req: SearchMemoriesRequest, ctx?: CallContext): Promise<SearchMemoriesResponse> {
    const filter = memoryFilter(scopeFilter(req, "visible"), req, Date.now());
    filter.omitEmbeddings = !req.includeEmbeddings;
    const query: MemoryQuery = {
      filter,
      query: checkQuery("query", req.query),
      topK: topK("top_k", req.topK),
      embedding: queryEmbedding("query_embedding", req.queryEmbedding),
    };
    if (!this.readScope(ctx, filter)) return create(SearchMemoriesResponseSchema, {});
    const results = await this.rank(query, ctx);
    // Vectors only when asked for: 100 results of 384 dimensions took ~20 ms to encode in protobuf.
    return create(SearchMemoriesResponseSchema, {
      results: results.map((r) => toWireScored(r, req.includeEmbeddings)),
    });
  }

  /**
   * The best memories for a query: lexical (BM25) candidates, vector
   * candidates when the query has an embedding and the store vector search,
   * and, for an empty query, the newest memories; fused by reciprocal rank
   * with importance and recency (src/service/memories/ranking.ts). A query
   * without a client embedding is embedded by the endpoint, when there is
   * one and the store searches by vector; its failure fails the call. With
   * a reranker and a query, the best MEMORY_RERANK_TOP_N fused candidates
   * are reordered by it (their scores stay the fused ones); when it fails
   * they keep the fused order.
   */
  async rank(q: MemoryQuery, call?: CallContext): Promise<FusedMemory[]> {
    const memories = this.memories;
    const candidates = Math.min(MAX_CANDIDATES, Math.max(MIN_CANDIDATES, q.topK * CANDIDATES_PER_RESULT));
    const hasQuery = q.query.trim() !== "";
    const nearest = memories.nearestMemories?.bind(memories);
    const embeddings = this.options.embeddings;
    const embedding =
      q.embedding ??
      (hasQuery && nearest && embeddings
        ? await embeddings.embedOne(q.query, { field: "query", deadline: call?.deadline, signal: call?.signal })
        : undefined);
    const [lexical, vector, unranked] = await Promise.all([
      hasQuery ? memories.searchMemories(q.filter, q.query, candidates, call) : [],
      embedding && nearest ? nearest(q.filter, embedding, candidates, call) : undefined,
      hasQuery || embedding ? undefined : memories.listMemories(q.filter, MAX_CANDIDATES, undefined, call),
    ]);
    const reranker = this.options.reranker;
    if (!reranker || !hasQuery) return fuseRankings({ lexical, vector, unranked }, q.topK);
    const fused = fuseRankings({ lexical, vector, unranked }, Math.max(q.topK, reranker.settings.topN));
    const head = fused.slice(0, reranker.settings.topN);
    const order = await reranker.order(
      q.query,
      head.map((f) => f.memory.text),
      call?.signal,
    );
    const reranked = order ? [...order.map((i) => head[i]), ...fused.slice(head.length)] : fused;
    return reranked.slice(0, q.topK);
  }

  /**
   * Gives the memories of a write that came without a vector the endpoint's
   * embedding of their text, in one batched call before the store's atomic
   * write. Its failure fails the whole write (nothing is stored): a memory
   * stored without a vector would stay invisible to vector search forever,
   * with nothing to tell the client to write it again.
   */
  private async embedMemories(records: MemoryRecord[], call?: CallContext): Promise<void> {
    const embeddings = this.options.embeddings;
    if (!embeddings) return;
    const missing = records.flatMap((record, i) => (record.embedding ? [] : [{ record, i }]));
    if (missing.length === 0) return;
    // The endpoint refuses a batch as a whole: name the one memory when it is one, the batch's texts otherwise.
    const field = missing.length === 1 ? `memories[${missing[0]!.i}].text` : "memories[].text";
    const vectors = await embeddings.embed(
      missing.map((m) => m.record.text),
      { field, deadline: call?.deadline, signal: call?.signal },
    );
    missing.forEach((m, j) => (m.record.embedding = vectors[j]));
  }

  async listMemories(req: ListMemoriesRequest, ctx?: CallContext): Promise<ListMemoriesResponse> {
    const filter = memoryFilter(scopeFilter(req, "within"), req, Date.now());
    const key = optionalName("key", req.key);
    if (key !== undefined) filter.key = key;
    if (req.subject !== undefined) filter.subject = req.subject;
    if (req.predicate !== undefined) filter.predicate = req.predicate;
    filter.omitEmbeddings = !req.includeEmbeddings;
    const limit = pageSize("page_size", req.pageSize, this.options.limits);
    if (!this.readScope(ctx, filter)) return create(ListMemoriesResponseSchema, {});
    // The token is bound to every filter field, so it cannot be replayed with another (or a widened) filter.
    // as_of defaults to now, which moves: a token carries the first page's instant, not a moving one.
    const filters = [
      "memories",
      filter.scope,
      filter.topics,
      req.asOf ? filter.asOf : null,
      req.includeInvalid,
      filter.pinned ?? null,
      filter.key ?? null,
      filter.subject ?? null,
      filter.predicate ?? null,
    ];
    const after = req.pageToken ? decodeCursor(decodePageToken<string>(req.pageToken, "string", filters)) : undefined;
    // One extra row tells whether another page exists.
    const rows = await this.memories.listMemories(filter, limit + 1, after, ctx);
    const page = rows.slice(0, limit);
    const last = page[page.length - 1];
    const nextPageToken = rows.length > limit ? encodePageToken(`${last.createdAt}:${last.memoryId}`, filters) : "";
    return create(ListMemoriesResponseSchema, {
      memories: page.map((m) => toWireMemory(m, req.includeEmbeddings)),
      nextPageToken,
    });
  }

  async deleteMemories(req: DeleteMemoriesRequest, ctx?: CallContext): Promise<DeleteMemoriesResponse> {
    const appName = requireName("app_name", req.appName);
    const hasScope = req.userId !== undefined || req.agentId !== undefined || req.sessionId !== undefined;
    if (req.memoryIds.length > 0) {
      if (hasScope)
        throw invalidArgument("memory_ids", "cannot be combined with a scope (user_id, agent_id, session_id)");
      if (req.memoryIds.length > MAX_DELETE_IDS)
        throw invalidArgument("memory_ids", `must hold at most ${MAX_DELETE_IDS} ids`);
      const ids = req.memoryIds.map((id, i) => requireId(`memory_ids[${i}]`, id));
      requireApp(ctx?.tenant, "app_name", appName);
      // Another tenant's memory counts as absent: it is neither removed nor reported.
      const forgettable = ctx?.tenant?.userId === undefined ? ids : await this.forgettable(appName, ids, ctx);
      const removed = await this.memories.deleteMemories(appName, forgettable, ctx);
      return create(DeleteMemoriesResponseSchema, { deletedCount: BigInt(removed.length) });
    }
    if (!hasScope && req.scopeMatch === 0) {
      throw invalidArgument(
        "scope_match",
        "must be given when no memory_ids and no scope are: SCOPE_MATCH_WITHIN forgets every memory of the app, SCOPE_MATCH_EXACT only the app-wide ones",
      );
    }
    const scope = scopeFilter(req, "within");
    if (scope.match === "visible")
      throw invalidArgument(
        "scope_match",
        "must be SCOPE_MATCH_WITHIN or SCOPE_MATCH_EXACT: forgetting what a scope sees would forget the shared memories too",
      );
    requireApp(ctx?.tenant, "app_name", appName);
    const userId = ownUser(ctx?.tenant, "user_id", scope.userId);
    if (userId !== undefined) scope.userId = userId;
    const removed = await this.memories.deleteMemoriesInScope(scope, ctx);
    return create(DeleteMemoriesResponseSchema, { deletedCount: BigInt(removed.length) });
  }

  /** The ids (of those given) whose memories the key may forget. */
  private async forgettable(appName: string, ids: readonly string[], ctx?: CallContext): Promise<string[]> {
    const memories = await Promise.all(ids.map((id) => this.memories.getMemory(appName, id, ctx)));
    return memories
      .filter((m): m is MemoryRecord => m !== undefined && mayForget(ctx?.tenant, m))
      .map((m) => m.memoryId);
  }

  /**
   * Changes of a scope's memories: a `started` frame once subscribed (with
   * the cursor it starts from), then, when `after` is given, the retained
   * changes after it (read from the store's change log), then every live
   * write, supersession and deletion the scope selects, each with its change
   * number; heartbeats while idle. Live changes are delivered as they come
   * while they follow one another; a gap (another replica's change, or a
   * reader that fell MAX_WATCH_BACKLOG behind) is filled from the log, so
   * nothing is missed or delivered twice. A reader behind the retained log
   * ends OUT_OF_RANGE naming `after`.
   */
  async *watchMemories(req: WatchMemoriesRequest, ctx?: CallContext): AsyncGenerator<WatchMemoriesResponse> {
    const scope = scopeFilter(req, "visible");
    requireApp(ctx?.tenant, "app_name", scope.appName);
    // Another user's scope would show nothing of theirs; say so rather than watch in silence.
    if (ctx?.tenant?.userId !== undefined) scope.userId = ownUser(ctx.tenant, "user_id", scope.userId);
    const after = req.after === undefined ? undefined : resumePoint(req.after);
    const live: MemoryChange[] = [];
    let wake: (() => void) | undefined;
    // Set when the live changes alone cannot continue the feed: read the log from the cursor.
    let behind = false;
    const onChange = (change: MemoryChange) => {
      if (live.length >= MAX_WATCH_BACKLOG) {
        live.length = 0;
        behind = true;
      } else live.push(change);
      wake?.();
    };
    // Subscribed before the window is read: a change committed in between is in both, and the cursor drops the copy.
    const unsubscribe = this.memories.subscribeMemories(scope.appName, onChange);
    const signal = ctx?.signal;
    const onAbort = () => wake?.();
    signal?.addEventListener("abort", onAbort);
    const framesOf = (change: MemoryChange): WatchMemoriesResponse | undefined => {
      const cursor = BigInt(change.seq);
      if (change.kind === "deleted") {
        const ids = change.memories.filter((m) => scopeSelects(scope, m)).map((m) => m.memoryId);
        return ids.length > 0
          ? create(WatchMemoriesResponseSchema, {
              cursor,
              frame: { case: "deleted", value: create(MemoriesDeletedSchema, { memoryIds: ids }) },
            })
          : undefined;
      }
      if (change.kind === "remote" || !scopeSelects(scope, change.memory)) return undefined;
      return create(WatchMemoriesResponseSchema, {
        cursor,
        frame: { case: change.kind, value: toWireMemory(change.memory) },
      });
    };
    try {
      // Where notices are subscribed per app (a Redis Cluster), the window is read once others' changes reach us.
      await this.memories.listening?.(scope.appName);
      const window = await this.memories.memoryChangeWindow(scope.appName);
      if (after !== undefined) requireRetained(after, window);
      let cursor = after ?? window.head;
      behind ||= cursor < window.head;
      yield create(WatchMemoriesResponseSchema, {
        frame: { case: "started", value: create(WatchStartedSchema, { cursor: BigInt(cursor) }) },
      });
      while (!signal?.aborted) {
        if (behind) {
          const page = await this.memories.readMemoryChanges(scope.appName, cursor, REPLAY_PAGE);
          for (const change of page.changes) {
            const frame = framesOf(change);
            if (frame) yield frame;
          }
          behind = page.through > cursor && page.through - cursor >= REPLAY_PAGE;
          cursor = page.through;
          continue;
        }
        const change = live.shift();
        if (change) {
          if (change.seq <= cursor) continue; // delivered already (from the log)
          if (change.seq > cursor + 1 || change.kind === "remote") {
            behind = true; // a gap: the log has what lies between
            continue;
          }
          cursor = change.seq;
          const frame = framesOf(change);
          if (frame) yield frame;
          continue;
        }
        let timer: NodeJS.Timeout | undefined;
        const idle = await new Promise<boolean>((resolve) => {
          wake = () => resolve(false);
          timer = setTimeout(() => resolve(true), this.options.heartbeatMs);
        });
        wake = undefined;
        clearTimeout(timer);
        if (idle && !signal?.aborted)
          yield create(WatchMemoriesResponseSchema, {
            frame: { case: "heartbeat", value: create(WatchHeartbeatSchema, {}) },
          });
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      unsubscribe();
    }
  }

  /** Episodic recall: the events of an app's (or a user's) sessions that best match a query. */
  async searchEvents(req: SearchEventsRequest, ctx?: CallContext): Promise<SearchEventsResponse> {
    const appName = requireName("app_name", req.appName);
    const requestedUser = optionalName("user_id", req.userId);
    const query = checkQuery("query", req.query);
    if (query.trim() === "") throw invalidArgument("query", "is required (the text to search for)");
    const k = topK("top_k", req.topK);
    const eventTypes = req.eventTypes.map((t, i) => requireEventType(`event_types[${i}]`, t));
    const userId = readableUser(ctx?.tenant, requestedUser);
    if (!appAllowed(ctx?.tenant, appName) || userId === null) return create(SearchEventsResponseSchema, {});
    const hits = await searchEvents(this.store, { appName, userId, eventTypes, query, topK: k });
    return create(SearchEventsResponseSchema, {
      hits: hits.map((h) =>
        create(EventHitSchema, {
          sessionId: h.event.sessionId,
          seq: BigInt(h.event.seq),
          snippet: h.snippet,
          score: h.score,
          event: toWireEvent(h.event),
        }),
      ),
    });
  }

  /**
   * Narrows a read filter to the key's scope: false when the key may see
   * nothing of it (another app, another user), so the caller answers empty.
   */
  private readScope(ctx: CallContext | undefined, filter: MemoryFilter): boolean {
    const userId = readableUser(ctx?.tenant, filter.scope.userId);
    if (!appAllowed(ctx?.tenant, filter.scope.appName) || userId === null) return false;
    if (userId !== undefined) filter.scope.userId = userId;
    return true;
  }
}

/** A watch's `after`, as a change number (the largest a change log can reach is a safe integer). */
function resumePoint(after: bigint): number {
  if (after > BigInt(Number.MAX_SAFE_INTEGER))
    throw invalidArgument("after", `must be at most ${Number.MAX_SAFE_INTEGER}`);
  return Number(after);
}

/** A listing cursor from its page-token position ("<createdAt>:<memoryId>"). */
function decodeCursor(position: string): MemoryCursor {
  const match = /^(\d{1,16}):([!-~]{1,128})$/.exec(position);
  if (!match) throw invalidArgument("page_token", "is malformed");
  return { createdAt: Number(match[1]), memoryId: match[2] };
}
