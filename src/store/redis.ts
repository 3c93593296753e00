/**
 * The Redis store: several replicas share one Redis (MEMORY_TYPE=redis).
 *
 * Every write is one atomic Lua script (src/store/redis/scripts/<name>-<keys>.lua,
 * bullmq style) that receives all its keys in KEYS, so a session is never
 * read-modified-written as a whole. Layout under `<prefix>:` (ids are
 * hex-encoded in key names so that no id, whatever bytes it holds, can
 * collide with another or act as a pattern):
 *
 *   s:<hex id>           hash: app, user, meta, created, updated, head, first, inc (incarnation)
 *   s:<hex id>:ev        hash: seq -> encoded event (seqs first..head, consecutive)
 *   s:<hex id>:id        hash: event id -> "seq:fingerprint" (idempotency; trimmed
 *                        events' ids stay for the dedupe window)
 *   s:<hex id>:tr        zset: trimmed event ids by trim time (the dedupe window)
 *   updated              zset: session id by updatedAt (eviction, cleanup)
 *   ix:all, ix:a:<hex app>, ix:u:<hex user>, ix:au:<hex app>:<hex user>
 *                        zsets, score 0: session ids in byte (= code-point) order
 *   recent:all, recent:a:<hex app>, recent:u:<hex user>, recent:au:<hex app>:<hex user>
 *                        zsets: "<hex id>!<seq>" by ingest position (stats
 *                        field "ingested" counts appended events store-wide),
 *                        each capped at RECENT_CAP; an event is in the four of
 *                        its session's tenancy, so a scoped listing reads its
 *                        own index and no other tenant's appends crowd it out
 *   stats                hash: sessions, events, ingested (kept by the scripts: O(1) stats)
 *   erasures             hash: "<hex app>:<hex user>" -> token, erasures in progress (resumeErasures)
 *   notices              pub/sub channel: {"s": id, "h": head, "i": incarnation} or {"s": id, "d": 1, "i": incarnation}
 *   mem:<hex app>:*, memories   long-term memories and their change channel (src/store/memories/redis.ts)
 *
 * Outages: the command connection has no offline queue and a command timeout,
 * so calls fail UNAVAILABLE quickly instead of hanging. Commands in flight
 * when the connection drops are re-sent by ioredis after reconnecting; an
 * append is harmless to re-send because every event id (generated ones too)
 * goes through the idempotency index.
 */
import { randomUUID } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Redis, type RedisOptions } from "ioredis";
import { LRUCache } from "lru-cache";
import { MemoryError, seqConflict, sessionNotFound } from "../errors.js";
import { eventFingerprint } from "./fingerprint.js";
import { appEventCaps, appSessionCap, checkCursor, dedupeWindow, duplicateEventId, evictionCount, newIncarnation, recentScopes, sessionExists, type RecentScope } from "./rules.js";
import type {
  AppendResult,
  CleanupScope,
  ErasureResult,
  EventPage,
  EventQuery,
  JsonObject,
  JsonValue,
  MemoryStore,
  NewEvent,
  NewSession,
  NoticeListener,
  RecentEventsFilter,
  ResumedErasures,
  SessionNotice,
  SessionQuery,
  SessionRecord,
  StoreDurability,
  StoreLimits,
  StoreStats,
  StoredEvent,
} from "./types.js";
import { NoticeListeners } from "./notices.js";
import { RedisMemories } from "./memories/redis.js";

/** How to open a RedisStore. */
export interface RedisStoreOptions {
  /** redis:// or rediss:// URL. */
  url: string;
  /** Namespace of every key and the notice channel (MEMORY_KEY_PREFIX). */
  keyPrefix: string;
  limits: StoreLimits;
  /** A command not answered within this many ms fails UNAVAILABLE (default 4000). */
  commandTimeoutMs?: number;
}

/** Entries kept in each recent-events index: twice the ListEvents cap of 1000, as slack for removals. */
const RECENT_CAP = 2000;
/** Sessions whose tenancy (app, user) this replica remembers, to name their recent indexes without a read. */
const TENANCY_CACHE = 10_000;
/**
 * Largest notice that carries the appended events themselves (append-10.lua):
 * every replica then streams them without reading them back, one Redis round
 * trip per event per replica saved. Larger appends announce only the head.
 */
const NOTICE_EVENTS_MAX_BYTES = 64 * 1024;
/** Sessions looked at per cleanup batch. */
const CLEANUP_BATCH = 100;
/** Session ids read from a tenancy index at a time (erasure, filtered cleanup); their removals run concurrently. */
const INDEX_BATCH = 100;
/** Seqs a filtered read looks at per script call (bounds the script's run time). */
const FILTER_SCAN = 500;
/** Redis errors that mean "try again later" rather than "bug". */
const TRANSIENT_REPLY = /^(LOADING|BUSY|MASTERDOWN|READONLY|TRYAGAIN|CLUSTERDOWN|NOREPLICAS|NOSCRIPT)/;

const SCRIPTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), "redis", "scripts");

type ScriptName = "append" | "create" | "delete" | "erased" | "read";
type Reply = Array<string | number | null | Reply>;
type ScriptRunner = (...keysAndArgs: Array<string | number>) => Promise<Reply>;

const hex = (s: string) => Buffer.from(s, "utf8").toString("hex");
const unhex = (s: string) => Buffer.from(s, "hex").toString("utf8");
const maskUrl = (url: string) => url.replace(/\/\/([^:@/]*):[^@/]*@/, "//$1:***@");

/** "<byte length>:<text>", so Lua can cut fields out of a value without a JSON decoder. */
function lengthPrefixed(text: string): string {
  return `${Buffer.byteLength(text, "utf8")}:${text}`;
}

/** Encodes an event for the events hash: type and id length-prefixed, then JSON of the rest. */
function encodeEvent(e: NewEvent): string {
  return lengthPrefixed(e.eventType) + lengthPrefixed(e.eventId) + JSON.stringify([e.timestamp, e.content, e.metadata]);
}

function decodeEvent(sessionId: string, seq: number, encoded: string): StoredEvent {
  const buf = Buffer.from(encoded, "utf8");
  let pos = 0;
  const field = () => {
    const colon = buf.indexOf(0x3a, pos);
    const len = Number(buf.toString("latin1", pos, colon));
    const text = buf.toString("utf8", colon + 1, colon + 1 + len);
    pos = colon + 1 + len;
    return text;
  };
  const eventType = field();
  const eventId = field();
  const [timestamp, content, metadata] = JSON.parse(buf.toString("utf8", pos)) as [number, JsonValue, JsonObject];
  return { sessionId, seq, eventId, eventType, content, metadata, timestamp };
}

/** Maps anything a Redis call throws to a MemoryError: connection trouble is UNAVAILABLE. */
function storeError(err: unknown): MemoryError {
  if (err instanceof MemoryError) return err;
  const e = err instanceof Error ? err : new Error(String(err));
  if (e.name === "ReplyError") {
    if (TRANSIENT_REPLY.test(e.message)) return new MemoryError("UNAVAILABLE", `redis unavailable: ${e.message}`, {}, { cause: e });
    if (e.message.startsWith("OOM")) return new MemoryError("RESOURCE_EXHAUSTED", `redis is out of memory: ${e.message}`, {}, { cause: e });
    return new MemoryError("INTERNAL", "internal error", {}, { cause: e });
  }
  if (e instanceof TypeError || e instanceof RangeError || e instanceof SyntaxError) {
    return new MemoryError("INTERNAL", "internal error", {}, { cause: e });
  }
  // Connection closed, not writeable (no offline queue), command timed out, retries exhausted.
  return new MemoryError("UNAVAILABLE", `redis unavailable: ${e.message}`, {}, { cause: e });
}

/** The Redis-backed MemoryStore; open it with RedisStore.open(). */
export class RedisStore implements MemoryStore {
  /** Sessions this process evicted past maxSessions. */
  sessionsEvicted = 0;
  /** Events this process trimmed past maxSessionEvents. */
  eventsTrimmed = 0;
  readonly backend = "redis";
  readonly capabilities = { persistent: true, shared: true, retains: true };

  /** Long-term memories (src/store/memories/redis.ts), on the command connection and key prefix. */
  readonly memories: RedisMemories;
  private readonly listeners = new NoticeListeners();
  private readonly channel: string;
  private readonly scripts: Record<ScriptName, ScriptRunner>;
  private closed = false;
  /** The append script's last arguments, the same for every append: dedupe window, bound, per-app event caps. */
  private readonly retentionArgs: Array<string | number>;
  /**
   * Each session's (app, user), which names its recent indexes: an append
   * needs it, and it never changes while the session lives. The append script
   * checks it ({"MOVED"} when the id now belongs to a session of another
   * tenancy), so a stale entry costs a re-read, never a misfiled event.
   */
  private readonly tenancies = new LRUCache<string, { appName: string; userId: string }>({ max: TENANCY_CACHE });
  /**
   * Events of recent reads, by session, seq and stored text: a tail read again
   * and again (context windows, polling readers) yields the same objects, so
   * the service's caches of their wire forms and encoded bytes hit instead of
   * redoing JSON.parse, protobuf conversion and encoding for every call. The
   * key holds the whole stored text, so an entry only ever stands for exactly
   * that event.
   */
  private readonly decoded = new LRUCache<string, StoredEvent>({
    max: 4096,
    maxSize: 16 * 1024 * 1024,
    sizeCalculation: (_event, key) => 200 + 2 * key.length,
  });

  private constructor(
    private readonly redis: Redis,
    private readonly subscriber: Redis,
    private readonly prefix: string,
    private readonly limits: StoreLimits,
  ) {
    this.channel = `${prefix}:notices`;
    this.memories = new RedisMemories(redis, prefix, (run) => this.call(run));
    const { windowMs, maxIds } = dedupeWindow(limits);
    const caps = appEventCaps(limits);
    this.retentionArgs = [windowMs, maxIds, caps.length, ...caps.flat()];
    this.scripts = {} as Record<ScriptName, ScriptRunner>;
    for (const file of readdirSync(SCRIPTS_DIR)) {
      const match = /^([a-z]+)-(\d+)\.lua$/.exec(file);
      if (!match) continue;
      const name = match[1] as ScriptName;
      redis.defineCommand(`engram_${name}`, { numberOfKeys: Number(match[2]), lua: readFileSync(path.join(SCRIPTS_DIR, file), "utf8") });
      const command = (redis as unknown as Record<string, ScriptRunner>)[`engram_${name}`].bind(redis);
      this.scripts[name] = command;
    }
  }

  /** Connects both connections (commands, notices) and subscribes; UNAVAILABLE when Redis cannot be reached. */
  static async open(options: RedisStoreOptions): Promise<RedisStore> {
    const common: RedisOptions = {
      lazyConnect: true,
      // Fail fast while disconnected instead of queueing: callers see UNAVAILABLE, not a hang.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 2,
      commandTimeout: options.commandTimeoutMs ?? 4000,
      connectTimeout: 3000,
      retryStrategy: (attempt) => Math.min(50 * 2 ** attempt, 1000),
    };
    const redis = new Redis(options.url, { ...common, connectionName: `${options.keyPrefix}:commands` });
    // The subscriber's only commands are (re)subscriptions; no command timeout needed beyond connecting.
    const subscriber = new Redis(options.url, { ...common, commandTimeout: undefined, connectionName: `${options.keyPrefix}:notices` });
    // Without listeners ioredis reports every failed reconnect as an unhandled error event.
    let lastError: Error | undefined;
    redis.on("error", (err: Error) => (lastError = err));
    subscriber.on("error", () => {});
    try {
      await Promise.all([redis.connect(), subscriber.connect()]);
      const store = new RedisStore(redis, subscriber, options.keyPrefix, options.limits);
      await store.listen();
      await store.memories.listen();
      return store;
    } catch (err) {
      redis.disconnect();
      subscriber.disconnect();
      // connect() only says "Connection is closed."; the error event has the reason (ECONNREFUSED, auth...).
      const cause = lastError?.message ?? (err instanceof Error ? err.message : String(err));
      throw new MemoryError("UNAVAILABLE", `cannot connect to Redis at ${maskUrl(options.url)}: ${cause}`, {}, { cause: err });
    }
  }

  async createSession(input: NewSession): Promise<SessionRecord> {
    const incarnation = newIncarnation();
    const reply = await this.create(input, incarnation, "create");
    if (reply[0] === "EXISTS") throw sessionExists(input.sessionId);
    this.tenancies.set(input.sessionId, { appName: input.appName, userId: input.userId });
    await this.evictAfterCreate(reply[1] as number, input.appName);
    return this.newRecord(input, incarnation);
  }

  async getOrCreateSession(input: NewSession): Promise<{ session: SessionRecord; created: boolean }> {
    const incarnation = newIncarnation();
    const reply = await this.create(input, incarnation, "get");
    if (reply[0] === "FOUND") {
      const session = this.toRecord(input.sessionId, reply[1] as string[])!;
      this.tenancies.set(session.sessionId, { appName: session.appName, userId: session.userId });
      return { session, created: false };
    }
    this.tenancies.set(input.sessionId, { appName: input.appName, userId: input.userId });
    await this.evictAfterCreate(reply[1] as number, input.appName);
    return { session: this.newRecord(input, incarnation), created: true };
  }

  async getSession(sessionId: string): Promise<SessionRecord | undefined> {
    const fields = await this.call(() => this.redis.hgetall(this.sessionKey(sessionId)));
    return this.toRecord(sessionId, Object.entries(fields).flat());
  }

  async listSessions(query: SessionQuery): Promise<SessionRecord[]> {
    const index = this.indexKey(query.appName, query.userId);
    const out: SessionRecord[] = [];
    let after = query.afterSessionId;
    // A session deleted between the index read and the fetch is skipped; read on to fill the page.
    for (let rounds = 0; rounds < 10 && out.length < query.limit; rounds++) {
      const want = query.limit - out.length;
      const ids = await this.call(() =>
        this.redis.zrangebylex(index, after === undefined ? "-" : `(${after}`, "+", "LIMIT", 0, want),
      );
      if (ids.length === 0) break;
      const pipeline = this.redis.pipeline();
      for (const id of ids) pipeline.hgetall(this.sessionKey(id));
      const results = await this.call(() => pipeline.exec());
      for (const [i, id] of ids.entries()) {
        const [err, fields] = results![i];
        if (err) throw storeError(err);
        const record = this.toRecord(id, Object.entries(fields as Record<string, string>).flat());
        if (record) out.push(record);
      }
      if (ids.length < want) break;
      after = ids[ids.length - 1];
    }
    return out;
  }

  async deleteSession(sessionId: string): Promise<boolean> {
    return (await this.deleteWhere(sessionId, {})) === "DELETED";
  }

  async appendEvents(sessionId: string, events: readonly NewEvent[], expectedSeq?: number): Promise<AppendResult> {
    const args: Array<string | number> = [
      sessionId,
      JSON.stringify(sessionId),
      expectedSeq === undefined ? "" : expectedSeq,
      Date.now(),
      this.limits.maxSessionEvents,
      RECENT_CAP,
      this.recentPrefix(sessionId),
      this.channel,
      events.length,
    ];
    for (const e of events) {
      // Generated ids come with fingerprint "": fingerprint them anyway, so a
      // retry naming such an id (or a re-sent command) is recognised as the same event.
      const fingerprint = e.fingerprint || eventFingerprint(e.eventType, e.content, e.metadata);
      args.push(e.eventId, fingerprint, e.timestamp, encodeEvent(e));
    }
    args.push(NOTICE_EVENTS_MAX_BYTES);
    let reply: Reply = ["NOT_FOUND"];
    // A cached tenancy is wrong only when the id was deleted and taken by another tenancy: re-read it then.
    for (let attempt = 0; attempt < 3; attempt++) {
      const tenancy = await this.tenancyOf(sessionId, attempt > 0);
      if (!tenancy) break;
      const recentKeys = this.recentKeysOf(tenancy.appName, tenancy.userId);
      reply = await this.call(() =>
        this.scripts.append(
          ...this.sessionKeys(sessionId),
          this.key("updated"),
          this.key("stats"),
          ...recentKeys,
          this.trimmedIdsKey(sessionId),
          ...args,
          tenancy.appName,
          tenancy.userId,
          ...this.retentionArgs,
        ),
      );
      if (reply[0] !== "MOVED") break;
    }
    switch (reply[0]) {
      case "MOVED":
      case "NOT_FOUND":
        this.tenancies.delete(sessionId);
        throw sessionNotFound(sessionId);
      case "DUPLICATE":
        throw duplicateEventId(reply[1] as string);
      case "CONFLICT":
        throw seqConflict(expectedSeq!, reply[1] as number);
    }
    this.eventsTrimmed += (reply[4 + 2 * events.length] as number | undefined) ?? 0;
    const stored: StoredEvent[] = events.map((e, i) => {
      const seq = reply[4 + 2 * i] as number;
      const original = reply[5 + 2 * i] as string | null;
      if (original) return decodeEvent(sessionId, seq, original);
      // A new event, or the retry of one trimmed inside the dedupe window (null): as submitted.
      return { sessionId, seq, eventId: e.eventId, eventType: e.eventType, content: e.content, metadata: e.metadata, timestamp: e.timestamp };
    });
    return { events: stored, replayed: reply[1] === 1 };
  }

  async readEvents(sessionId: string, query: EventQuery): Promise<EventPage> {
    const types = query.eventTypes ?? [];
    const events: StoredEvent[] = [];
    let cursor = query.afterSeq;
    for (;;) {
      const page = await this.readRun(sessionId, "asc", cursor, query.limit - events.length, types);
      // Continuation reads re-check the cursor too: a trim racing a filtered
      // read surfaces as OUT_OF_RANGE, never as a silent gap.
      checkCursor(cursor ?? page.firstSeq - 1, page.firstSeq, page.headSeq);
      events.push(...page.events);
      if (events.length >= query.limit || page.lastSeq >= page.headSeq) {
        return { events, headSeq: page.headSeq, firstSeq: page.firstSeq, incarnation: page.incarnation };
      }
      cursor = page.lastSeq;
    }
  }

  async readTail(sessionId: string, limit: number, eventTypes?: readonly string[]): Promise<EventPage> {
    const types = eventTypes ?? [];
    const events: StoredEvent[] = [];
    let before: number | undefined;
    let bounds = { headSeq: 0, firstSeq: 1, incarnation: "" };
    for (;;) {
      const page = await this.readRun(sessionId, "desc", before, limit - events.length, types);
      if (before === undefined) bounds = { headSeq: page.headSeq, firstSeq: page.firstSeq, incarnation: page.incarnation };
      events.push(...page.events);
      // Older events trimmed meanwhile were evicted anyway: the tail just ends there.
      if (events.length >= limit || page.lastSeq <= page.firstSeq || (before !== undefined && page.lastSeq >= before)) break;
      before = page.lastSeq;
    }
    events.reverse();
    return { events, ...bounds };
  }

  async listRecentEvents(limit: number, filter: RecentEventsFilter = {}): Promise<StoredEvent[]> {
    if (filter.sessionId !== undefined) return (await this.readTail(filter.sessionId, limit)).events;
    const scopes = recentScopes(filter);
    if (scopes.length === 0) return [];
    // The newest `limit` of each index read, merged by ingest position.
    const reads = this.redis.pipeline();
    for (const scope of scopes) reads.zrevrange(this.recentKey(scope), 0, limit - 1, "WITHSCORES");
    const pages = await this.call(() => reads.exec());
    const entries: Array<{ member: string; ingest: number }> = [];
    for (const [err, page] of pages!) {
      if (err) throw storeError(err);
      const flat = page as string[];
      for (let i = 0; i < flat.length; i += 2) entries.push({ member: flat[i], ingest: Number(flat[i + 1]) });
    }
    entries.sort((a, b) => b.ingest - a.ingest);
    const refs = entries.slice(0, limit).map(({ member }) => {
      const bang = member.indexOf("!");
      return { sessionId: unhex(member.slice(0, bang)), seq: Number(member.slice(bang + 1)) };
    });
    if (refs.length === 0) return [];
    const pipeline = this.redis.pipeline();
    for (const ref of refs) pipeline.hget(this.sessionKeys(ref.sessionId)[1], String(ref.seq));
    // Entries are removed with their events; checking each session's tenancy
    // anyway means an entry left behind (a replica of an older release) can
    // never show a later session of the same id to the wrong tenant.
    const scoped = filter.appNames !== undefined || filter.userId !== undefined;
    const owners = scoped ? [...new Set(refs.map((ref) => ref.sessionId))] : [];
    for (const id of owners) pipeline.hmget(this.sessionKey(id), "app", "user");
    const results = (await this.call(() => pipeline.exec()))!;
    const allowed = new Set<string>();
    for (const [i, id] of owners.entries()) {
      const [err, fields] = results[refs.length + i];
      if (err) throw storeError(err);
      const [appName, userId] = fields as Array<string | null>;
      if (appName !== null && userId !== null && scopes.some((scope) => inRecentScope(scope, appName, userId))) allowed.add(id);
    }
    const out: StoredEvent[] = [];
    for (const [i, ref] of refs.entries()) {
      const [err, value] = results[i];
      if (err) throw storeError(err);
      // Gone between the two reads (trimmed or deleted): skip it.
      if (typeof value === "string" && (!scoped || allowed.has(ref.sessionId))) out.push(decodeEvent(ref.sessionId, ref.seq, value));
    }
    return out.reverse();
  }

  async stats(): Promise<StoreStats> {
    const [sessions, events] = await this.call(() => this.redis.hmget(this.key("stats"), "sessions", "events"));
    return { totalSessions: Number(sessions ?? 0), totalEvents: Number(events ?? 0) };
  }

  async cleanup(cutoff: number, scope: CleanupScope = {}): Promise<number> {
    let removed = 0;
    if (scope.userId !== undefined) {
      // Only one user's sessions: walk their index instead of every stale session of every tenant.
      await this.forEachIndexed(this.indexKey(scope.appName, scope.userId), async (id) => {
        if ((await this.deleteOne(id, { updatedBelow: cutoff, scope })).outcome === "DELETED") removed++;
      });
      return removed;
    }
    // Sessions left in place (out of scope, or updated meanwhile) are stepped over, so every batch makes progress.
    let skipped = 0;
    for (;;) {
      const ids = await this.call(() =>
        this.redis.zrangebyscore(this.key("updated"), "-inf", `(${cutoff}`, "LIMIT", skipped, CLEANUP_BATCH),
      );
      for (const id of ids) {
        if ((await this.deleteWhere(id, { updatedBelow: cutoff, scope })) === "DELETED") removed++;
        else skipped++;
      }
      if (ids.length < CLEANUP_BATCH) return removed;
    }
  }

  async deleteUserData(appName: string, userId: string): Promise<ErasureResult> {
    // Recorded first, cleared last: a replica finds an erasure this one could not finish (resumeErasures).
    const field = `${hex(appName)}:${hex(userId)}`;
    const token = randomUUID();
    await this.call(() => this.redis.hset(this.key("erasures"), field, token));
    const erased: ErasureResult = { sessions: 0, events: 0 };
    // Each session goes through the same script as DeleteSession: counters, indexes and notices stay right.
    await this.forEachIndexed(this.indexKey(appName, userId), async (id) => {
      const { outcome, events } = await this.deleteOne(id, { scope: { appName, userId } });
      if (outcome !== "DELETED") return;
      erased.sessions++;
      erased.events += events;
    });
    erased.memories = await this.memories.eraseUser(appName, userId);
    await this.call(() => this.scripts.erased(this.key("erasures"), field, token));
    return erased;
  }

  async resumeErasures(): Promise<ResumedErasures> {
    const fields = await this.call(() => this.redis.hkeys(this.key("erasures")));
    const resumed: ResumedErasures = { users: 0, sessions: 0, events: 0 };
    for (const field of fields) {
      const [appName, userId] = field.split(":").map(unhex);
      const erased = await this.deleteUserData(appName, userId);
      resumed.users++;
      resumed.sessions += erased.sessions;
      resumed.events += erased.events;
    }
    return resumed;
  }

  subscribe(sessionId: string, listener: NoticeListener): () => void {
    return this.listeners.subscribe(sessionId, listener);
  }

  async ping(): Promise<void> {
    await this.call(() => this.redis.ping());
    // Without the notice connection live streams fall back to heartbeat re-reads: report it.
    if (this.subscriber.status !== "ready") throw new MemoryError("UNAVAILABLE", `redis unavailable: notice connection is ${this.subscriber.status}`);
  }

  async describeDurability(): Promise<StoreDurability> {
    let settings: Record<string, string>;
    try {
      settings = {};
      for (const name of ["appendonly", "appendfsync", "save"]) {
        const pair = (await this.redis.config("GET", name)) as string[];
        if (pair.length >= 2) settings[pair[0]] = pair[1];
      }
    } catch (err) {
      const mapped = storeError(err);
      if (mapped.code === "UNAVAILABLE") throw mapped;
      // CONFIG is often disabled or renamed on managed Redis.
      return {
        summary: "unknown: CONFIG GET is not allowed on this Redis; ask its operator whether appendonly (AOF) is on and how often it fsyncs",
        settings: { appendonly: "unknown", appendfsync: "unknown" },
      };
    }
    return { summary: durabilitySummary(settings), settings };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.listeners.clear();
    this.memories.close();
    await Promise.allSettled([this.redis.quit(), this.subscriber.quit()]);
    // quit() fails while disconnected; disconnect() also stops the reconnect loop.
    this.redis.disconnect();
    this.subscriber.disconnect();
  }

  /** Subscribes the notice connection; after every reconnect, tells every listener to re-read. */
  private async listen(): Promise<void> {
    this.subscriber.on("messageBuffer", (channel: Buffer, message: Buffer) => {
      // Every replica hears every append; most have no stream on its session. Nothing to parse then:
      // decoding each notice's events was ~10% of a replica's CPU under appends nobody streamed.
      if (this.listeners.size === 0 || channel.toString() !== this.channel) return;
      const notice = this.parseNotice(message);
      if (notice) this.listeners.notify(notice);
    });
    await this.subscriber.subscribe(this.channel);
    this.subscriber.on("ready", () => {
      if (this.closed) return;
      // ioredis re-subscribes by itself; subscribing again makes the ack tell us when notices flow again.
      this.subscriber.subscribe(this.channel).then(
        () => this.renotify(),
        () => {},
      );
    });
  }

  /**
   * A notice of the append script or of a deletion (append-10.lua says the
   * format): a JSON header, and after a newline the appended events when they
   * fit, decoded through the same cache as reads so both share one object per
   * event. Undefined for anything malformed (it cannot come from our scripts).
   */
  private parseNotice(message: Buffer): SessionNotice | undefined {
    const newline = message.indexOf(0x0a);
    let header: { s: string; h?: number; d?: number; k?: number; i?: string };
    try {
      header = JSON.parse(message.toString("utf8", 0, newline < 0 ? message.length : newline));
    } catch {
      return undefined;
    }
    const incarnation = typeof header.i === "string" ? header.i : undefined;
    if (header.d) return { sessionId: header.s, deleted: true, incarnation };
    // The events are decoded (and cached) only for a session someone here listens to.
    if (!this.listeners.has(header.s)) return undefined;
    if (!header.k || newline < 0 || header.h === undefined || incarnation === undefined) return { sessionId: header.s, headSeq: header.h, incarnation };
    const events: StoredEvent[] = [];
    let pos = newline + 1;
    for (let seq = header.h - header.k + 1; seq <= header.h; seq++) {
      const colon = message.indexOf(0x3a, pos);
      const length = Number(message.toString("latin1", pos, colon));
      if (colon < 0 || !Number.isSafeInteger(length) || colon + 1 + length > message.length) return { sessionId: header.s, headSeq: header.h, incarnation };
      events.push(this.decodeRecent(header.s, seq, message.toString("utf8", colon + 1, colon + 1 + length)));
      pos = colon + 1 + length;
    }
    return { sessionId: header.s, headSeq: header.h, incarnation, events };
  }

  /**
   * Notices published while the notice connection was down are lost: tell
   * every subscribed session's listeners its current head (or that it is
   * gone), read now. The head is sent on purpose: a notice without one makes
   * readers treat the head as unknown for good (StreamHub).
   */
  private async renotify(): Promise<void> {
    const ids = this.listeners.sessionIds();
    if (ids.length === 0) return;
    try {
      const pipeline = this.redis.pipeline();
      for (const id of ids) pipeline.hmget(this.sessionKey(id), "head", "inc");
      const results = (await pipeline.exec()) ?? [];
      for (const [i, id] of ids.entries()) {
        const [err, fields] = results[i] ?? [new Error("no reply")];
        if (err) continue;
        const [head, incarnation] = fields as [string | null, string | null];
        this.listeners.notify(head === null ? { sessionId: id, deleted: true } : { sessionId: id, headSeq: Number(head), incarnation: incarnation ?? "" });
      }
    } catch {
      // The heartbeat re-reads of the streams catch up instead.
    }
  }


  private async create(input: NewSession, incarnation: string, mode: "create" | "get"): Promise<Reply> {
    const { sessionId, appName, userId } = input;
    return this.call(() =>
      this.scripts.create(
        this.sessionKey(sessionId),
        this.key("updated"),
        this.key("stats"),
        ...this.indexKeys(appName, userId),
        sessionId,
        appName,
        userId,
        JSON.stringify(input.metadata),
        input.now,
        mode,
        incarnation,
      ),
    );
  }

  /**
   * Past the app's session cap, evicts the app's least recently updated 10%
   * (at least one); past the global cap, the store's, as LocalStore does.
   * 0: no cap.
   */
  private async evictAfterCreate(totalSessions: number, appName: string): Promise<void> {
    const appCap = appSessionCap(this.limits, appName);
    if (appCap > 0) await this.evictAppOverLimit(appName, appCap);
    const { maxSessions } = this.limits;
    if (maxSessions === 0 || totalSessions <= maxSessions) return;
    const count = evictionCount(maxSessions);
    const oldest = await this.call(() => this.redis.zrange(this.key("updated"), 0, count - 1, "WITHSCORES"));
    for (let i = 0; i < oldest.length; i += 2) {
      // Re-checked in the script: a session updated since is kept, and
      // concurrent evictions (other replicas) stop at the same floor.
      const outcome = await this.deleteWhere(oldest[i], { updatedBelow: Number(oldest[i + 1]) + 1, keepAtLeast: maxSessions + 1 - count });
      if (outcome === "DELETED") this.sessionsEvicted++;
    }
  }

  /**
   * Evicts the oldest 10% of one app's sessions once it holds more than its
   * cap. Its sessions are read from the app's index and ordered by their
   * update times (ZMSCORE): O(sessions of the app), once per tenth of the cap
   * of creations. Replicas creating at once may each evict a tenth.
   */
  private async evictAppOverLimit(appName: string, cap: number): Promise<void> {
    const appIndex = this.indexKey(appName);
    if ((await this.call(() => this.redis.zcard(appIndex))) <= cap) return;
    const ids = await this.call(() => this.redis.zrange(appIndex, 0, -1));
    const scores = await this.call(() => this.redis.zmscore(this.key("updated"), ...ids));
    const oldest = ids
      .map((id, i) => ({ id, updated: scores[i] === null ? Number.NaN : Number(scores[i]) }))
      .filter((s) => !Number.isNaN(s.updated))
      .sort((a, b) => a.updated - b.updated)
      .slice(0, evictionCount(cap));
    for (const { id, updated } of oldest) {
      if ((await this.deleteWhere(id, { updatedBelow: updated + 1 })) === "DELETED") this.sessionsEvicted++;
    }
  }

  /** Runs delete-14.lua for one session, re-reading its tenancy when it moved; the script's outcome. */
  private async deleteWhere(sessionId: string, cond: { updatedBelow?: number; keepAtLeast?: number; scope?: CleanupScope }): Promise<string> {
    return (await this.deleteOne(sessionId, cond)).outcome;
  }

  /**
   * Runs delete-14.lua for one session, re-reading its tenancy when it moved.
   * With `scope`, only a session of that app and/or user (and of no excepted
   * app) is removed: one out of scope, or re-created meanwhile under the same
   * id for someone else, is "KEPT". `events`: what a "DELETED" session held.
   */
  private async deleteOne(
    sessionId: string,
    cond: { updatedBelow?: number; keepAtLeast?: number; scope?: CleanupScope },
  ): Promise<{ outcome: string; events: number }> {
    const { scope } = cond;
    for (let attempt = 0; attempt < 3; attempt++) {
      const [appName, userId, updated] = await this.call(() => this.redis.hmget(this.sessionKey(sessionId), "app", "user", "updated"));
      if (appName === null || userId === null) return { outcome: "GONE", events: 0 };
      // The script checks the tenancy it is given, so a session moved to another app or user meanwhile is MOVED, never removed out of scope.
      if (scope?.appName !== undefined && appName !== scope.appName) return { outcome: "KEPT", events: 0 };
      if (scope?.userId !== undefined && userId !== scope.userId) return { outcome: "KEPT", events: 0 };
      if (scope?.exceptAppNames?.includes(appName)) return { outcome: "KEPT", events: 0 };
      // Not stale now: no script call (the script re-checks anyway, atomically).
      if (cond.updatedBelow !== undefined && Number(updated) >= cond.updatedBelow) return { outcome: "KEPT", events: 0 };
      const reply = await this.call(() =>
        this.scripts.delete(
          ...this.sessionKeys(sessionId),
          this.key("updated"),
          this.key("stats"),
          this.recentKey({}),
          ...this.indexKeys(appName, userId),
          ...this.recentKeysOf(appName, userId).slice(1),
          this.trimmedIdsKey(sessionId),
          sessionId,
          appName,
          userId,
          JSON.stringify(sessionId),
          this.channel,
          this.recentPrefix(sessionId),
          cond.updatedBelow ?? "",
          cond.keepAtLeast ?? "",
        ),
      );
      if (reply[0] === "DELETED" || reply[0] === "GONE") this.tenancies.delete(sessionId);
      if (reply[0] !== "MOVED") return { outcome: reply[0] as string, events: Number(reply[1] ?? 0) };
    }
    return { outcome: "GONE", events: 0 };
  }

  /**
   * Runs `remove` on every session id of a tenancy index, a page at a time
   * (the page's sessions concurrently), in id order from the start: ids
   * already passed are never revisited, so a stale entry cannot loop it.
   */
  private async forEachIndexed(index: string, remove: (sessionId: string) => Promise<void>): Promise<void> {
    let after: string | undefined;
    for (;;) {
      const ids = await this.call(() => this.redis.zrangebylex(index, after === undefined ? "-" : `(${after}`, "+", "LIMIT", 0, INDEX_BATCH));
      await Promise.all(ids.map(remove));
      if (ids.length < INDEX_BATCH) return;
      after = ids[ids.length - 1];
    }
  }

  /** The session's (app, user), from the cache unless `reread`; undefined when there is no such session. */
  private async tenancyOf(sessionId: string, reread: boolean): Promise<{ appName: string; userId: string } | undefined> {
    const cached = reread ? undefined : this.tenancies.get(sessionId);
    if (cached) return cached;
    const [appName, userId] = await this.call(() => this.redis.hmget(this.sessionKey(sessionId), "app", "user"));
    if (appName === null || userId === null) {
      this.tenancies.delete(sessionId);
      return undefined;
    }
    const tenancy = { appName, userId };
    this.tenancies.set(sessionId, tenancy);
    return tenancy;
  }

  /** One read-2.lua call: a run of seqs with the session's bounds. */
  private async readRun(
    sessionId: string,
    direction: "asc" | "desc",
    cursor: number | undefined,
    limit: number,
    types: readonly string[],
  ): Promise<EventPage & { lastSeq: number }> {
    const budget = types.length > 0 ? Math.max(limit, FILTER_SCAN) : limit;
    const [sessionKey, eventsKey] = this.sessionKeys(sessionId);
    const reply = await this.call(() =>
      this.scripts.read(sessionKey, eventsKey, direction, cursor ?? "", limit, budget, types.length, ...types),
    );
    if (reply[0] === "NOT_FOUND") throw sessionNotFound(sessionId);
    const events: StoredEvent[] = [];
    for (let i = 5; i < reply.length; i += 2) events.push(this.decodeRecent(sessionId, reply[i] as number, reply[i + 1] as string));
    return { headSeq: reply[1] as number, firstSeq: reply[2] as number, lastSeq: reply[3] as number, incarnation: reply[4] as string, events };
  }

  private decodeRecent(sessionId: string, seq: number, encoded: string): StoredEvent {
    const key = `${seq}:${sessionId.length}:${sessionId}${encoded}`;
    let event = this.decoded.get(key);
    if (!event) this.decoded.set(key, (event = decodeEvent(sessionId, seq, encoded)));
    return event;
  }

  private async call<T>(run: () => Promise<T>): Promise<T> {
    if (this.closed) throw new MemoryError("UNAVAILABLE", "redis store is closed");
    try {
      return await run();
    } catch (err) {
      throw storeError(err);
    }
  }

  private newRecord(input: NewSession, incarnation: string): SessionRecord {
    return {
      sessionId: input.sessionId,
      appName: input.appName,
      userId: input.userId,
      metadata: input.metadata,
      createdAt: input.now,
      updatedAt: input.now,
      headSeq: 0,
      firstSeq: 1,
      incarnation,
    };
  }

  /** A record from a flat [field, value, ...] list; undefined when empty (no such session). */
  private toRecord(sessionId: string, flat: string[]): SessionRecord | undefined {
    if (flat.length === 0) return undefined;
    const f: Record<string, string> = {};
    for (let i = 0; i < flat.length; i += 2) f[flat[i]] = flat[i + 1];
    return {
      sessionId,
      appName: f.app,
      userId: f.user,
      metadata: JSON.parse(f.meta) as JsonObject,
      createdAt: Number(f.created),
      updatedAt: Number(f.updated),
      headSeq: Number(f.head),
      firstSeq: Number(f.first),
      incarnation: f.inc ?? "",
    };
  }

  private key(name: string): string {
    return `${this.prefix}:${name}`;
  }

  private sessionKey(sessionId: string): string {
    return this.key(`s:${hex(sessionId)}`);
  }

  /** Session hash, events hash, event ids hash. */
  private sessionKeys(sessionId: string): [string, string, string] {
    const base = this.sessionKey(sessionId);
    return [base, `${base}:ev`, `${base}:id`];
  }

  /** The session's trimmed ids by trim time (the dedupe window). */
  private trimmedIdsKey(sessionId: string): string {
    return `${this.sessionKey(sessionId)}:tr`;
  }

  /** Member prefix of the session's entries in the recent index; "!" sorts below every hex digit. */
  private recentPrefix(sessionId: string): string {
    return `${hex(sessionId)}!`;
  }

  /** The recent-events index of one scope (src/store/rules.ts RecentScope). */
  private recentKey(scope: RecentScope): string {
    if (scope.appName !== undefined && scope.userId !== undefined) return this.key(`recent:au:${hex(scope.appName)}:${hex(scope.userId)}`);
    if (scope.appName !== undefined) return this.key(`recent:a:${hex(scope.appName)}`);
    if (scope.userId !== undefined) return this.key(`recent:u:${hex(scope.userId)}`);
    return this.key("recent:all");
  }

  /** The four recent-events indexes a session's events go into: all, app, user, app + user. */
  private recentKeysOf(appName: string, userId: string): [string, string, string, string] {
    return [this.recentKey({}), this.recentKey({ appName }), this.recentKey({ userId }), this.recentKey({ appName, userId })];
  }

  /** The four index keys a session belongs to: all, app, user, app + user. */
  private indexKeys(appName: string, userId: string): [string, string, string, string] {
    return [this.key("ix:all"), this.key(`ix:a:${hex(appName)}`), this.key(`ix:u:${hex(userId)}`), this.key(`ix:au:${hex(appName)}:${hex(userId)}`)];
  }

  /** The one index answering a listSessions filter. */
  private indexKey(appName?: string, userId?: string): string {
    if (appName !== undefined && userId !== undefined) return this.key(`ix:au:${hex(appName)}:${hex(userId)}`);
    if (appName !== undefined) return this.key(`ix:a:${hex(appName)}`);
    if (userId !== undefined) return this.key(`ix:u:${hex(userId)}`);
    return this.key("ix:all");
  }
}

/** True when a session of (appName, userId) belongs in the recent scope. */
function inRecentScope(scope: RecentScope, appName: string, userId: string): boolean {
  return (scope.appName === undefined || scope.appName === appName) && (scope.userId === undefined || scope.userId === userId);
}

/** One line an operator can act on, from appendonly / appendfsync / save. */
export function durabilitySummary(settings: Record<string, string>): string {
  const raw = `(appendonly ${settings.appendonly ?? "?"}, appendfsync ${settings.appendfsync ?? "?"})`;
  if (settings.appendonly === "yes") {
    switch (settings.appendfsync) {
      case "always":
        return `AOF, fsync on every write: an acknowledged append survives a Redis restart and a power failure ${raw}`;
      case "everysec":
        return `AOF, fsync every second: an acknowledged append survives a Redis restart; up to ~1 s may be lost on power failure ${raw}`;
      default:
        return `AOF, fsync left to the OS: an acknowledged append survives a Redis restart; up to ~30 s may be lost on power failure ${raw}`;
    }
  }
  if (!settings.save) {
    return `no AOF and no RDB snapshots: every append is lost when Redis restarts ${raw}`;
  }
  return `no AOF: only RDB snapshots (save "${settings.save}"); appends since the last snapshot are lost when Redis restarts ${raw}`;
}
