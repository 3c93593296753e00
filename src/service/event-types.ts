/**
 * The well-known event types (those KAOS agents write). event_type stays an
 * open string: anything matching EVENT_TYPE_PATTERN is stored.
 */
export const EventType = {
  USER_MESSAGE: "user_message",
  AGENT_RESPONSE: "agent_response",
  TOOL_CALL: "tool_call",
  TOOL_RESULT: "tool_result",
  DELEGATION_REQUEST: "delegation_request",
  DELEGATION_RESPONSE: "delegation_response",
  TASK_DELEGATION_RECEIVED: "task_delegation_received",
  ERROR: "error",
  SYSTEM: "system",
  /** A client-written summary; metadata.covers = {from_seq, to_seq} names the seqs it replaces in contexts. */
  SUMMARY: "summary",
} as const;
