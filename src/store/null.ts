/**
 * The null store (MEMORY_ENABLED=false): every call succeeds and nothing is
 * kept, like KAOS's NullMemory. Appends are acknowledged with seqs counted from
 * 1 within the call; event reads find empty sessions, all of one incarnation
 * (""). As NullMemory, a session created without an id is "null-session" and
 * looking a session up finds none (GetSession: NOT_FOUND). A call expecting
 * another incarnation than "" is NOT_FOUND, as on every store.
 */
import type {
  LongTermMemoryStore,
  MemoryChangePage,
  MemoryChangeWindow,
  MemoryRecord,
  MemoryWriteResult,
  AppendResult,
  ErasureResult,
  EventPage,
  EventQuery,
  MemoryStore,
  NewEvent,
  NewSession,
  SessionRecord,
  SessionUpdate,
  SharedState,
  StoreCall,
  StoreStats,
  StoredEvent,
  StoreDurability,
} from "./types.js";
import { requireRetained } from "./memories/rules.js";
import { checkIncarnation } from "./rules.js";
import { copyStateChange } from "./state.js";

function emptySession(sessionId: string, now = Date.now()): SessionRecord {
  return {
    sessionId,
    appName: "",
    userId: "",
    metadata: {},
    createdAt: now,
    updatedAt: now,
    headSeq: 0,
    firstSeq: 1,
    incarnation: "",
    state: {},
    version: 0,
  };
}

/** The MemoryStore that keeps nothing. */
export class NullStore implements MemoryStore {
  readonly backend = "null";
  readonly capabilities = { persistent: false, shared: false, retains: false };
  /** Nothing is kept, so nothing is ever evicted. */
  readonly sessionsEvicted = 0;
  /** Memories are acknowledged and forgotten, like events. */
  readonly memories: LongTermMemoryStore = new NullMemories();
  readonly eventsTrimmed = 0;

  async createSession(input: NewSession): Promise<SessionRecord> {
    return {
      ...emptySession(input.sessionId, input.now),
      appName: input.appName,
      userId: input.userId,
      metadata: input.metadata,
    };
  }

  async getOrCreateSession(input: NewSession): Promise<{ session: SessionRecord; created: boolean }> {
    return { session: await this.createSession(input), created: true };
  }

  /** KAOS's NullMemory.create_session answers this id when given none. */
  newSessionId(): string {
    return "null-session";
  }

  /** Nothing is kept, so no session is found (KAOS's NullMemory.get_session returns None). */
  async getSession(): Promise<SessionRecord | undefined> {
    return undefined;
  }

  async listSessions(): Promise<SessionRecord[]> {
    return [];
  }

  /** Acknowledged with what it was given (nothing is kept). */
  async updateSession(sessionId: string, update: SessionUpdate, call?: StoreCall): Promise<SessionRecord> {
    checkIncarnation(sessionId, "", call);
    return { ...emptySession(sessionId, update.now), metadata: update.metadata ?? {} };
  }

  async sharedState(): Promise<SharedState> {
    return { app: {}, user: {} };
  }

  async deleteSession(sessionId: string, call?: StoreCall): Promise<boolean> {
    checkIncarnation(sessionId, "", call);
    return true;
  }

  async appendEvents(
    sessionId: string,
    events: readonly NewEvent[],
    _expectedSeq?: number,
    call?: StoreCall,
  ): Promise<AppendResult> {
    checkIncarnation(sessionId, "", call);
    const stored: StoredEvent[] = events.map((e, i) =>
      copyStateChange<StoredEvent>(
        {
          sessionId,
          seq: i + 1,
          eventId: e.eventId,
          eventType: e.eventType,
          content: e.content,
          metadata: e.metadata,
          timestamp: e.timestamp,
        },
        e,
      ),
    );
    return { events: stored, replayed: false };
  }

  async readEvents(sessionId: string, _query: EventQuery, call?: StoreCall): Promise<EventPage> {
    checkIncarnation(sessionId, "", call);
    return { events: [], headSeq: 0, firstSeq: 1, incarnation: "" };
  }

  async readTail(
    sessionId: string,
    _limit: number,
    _eventTypes?: readonly string[],
    call?: StoreCall,
  ): Promise<EventPage> {
    checkIncarnation(sessionId, "", call);
    return { events: [], headSeq: 0, firstSeq: 1, incarnation: "" };
  }

  async listRecentEvents(): Promise<StoredEvent[]> {
    return [];
  }

  async stats(): Promise<StoreStats> {
    return { totalSessions: 0, totalEvents: 0 };
  }

  async cleanup(): Promise<number> {
    return 0;
  }

  async deleteUserData(): Promise<ErasureResult> {
    return { sessions: 0, events: 0 };
  }

  subscribe(): () => void {
    return () => {};
  }

  async ping(): Promise<void> {}

  async describeDurability(): Promise<StoreDurability> {
    return { summary: "nothing is kept (MEMORY_ENABLED=false)", settings: {} };
  }

  async close(): Promise<void> {}
}

/** Long-term memories that keep nothing: writes are acknowledged as given, reads find nothing. */
class NullMemories implements LongTermMemoryStore {
  async writeMemories(memories: readonly MemoryRecord[]): Promise<MemoryWriteResult> {
    return { memories: [...memories], superseded: [] };
  }
  async getMemory(): Promise<undefined> {
    return undefined;
  }
  async searchMemories(): Promise<[]> {
    return [];
  }
  async listMemories(): Promise<[]> {
    return [];
  }
  async deleteMemories(): Promise<[]> {
    return [];
  }
  async deleteMemoriesInScope(): Promise<[]> {
    return [];
  }
  async memoryChangeWindow(): Promise<MemoryChangeWindow> {
    return { head: 0, floor: 0 };
  }
  async readMemoryChanges(_appName: string, after: number): Promise<MemoryChangePage> {
    requireRetained(after, { head: 0, floor: 0 });
    return { changes: [], through: after };
  }
  subscribeMemories(): () => void {
    return () => {};
  }
}
