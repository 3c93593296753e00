/**
 * The MCP tools: each one is an Engram RPC, named and described for a model.
 * A tool's arguments are the RPC request's proto JSON (snake_case field
 * names, so an error names the same field on every path), a subset of it
 * where a field makes no sense to a model (embeddings, timestamps). zod
 * checks the shape (types, unknown keys: the SDK answers a tool error naming
 * the field); the service checks the values, as for every other protocol.
 */
import type { DescMessage, JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { ToolAnnotations } from "@modelcontextprotocol/sdk/types.js";
import * as z from "zod";
import {
  AddEventsRequestSchema,
  AddEventsResponseSchema,
  BuildConversationContextRequestSchema,
  BuildConversationContextResponseSchema,
  CreateSessionRequestSchema,
  CreateSessionResponseSchema,
  GetSessionEventsRequestSchema,
  GetSessionEventsResponseSchema,
  GetSessionRequestSchema,
  GetSessionResponseSchema,
  ListEventsRequestSchema,
  ListEventsResponseSchema,
  ListSessionsRequestSchema,
  ListSessionsResponseSchema,
  RecallRequestSchema,
  RecallResponseSchema,
  UpdateSessionRequestSchema,
  UpdateSessionResponseSchema,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import {
  DeleteMemoriesRequestSchema,
  DeleteMemoriesResponseSchema,
  SearchMemoriesRequestSchema,
  SearchMemoriesResponseSchema,
  WriteMemoriesRequestSchema,
  WriteMemoriesResponseSchema,
} from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import type { RpcName } from "../../service/guard/index.js";

/** One MCP tool over one MemoryService method. */
export interface EngramTool {
  /** The tool's name, as a model calls it. */
  name: string;
  title: string;
  /** What a model reads to decide when to call it. */
  description: string;
  /** The arguments' shape; unknown keys are refused. */
  input: z.ZodObject;
  /** The guarded MemoryService method (its local name). */
  method: RpcName;
  request: DescMessage;
  response: DescMessage;
  /** The request's proto JSON from the checked arguments; the arguments themselves when absent. */
  toRequest?: (args: JsonObject) => JsonValue;
  /** The tool's answer from the response's proto JSON; the response itself when absent. */
  fromResponse?: (response: JsonObject) => JsonObject;
  annotations: ToolAnnotations;
}

const uint32 = () => z.number().int().min(0).max(0xffff_ffff);
const seq = () => z.number().int().min(0).max(Number.MAX_SAFE_INTEGER);
const sessionId = () => z.string().describe("The session's id.");
const jsonObject = () => z.record(z.string(), z.json());
const stateDelta = () =>
  jsonObject().describe(
    'State changes: "key" sets the session\'s state, "user:key" the user\'s (shared by their sessions), "app:key" the app\'s; "temp:key" is never stored; null deletes a key, unless state_nulls_are_values.',
  );
const stateRemovals = () =>
  z
    .array(z.string())
    .describe('State keys to delete before state_delta applies, prefixed as in state_delta ("user:key", "app:key").');
const stateNullsAreValues = () =>
  z.boolean().describe("When true, a null in state_delta is stored as the key's value instead of deleting the key.");
const scopeMatch = () =>
  z
    .enum(["visible", "within", "exact"])
    .describe(
      "visible: memories a caller in that scope may recall (shared ones too); within: every memory inside the scope; exact: exactly that scope.",
    );

/** "within" -> "SCOPE_MATCH_WITHIN", the enum's proto JSON name. */
function withScopeMatch(args: JsonObject): JsonObject {
  return typeof args.scope_match === "string"
    ? { ...args, scope_match: `SCOPE_MATCH_${args.scope_match.toUpperCase()}` }
    : args;
}

const READ: ToolAnnotations = { readOnlyHint: true, openWorldHint: false };
const WRITE: ToolAnnotations = { readOnlyHint: false, destructiveHint: false, openWorldHint: false };

/** Every tool, in the order tools/list shows them. */
export const ENGRAM_TOOLS: readonly EngramTool[] = [
  {
    name: "create_session",
    title: "Create a session",
    description:
      "Starts a conversation session (an ordered event log) for one user of one app. Returns the session with its id.",
    input: z.strictObject({
      app_name: z
        .string()
        .optional()
        .describe("The application; may be left out when the API key is bound to one app."),
      user_id: z.string().optional().describe("The user; may be left out when the API key is bound to one user."),
      session_id: z.string().optional().describe("A session id of your choosing; the server makes one when left out."),
      metadata: jsonObject().optional().describe("Free-form JSON object stored with the session."),
    }),
    method: "createSession",
    request: CreateSessionRequestSchema,
    response: CreateSessionResponseSchema,
    annotations: { ...WRITE, idempotentHint: false },
  },
  {
    name: "get_session",
    title: "Get a session",
    description: "Returns a session: its app, user, metadata, head seq and event count.",
    input: z.strictObject({ session_id: sessionId() }),
    method: "getSession",
    request: GetSessionRequestSchema,
    response: GetSessionResponseSchema,
    annotations: READ,
  },
  {
    name: "get_state",
    title: "Get session state",
    description:
      'A session\'s state: its own keys, the user\'s prefixed "user:" and the app\'s prefixed "app:", with its version (which update_session can be made to expect).',
    input: z.strictObject({ session_id: sessionId() }),
    method: "getSession",
    request: GetSessionRequestSchema,
    response: GetSessionResponseSchema,
    fromResponse: ({ session }) => {
      const { session_id, state, version } = session as JsonObject;
      return { session_id, state, version };
    },
    annotations: READ,
  },
  {
    name: "update_session",
    title: "Update session state and metadata",
    description:
      "Applies a state delta to a session and/or replaces its metadata, optionally only at an expected version. Returns the session with its merged state and new version.",
    input: z.strictObject({
      session_id: sessionId(),
      state_delta: stateDelta().optional(),
      state_removals: stateRemovals().optional(),
      state_nulls_are_values: stateNullsAreValues().optional(),
      metadata: jsonObject().optional().describe("Replaces the session's metadata."),
      expected_version: seq()
        .optional()
        .describe("Update only if the session's version is this (optimistic concurrency)."),
    }),
    method: "updateSession",
    request: UpdateSessionRequestSchema,
    response: UpdateSessionResponseSchema,
    annotations: { ...WRITE, idempotentHint: false },
  },
  {
    name: "list_sessions",
    title: "List sessions",
    description: "Lists sessions, optionally of one app and one user, a page at a time.",
    input: z.strictObject({
      app_name: z.string().optional(),
      user_id: z.string().optional(),
      page_size: uint32().optional().describe("1..1000; 100 when left out."),
      page_token: z.string().optional().describe("next_page_token of the previous page."),
    }),
    method: "listSessions",
    request: ListSessionsRequestSchema,
    response: ListSessionsResponseSchema,
    annotations: READ,
  },
  {
    name: "append_events",
    title: "Append events",
    description:
      "Appends events (messages, tool calls, anything) to a session's log, atomically and in order. Returns them with their seq numbers.",
    input: z.strictObject({
      session_id: sessionId(),
      events: z
        .array(
          z.strictObject({
            event_type: z
              .string()
              .describe(
                "What the event is: user_message, agent_response, tool_call, tool_result, system, or a type of your own.",
              ),
            content: z.json().optional().describe("The event's content: any JSON value, e.g. the message text."),
            metadata: jsonObject().optional(),
            event_id: z
              .string()
              .optional()
              .describe("An idempotency key: an event id already stored is not stored twice."),
            state_delta: stateDelta().optional(),
            state_removals: stateRemovals().optional(),
            state_nulls_are_values: stateNullsAreValues().optional(),
          }),
        )
        .min(1)
        .describe("The events, oldest first."),
      expected_seq: seq()
        .optional()
        .describe("Append only if the session's head seq is this (optimistic concurrency)."),
    }),
    method: "addEvents",
    request: AddEventsRequestSchema,
    response: AddEventsResponseSchema,
    annotations: { ...WRITE, idempotentHint: false },
  },
  {
    name: "read_events",
    title: "Read a session's events",
    description: "Reads a session's events in seq order: a page after a seq, or the newest few (tail).",
    input: z.strictObject({
      session_id: sessionId(),
      after_seq: seq().optional().describe("Only events after this seq."),
      limit: uint32().optional().describe("1..1000; 100 when left out."),
      page_token: z.string().optional().describe("next_page_token of the previous page."),
      tail: uint32().optional().describe("Only the newest this many events (no after_seq or page_token then)."),
      event_types: z.array(z.string()).optional().describe("Only events of these types."),
    }),
    method: "getSessionEvents",
    request: GetSessionEventsRequestSchema,
    response: GetSessionEventsResponseSchema,
    annotations: READ,
  },
  {
    name: "list_events",
    title: "List recent events",
    description: "The newest events of one session, or of every session in scope, oldest first.",
    input: z.strictObject({
      session_id: z.string().optional().describe("One session; every session in scope when left out."),
      limit: uint32().optional().describe("1..1000; 100 when left out."),
    }),
    method: "listEvents",
    request: ListEventsRequestSchema,
    response: ListEventsResponseSchema,
    annotations: READ,
  },
  {
    name: "build_context",
    title: "Build conversation context",
    description:
      "Builds a session's conversation context for a model: chat messages and one rendered text, within a token budget, optionally focused on a query.",
    input: z.strictObject({
      session_id: sessionId(),
      token_budget: uint32().optional().describe("Most tokens of the result; no budget when left out."),
      max_events: uint32().optional().describe("Most events considered."),
      query: z.string().optional().describe("Text the older events are ranked by when they do not all fit."),
      tokenizer: z.string().optional().describe("o200k_base (default), cl100k_base or chars4."),
    }),
    method: "buildConversationContext",
    request: BuildConversationContextRequestSchema,
    response: BuildConversationContextResponseSchema,
    annotations: READ,
  },
  {
    name: "remember",
    title: "Remember",
    description:
      "Stores one long-term memory (a fact, a preference) for an app, optionally for one user, agent or session. Writing the same memory_id again with the same text is a no-op.",
    input: z.strictObject({
      app_name: z.string().describe("The application the memory belongs to."),
      text: z.string().describe("What to remember, in words."),
      user_id: z.string().optional().describe("The user it belongs to; shared by every user when left out."),
      agent_id: z.string().optional(),
      session_id: z.string().optional(),
      memory_id: z.string().optional().describe("An idempotency key; the server makes one when left out."),
      fact: z.strictObject({ subject: z.string(), predicate: z.string(), object: z.string() }).optional(),
      key: z
        .string()
        .optional()
        .describe("Supersession key: a newer memory with the same key in the same scope replaces this one."),
      topics: z.array(z.string()).optional(),
      importance: z.number().min(0).max(1).optional().describe("0..1; raises the memory's rank."),
      pinned: z.boolean().optional().describe("Always included by recall."),
      metadata: jsonObject().optional(),
    }),
    method: "writeMemories",
    request: WriteMemoriesRequestSchema,
    response: WriteMemoriesResponseSchema,
    toRequest: (args) => ({ memories: [args] }),
    annotations: { ...WRITE, idempotentHint: true },
  },
  {
    name: "recall",
    title: "Recall",
    description:
      "Everything to put in front of a model for a session's next turn: pinned memories, the memories most relevant to the query, and the session's recent context, within one token budget, rendered as one text.",
    input: z.strictObject({
      session_id: sessionId(),
      query: z.string().optional().describe("Text to rank memories by, usually the latest user message."),
      token_budget: uint32().optional().describe("Most tokens of the whole recall; 4000 when left out."),
      agent_id: z.string().optional().describe("The calling agent: other agents' memories are left out."),
      top_k: uint32().optional().describe("Most relevant memories considered, 1..100; 10 when left out."),
      tokenizer: z.string().optional(),
    }),
    method: "recall",
    request: RecallRequestSchema,
    response: RecallResponseSchema,
    annotations: READ,
  },
  {
    name: "search_memories",
    title: "Search memories",
    description: "Searches an app's long-term memories by text, best first, within a scope (user, agent, session).",
    input: z.strictObject({
      app_name: z.string(),
      query: z.string().optional().describe("Text to rank by; by importance and recency alone when left out."),
      user_id: z.string().optional(),
      agent_id: z.string().optional(),
      session_id: z.string().optional(),
      scope_match: scopeMatch().optional(),
      top_k: uint32().optional().describe("1..100; 10 when left out."),
      topics: z.array(z.string()).optional().describe("Only memories with one of these topics."),
      pinned: z.boolean().optional(),
      include_invalid: z.boolean().optional().describe("Also memories superseded or no longer valid."),
    }),
    method: "searchMemories",
    request: SearchMemoriesRequestSchema,
    response: SearchMemoriesResponseSchema,
    toRequest: withScopeMatch,
    annotations: READ,
  },
  {
    name: "forget",
    title: "Forget",
    description:
      "Deletes long-term memories: the given memory_ids, or every memory of a scope (user, agent, session). With neither, scope_match must be given: within then forgets every memory of the app.",
    input: z.strictObject({
      app_name: z.string(),
      memory_ids: z.array(z.string()).optional(),
      user_id: z.string().optional(),
      agent_id: z.string().optional(),
      session_id: z.string().optional(),
      scope_match: scopeMatch().optional(),
    }),
    method: "deleteMemories",
    request: DeleteMemoriesRequestSchema,
    response: DeleteMemoriesResponseSchema,
    toRequest: withScopeMatch,
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  },
];
