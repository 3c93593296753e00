/**
 * Trace context: KAOS keeps trace_id/span_id in event metadata, so an append
 * fills them from a valid W3C `traceparent` when the client did not set
 * them. They do not count towards an event's idempotency fingerprint
 * (src/store/fingerprint.ts).
 */
import type { AddEventRequest, AddEventsRequest, EventInput } from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import type { RpcName } from "./rules.js";
import type { StepFactory } from "./step.js";

const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/;

/** The trace ids of a valid `traceparent`. */
type TraceIds = { trace_id: string; span_id: string };

/** Each append method's request with its events traced; other methods carry no trace context. */
const TRACED: Partial<Record<RpcName, (req: unknown, ids: TraceIds) => unknown>> = {
  addEvent: (req, ids) => {
    const r = req as AddEventRequest;
    return r.event ? { ...r, event: traced(r.event, ids) } : r;
  },
  addEvents: (req, ids) => {
    const r = req as AddEventsRequest;
    return { ...r, events: r.events.map((e) => traced(e, ids)) };
  },
};

/**
 * Passes on the appended events with trace_id/span_id from `traceparent`, in
 * a new request (the caller's is never written into); absent for every
 * method but the appends.
 */
export const traceContext: StepFactory = ({ method }) => {
  const withTrace = TRACED[method];
  if (!withTrace) return undefined;
  return (next) => (call) => {
    const ids = call.context.traceparent ? traceIds(call.context.traceparent) : undefined;
    if (ids) call.req = withTrace(call.req, ids);
    return next(call);
  };
};

function traceIds(traceparent: string): TraceIds | undefined {
  const match = TRACEPARENT.exec(traceparent.trim());
  if (!match || /^0+$/.test(match[1]) || /^0+$/.test(match[2])) return undefined;
  return { trace_id: match[1], span_id: match[2] };
}

/** The event with the trace ids in its metadata, unless the client set either. */
function traced(event: EventInput, ids: TraceIds): EventInput {
  const metadata = event.metadata ?? {};
  if (metadata.trace_id !== undefined || metadata.span_id !== undefined) return event;
  return { ...event, metadata: { ...metadata, ...ids } };
}
