/**
 * Session state (ADK's model) on the wire: UpdateSession, and sessions
 * answered with their merged state (the session's keys plus the app's as
 * "app:<key>" and the user's as "user:<key>"). Deltas on appended events are
 * validated here and applied by the store inside its append.
 */
import { create } from "@bufbuild/protobuf";
import {
  UpdateSessionResponseSchema,
  type Session,
  type UpdateSessionRequest,
  type UpdateSessionResponse,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { MemoryError } from "../../errors.js";
import { mergeState } from "../../store/state.js";
import type { MemoryStore, SessionRecord, SharedState, StateChange, StoreCall } from "../../store/types.js";
import type { CallContext } from "../call-context.js";
import { toWireSession } from "../convert.js";
import { checkJson, requireId, seqNumber } from "../validation.js";
import { parseStateChange, type WireStateChange } from "./validation.js";

/** Serves session state for the memory service. */
export class SessionStateService {
  constructor(
    private readonly store: MemoryStore,
    private readonly maxJsonDepth: number,
  ) {}

  /** The state change an event input carries, ready for the store (see parseStateChange). */
  eventChange(field: string, input: WireStateChange): StateChange {
    return parseStateChange(`${field}.`, input, this.maxJsonDepth);
  }

  async updateSession(req: UpdateSessionRequest, call?: CallContext): Promise<UpdateSessionResponse> {
    const sessionId = requireId("session_id", req.sessionId);
    if (req.metadata) checkJson("metadata", req.metadata, this.maxJsonDepth);
    const change = parseStateChange("", req, this.maxJsonDepth);
    const expectedVersion =
      req.expectedVersion === undefined ? undefined : seqNumber("expected_version", req.expectedVersion);
    const record = await this.store.updateSession(
      sessionId,
      { metadata: req.metadata, ...change, expectedVersion, now: Date.now() },
      call,
    );
    return create(UpdateSessionResponseSchema, { session: await this.wireSession(record, call) });
  }

  /** One session on the wire, with its merged state. */
  async wireSession(record: SessionRecord, call?: StoreCall): Promise<Session> {
    const shared = await this.store.sharedState(record.appName, record.userId, call);
    return toWireSession(record, mergeState(record.state, shared));
  }

  /** Sessions on the wire, each with its merged state; the shared state of each app and user is read once. */
  async wireSessions(records: readonly SessionRecord[], call?: StoreCall): Promise<Session[]> {
    const reads = new Map<string, Promise<SharedState>>();
    const shared = records.map((r) => {
      const key = JSON.stringify([r.appName, r.userId]);
      let read = reads.get(key);
      if (!read) reads.set(key, (read = this.store.sharedState(r.appName, r.userId, call)));
      return read;
    });
    const states = await Promise.all(shared);
    return records.map((r, i) => toWireSession(r, mergeState(r.state, states[i])));
  }
}

/**
 * A store's refusal of a state that would pass a cap names "state_delta";
 * on an append it is the event's field. `field` is "event" or "events".
 */
export function renameStateField(err: unknown, field: string): unknown {
  if (err instanceof MemoryError && err.field === "state_delta" && err.code === "INVALID_ARGUMENT") {
    const named = `${field}.state_delta`;
    return new MemoryError(err.code, `${named}${err.message.slice("state_delta".length)}`, err.metadata, {
      field: named,
      fieldProblem: err.fieldProblem,
      cause: err,
    });
  }
  return err;
}
