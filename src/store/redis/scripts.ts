/**
 * The Redis store's Lua scripts, typed (as bullmq's src/classes/scripts.ts):
 * each script has an args builder (typed input -> KEYS and ARGV, in the order
 * its header documents) and a reply decoder (raw reply -> typed result), so
 * the driver never builds an argument array or indexes a reply itself.
 *
 * A script is src/store/redis/scripts/<name>-<key count>.lua. A line
 * `--- @include "<name>"` stands for includes/<name>.lua, pasted in once
 * per script when the scripts are loaded (bullmq does the same), so a piece
 * of Lua that several scripts need (the frame reader) is written once.
 */
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { setTimeout as sleep } from "node:timers/promises";
import { Command, type Redis } from "ioredis";
import { MemoryError } from "../../errors.js";
import { eventFingerprint } from "../fingerprint.js";
import { appEventCaps, dedupeWindow } from "../rules.js";
import { MAX_STATE_BYTES, MAX_STATE_KEYS } from "../state.js";
import type { CleanupScope, NewEvent, NewSession, SessionUpdate, StoreLimits } from "../types.js";
import { encodeEvent, encodeStateChanges, fieldsOf } from "./codec.js";
import { isCluster, type RedisClient } from "./connection.js";
import { erasureField, recentMemberPrefix, type RedisKeys, type Tenancy } from "./keys.js";

/** Where the script files are (copied next to the compiled code by scripts/build.mjs). */
export const SCRIPTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "scripts");

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

type Arg = string | number;
/** What a script returns, as ioredis hands it over (bulk strings as Buffers for a script with `buffers`). */
export type Reply = Array<string | number | null | Buffer | Reply>;

/** What every args builder may use besides its input: the key names and the store's limits. */
export interface ScriptContext {
  keys: RedisKeys;
  limits: StoreLimits;
  /** The append's per-session arguments, encoded (appendScript.resp); made when absent. */
  appendRuns?: Map<string, AppendRuns>;
}

/**
 * A run of arguments already in RESP (the Redis protocol): `count`
 * arguments, each "$<byte length>\r\n<bytes>\r\n", as ioredis writes them.
 */
export interface Resp {
  count: number;
  text: string;
}

/** One argument in RESP; numbers as ioredis sends them (String(n)). */
function bulk(arg: Arg): string {
  const text = typeof arg === "string" ? arg : String(arg);
  return `$${Buffer.byteLength(text, "utf8")}\r\n${text}\r\n`;
}

/** Arguments in RESP. */
export function respOf(args: readonly Arg[]): Resp {
  let text = "";
  for (const arg of args) text += bulk(arg);
  return { count: args.length, text };
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
  /** args() in RESP, made faster than respOf(args()) (equal to it: a test compares them); one node only. */
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
  args({ keys, limits }, { sessionId, tenancy, events, expectedSeq, now, ingestBase, incarnation }) {
    const bucket = keys.bucketOf(sessionId);
    const args: Arg[] = [
      ...appendSessionArgs(keys, sessionId, tenancy),
      expectedSeq === undefined ? "" : expectedSeq,
      now,
      limits.maxSessionEvents,
      RECENT_CAP,
      recentMemberPrefix(sessionId),
      keys.channel(bucket),
      events.length,
    ];
    for (const e of events) {
      // Generated ids come with fingerprint "": fingerprint them anyway, so a
      // retry naming such an id (or a re-sent command) is recognised as the same event.
      const fingerprint = e.fingerprint || eventFingerprint(e.eventType, e.content, e.metadata, e.stateDelta);
      args.push(e.eventId, fingerprint, e.timestamp, encodeEvent(e));
    }
    const { windowMs, maxIds } = dedupeWindow(limits);
    const caps = appEventCaps(limits);
    args.push(NOTICE_EVENTS_MAX_BYTES, tenancy.appName, tenancy.userId, windowMs, maxIds, caps.length, ...caps.flat());
    args.push(MAX_STATE_KEYS, MAX_STATE_BYTES);
    for (const e of events) args.push(...encodeStateChanges(e.stateDelta));
    args.push(
      keys.clustered ? recentMemberPrefix(sessionId) : "",
      ingestBase === undefined ? "" : ingestBase,
      publishCommand(keys),
    );
    if (incarnation !== undefined) args.push(incarnation);
    return args;
  },
  resp(context, { sessionId, tenancy, events, expectedSeq, now, ingestBase, incarnation }) {
    const runs = appendRunsOf(context, sessionId, tenancy);
    let count = runs.session.count + 2 + runs.limits.count + 1 + 4 * events.length + runs.tenancy.count + 3;
    let text =
      runs.session.text +
      bulk(expectedSeq === undefined ? "" : expectedSeq) +
      bulk(now) +
      runs.limits.text +
      bulk(events.length);
    for (const e of events) {
      const fingerprint = e.fingerprint || eventFingerprint(e.eventType, e.content, e.metadata, e.stateDelta);
      text += bulk(e.eventId) + bulk(fingerprint) + bulk(e.timestamp) + bulk(encodeEvent(e));
    }
    text += runs.tenancy.text;
    for (const e of events) {
      if (!e.stateDelta) {
        count++;
        text += "$1\r\n0\r\n";
        continue;
      }
      const changes = encodeStateChanges(e.stateDelta);
      count += changes.length;
      for (const change of changes) text += bulk(change);
    }
    text += runs.tail + bulk(ingestBase === undefined ? "" : ingestBase) + runs.publish;
    if (incarnation !== undefined) {
      count++;
      text += bulk(incarnation);
    }
    return { count, text };
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

/**
 * The arguments of append-12.lua that stay the same for every append to one
 * session (of one tenancy), in RESP: its 12 keys, id and id as JSON; the
 * limits, member prefix and channel; the tenancy, dedupe window, caps and
 * state limits; the outbox prefix and the publish command. Made once per
 * session instead of hex-encoding the id into eight key names per append.
 */
export interface AppendRuns {
  appName: string;
  userId: string;
  /** KEYS[1..12], ARGV[1..2]. */
  session: Resp;
  /** ARGV[5..8]. */
  limits: Resp;
  /** ARGV[10 + 4n] to the state limits. */
  tenancy: Resp;
  /** The outbox prefix (one argument). */
  tail: string;
  /** The publish command (one argument). */
  publish: string;
}

/** Sessions whose AppendRuns a store keeps; past it they are all dropped (and remade as needed). */
const APPEND_RUNS_KEPT = 10_000;

function appendRunsOf(context: ScriptContext, sessionId: string, tenancy: Tenancy): AppendRuns {
  const cache = (context.appendRuns ??= new Map());
  const cached = cache.get(sessionId);
  if (cached && cached.appName === tenancy.appName && cached.userId === tenancy.userId) return cached;
  const { keys, limits } = context;
  const bucket = keys.bucketOf(sessionId);
  const { windowMs, maxIds } = dedupeWindow(limits);
  const caps = appEventCaps(limits);
  const runs: AppendRuns = {
    appName: tenancy.appName,
    userId: tenancy.userId,
    session: respOf(appendSessionArgs(keys, sessionId, tenancy)),
    limits: respOf([limits.maxSessionEvents, RECENT_CAP, recentMemberPrefix(sessionId), keys.channel(bucket)]),
    tenancy: respOf([
      NOTICE_EVENTS_MAX_BYTES,
      tenancy.appName,
      tenancy.userId,
      windowMs,
      maxIds,
      caps.length,
      ...caps.flat(),
      MAX_STATE_KEYS,
      MAX_STATE_BYTES,
    ]),
    tail: bulk(keys.clustered ? recentMemberPrefix(sessionId) : ""),
    publish: bulk(publishCommand(keys)),
  };
  if (cache.size >= APPEND_RUNS_KEPT) cache.clear();
  cache.set(sessionId, runs);
  return runs;
}

/** KEYS[1..12] and ARGV[1..2] of append-12.lua: the session's keys, its id and its id as JSON. */
function appendSessionArgs(keys: RedisKeys, sessionId: string, tenancy: Tenancy): Arg[] {
  const bucket = keys.bucketOf(sessionId);
  return [
    ...keys.sessionKeys(sessionId),
    keys.updated(bucket),
    keys.stats(bucket),
    ...keys.recentOf(tenancy, bucket),
    keys.trimmedIds(sessionId),
    ...sharedStateKeys(keys, sessionId, tenancy),
    sessionId,
    JSON.stringify(sessionId),
  ];
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
      ...encodeStateChanges(update.stateDelta),
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

/** One script as the store sends it: its text with includes resolved, its file's name and its key count. */
export interface ScriptText {
  file: string;
  lua: string;
  /** Undefined for <name>-n.lua, whose caller passes the key count first. */
  numberOfKeys: number | undefined;
}

/**
 * Every script in `dir` (<name>-<key count>.lua) by name, includes resolved:
 * the text the store sends, byte for byte.
 *
 * Its comments must not hold "[[" inside a --[[ ... ]] block: Redis' own
 * build of Lua (LUA_COMPAT_LSTR 1), that of the official images and Redis
 * Stack, refuses the whole script for it, while Debian's Lua accepts it
 * (test/store/redis-scripts.test.ts loads each on both).
 */
export function loadScripts(dir = SCRIPTS_DIR): Map<string, ScriptText> {
  const scripts = new Map<string, ScriptText>();
  for (const file of readdirSync(dir)) {
    const match = /^([a-z]+)-(\d+|n)\.lua$/.exec(file);
    if (!match) continue;
    const lua = resolveIncludes(readFileSync(path.join(dir, file), "utf8"), dir, file);
    scripts.set(match[1], { file, lua, numberOfKeys: match[2] === "n" ? undefined : Number(match[2]) });
  }
  return scripts;
}

/** The script with every `--- @include "<name>"` line replaced by includes/<name>.lua (each at most once, nested ones too). */
function resolveIncludes(lua: string, dir: string, file: string, included = new Set<string>()): string {
  return lua.replace(/^--- @include "([a-z-]+)"[ \t]*$/gm, (_line, name: string) => {
    if (included.has(name)) return `-- (includes/${name}.lua: already included)`;
    included.add(name);
    let text: string;
    try {
      text = readFileSync(path.join(dir, "includes", `${name}.lua`), "utf8");
    } catch (err) {
      throw new Error(`${file} includes "${name}", but includes/${name}.lua cannot be read`, { cause: err });
    }
    return resolveIncludes(text.trimEnd(), dir, `includes/${name}.lua`, included);
  });
}

/** MEMORY_REDIS_WAIT_REPLICAS: replicas that must have each write script's effects before it counts as done. */
export interface WaitForReplicas {
  /** 0: no WAIT. */
  replicas: number;
  /** WAIT's own timeout; shorter than the command timeout, so the shortfall is what answers. */
  timeoutMs: number;
}

/** Tries of a script + WAIT pipeline refused by a cluster whose slots are moving (MOVED, ASK, TRYAGAIN: the script did not run). */
const REDIRECTED_TRIES = 5;

/** The scripts defined on one connection, run through their typed wrappers. */
export class RedisScripts {
  private readonly commands = new Map<string, (...keysAndArgs: Arg[]) => Promise<Reply>>();
  /** One node without WAIT: each script's text, SHA1 and key count in RESP, for commands written here (runRaw). */
  private readonly raw = new Map<string, { evalsha: string; evalHead: string; keyCount: string; keyArgs: number }>();

  constructor(
    private readonly redis: RedisClient,
    private readonly context: ScriptContext,
    private readonly wait: WaitForReplicas = { replicas: 0, timeoutMs: 0 },
  ) {
    for (const [name, { lua, numberOfKeys }] of loadScripts()) {
      // defineCommand runs EVALSHA and falls back to EVAL (loading it) when Redis does not know the script yet.
      redis.defineCommand(`engram_${name}`, numberOfKeys === undefined ? { lua } : { numberOfKeys, lua });
      for (const variant of [`engram_${name}`, `engram_${name}Buffer`]) {
        this.commands.set(
          variant,
          (redis as unknown as Record<string, (...keysAndArgs: Arg[]) => Promise<Reply>>)[variant].bind(redis),
        );
      }
      if (!isCluster(redis) && wait.replicas === 0) {
        const sha = createHash("sha1").update(lua).digest("hex");
        this.raw.set(name, {
          evalsha: `$7\r\nevalsha\r\n${bulk(sha)}`,
          evalHead: `$4\r\neval\r\n${bulk(lua)}`,
          keyCount: numberOfKeys === undefined ? "" : bulk(numberOfKeys),
          keyArgs: numberOfKeys === undefined ? 0 : 1,
        });
      }
    }
  }

  /**
   * Runs `script` with `input`; its decoded reply. With WAIT configured, a
   * writing script is followed by WAIT (runThenWait).
   */
  async run<Input, Result>(script: Script<Input, Result>, input: Input): Promise<Result> {
    const raw = this.raw.get(script.name);
    if (raw) {
      const args = script.resp ? script.resp(this.context, input) : respOf(script.args(this.context, input));
      return script.decode(await this.runRaw(raw, args, script.buffers === true), input);
    }
    // defineCommand also made `<name>Buffer`, whose reply keeps bulk strings as Buffers.
    const name = `engram_${script.name}${script.buffers ? "Buffer" : ""}`;
    const command = this.commands.get(name);
    if (!command) throw new Error(`no script file for ${script.name} in ${SCRIPTS_DIR}`);
    const args = script.args(this.context, input);
    if (script.readOnly || this.wait.replicas === 0) return script.decode(await command(...args), input);
    return script.decode(await runThenWait(this.redis, name, args, this.wait), input);
  }

  /**
   * One node: EVALSHA written here in RESP, the bytes ioredis' defined
   * command writes, without its per-argument work (flattening, converting
   * and framing each argument again, a second promise for the fallback);
   * EVAL (which loads the script) when Redis does not know it. The command
   * still goes through the client: its queue, timeout, reconnect and
   * re-sending of unanswered commands are unchanged.
   */
  private async runRaw(
    raw: { evalsha: string; evalHead: string; keyCount: string; keyArgs: number },
    args: Resp,
    buffers: boolean,
  ): Promise<Reply> {
    const count = `*${args.count + raw.keyArgs + 2}\r\n`;
    const client = this.redis as Redis;
    try {
      return (await client.sendCommand(
        new RespCommand(count + raw.evalsha + raw.keyCount + args.text, buffers),
      )) as Reply;
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith("NOSCRIPT")) throw err;
      return (await client.sendCommand(
        new RespCommand(count + raw.evalHead + raw.keyCount + args.text, buffers),
      )) as Reply;
    }
  }
}

/** A command whose bytes are already RESP (RedisScripts.runRaw); its reply as strings, as a defined command's, or as Buffers (`<name>Buffer`'s). */
class RespCommand extends Command {
  constructor(
    private readonly resp: string,
    buffers: boolean,
  ) {
    super("evalsha", [], { replyEncoding: buffers ? null : "utf8" });
  }

  override toWritable(): string {
    return this.resp;
  }
}

/**
 * Runs the command `command` (a script defineCommand made) with `keysAndArgs`
 * and, when `wait.replicas` > 0, WAIT in the same pipeline, so on a cluster
 * it reaches the node that ran the script; a cluster's refusal before the
 * script ran (slots moving) is tried again. UNAVAILABLE naming how many
 * replicas acknowledged when fewer than asked: the write may have happened,
 * and a retry with the same ids is idempotent. Every writing script of the
 * store (sessions and memories) goes through here.
 */
export async function runThenWait(
  redis: RedisClient,
  command: string,
  keysAndArgs: Array<Arg | Buffer>,
  wait: WaitForReplicas,
): Promise<Reply> {
  const runner = (target: object) =>
    (target as Record<string, (...a: Array<Arg | Buffer>) => unknown>)[command].bind(target);
  if (wait.replicas === 0) return (await runner(redis)(...keysAndArgs)) as Reply;
  for (let attempt = 1; ; attempt++) {
    const pipeline = redis.pipeline();
    runner(pipeline)(...keysAndArgs);
    pipeline.wait(wait.replicas, wait.timeoutMs);
    const [[scriptError, reply], [waitError, acknowledged]] = (await pipeline.exec()) as Array<[Error | null, unknown]>;
    if (scriptError) {
      const redirected = /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /.test(scriptError.message);
      if (!redirected || !isCluster(redis) || attempt >= REDIRECTED_TRIES) throw scriptError;
      redis.refreshSlotsCache();
      await sleep(100 * attempt);
      continue;
    }
    if (waitError) throw waitError;
    if (Number(acknowledged) < wait.replicas) {
      throw new MemoryError(
        "UNAVAILABLE",
        `redis unavailable: the write reached ${Number(acknowledged)} of the ${wait.replicas} replicas MEMORY_REDIS_WAIT_REPLICAS asks for within ${wait.timeoutMs} ms; it may have been applied (retrying with the same ids is safe)`,
      );
    }
    return reply as Reply;
  }
}
