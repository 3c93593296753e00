/**
 * Trace context: KAOS keeps trace_id/span_id in event metadata, so an append
 * fills them from a valid W3C `traceparent` when the client did not set
 * them. They do not count towards an event's idempotency fingerprint
 * (src/store/fingerprint.ts).
 */
import type { AddEventRequest, AddEventsRequest } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { JsonObject } from "../../store/types.js";
import type { RpcName } from "./rules.js";
import type { StepFactory } from "./step.js";

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;

/** The events of each append method; other methods carry no trace context. */
const EVENTS_OF: Partial<Record<RpcName, (req: unknown) => AddEventRequest["event"][]>> = {
  addEvent: (req) => [(req as AddEventRequest).event],
  addEvents: (req) => (req as AddEventsRequest).events,
};

/** Fills trace_id/span_id of the appended events from `traceparent`; absent for every method but the appends. */
export const traceContext: StepFactory = ({ method }) => {
  const eventsOf = EVENTS_OF[method];
  if (!eventsOf) return undefined;
  return (next) => (call) => {
    if (call.context.traceparent) addTraceContext(eventsOf(call.req), call.context.traceparent);
    return next(call);
  };
};

function addTraceContext(events: AddEventRequest["event"][], traceparent: string): void {
  const match = TRACEPARENT.exec(traceparent.trim());
  if (!match || /^0+$/.test(match[1]) || /^0+$/.test(match[2])) return;
  for (const event of events) {
    if (!event) continue;
    const metadata: JsonObject = (event.metadata ??= {});
    if (metadata.trace_id === undefined && metadata.span_id === undefined) {
      metadata.trace_id = match[1];
      metadata.span_id = match[2];
    }
  }
}
