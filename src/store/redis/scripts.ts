/**
 * The Redis store's Lua scripts, typed (as bullmq's src/classes/scripts.ts):
 * each script has one args builder (typed input -> KEYS and ARGV, in the
 * order its header documents; append-12.lua's by the names script-args.ts
 * declares) and a reply decoder (raw reply -> typed result), so the driver
 * never builds an argument array or indexes a reply itself. Loading and
 * running them: script-runner.ts.
 */
import { eventFingerprint } from "../fingerprint.js";
import { appEventCaps, dedupeWindow } from "../rules.js";
import { hasStateChange, MAX_STATE_BYTES, MAX_STATE_KEYS } from "../state.js";
import type { CleanupScope, NewEvent, NewSession, SessionUpdate, StoreLimits } from "../types.js";
import { encodeEvent, encodeStateChanges, fieldsOf } from "./codec.js";
import {
  APPEND_ARGV,
  ArgList,
  encodedArgs,
  RespText,
  sectionTemplate,
  writeSection,
  writeTemplate,
  type Arg,
  type ArgWriter,
  type Resp,
} from "./script-args.js";
import { erasureField, recentMemberPrefix, type RedisKeys, type Tenancy } from "./keys.js";

/** Entries kept in each recent-events index: twice the ListEvents cap of 1000, as slack for removals. */
export const RECENT_CAP = 2000;
/**
 * Largest notice that carries the appended events themselves (append-12.lua):
 * every replica then streams them without reading them back, one Redis round
 * trip per event per replica saved. Larger appends announce only the head.
 */
const NOTICE_EVENTS_MAX_BYTES = 64 * 1024;
/** Seqs a filtered read looks at per script call (bounds the script's run time). */
const FILTER_SCAN = 500;

/** What a script returns, as ioredis hands it over (bulk strings as Buffers for a script with `buffers`). */
export type Reply = Array<string | number | null | Buffer | Reply>;

/** What every args builder may use besides its input: the key names and the store's limits. */
export interface ScriptContext {
  keys: RedisKeys;
  limits: StoreLimits;
}

/** One script: its file's name, how to call it and how to read its reply. */
export interface Script<Input, Result> {
  name: string;
  /** Writes nothing: no WAIT after it (MEMORY_REDIS_WAIT_REPLICAS). */
  readOnly?: boolean;
  /**
   * Its reply's bulk strings as Buffers, not strings: for replies whose
   * values are compared and cached as bytes (a read's encoded events),
   * where converting each to a string first is wasted work.
   */
  buffers?: boolean;
  /** KEYS then ARGV, as the script's header lists them. */
  args(context: ScriptContext, input: Input): Arg[];
  /** The reply as a typed result (some replies are only read knowing the input, such as the number of events). */
  decode(reply: Reply, input: Input): Result;
  /** args() in RESP from the same builder, reusing encoded per-session runs (respOf(args()) otherwise); one node only. */
  resp?(context: ScriptContext, input: Input): Resp;
}

/** Input of create-7.lua. */
export interface CreateInput {
  session: NewSession;
  incarnation: string;
  /** "create": EXISTS when taken; "get": the existing session's fields. */
  mode: "create" | "get";
}

/** Creates a session, or finds the one there (getOrCreate). */
export const createScript: Script<
  CreateInput,
  | { outcome: "EXISTS" }
  | { outcome: "FOUND"; fields: Record<string, string> }
  | { outcome: "CREATED"; totalSessions: number }
> = {
  name: "create",
  args({ keys }, { session, incarnation, mode }) {
    const { sessionId, appName, userId } = session;
    const bucket = keys.bucketOf(sessionId);
    const head = [
      keys.session(sessionId),
      keys.updated(bucket),
      keys.stats(bucket),
      ...keys.indexesOf({ appName, userId }, bucket),
    ];
    return [...head, sessionId, appName, userId, JSON.stringify(session.metadata), session.now, mode, incarnation];
  },
  decode(reply) {
    if (reply[0] === "EXISTS") return { outcome: "EXISTS" };
    if (reply[0] === "FOUND") return { outcome: "FOUND", fields: fieldsOf(reply[1] as string[]) };
    return { outcome: "CREATED", totalSessions: reply[1] as number };
  },
};

/** Input of append-12.lua: the events go to `sessionId`, whose indexes are named from `tenancy`. */
export interface AppendInput {
  sessionId: string;
  tenancy: Tenancy;
  events: readonly NewEvent[];
  expectedSeq?: number;
  /** Epoch ms: the session's updatedAt, and the trim time of ids trimmed now. */
  now: number;
  /** Cluster: the lowest ingest position of this append (IngestClock); undefined on one node. */
  ingestBase?: number;
  /** The session's incarnation the caller expects (StoreCall.expectedIncarnation); undefined: any. */
  incarnation?: string;
}

/**
 * An append's outcome. "MOVED": the session now has another tenancy than the
 * one given (re-read it, call again). "REPLACED": the id names another
 * incarnation than the expected one. "OK": per event its seq, and its stored
 * encoding when it was stored before (a retry of an event still retained).
 */
export type AppendOutcome =
  | { outcome: "NOT_FOUND" | "MOVED" | "REPLACED" }
  | { outcome: "DUPLICATE"; eventId: string }
  | { outcome: "CONFLICT"; headSeq: number }
  | StateTooLarge
  | {
      outcome: "OK";
      replayed: boolean;
      events: Array<{ seq: number; original?: string }>;
      trimmed: number;
      outbox?: OutboxEntry;
    };

/** Cluster: user and app state changes written to a bucket's outbox, to apply in the app's slot (shared-3.lua). */
export interface OutboxEntry {
  /** The entry's field in the outbox hash: also its id once applied. */
  field: string;
  /** Its JSON: {"app", "user", "at", "changes": [[scope, key, value], ...]}. */
  value: string;
}

/** Appends a batch of events to one session. */
export const appendScript: Script<AppendInput, AppendOutcome> = {
  name: "append",
  args(context, input) {
    const out = new ArgList();
    writeAppendArgs(out, context, input);
    return out.args;
  },
  resp(context, input) {
    const out = new RespText();
    writeAppendArgs(out, context, input);
    return out;
  },
  decode(reply, { events }) {
    switch (reply[0]) {
      case "NOT_FOUND":
      case "MOVED":
      case "REPLACED":
        return { outcome: reply[0] };
      case "DUPLICATE":
        return { outcome: "DUPLICATE", eventId: reply[1] as string };
      case "CONFLICT":
        return { outcome: "CONFLICT", headSeq: reply[1] as number };
      case "TOO_LARGE":
        return stateTooLargeOf(reply);
    }
    const stored = events.map((_, i) => {
      // "": appended now; null: a retry of an event trimmed inside the dedupe window. Both: as submitted.
      const original = reply[5 + 2 * i];
      return {
        seq: reply[4 + 2 * i] as number,
        original: typeof original === "string" && original !== "" ? original : undefined,
      };
    });
    // A replay (every event known) has no trimmed count.
    const trimmed = (reply[4 + 2 * events.length] as number | undefined) ?? 0;
    const field = reply[5 + 2 * events.length];
    const outbox = typeof field === "string" ? { field, value: reply[6 + 2 * events.length] as string } : undefined;
    return { outcome: "OK", replayed: reply[1] === 1, events: stored, trimmed, outbox };
  },
};

/** Sessions whose AppendRuns a store keeps; past it they are all dropped (and remade as needed). */
const APPEND_RUNS_KEPT = 10_000;
/** Each store's AppendRuns by session id (a store has one ScriptContext). */
const appendRunsByContext = new WeakMap<ScriptContext, Map<string, AppendRuns>>();

/** Writes append-12.lua's KEYS and ARGV (APPEND_ARGV) for `input`. */
function writeAppendArgs(out: ArgWriter, context: ScriptContext, input: AppendInput): void {
  const { sessionId, tenancy, events, expectedSeq, now, ingestBase, incarnation } = input;
  const runs = appendRunsOf(context, sessionId, tenancy);
  writeTemplate(out, runs.head, { expectedSeq: expectedSeq ?? "", now, eventCount: events.length });
  for (const e of events) {
    writeSection(out, APPEND_ARGV.event, {
      eventId: e.eventId,
      // Generated ids come with fingerprint "": fingerprint them anyway, so a
      // retry naming such an id (or a re-sent command) is recognised as the same event.
      fingerprint: e.fingerprint || eventFingerprint(e.eventType, e.content, e.metadata, e),
      timestamp: e.timestamp,
      encoded: encodeEvent(e),
    });
  }
  out.encoded(runs.afterEvents);
  for (const e of events) {
    if (!hasStateChange(e)) out.arg(0);
    else for (const change of encodeStateChanges(e)) out.arg(change);
  }
  writeTemplate(out, runs.tail, { ingestBase: ingestBase ?? "", incarnation });
}

/**
 * The arguments of append-12.lua that stay the same for every append to one
 * session (of one tenancy), encoded once per session instead of hex-encoding
 * the id into eight key names per append: its KEYS with the fixed fields of
 * `head`, the sections between the events and their state changes, and the
 * fixed fields of `tail`.
 */
type AppendRuns = ReturnType<typeof newAppendRuns>;

function appendRunsOf(context: ScriptContext, sessionId: string, tenancy: Tenancy): AppendRuns {
  let cache = appendRunsByContext.get(context);
  if (!cache) appendRunsByContext.set(context, (cache = new Map()));
  const cached = cache.get(sessionId);
  if (cached && cached.appName === tenancy.appName && cached.userId === tenancy.userId) return cached;
  const runs = newAppendRuns(context, sessionId, tenancy);
  if (cache.size >= APPEND_RUNS_KEPT) cache.clear();
  cache.set(sessionId, runs);
  return runs;
}

function newAppendRuns({ keys, limits }: ScriptContext, sessionId: string, tenancy: Tenancy) {
  const bucket = keys.bucketOf(sessionId);
  const { windowMs, maxIds } = dedupeWindow(limits);
  const caps = appEventCaps(limits);
  const afterEvents = new ArgList();
  writeSection(afterEvents, APPEND_ARGV.tenancy, {
    noticeMaxBytes: NOTICE_EVENTS_MAX_BYTES,
    appName: tenancy.appName,
    userId: tenancy.userId,
    dedupeWindowMs: windowMs,
    dedupeMaxIds: maxIds,
    capCount: caps.length,
  });
  for (const [app, maxEvents] of caps) writeSection(afterEvents, APPEND_ARGV.cap, { app, maxEvents });
  writeSection(afterEvents, APPEND_ARGV.stateLimits, { maxStateKeys: MAX_STATE_KEYS, maxStateBytes: MAX_STATE_BYTES });
  const sessionKeys = [
    ...keys.sessionKeys(sessionId),
    keys.updated(bucket),
    keys.stats(bucket),
    ...keys.recentOf(tenancy, bucket),
    keys.trimmedIds(sessionId),
    ...sharedStateKeys(keys, sessionId, tenancy),
  ];
  const head = {
    sessionId,
    sessionIdJson: JSON.stringify(sessionId),
    maxSessionEvents: limits.maxSessionEvents,
    recentCap: RECENT_CAP,
    memberPrefix: recentMemberPrefix(sessionId),
    channel: keys.channel(bucket),
  };
  const tail = { outboxPrefix: keys.clustered ? recentMemberPrefix(sessionId) : "", publish: publishCommand(keys) };
  return {
    appName: tenancy.appName,
    userId: tenancy.userId,
    head: sectionTemplate(APPEND_ARGV.head, head, sessionKeys),
    afterEvents: encodedArgs(afterEvents.args),
    tail: sectionTemplate(APPEND_ARGV.tail, tail),
  };
}

/**
 * KEYS[11..12] of append-12.lua, KEYS[3..4] of update-4.lua: the user's and
 * the app's state on one node; on a cluster, where they are in another slot,
 * the session bucket's outbox twice.
 */
function sharedStateKeys(keys: RedisKeys, sessionId: string, tenancy: Tenancy): [string, string] {
  if (!keys.clustered) return [keys.userState(tenancy), keys.appState(tenancy.appName)];
  const outbox = keys.outbox(keys.bucketOf(sessionId));
  return [outbox, outbox];
}

/** PUBLISH on one node (as every release before clusters), SPUBLISH to the bucket's shard on a cluster. */
function publishCommand(keys: RedisKeys): string {
  return keys.clustered ? "SPUBLISH" : "PUBLISH";
}

/** A state change refused by a script: which state would have held how many entries and bytes. */
export interface StateTooLarge {
  outcome: "TOO_LARGE";
  scope: "session" | "user" | "app";
  entries: number;
  bytes: number;
}

function stateTooLargeOf(reply: Reply): StateTooLarge {
  const scope = ({ s: "session", u: "user", a: "app" } as const)[reply[1] as "s" | "u" | "a"];
  return { outcome: "TOO_LARGE", scope, entries: reply[2] as number, bytes: reply[3] as number };
}

/** Input of update-4.lua: the session, the tenancy its state keys are named from, the update. */
export interface UpdateInput {
  sessionId: string;
  tenancy: Tenancy;
  update: SessionUpdate;
  /** The session's incarnation the caller expects (StoreCall.expectedIncarnation); undefined: any. */
  incarnation?: string;
}

/** An update's outcome; "OK" carries the session hash's fields after it. */
export type UpdateOutcome =
  | { outcome: "NOT_FOUND" | "MOVED" | "REPLACED" }
  | { outcome: "CONFLICT"; version: number }
  | StateTooLarge
  | { outcome: "OK"; fields: Record<string, string>; outbox?: OutboxEntry };

/** Updates a session's metadata and state (UpdateSession). */
export const updateScript: Script<UpdateInput, UpdateOutcome> = {
  name: "update",
  args({ keys }, { sessionId, tenancy, update, incarnation }) {
    const args: Arg[] = [
      keys.session(sessionId),
      keys.updated(keys.bucketOf(sessionId)),
      ...sharedStateKeys(keys, sessionId, tenancy),
      sessionId,
      tenancy.appName,
      tenancy.userId,
      update.expectedVersion ?? "",
      update.now,
      update.metadata ? JSON.stringify(update.metadata) : "",
      MAX_STATE_KEYS,
      MAX_STATE_BYTES,
      ...encodeStateChanges(update),
      keys.clustered ? recentMemberPrefix(sessionId) : "",
    ];
    if (incarnation !== undefined) args.push(incarnation);
    return args;
  },
  decode(reply) {
    switch (reply[0]) {
      case "NOT_FOUND":
      case "MOVED":
      case "REPLACED":
        return { outcome: reply[0] };
      case "CONFLICT":
        return { outcome: "CONFLICT", version: reply[1] as number };
      case "TOO_LARGE":
        return stateTooLargeOf(reply);
    }
    const outbox = typeof reply[2] === "string" ? { field: reply[2], value: reply[3] as string } : undefined;
    return { outcome: "OK", fields: fieldsOf(reply[1] as string[]), outbox };
  },
};

/**
 * Input of delete-14.lua: the session and the tenancy its keys are named
 * from, with the conditions eviction and cleanup re-check atomically.
 */
export interface DeleteInput {
  sessionId: string;
  tenancy: Tenancy;
  /** Only when updatedAt < this. */
  updatedBelow?: number;
  /** Only when more than this many sessions exist. */
  keepAtLeast?: number;
  /** Only the session of this incarnation (StoreCall.expectedIncarnation): another one is "REPLACED". Undefined: any. */
  incarnation?: string;
}

/** What the driver's deletions pass on to the script: conditions and a scope the driver checks itself. */
export type DeleteConditions = Pick<DeleteInput, "updatedBelow" | "keepAtLeast" | "incarnation"> & {
  scope?: CleanupScope;
};

/** A deletion's outcome; `events`: what a DELETED session held. */
export interface DeleteOutcome {
  outcome: "DELETED" | "GONE" | "MOVED" | "KEPT" | "REPLACED";
  events: number;
}

/** Deletes a session with every key and index entry of it. */
export const deleteScript: Script<DeleteInput, DeleteOutcome> = {
  name: "delete",
  args({ keys }, { sessionId, tenancy, updatedBelow, keepAtLeast, incarnation }) {
    const bucket = keys.bucketOf(sessionId);
    const [recentAll, ...recentOwn] = keys.recentOf(tenancy, bucket);
    const args: Arg[] = [
      ...keys.sessionKeys(sessionId),
      keys.updated(bucket),
      keys.stats(bucket),
      recentAll,
      ...keys.indexesOf(tenancy, bucket),
      ...recentOwn,
      keys.trimmedIds(sessionId),
      sessionId,
      tenancy.appName,
      tenancy.userId,
      JSON.stringify(sessionId),
      keys.channel(bucket),
      recentMemberPrefix(sessionId),
      updatedBelow ?? "",
      // A bucket counts only its own sessions: the floor is the driver's on a cluster.
      keys.clustered ? "" : (keepAtLeast ?? ""),
      publishCommand(keys),
    ];
    if (incarnation !== undefined) args.push(incarnation);
    return args;
  },
  decode(reply) {
    return { outcome: reply[0] as DeleteOutcome["outcome"], events: Number(reply[1] ?? 0) };
  },
};

/** Input of read-2.lua: a run of seqs after (asc) or before (desc) a cursor. */
export interface ReadInput {
  sessionId: string;
  direction: "asc" | "desc";
  cursor?: number;
  limit: number;
  /** Only events of these types; empty: all. */
  types: readonly string[];
}

/** A run of one session's events with its bounds; `lastSeq`: the last seq looked at. Undefined: no such session. */
export type ReadOutcome =
  | {
      headSeq: number;
      firstSeq: number;
      lastSeq: number;
      incarnation: string;
      events: Array<{ seq: number; encoded: Buffer }>;
    }
  | undefined;

/** Reads a run of consecutive seqs of one session together with its bounds. */
export const readScript: Script<ReadInput, ReadOutcome> = {
  name: "read",
  readOnly: true,
  buffers: true,
  args({ keys }, { sessionId, direction, cursor, limit, types }) {
    const [sessionKey, eventsKey] = keys.sessionKeys(sessionId);
    const budget = types.length > 0 ? Math.max(limit, FILTER_SCAN) : limit;
    return [sessionKey, eventsKey, direction, cursor ?? "", limit, budget, types.length, ...types];
  },
  decode(reply) {
    // "NOT_FOUND" or "OK": two bytes tell them apart.
    if ((reply[0] as Buffer).length !== 2) return undefined;
    const events: Array<{ seq: number; encoded: Buffer }> = [];
    for (let i = 5; i < reply.length; i += 2) events.push({ seq: reply[i] as number, encoded: reply[i + 1] as Buffer });
    return {
      headSeq: reply[1] as number,
      firstSeq: reply[2] as number,
      lastSeq: reply[3] as number,
      incarnation: (reply[4] as Buffer).toString(),
      events,
    };
  },
};

/** Input of statecheck-2.lua and shared-3.lua: the user and app state changes of one write. */
export interface SharedStateInput {
  tenancy: Tenancy;
  /** [scope "u" | "a", key, value JSON or "" to delete], as encodeStateChanges lists them. */
  changes: ReadonlyArray<readonly [string, string, string]>;
}

/** Cluster: the caps of the user's and app's states checked against a write's changes, before it runs. */
export const stateCheckScript: Script<SharedStateInput, StateTooLarge | undefined> = {
  name: "statecheck",
  readOnly: true,
  args({ keys }, { tenancy, changes }) {
    return [
      keys.userState(tenancy),
      keys.appState(tenancy.appName),
      MAX_STATE_KEYS,
      MAX_STATE_BYTES,
      changes.length,
      ...changes.flat(),
    ];
  },
  decode(reply) {
    return reply[0] === "TOO_LARGE" ? stateTooLargeOf(reply) : undefined;
  },
};

/** How long an applied outbox entry's id is remembered (shared-3.lua): far past any re-drive. */
const APPLIED_KEPT_MS = 24 * 60 * 60 * 1000;

/** Input of shared-3.lua: one outbox entry. */
export interface ApplySharedInput extends SharedStateInput {
  field: string;
  now: number;
}

/** Cluster: applies one outbox entry to the user's and app's state, once; true when applied now. */
export const applySharedScript: Script<ApplySharedInput, boolean> = {
  name: "shared",
  args({ keys }, { tenancy, changes, field, now }) {
    return [
      keys.userState(tenancy),
      keys.appState(tenancy.appName),
      keys.stateApplied(tenancy.appName),
      field,
      now,
      APPLIED_KEPT_MS,
      changes.length,
      ...changes.flat(),
    ];
  },
  decode(reply) {
    return (reply as unknown as number) === 1;
  },
};

/** Input of erased-1.lua: the finished erasure's tenancy and the token it wrote. */
export interface ErasedInput {
  tenancy: Tenancy;
  token: string;
}

/** Clears the record of a finished erasure unless another one replaced it; true when cleared. */
export const erasedScript: Script<ErasedInput, boolean> = {
  name: "erased",
  args({ keys }, { tenancy, token }) {
    return [keys.erasures, erasureField(tenancy), token];
  },
  decode(reply) {
    return (reply as unknown as number) === 1;
  },
};
