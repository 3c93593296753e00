/**
 * Generated protobuf messages as the client's plain objects. Apart from
 * output.ts so that commands load protobuf-es only once they have a response
 * to convert: `engram --help` and usage errors never pay for it.
 */
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema, timestampDate } from "@bufbuild/protobuf/wkt";
import type { MemoryEvent, Session, pb } from "@engram-memory/client";

/** A generated Session message as the client's plain Session. */
export function sessionFromPb(s: pb.Session): Session {
  return {
    sessionId: s.sessionId,
    appName: s.appName,
    userId: s.userId,
    metadata: s.metadata ?? {},
    createdAt: s.createdAt ? timestampDate(s.createdAt) : undefined,
    updatedAt: s.updatedAt ? timestampDate(s.updatedAt) : undefined,
    headSeq: Number(s.headSeq),
    firstSeq: Number(s.firstSeq),
    eventCount: Number(s.eventCount),
    state: s.state ?? {},
    version: Number(s.version),
  };
}

/** A generated Event message as the client's plain MemoryEvent. */
export function eventFromPb(e: pb.Event): MemoryEvent {
  return {
    eventId: e.eventId,
    eventType: e.eventType,
    content: e.content ? toJson(ValueSchema, e.content) : null,
    metadata: e.metadata ?? {},
    timestamp: e.timestamp ? timestampDate(e.timestamp) : undefined,
    seq: Number(e.seq),
    sessionId: e.sessionId,
    ...(e.stateDelta && { stateDelta: e.stateDelta }),
    ...(e.stateRemovals.length > 0 && { stateRemovals: e.stateRemovals }),
    ...(e.stateNullsAreValues && { stateNullsAreValues: true }),
  };
}
