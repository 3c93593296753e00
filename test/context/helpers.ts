/**
 * Helpers of the context tests: events written as plain JSON, appended over a
 * real client, and an independent recount of a context's tokens with
 * gpt-tokenizer itself (not the server's counter), so a budget check can fail.
 */
import { fromJson, type JsonObject, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { countTokens as o200k } from "gpt-tokenizer/encoding/o200k_base";
import { countTokens as cl100k } from "gpt-tokenizer/encoding/cl100k_base";
import type {
  BuildConversationContextRequestSchema,
  BuildConversationContextResponse,
  EventInput,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { MemoryClient } from "../support/clients.js";

/** The options of a BuildConversationContext request (all but session_id). */
export type ContextRequestInit = Omit<
  MessageInitShape<typeof BuildConversationContextRequestSchema>,
  "sessionId" | "$typeName"
>;

/** An event as a test writes it. */
export interface EventSpec {
  type: string;
  content?: JsonValue;
  metadata?: JsonObject;
  id?: string;
}

/** Shorthands for the common event types. */
export const ev = {
  user: (text: string, metadata?: JsonObject): EventSpec => ({ type: "user_message", content: text, metadata }),
  assistant: (text: string, metadata?: JsonObject): EventSpec => ({ type: "agent_response", content: text, metadata }),
  system: (text: string, metadata?: JsonObject): EventSpec => ({ type: "system", content: text, metadata }),
  call: (tool: string, id: string, args: JsonObject = {}, metadata?: JsonObject): EventSpec => ({
    type: "tool_call",
    content: { tool, tool_call_id: id, arguments: args },
    metadata,
  }),
  result: (tool: string, id: string, result: JsonValue, metadata?: JsonObject): EventSpec => ({
    type: "tool_result",
    content: { tool, tool_call_id: id, result },
    metadata,
  }),
  summary: (text: string, fromSeq: number, toSeq: number): EventSpec => ({
    type: "summary",
    content: text,
    metadata: { covers: { from_seq: fromSeq, to_seq: toSeq } },
  }),
  doc: (text: string, section = "documents"): EventSpec => ({ type: "document", content: text, metadata: { section } }),
};

/** The wire form of an event spec. */
export function toInput(e: EventSpec): Partial<EventInput> {
  return {
    eventId: e.id ?? "",
    eventType: e.type,
    content: e.content === undefined ? undefined : fromJson(ValueSchema, e.content),
    metadata: e.metadata,
  };
}

let unique = 0;
/** A fresh session holding `events`, appended in batches of at most 500. */
export async function sessionWith(client: MemoryClient, events: EventSpec[], label = "ctx"): Promise<string> {
  const sessionId = `${label}-${process.pid}-${++unique}-${Date.now().toString(36)}`;
  await client.createSession({ appName: "context-tests", userId: "u", sessionId });
  for (let i = 0; i < events.length; i += 500) {
    await client.addEvents({ sessionId, events: events.slice(i, i + 500).map(toInput) as EventInput[] });
  }
  return sessionId;
}

/** Counts as the documented rules say, with the tokenizer library directly. */
export function recountTokens(ctx: BuildConversationContextResponse): number {
  const count =
    ctx.tokenizer === "o200k_base"
      ? (t: string) => (t ? o200k(t, { disallowedSpecial: new Set() }) : 0)
      : ctx.tokenizer === "cl100k_base"
        ? (t: string) => (t ? cl100k(t, { disallowedSpecial: new Set() }) : 0)
        : (t: string) => Math.ceil(t.length / 4);
  let total = 0;
  for (const m of ctx.messages) {
    if (m.toolCalls.length > 0) {
      // Each call is charged as its own message (parallel calls share one on the wire: an upper bound).
      for (const c of m.toolCalls) total += 4 + count(`${c.function!.name} ${c.function!.arguments}`);
    } else if (m.role === "tool") {
      total += 4 + count(`${m.name} ${m.content}`);
    } else {
      total += 4 + count(m.content) + 85 * m.contentParts.filter((p) => p.type === "image_url").length;
    }
  }
  return total;
}

/** Checks that every tool call has exactly one answer after it and every answer a call before it. */
export function toolPairingErrors(ctx: BuildConversationContextResponse): string[] {
  const errors: string[] = [];
  const open = new Map<string, number>();
  ctx.messages.forEach((m, i) => {
    for (const c of m.toolCalls) {
      if (open.has(c.id)) errors.push(`call ${c.id} repeated at ${i}`);
      open.set(c.id, i);
    }
    if (m.role === "tool") {
      if (!open.has(m.toolCallId)) errors.push(`tool message ${i} answers no earlier call (${m.toolCallId})`);
      open.delete(m.toolCallId);
    }
  });
  for (const id of open.keys()) errors.push(`call ${id} has no result`);
  return errors;
}
