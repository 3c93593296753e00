/**
 * What an RPC's answer or error becomes in MCP. A tool answers its RPC
 * response as proto JSON (the same field names as Connect and REST), as text
 * and as structured content. An error is a tool error (isError), which the
 * model reads and can act on, never a JSON-RPC failure: its text is the
 * status code and message (the message names the field at fault), its
 * structured content the Connect JSON error every plain HTTP path answers.
 * A resource read has no tool result, so its errors are JSON-RPC errors.
 */
import { toJson, type DescMessage, type JsonObject } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { ErrorCode, McpError, type CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { errorJsonOf, JSON_WRITE_OPTIONS, statusOf, type InternalErrorReporter } from "../status.js";

/** "not_found", as Connect JSON spells a code. */
function codeName(code: Code): string {
  return Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
}

/** A tool's answer: the RPC response as proto JSON, or what `shape` makes of it. */
export function toolResult(
  schema: DescMessage,
  response: unknown,
  shape?: (response: JsonObject) => JsonObject,
): CallToolResult {
  const full = toJson(schema, response as never, JSON_WRITE_OPTIONS) as JsonObject;
  const json = shape ? shape(full) : full;
  return { content: [{ type: "text", text: JSON.stringify(json) }], structuredContent: json };
}

/** A tool error: the code and message for the model, the Connect JSON error for programs; INTERNAL hides its cause (reported). */
export function toolError(err: unknown, report: InternalErrorReporter): CallToolResult {
  const status = statusOf(err, report);
  const error = errorJsonOf(status);
  return {
    isError: true,
    content: [{ type: "text", text: `${codeName(status.code)}: ${status.message}` }],
    structuredContent: { error },
  };
}

/** JSON-RPC error codes of MCP (the spec's "resource not found" is -32002). */
const RESOURCE_NOT_FOUND = -32002;

/** A resource read's error: NOT_FOUND is "resource not found", a client's mistake invalid params, the rest internal; data is the Connect JSON error. */
export function resourceError(err: unknown, report: InternalErrorReporter): McpError {
  const status = statusOf(err, report);
  const mcpCode =
    status.code === Code.NotFound
      ? RESOURCE_NOT_FOUND
      : status.code === Code.InvalidArgument ||
          status.code === Code.OutOfRange ||
          status.code === Code.FailedPrecondition
        ? ErrorCode.InvalidParams
        : ErrorCode.InternalError;
  return new McpError(mcpCode, `${codeName(status.code)}: ${status.message}`, errorJsonOf(status));
}
