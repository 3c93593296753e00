/**
 * Background fact extraction (MEMORY_EXTRACTION_URL, off by default): the
 * events of every successful append are sent to the operator's
 * OpenAI-compatible chat completions endpoint, which is asked for JSON fact
 * triples; each fact becomes a long-term memory of the session's app and
 * user, written through LongTermMemoryService.writeMemories (validation,
 * embeddings and the store's atomic, idempotent write, exactly as for the
 * RPC), with the fact's subject + predicate as its supersession key.
 *
 * - Never on the request path: `onAppended` only enqueues and returns. A
 *   bounded queue (MEMORY_EXTRACTION_QUEUE_SIZE ranges) drains with
 *   MEMORY_EXTRACTION_CONCURRENCY requests at once; when full, new ranges are
 *   dropped and counted. Nothing the endpoint does can fail or slow an append.
 * - Idempotent per event range: the memory ids are derived from (session_id,
 *   from_seq, to_seq, index), so processing a range again (a retried append
 *   is re-extracted) writes the same ids and the store keeps one memory each.
 * - Progress lives in this process only: ranges queued or in flight when it
 *   stops are not extracted, and nothing is replayed at start. With several
 *   replicas, each extracts the appends it served.
 * - Bad answers (not JSON, wrong shapes, facts the memory validation refuses)
 *   are skipped and counted, never thrown: this runs with no caller to tell.
 * - A session deleted or erased before or while its range is extracted gets
 *   no facts: it is looked up again after the write, which is taken back.
 */
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import OpenAI from "openai";
import { openAICompatibleClient } from "./openai-endpoint.js";
import {
  MemoryFactSchema,
  MemorySchema,
  MemorySourceSchema,
  WriteMemoriesRequestSchema,
  type Memory,
} from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import type { Config } from "../../config.js";
import type { EventPage, MemoryStore, StoredEvent } from "../../store/types.js";
import { contentText } from "../context/index.js";
import type { ServiceLimits } from "../limits.js";
import type { LongTermMemoryService } from "./service.js";
import { MAX_BATCH_MEMORIES, newMemory } from "./validation.js";

/** How to reach the extraction endpoint and how much work to queue (the MEMORY_EXTRACTION_* settings). */
export interface ExtractionSettings {
  /** Base URL of the OpenAI-compatible API; requests go to <url>/chat/completions. */
  url: string;
  /** The model name sent with every request. */
  model: string;
  /** Sent as `authorization: Bearer <key>`; none: no authorization header. */
  apiKey?: string;
  /** Longest one request may take, retries included. */
  timeoutMs: number;
  /** Events per request: an append of more is extracted as several ranges. */
  maxEvents: number;
  /** Ranges waiting; past it new ranges are dropped. */
  queueSize: number;
  /** Requests in flight at once. */
  concurrency: number;
  /** Event types whose text is sent; others are left out. */
  eventTypes: readonly string[];
}

/** What extraction did so far on this replica (exported as engram_extraction_* metrics). */
export interface ExtractionCounts {
  /** Facts written as memories (a re-extracted range counts its facts again). */
  facts: number;
  /** Requests that failed (endpoint down, timed out, refused) or answers that were not JSON of the asked shape. */
  failedRequests: number;
  /** Facts of a readable answer that were skipped: wrong shape, or refused by the memory validation. */
  skippedFacts: number;
  /** Ranges dropped because the queue was full. */
  droppedRanges: number;
  /** Writes of a range's facts the store refused. */
  failedWrites: number;
}

/** Facts one answer may contribute at most (a write is one batch). */
const MAX_FACTS_PER_RANGE = MAX_BATCH_MEMORIES;
/** Characters of one event's text sent to the endpoint; longer texts are cut. */
const MAX_EVENT_CHARS = 4000;

const SYSTEM_PROMPT = [
  "You extract durable facts about the user and the world from a conversation excerpt.",
  'Answer with one JSON object only: {"facts": [{"subject": "...", "predicate": "...", "object": "..."}]}.',
  'Use short, lowercase, reusable predicates (e.g. "lives in", "likes", "works at"), so a later fact with the same subject and predicate replaces an earlier one.',
  'Answer {"facts": []} when there is nothing worth remembering.',
].join(" ");

/** One range of one session's events waiting for extraction. */
interface PendingRange {
  sessionId: string;
  events: StoredEvent[];
  /** The incarnation the events were appended to, when the append expected one (a scoped key's); undefined: not known. */
  incarnation?: string;
}

/** A fact triple as the model answered it. */
interface ExtractedFact {
  subject: string;
  predicate: string;
  object: string;
}

/** The memory id of the `index`th fact extracted from a range: the same range always yields the same ids. */
export function extractedMemoryId(sessionId: string, fromSeq: number, toSeq: number, index: number): string {
  const digest = createHash("sha256")
    .update(`${sessionId}\u0000${fromSeq}\u0000${toSeq}\u0000${index}`)
    .digest("hex")
    .slice(0, 32);
  return `fact-${digest}`;
}

/** Extracts facts from appended events in the background; one per process. */
export class FactExtractor {
  readonly counts: ExtractionCounts = {
    facts: 0,
    failedRequests: 0,
    skippedFacts: 0,
    droppedRanges: 0,
    failedWrites: 0,
  };
  private readonly openai: OpenAI;
  private readonly queue: PendingRange[] = [];
  private running = 0;
  /** Resolvers of `idle()` callers. */
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly store: MemoryStore,
    private readonly memories: LongTermMemoryService,
    private readonly limits: ServiceLimits,
    readonly settings: ExtractionSettings,
  ) {
    this.openai = openAICompatibleClient({ ...settings, maxRetries: 1 });
  }

  /**
   * Queues the events of a successful append for extraction and returns at
   * once; never throws. Events of other types than `eventTypes` are left
   * out; the rest go in ranges of at most `maxEvents` (from_seq and to_seq
   * are the first and last kept event's), the same ranges for a retry of
   * the same append. `incarnation`: the session incarnation the append
   * expected, when it did: facts are never filed under a session created
   * since under the same id.
   */
  onAppended(sessionId: string, appended: readonly StoredEvent[], incarnation?: string): void {
    const events = appended.filter((e) => this.settings.eventTypes.includes(e.eventType));
    for (let start = 0; start < events.length; start += this.settings.maxEvents) {
      const range = events.slice(start, start + this.settings.maxEvents);
      if (this.queue.length >= this.settings.queueSize) {
        this.counts.droppedRanges++;
        continue;
      }
      this.queue.push({ sessionId, events: range, incarnation });
    }
    this.drain();
  }

  /** Resolves once nothing is queued or in flight (for tests and shutdown). */
  idle(): Promise<void> {
    if (this.queue.length === 0 && this.running === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private drain(): void {
    while (this.running < this.settings.concurrency && this.queue.length > 0) {
      const range = this.queue.shift()!;
      this.running++;
      void this.extract(range)
        .catch(() => this.counts.failedWrites++)
        .finally(() => {
          this.running--;
          this.drain();
          if (this.queue.length === 0 && this.running === 0) for (const wake of this.idleWaiters.splice(0)) wake();
        });
    }
  }

  /** Extracts one range and writes its facts; failures are counted, never thrown past here. */
  private async extract(range: PendingRange): Promise<void> {
    const fromSeq = range.events[0]!.seq;
    const toSeq = range.events[range.events.length - 1]!.seq;
    const transcript = range.events
      .map((e) => ({ type: e.eventType, text: contentText(e.content).slice(0, MAX_EVENT_CHARS) }))
      .filter((e) => e.text.trim() !== "")
      .map((e) => `[${e.type}] ${e.text}`)
      .join("\n");
    if (transcript === "") return;
    const incarnation = range.incarnation ?? (await this.incarnationHolding(range));
    // Replaced by a session created under its id, whose events at these seqs are others: not its to remember.
    if (incarnation === undefined) return;
    const session = await this.store.getSession(range.sessionId, { expectedIncarnation: incarnation });
    // Deleted (or erased, or replaced by a session created under its id) since the append: nothing to remember it for.
    if (!session) return;
    const facts = await this.ask(transcript);
    if (facts === undefined || facts.length === 0) return;
    const now = Date.now();
    const memories: Memory[] = [];
    facts.forEach((fact, index) => {
      const memory = create(MemorySchema, {
        memoryId: extractedMemoryId(range.sessionId, fromSeq, toSeq, index),
        appName: session.appName,
        userId: session.userId,
        text: `${fact.subject} ${fact.predicate} ${fact.object}`,
        fact: create(MemoryFactSchema, fact),
        topics: ["extracted"],
        importance: 0.5,
        source: create(MemorySourceSchema, {
          sessionId: range.sessionId,
          fromSeq: BigInt(fromSeq),
          toSeq: BigInt(toSeq),
        }),
      });
      try {
        // The RPC's own validation, one fact at a time, so one bad fact does not sink the others.
        newMemory(`facts[${index}]`, memory, now, this.limits, () => memory.memoryId);
        memories.push(memory);
      } catch {
        this.counts.skippedFacts++;
      }
    });
    if (memories.length === 0) return;
    await this.memories.writeMemories(create(WriteMemoriesRequestSchema, { memories }));
    // An erasure (DeleteUserData) or deletion that ran while the endpoint was answering must not be undone by facts
    // arriving after it: look again, and take them back. An erasure after this point removes them itself.
    const after = await this.store.getSession(range.sessionId);
    if (!after || after.incarnation !== session.incarnation) {
      await this.store.memories.deleteMemories(
        session.appName,
        memories.map((m) => m.memoryId),
      );
      return;
    }
    this.counts.facts += memories.length;
  }

  /**
   * The incarnation of the session now holding the range's events, when the
   * append did not say which it went to (a call without a scoped key): the
   * session's events at the range's seqs are read again, and only if they
   * are exactly the range's (ids, types, timestamps, contents) does the
   * incarnation they were read from count as the range's. A session deleted
   * and created again under the id since holds other events there (or none):
   * undefined, so one tenant's words are never filed under another's
   * session. Undefined too when they can no longer be read (gone, trimmed).
   */
  private async incarnationHolding(range: PendingRange): Promise<string | undefined> {
    const fromSeq = range.events[0]!.seq;
    const toSeq = range.events[range.events.length - 1]!.seq;
    let page: EventPage;
    try {
      page = await this.store.readEvents(range.sessionId, { afterSeq: fromSeq - 1, limit: toSeq - fromSeq + 1 });
    } catch {
      return undefined;
    }
    const stored = new Map(page.events.map((e) => [e.seq, e]));
    const same = range.events.every((e) => {
      const now = stored.get(e.seq);
      return (
        now !== undefined &&
        now.eventId === e.eventId &&
        now.eventType === e.eventType &&
        now.timestamp === e.timestamp &&
        JSON.stringify(now.content) === JSON.stringify(e.content)
      );
    });
    return same ? page.incarnation : undefined;
  }

  /** The facts the endpoint found in a transcript; undefined (counted) when the request or its answer failed. */
  private async ask(transcript: string): Promise<ExtractedFact[] | undefined> {
    let content: string | null | undefined;
    try {
      const completion = await this.openai.chat.completions.create(
        {
          model: this.settings.model,
          temperature: 0,
          response_format: { type: "json_object" },
          messages: [
            { role: "system", content: SYSTEM_PROMPT },
            { role: "user", content: transcript },
          ],
        },
        { signal: AbortSignal.timeout(this.settings.timeoutMs) },
      );
      content = (completion as { choices?: Array<{ message?: { content?: string | null } }> }).choices?.[0]?.message
        ?.content;
    } catch {
      this.counts.failedRequests++;
      return undefined;
    }
    const facts = parseFacts(content);
    if (facts === undefined) {
      this.counts.failedRequests++;
      return undefined;
    }
    const usable = facts
      .filter(isFact)
      .map((f) => ({ subject: f.subject.trim(), predicate: f.predicate.trim(), object: f.object.trim() }))
      .slice(0, MAX_FACTS_PER_RANGE);
    this.counts.skippedFacts += facts.length - usable.length;
    return usable;
  }
}

/** The `facts` array of an answer, or undefined when the answer is not a JSON object holding one. */
function parseFacts(content: string | null | undefined): unknown[] | undefined {
  if (typeof content !== "string") return undefined;
  let parsed: unknown;
  try {
    // Some models wrap JSON in a Markdown fence despite response_format.
    parsed = JSON.parse(content.trim().replace(/^```(?:json)?\s*|\s*```$/g, ""));
  } catch {
    return undefined;
  }
  const facts = (parsed as { facts?: unknown } | null)?.facts;
  return Array.isArray(facts) ? facts : undefined;
}

function isFact(value: unknown): value is ExtractedFact {
  const f = value as Partial<Record<keyof ExtractedFact, unknown>> | null;
  return (
    typeof f === "object" &&
    f !== null &&
    [f.subject, f.predicate, f.object].every((part) => typeof part === "string" && part.trim() !== "")
  );
}

/** The extraction settings of the configuration; undefined when MEMORY_EXTRACTION_URL is unset (no extraction). */
export function extractionSettingsFromConfig(config: Config): ExtractionSettings | undefined {
  if (!config.extractionUrl || !config.extractionModel) return undefined;
  return {
    url: config.extractionUrl,
    model: config.extractionModel,
    apiKey: config.extractionApiKey,
    timeoutMs: config.extractionTimeoutMs,
    maxEvents: config.extractionMaxEvents,
    queueSize: config.extractionQueueSize,
    concurrency: config.extractionConcurrency,
    eventTypes: config.extractionEventTypes,
  };
}
