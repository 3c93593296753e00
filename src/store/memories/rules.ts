/**
 * The semantics of long-term memories every driver shares: which memories a
 * scope selects, what supersedes what, when a memory is valid, and what makes
 * two writes of one memory_id the same memory. Drivers that filter in their
 * backend (SQL, Lua) must agree with these functions; the conformance suite
 * (test/store/memories-conformance.ts) checks that they do.
 */
import { hash } from "node:crypto";
import stableStringify from "safe-stable-stringify";
import { MemoryError } from "../../errors.js";
import type { MemoryChangeWindow, MemoryFilter, MemoryRecord, MemoryScopeFilter } from "../types.js";

/** The scope dimensions below the app, in a fixed order. */
const DIMENSIONS = ["userId", "agentId", "sessionId"] as const;

/**
 * The supersession key of a memory: its explicit key, else its fact's subject
 * and predicate; "" (never superseded) when it has neither. The two kinds
 * never collide: an explicit key and a fact live in separate namespaces.
 */
export function supersessionKey(m: Pick<MemoryRecord, "key" | "fact">): string {
  if (m.key !== "") return `k\u0000${m.key}`;
  if (m.fact && m.fact.subject !== "" && m.fact.predicate !== "")
    return `f\u0000${m.fact.subject}\u0000${m.fact.predicate}`;
  return "";
}

/** One string naming a memory's exact scope (within its app): equal exactly when the scopes are. */
export function exactScopeKey(m: Pick<MemoryRecord, "userId" | "agentId" | "sessionId">): string {
  // JSON keeps "absent" apart from any string value, and is unambiguous for any characters.
  return JSON.stringify(DIMENSIONS.map((d) => m[d] ?? null));
}

/** True when the scope filter selects the memory (ScopeMatch in memories.proto). */
export function scopeSelects(scope: MemoryScopeFilter, m: MemoryRecord): boolean {
  if (m.appName !== scope.appName) return false;
  for (const d of DIMENSIONS) {
    const want = scope[d];
    const have = m[d];
    switch (scope.match) {
      case "visible":
        if (have !== undefined && have !== want) return false;
        break;
      case "within":
        if (want !== undefined && have !== want) return false;
        break;
      case "exact":
        if (have !== want) return false;
        break;
    }
  }
  return true;
}

/** True when the memory holds at `at` (validFrom <= at < invalidAt). */
export function validAt(m: Pick<MemoryRecord, "validFrom" | "invalidAt">, at: number): boolean {
  return m.validFrom <= at && (m.invalidAt === undefined || at < m.invalidAt);
}

/** True when the filter (scope, topics, validity, pinned, key, fact) selects the memory. */
export function filterSelects(filter: MemoryFilter, m: MemoryRecord): boolean {
  if (!scopeSelects(filter.scope, m)) return false;
  if (filter.asOf !== undefined && !validAt(m, filter.asOf)) return false;
  if (filter.pinned !== undefined && m.pinned !== filter.pinned) return false;
  if (filter.key !== undefined && m.key !== filter.key) return false;
  if (filter.subject !== undefined && m.fact?.subject !== filter.subject) return false;
  if (filter.predicate !== undefined && m.fact?.predicate !== filter.predicate) return false;
  if (filter.topics && filter.topics.length > 0 && !m.topics.some((t) => filter.topics!.includes(t))) return false;
  return true;
}

/**
 * Identity of a memory as the client wrote it, for idempotent retries: a hash
 * of the canonical JSON of every client-set field. Server-set fields
 * (createdAt, supersededBy) and invalidAt, which a later supersession may
 * change, are left out; a retry that leaves validFrom to the server again is
 * still the same memory, so validFrom counts only when the client set it.
 */
export function memoryFingerprint(
  m: Omit<MemoryRecord, "createdAt" | "supersededBy" | "fingerprint" | "invalidAt" | "validFrom">,
  clientValidFrom?: number,
): string {
  const canonical = stableStringify([
    m.appName,
    m.userId ?? null,
    m.agentId ?? null,
    m.sessionId ?? null,
    m.text,
    m.fact ?? null,
    m.key,
    m.topics,
    m.importance,
    m.pinned,
    m.metadata,
    m.source ?? null,
    clientValidFrom ?? null,
    m.embedding ?? null,
  ]);
  return hash("sha256", canonical ?? "", "base64url");
}

/** ALREADY_EXISTS for a memory_id stored with other content. */
export function memoryIdTaken(field: string, memoryId: string): MemoryError {
  return new MemoryError(
    "ALREADY_EXISTS",
    `${field}: memory ${JSON.stringify(memoryId)} already exists with other content; write a new memory_id (with the same key to supersede it)`,
    {},
    {
      field,
      fieldProblem: "already exists with other content",
      reason: "MEMORY_ID_TAKEN",
    },
  );
}

/** INVALID_ARGUMENT for an embedding whose dimension is not the app's (the first embedding of an app sets it). */
export function embeddingDimensionMismatch(field: string, got: number, want: number): MemoryError {
  const problem = `has ${got} dimensions, but this app's embeddings have ${want}`;
  return new MemoryError(
    "INVALID_ARGUMENT",
    `${field}: ${problem}`,
    {},
    { field, fieldProblem: problem, reason: "EMBEDDING_DIMENSION_MISMATCH" },
  );
}

/** Cosine similarity of two vectors of the same length; 0 when either is all zeros. */
export function cosine(a: readonly number[], b: readonly number[]): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb);
}

/**
 * Changes each app's change log retains (for WatchMemories' `after`): the
 * newest this many; a resume point before them is OUT_OF_RANGE.
 */
export const MEMORY_CHANGES_RETAINED = 10_000;

/** An app's change log window from its newest change number: the log keeps the newest MEMORY_CHANGES_RETAINED. */
export function changeWindowOf(head: number): MemoryChangeWindow {
  return { head, floor: Math.max(0, head - MEMORY_CHANGES_RETAINED) };
}

/** OUT_OF_RANGE for a watch resume point (`after`) outside the app's retained change log. */
export function changeCursorOutOfRange(after: number, window: MemoryChangeWindow): MemoryError {
  const problem =
    after > window.head
      ? `change ${after} is beyond the app's newest change (${window.head})`
      : `changes after ${after} are no longer retained (the oldest retained is ${window.floor + 1}); list or search, then watch from the cursor of started`;
  return new MemoryError(
    "OUT_OF_RANGE",
    `after: ${problem}`,
    {},
    {
      field: "after",
      fieldProblem: problem,
      reason: "CHANGES_EVICTED",
      info: { head: String(window.head), floor: String(window.floor) },
    },
  );
}

/** The window check readMemoryChanges makes before reading. */
export function requireRetained(after: number, window: MemoryChangeWindow): void {
  if (after < window.floor || after > window.head) throw changeCursorOutOfRange(after, window);
}

/** A deleted memory as a change log keeps it: its id and scope (what a watch filters and reports), nothing else. */
export function deletedStub(
  appName: string,
  memoryId: string,
  userId?: string | null,
  agentId?: string | null,
  sessionId?: string | null,
): MemoryRecord {
  const m: MemoryRecord = {
    memoryId,
    appName,
    text: "",
    key: "",
    topics: [],
    importance: 0,
    pinned: false,
    metadata: {},
    createdAt: 0,
    validFrom: 0,
    fingerprint: "",
  };
  if (userId !== null && userId !== undefined) m.userId = userId;
  if (agentId !== null && agentId !== undefined) m.agentId = agentId;
  if (sessionId !== null && sessionId !== undefined) m.sessionId = sessionId;
  return m;
}
