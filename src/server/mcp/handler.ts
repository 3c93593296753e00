/**
 * The Model Context Protocol at POST /mcp on the HTTP/1.1 side of the one
 * port: the official SDK's streamable HTTP transport, stateless, answering
 * JSON. Each request gets its own McpServer and transport (the SDK's
 * stateless pattern), bound to that request's credentials: no MCP session is
 * kept, nothing is held between requests, and any replica can answer any
 * request. GET (a server-to-client event stream) and DELETE (ending a
 * session) have nothing to serve without sessions and answer 405.
 *
 * Every tool call and resource read is a guarded MemoryService call
 * (protocol "mcp"): API keys, roles, tenant scope, rate limits, metrics and
 * logs apply exactly as on gRPC, Connect and REST. A request with a missing
 * or bad key is refused with HTTP 401 before any MCP message is read, as
 * MCP's authorization spec asks. The cross-site policy (cross-site.ts) has
 * already checked Origin, as MCP's transport spec asks.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { fromJson, type JsonObject } from "@bufbuild/protobuf";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { ErrorCode } from "@modelcontextprotocol/sdk/types.js";
import { invalidArgument } from "../../errors.js";
import type { CallGuard, GuardedHandler, RpcName } from "../../service/guard/index.js";
import { VERSION } from "../../version.js";
import { sendJsonError, type InternalErrorReporter } from "../status.js";
import { registerTranscripts, type GuardedRpc } from "./resources.js";
import { toolError, toolResult } from "./results.js";
import { ENGRAM_TOOLS } from "./tools.js";
import { httpCallContext } from "../http-call-context.js";
import { requestTarget } from "../request-target.js";

/** Where MCP is served. */
export const MCP_PATH = "/mcp";

/** The MemoryService methods MCP calls: the tools' and the transcript's. */
const METHODS = [
  ...new Set<RpcName>([...ENGRAM_TOOLS.map((t) => t.method), "listSessions", "getSession", "getSessionEvents"]),
];

const INSTRUCTIONS =
  "Engram is a memory server. Sessions are ordered event logs of one user's conversation with one app: " +
  "create_session, append_events, read_events and build_context keep and read them; get_state and update_session (or an event's state_delta) keep their state. " +
  "Long-term memories outlive sessions: " +
  "remember stores a fact, recall gathers what matters for a session's next turn, search_memories and forget find and remove memories.";

/**
 * Returns the /mcp handler: false for any other path, true once it has taken
 * the request (it answers it, errors included).
 */
export function createMcpHandler(opts: { guard: CallGuard; report: InternalErrorReporter; maxMessageBytes: number }) {
  const { guard, report, maxMessageBytes } = opts;
  const handlers = new Map<string, GuardedHandler>(METHODS.map((m) => [m, guard.handler(m)]));
  return (req: IncomingMessage, res: ServerResponse): boolean => {
    // Asked of every HTTP/1.1 request: read without a URL when the target is plain, and a target URL cannot parse is not ours.
    if (requestTarget(req.url)?.pathname !== MCP_PATH) return false;
    serve(req, res).catch((err: unknown) => {
      report(err);
      if (!res.headersSent) res.writeHead(500);
      res.end();
    });
    return true;
  };

  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method !== "POST") {
      sendJsonRpcError(
        res,
        405,
        { allow: "POST" },
        `${req.method} is not allowed on ${MCP_PATH}: this server keeps no MCP sessions (stateless streamable HTTP); POST each message`,
      );
      return;
    }
    const call = httpCallContext(req, res, "mcp");
    try {
      await guard.authenticate(call.authorization);
    } catch (err) {
      sendJsonError(res, err, { kaos: false, report });
      return;
    }
    const rpc: GuardedRpc = (method, message) => handlers.get(method)!(message, call) as Promise<unknown>;
    const server = engramMcpServer(rpc, report);
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: undefined,
      enableJsonResponse: true,
      maxRequestBodySize: maxMessageBytes,
    });
    res.once("close", () => {
      transport.close().catch(report);
      server.close().catch(report);
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  }
}

/** An McpServer with Engram's tools and resources, calling `rpc`. */
function engramMcpServer(rpc: GuardedRpc, report: InternalErrorReporter): McpServer {
  const server = new McpServer(
    { name: "engram", title: "Engram memory", version: VERSION },
    { instructions: INSTRUCTIONS },
  );
  for (const tool of ENGRAM_TOOLS) {
    server.registerTool(
      tool.name,
      { title: tool.title, description: tool.description, inputSchema: tool.input, annotations: tool.annotations },
      async (args) => {
        try {
          const json = args as JsonObject;
          let request;
          try {
            request = fromJson(tool.request, tool.toRequest ? tool.toRequest(json) : json);
          } catch (err) {
            // zod has checked every field's type; what is left is a value proto JSON cannot hold.
            throw invalidArgument("arguments", err instanceof Error ? err.message : String(err));
          }
          return toolResult(tool.response, await rpc(tool.method, request), tool.fromResponse);
        } catch (err) {
          return toolError(err, report);
        }
      },
    );
  }
  registerTranscripts(server, rpc, report);
  return server;
}

/** A JSON-RPC error without an id, as MCP's transport answers an HTTP-level refusal. */
function sendJsonRpcError(res: ServerResponse, status: number, headers: Record<string, string>, message: string): void {
  const body = Buffer.from(
    JSON.stringify({ jsonrpc: "2.0", error: { code: ErrorCode.InvalidRequest, message }, id: null }),
  );
  res.writeHead(status, { ...headers, "content-type": "application/json", "content-length": body.length });
  res.end(body);
}
