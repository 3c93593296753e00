/**
 * MCP resources: a session's transcript, engram://sessions/{session_id}/transcript,
 * read through the same guarded RPCs as the tools (GetSession, then
 * GetSessionEvents with a tail), so a key sees only its own tenants' sessions.
 */
import { create } from "@bufbuild/protobuf";
import { McpServer, ResourceTemplate } from "@modelcontextprotocol/sdk/server/mcp.js";
import {
  GetSessionEventsRequestSchema,
  GetSessionRequestSchema,
  ListSessionsRequestSchema,
  type Event,
  type GetSessionEventsResponse,
  type GetSessionResponse,
  type ListSessionsResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { invalidArgument } from "../../errors.js";
import { valueToJson } from "../../service/convert.js";
import type { InternalErrorReporter } from "../status.js";
import { resourceError } from "./results.js";

/** Calls a guarded MemoryService method with the MCP request's credentials. */
export type GuardedRpc = (method: string, req: unknown) => Promise<unknown>;

/** The newest events a transcript shows: one page, the service's largest. */
export const TRANSCRIPT_MAX_EVENTS = 1000;
/** Sessions resources/list shows: the first page of ListSessions. */
export const LISTED_TRANSCRIPTS = 100;

const TEMPLATE = "engram://sessions/{session_id}/transcript";

/** The transcript's URI of a session (its id percent-encoded, as a URI template expands it). */
export function transcriptUri(sessionId: string): string {
  return `engram://sessions/${encodeURIComponent(sessionId)}/transcript`;
}

/** Registers the transcript resource template on `server`. */
export function registerTranscripts(server: McpServer, rpc: GuardedRpc, report: InternalErrorReporter): void {
  const template = new ResourceTemplate(TEMPLATE, {
    list: async () => {
      try {
        const page = (await rpc(
          "listSessions",
          create(ListSessionsRequestSchema, { pageSize: LISTED_TRANSCRIPTS }),
        )) as ListSessionsResponse;
        return {
          resources: page.sessions.map((s) => ({
            uri: transcriptUri(s.sessionId),
            name: `session ${s.sessionId}`,
            description: `Transcript of session ${s.sessionId} (app ${s.appName}, user ${s.userId})`,
            mimeType: "text/plain",
          })),
        };
      } catch (err) {
        throw resourceError(err, report);
      }
    },
  });
  server.registerResource(
    "session-transcript",
    template,
    {
      title: "Session transcript",
      description: `A session's events as text, one line each (content as JSON), oldest first (the newest ${TRANSCRIPT_MAX_EVENTS} at most).`,
      mimeType: "text/plain",
    },
    async (uri, variables) => {
      try {
        const sessionId = decodeSessionId(variables.session_id);
        const { session } = (await rpc(
          "getSession",
          create(GetSessionRequestSchema, { sessionId }),
        )) as GetSessionResponse;
        const page = (await rpc(
          "getSessionEvents",
          create(GetSessionEventsRequestSchema, { sessionId, tail: TRANSCRIPT_MAX_EVENTS }),
        )) as GetSessionEventsResponse;
        const header = `session ${sessionId} (app ${session!.appName}, user ${session!.userId}): ${session!.eventCount} events, head seq ${page.headSeq}`;
        const omitted = Number(session!.eventCount) - page.events.length;
        const lines = [
          header,
          ...(omitted > 0 ? [`(${omitted} older events not shown)`] : []),
          ...page.events.map(transcriptLine),
        ];
        return { contents: [{ uri: uri.href, mimeType: "text/plain", text: lines.join("\n") + "\n" }] };
      } catch (err) {
        throw resourceError(err, report);
      }
    },
  );
}

/** The template's one variable, percent-decoded; INVALID_ARGUMENT naming session_id when it is not one id. */
function decodeSessionId(value: string | string[] | undefined): string {
  if (typeof value !== "string") throw invalidArgument("session_id", "must be one session id");
  try {
    return decodeURIComponent(value);
  } catch {
    throw invalidArgument("session_id", "is not valid percent-encoding");
  }
}

/**
 * `[seq 3] user_message: "hello"`: the content as JSON, strings too, so that
 * every event is one line and no content can pass for another event's line.
 */
function transcriptLine(e: Event): string {
  return `[seq ${e.seq}] ${e.eventType}: ${JSON.stringify(valueToJson("content", e.content, Number.MAX_SAFE_INTEGER))}`;
}
