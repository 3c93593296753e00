/**
 * Context assembly: turns a window of events into the KAOS text form and into
 * chat messages in the OpenAI shape. Tool calls and their results travel
 * together: a call without its result in the window (or a result without its
 * call) is left out, because LLM APIs reject an unanswered tool call.
 */
import type { JsonObject, JsonValue, StoredEvent } from "../store/types.js";
import { EventType } from "./event-types.js";

/** A chat message in the OpenAI shape. */
export interface ContextMessage {
  role: "system" | "user" | "assistant" | "tool";
  content: string;
  name: string;
  toolCalls: { id: string; type: "function"; function: { name: string; arguments: string } }[];
  toolCallId: string;
}

/** The assembled context. */
export interface ConversationContext {
  text: string;
  messages: ContextMessage[];
  eventsIncluded: number;
  eventsDropped: number;
}

function asObject(v: JsonValue): JsonObject | undefined {
  return v !== null && typeof v === "object" && !Array.isArray(v) ? v : undefined;
}

function str(v: JsonValue | undefined): string | undefined {
  return typeof v === "string" && v.length > 0 ? v : undefined;
}

/** Readable text of a content value: strings as they are, {text|content|message} unwrapped, else JSON. */
export function contentText(content: JsonValue): string {
  if (typeof content === "string") return content;
  const obj = asObject(content);
  const inner = obj && (str(obj.text) ?? str(obj.content) ?? str(obj.message));
  return inner ?? JSON.stringify(content);
}

function toolCallId(e: StoredEvent): string | undefined {
  const c = asObject(e.content);
  return str(c?.tool_call_id) ?? str(c?.id) ?? str(e.metadata.tool_call_id);
}

function toolName(e: StoredEvent): string {
  const c = asObject(e.content);
  return str(c?.tool) ?? str(c?.tool_name) ?? str(c?.name) ?? str(c?.function) ?? str(e.metadata.tool) ?? "tool";
}

function agentName(e: StoredEvent): string | undefined {
  const c = asObject(e.content);
  return str(c?.agent) ?? str(c?.target_agent) ?? str(c?.from_agent) ?? str(e.metadata.agent);
}

function message(role: ContextMessage["role"], content: string, extra: Partial<ContextMessage> = {}): ContextMessage {
  return { role, content, name: "", toolCalls: [], toolCallId: "", ...extra };
}

/** Pairs tool calls with results inside the window; returns the id of every kept call/result event. */
function pairTools(events: readonly StoredEvent[]): Map<StoredEvent, string> {
  const open: { event: StoredEvent; id: string; name: string }[] = [];
  const paired = new Map<StoredEvent, string>();
  for (const e of events) {
    if (e.eventType === EventType.TOOL_CALL) {
      open.push({ event: e, id: toolCallId(e) ?? `call_${e.seq}`, name: toolName(e) });
    } else if (e.eventType === EventType.TOOL_RESULT) {
      const id = toolCallId(e);
      const name = toolName(e);
      // By id when the result names one; otherwise the oldest open call of that tool.
      const i = id !== undefined ? open.findIndex((c) => c.id === id) : open.findIndex((c) => c.name === name || name === "tool");
      if (i < 0) continue;
      const [call] = open.splice(i, 1);
      paired.set(call.event, call.id);
      paired.set(e, call.id);
    }
  }
  return paired;
}

/** Builds the context from a window of events in seq order. */
export function buildConversationContext(events: readonly StoredEvent[]): ConversationContext {
  const paired = pairTools(events);
  const lines: string[] = [];
  const messages: ContextMessage[] = [];
  let included = 0;
  let dropped = 0;
  for (const e of events) {
    const text = contentText(e.content);
    switch (e.eventType) {
      case EventType.SYSTEM:
        messages.push(message("system", text));
        break;
      case EventType.USER_MESSAGE:
        lines.push(`User: ${text}`);
        messages.push(message("user", text));
        break;
      case EventType.AGENT_RESPONSE:
        lines.push(`Assistant: ${text}`);
        messages.push(message("assistant", text));
        break;
      case EventType.TOOL_CALL: {
        const id = paired.get(e);
        if (id === undefined) {
          dropped++;
          continue;
        }
        const c = asObject(e.content);
        const args = c?.arguments ?? c?.args ?? c?.input ?? {};
        const call = {
          id,
          type: "function" as const,
          function: { name: toolName(e), arguments: typeof args === "string" ? args : JSON.stringify(args) },
        };
        // Consecutive calls form one assistant turn (parallel tool calls).
        const last = messages[messages.length - 1];
        if (last && last.role === "assistant" && last.toolCalls.length > 0 && last.content === "") last.toolCalls.push(call);
        else messages.push(message("assistant", "", { toolCalls: [call] }));
        break;
      }
      case EventType.TOOL_RESULT: {
        const id = paired.get(e);
        if (id === undefined) {
          dropped++;
          continue;
        }
        const c = asObject(e.content);
        const result = c && "result" in c ? c.result : c && "output" in c ? c.output : e.content;
        messages.push(message("tool", typeof result === "string" ? result : JSON.stringify(result), { name: toolName(e), toolCallId: id }));
        break;
      }
      case EventType.DELEGATION_REQUEST: {
        const agent = agentName(e);
        messages.push(message("assistant", `[Delegation request${agent ? ` to ${agent}` : ""}] ${text}`));
        break;
      }
      case EventType.DELEGATION_RESPONSE: {
        const agent = agentName(e);
        messages.push(message("user", `[Delegation response${agent ? ` from ${agent}` : ""}] ${text}`));
        break;
      }
      case EventType.TASK_DELEGATION_RECEIVED: {
        const agent = agentName(e);
        messages.push(message("user", `[Task delegated${agent ? ` by ${agent}` : ""}] ${text}`));
        break;
      }
      case EventType.ERROR:
        messages.push(message("system", `[Error] ${text}`));
        break;
      default:
        dropped++;
        continue;
    }
    included++;
  }
  return { text: lines.join("\n"), messages, eventsIncluded: included, eventsDropped: dropped };
}
