/**
 * Semantics every store driver shares, written once so that local, Redis and
 * PostgreSQL answer the same codes and messages.
 */
import { randomBytes } from "node:crypto";
import { cursorEvicted, MemoryError, sessionNotFound } from "../errors.js";
import type {
  ErasureResult,
  NewSession,
  RecentEventsFilter,
  ResumedErasures,
  SessionRecord,
  StoreCall,
  StoreLimits,
} from "./types.js";

/** Shared cursor rule: OUT_OF_RANGE for a cursor before the retained window or past the head. */
export function checkCursor(afterSeq: number, firstSeq: number, headSeq: number): void {
  if (afterSeq < firstSeq - 1) throw cursorEvicted(afterSeq, firstSeq);
  if (afterSeq > headSeq) {
    const problem = `${afterSeq} is ahead of the session's head seq ${headSeq}`;
    throw new MemoryError(
      "OUT_OF_RANGE",
      `after_seq: ${problem}`,
      {},
      { field: "after_seq", fieldProblem: problem, reason: "CURSOR_AHEAD", info: { head_seq: String(headSeq) } },
    );
  }
}

/**
 * One recent-events index, kept in ingest order by every store: every
 * event's (both fields absent), an app's, a user's, or an app and user's.
 * Each session's events go into the four indexes of its tenancy, so no
 * tenant's writes can push another tenant's events out of its index.
 */
export interface RecentScope {
  appName?: string;
  userId?: string;
}

/** The four recent indexes a session's events go into. */
export function scopesOfSession(appName: string, userId: string): RecentScope[] {
  return [{}, { appName }, { userId }, { appName, userId }];
}

/**
 * The recent indexes a store-wide listing reads: one per app named (merged by
 * ingest order), or the user's or the global one when no app is named; none
 * when `appNames` is empty.
 */
export function recentScopes(filter: RecentEventsFilter = {}): RecentScope[] {
  const { appNames, userId } = filter;
  if (appNames === undefined) return [userId === undefined ? {} : { userId }];
  return [...new Set(appNames)].map((appName) => (userId === undefined ? { appName } : { appName, userId }));
}

/** True when a session of (appName, userId) belongs in the recent scope. */
export function inRecentScope(scope: RecentScope, appName: string, userId: string): boolean {
  return (
    (scope.appName === undefined || scope.appName === appName) &&
    (scope.userId === undefined || scope.userId === userId)
  );
}

/** ALREADY_EXISTS for an event_id retained with a different payload. */
export function duplicateEventId(eventId: string): MemoryError {
  const problem = `event ${JSON.stringify(eventId)} already exists in this session with different content`;
  return new MemoryError(
    "ALREADY_EXISTS",
    `event.event_id: ${problem}`,
    {},
    { field: "event.event_id", fieldProblem: problem, reason: "EVENT_ID_CONFLICT" },
  );
}

/** ALREADY_EXISTS for a session id that is taken. */
export function sessionExists(sessionId: string): MemoryError {
  return new MemoryError(
    "ALREADY_EXISTS",
    `session_id: session ${JSON.stringify(sessionId)} already exists`,
    {},
    {
      field: "session_id",
      fieldProblem: "session already exists",
      reason: "SESSION_EXISTS",
    },
  );
}

/** True when a JSON object has no keys (without building a key array). */
export function isEmptyObject(object: object): boolean {
  for (const _key in object) return false;
  return true;
}

/**
 * A new session's incarnation: 96 random bits, so that a session created
 * again under a deleted one's id (on any replica, at any time) never matches
 * it, without a counter shared by every replica.
 */
export function newIncarnation(): string {
  return randomBytes(12).toString("base64url");
}

/** True when the call may act on the session of this incarnation: it expects none, or this one (StoreCall.expectedIncarnation). */
export function isExpectedIncarnation(incarnation: string, call: StoreCall | undefined): boolean {
  return call?.expectedIncarnation === undefined || call.expectedIncarnation === incarnation;
}

/** NOT_FOUND, exactly as for an absent session, when the call expects another incarnation than the session's `incarnation`. */
export function checkIncarnation(sessionId: string, incarnation: string, call: StoreCall | undefined): void {
  if (!isExpectedIncarnation(incarnation, call)) throw sessionNotFound(sessionId);
}

/** The record of a session just created from `input`: no events yet. */
export function newSessionRecord(input: NewSession, incarnation: string): SessionRecord {
  const { sessionId, appName, userId, metadata, now } = input;
  return {
    sessionId,
    appName,
    userId,
    metadata,
    createdAt: now,
    updatedAt: now,
    headSeq: 0,
    firstSeq: 1,
    incarnation,
    state: {},
    version: 0,
  };
}

/**
 * Runs `erase` again for each tenancy whose erasure was recorded but not
 * finished (resumeErasures), one after another, adding up what they removed.
 */
export async function resumeEach(
  tenancies: Iterable<{ appName: string; userId: string }>,
  erase: (appName: string, userId: string) => Promise<ErasureResult>,
): Promise<ResumedErasures> {
  const resumed: ResumedErasures = { users: 0, sessions: 0, events: 0 };
  for (const { appName, userId } of tenancies) {
    const erased = await erase(appName, userId);
    resumed.users++;
    resumed.sessions += erased.sessions;
    resumed.events += erased.events;
  }
  return resumed;
}

/** Default of StoreLimits.dedupeWindowMs: two minutes, as JetStream's duplicate window. */
export const DEFAULT_DEDUPE_WINDOW_MS = 120_000;
/** Default of StoreLimits.dedupeMaxIds. */
export const DEFAULT_DEDUPE_MAX_IDS = 1000;

/** The events cap of a session of `appName`: its app's, else the global one (0: no cap). */
export function sessionEventCap(limits: StoreLimits, appName: string): number {
  return limits.apps?.get(appName)?.maxSessionEvents ?? limits.maxSessionEvents;
}

/** The session cap of one app (0: none); the global cap applies besides. */
export function appSessionCap(limits: StoreLimits, appName: string): number {
  return limits.apps?.get(appName)?.maxSessions ?? 0;
}

/** The apps whose event cap differs from the global one, with that cap. */
export function appEventCaps(limits: StoreLimits): Array<[string, number]> {
  const caps: Array<[string, number]> = [];
  for (const [app, retention] of limits.apps ?? []) {
    if (retention.maxSessionEvents !== undefined && retention.maxSessionEvents !== limits.maxSessionEvents)
      caps.push([app, retention.maxSessionEvents]);
  }
  return caps;
}

/** How long and how many trimmed ids a session remembers (0 and 0: none). */
export function dedupeWindow(limits: StoreLimits): { windowMs: number; maxIds: number } {
  const windowMs = limits.dedupeWindowMs ?? DEFAULT_DEDUPE_WINDOW_MS;
  const maxIds = limits.dedupeMaxIds ?? DEFAULT_DEDUPE_MAX_IDS;
  return windowMs > 0 && maxIds > 0 ? { windowMs, maxIds } : { windowMs: 0, maxIds: 0 };
}

/** Sessions one eviction past `cap` removes: the least recently updated 10%, at least one. */
export function evictionCount(cap: number): number {
  return Math.max(1, Math.ceil(cap * 0.1));
}
