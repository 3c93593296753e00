/**
 * BuildConversationContext and CountEventTokens: a session's recent events
 * read once and assembled into the context of the next model call, with
 * each event's rendering and token count kept across calls. Recall uses the
 * same assembly for the conversation part of its answer.
 */
import { create } from "@bufbuild/protobuf";
import {
  BuildConversationContextResponseSchema,
  ChatMessageSchema,
  ContentPartSchema,
  ContextSectionSchema,
  CountEventTokensResponseSchema,
  EventTokensSchema,
  type BuildConversationContextRequest,
  type BuildConversationContextResponse,
  type ChatMessage,
  type CountEventTokensRequest,
  type CountEventTokensResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { MemoryStore } from "../../store/types.js";
import type { CallContext } from "../call-context.js";
import type { ServiceLimits } from "../limits.js";
import { pageSize, requireId, seqNumber } from "../validation.js";
import { ContextAssembler } from "./assemble.js";
import type { ContextMessage } from "./render.js";
import { parseContextRequest, tokenizerName } from "./request.js";
import { TokenizerRegistry, type TokenCounter, type TokenizerName } from "./tokenizer.js";

/** Conversation contexts of sessions; one per service. */
export class ConversationContexts {
  /** Context assembly, with per-event renderings and token counts kept across calls. */
  private readonly contexts = new ContextAssembler();
  /** Tokenizers, loaded on first use. */
  private readonly tokenizers = new TokenizerRegistry();
  /** Wire form of shared context messages (plain messages are rendered once per stored event). */
  private readonly wireMessages = new WeakMap<ContextMessage, ChatMessage>();

  constructor(
    private readonly store: MemoryStore,
    private readonly limits: ServiceLimits,
    /** Default max_events of BuildConversationContext (MEMORY_CONTEXT_LIMIT). */
    private readonly contextLimit: number,
  ) {}

  /** The named tokenizer, loaded on first use. */
  tokenizer(name: TokenizerName): Promise<TokenCounter> {
    return this.tokenizers.get(name);
  }

  async build(req: BuildConversationContextRequest, call?: CallContext): Promise<BuildConversationContextResponse> {
    const sessionId = requireId("session_id", req.sessionId);
    const request = parseContextRequest(req, this.limits, this.contextLimit);
    const counter = await this.tokenizers.get(request.tokenizer);
    const page = await this.store.readTail(sessionId, request.window, undefined, call);
    const context = this.contexts.assemble(page.events, request, counter);
    return create(BuildConversationContextResponseSchema, {
      text: context.text,
      messages: context.messages.map((m) => this.wireMessage(m)),
      eventsIncluded: context.eventsIncluded,
      eventsDropped: context.eventsDropped,
      tokensUsed: context.tokensUsed,
      retrievalUsed: context.retrievalUsed,
      tokenizer: context.tokenizer,
      eventsSummarized: context.eventsSummarized,
      sections: context.sections.map((s) => create(ContextSectionSchema, s)),
    });
  }

  /** Each event's tokens in a context, by the same tokenizer and rendering as build(). */
  async countEventTokens(req: CountEventTokensRequest, call?: CallContext): Promise<CountEventTokensResponse> {
    const sessionId = requireId("session_id", req.sessionId);
    const limit = pageSize("limit", req.limit, this.limits);
    const afterSeq = req.afterSeq === undefined ? undefined : seqNumber("after_seq", req.afterSeq);
    const tokenizer = tokenizerName(req.tokenizer);
    const [page, counter] = await Promise.all([
      this.store.readEvents(sessionId, { afterSeq, limit }, call),
      this.tokenizers.get(tokenizer),
    ]);
    return create(CountEventTokensResponseSchema, {
      events: page.events.map((e) =>
        create(EventTokensSchema, { seq: BigInt(e.seq), tokens: this.contexts.eventTokens(e, counter) }),
      ),
      tokenizer: counter.name,
    });
  }

  private wireMessage(m: ContextMessage): ChatMessage {
    let wire = this.wireMessages.get(m);
    if (!wire) {
      wire = create(ChatMessageSchema, {
        role: m.role,
        content: m.content,
        name: m.name,
        toolCalls: m.toolCalls,
        toolCallId: m.toolCallId,
        contentParts: m.contentParts.map((p) => create(ContentPartSchema, p)),
      });
      this.wireMessages.set(m, wire);
    }
    return wire;
  }
}
