/**
 * Where the Redis store keeps what, under `<prefix>:`. Ids are hex-encoded in
 * key names so that no id, whatever bytes it holds, can collide with another
 * or act as a pattern. These names are the data format shared by every
 * replica of every release: change them only with a migration.
 *
 *   s:<hex id>           hash: app, user, meta, created, updated, head, first, inc (incarnation),
 *                        ver (state version, absent: 0), and the session's state:
 *                        "st:<key>" -> value JSON, stn (entries), stb (bytes) (scripts/includes/state.lua)
 *   s:<hex id>:ev        hash: seq -> encoded event (seqs first..head, consecutive; codec.ts)
 *   s:<hex id>:id        hash: event id -> "seq:fingerprint" (idempotency; trimmed
 *                        events' ids stay for the dedupe window)
 *   s:<hex id>:tr        zset: trimmed event ids by trim time (the dedupe window)
 *   updated              zset: session id by updatedAt (eviction, cleanup)
 *   ix:all, ix:a:<hex app>, ix:u:<hex user>, ix:au:<hex app>:<hex user>
 *                        zsets, score 0: session ids in byte (= code-point) order
 *   recent:all, recent:a:<hex app>, recent:u:<hex user>, recent:au:<hex app>:<hex user>
 *                        zsets: "<hex id>!<seq, 16 digits>" by ingest position (stats
 *                        field "ingested" counts appended events store-wide),
 *                        each capped at RECENT_CAP; an event is in the four of
 *                        its session's tenancy, so a scoped listing reads its
 *                        own index and no other tenant's appends crowd it out
 *   stats                hash: sessions, events, ingested (kept by the scripts: O(1) stats)
 *   st:a:<hex app>, st:au:<hex app>:<hex user>
 *                        hashes: an app's and a user's state, fields as the session's
 *                        ("st:<key>", stn, stb); the user's goes with DeleteUserData
 *   erasures             hash: "<hex app>:<hex user>" -> token, erasures in progress (resumeErasures)
 *   notices              pub/sub channel: {"s": id, "h": head, "i": incarnation} or {"s": id, "d": 1, "i": incarnation}
 *                        (notices.ts reads them)
 */
import { scopesOfSession, type RecentScope } from "../rules.js";

/** The hex of a text's UTF-8 bytes, as ids stand in key names. */
function hex(text: string): string {
  return Buffer.from(text, "utf8").toString("hex");
}

/** The text a hex key part stands for. */
function unhex(hexText: string): string {
  return Buffer.from(hexText, "hex").toString("utf8");
}

/** A session's tenancy: it names the session's index keys and never changes while the session lives. */
export interface Tenancy {
  appName: string;
  userId: string;
}

/** The key names of one store (one MEMORY_KEY_PREFIX). */
export class RedisKeys {
  /** Sessions by updatedAt. */
  readonly updated: string;
  /** Counters: sessions, events, ingested. */
  readonly stats: string;
  /** Erasures in progress. */
  readonly erasures: string;
  /** The pub/sub channel of session notices. */
  readonly channel: string;

  constructor(private readonly prefix: string) {
    this.updated = this.key("updated");
    this.stats = this.key("stats");
    this.erasures = this.key("erasures");
    this.channel = this.key("notices");
  }

  /** The session's hash. */
  session(sessionId: string): string {
    return this.key(`s:${hex(sessionId)}`);
  }

  /** The session's events hash (seq -> encoded event). */
  events(sessionId: string): string {
    return `${this.session(sessionId)}:ev`;
  }

  /** Session hash, events hash, event ids hash. */
  sessionKeys(sessionId: string): [string, string, string] {
    const base = this.session(sessionId);
    return [base, `${base}:ev`, `${base}:id`];
  }

  /** The session's trimmed ids by trim time (the dedupe window). */
  trimmedIds(sessionId: string): string {
    return `${this.session(sessionId)}:tr`;
  }

  /** The app's state (session state's "app:" keys). */
  appState(appName: string): string {
    return this.key(`st:a:${hex(appName)}`);
  }

  /** The user's state in one app (session state's "user:" keys). */
  userState(tenancy: Tenancy): string {
    return this.key(`st:au:${hex(tenancy.appName)}:${hex(tenancy.userId)}`);
  }

  /** The session index answering one filter (all, app, user, app + user). */
  index(scope: RecentScope): string {
    return this.key(`ix:${scopeSuffix(scope)}`);
  }

  /** The four index keys a session belongs to: all, app, user, app + user. */
  indexesOf(tenancy: Tenancy): [string, string, string, string] {
    return scopesOfSession(tenancy.appName, tenancy.userId).map((scope) => this.index(scope)) as [string, string, string, string];
  }

  /** The recent-events index of one scope (src/store/rules.ts RecentScope). */
  recent(scope: RecentScope): string {
    return this.key(`recent:${scopeSuffix(scope)}`);
  }

  /** The four recent-events indexes a session's events go into: all, app, user, app + user. */
  recentOf(tenancy: Tenancy): [string, string, string, string] {
    return scopesOfSession(tenancy.appName, tenancy.userId).map((scope) => this.recent(scope)) as [string, string, string, string];
  }

  private key(name: string): string {
    return `${this.prefix}:${name}`;
  }
}

/** "all", "a:<hex app>", "u:<hex user>" or "au:<hex app>:<hex user>". */
function scopeSuffix(scope: RecentScope): string {
  if (scope.appName !== undefined && scope.userId !== undefined) return `au:${hex(scope.appName)}:${hex(scope.userId)}`;
  if (scope.appName !== undefined) return `a:${hex(scope.appName)}`;
  if (scope.userId !== undefined) return `u:${hex(scope.userId)}`;
  return "all";
}

/** Member prefix of the session's entries in the recent indexes; "!" sorts below every hex digit. */
export function recentMemberPrefix(sessionId: string): string {
  return `${hex(sessionId)}!`;
}

/** The event a recent-index member names ("<hex id>!<seq>"; the Lua side is includes/recent.lua). */
export function recentMemberRef(member: string): { sessionId: string; seq: number } {
  const bang = member.indexOf("!");
  return { sessionId: unhex(member.slice(0, bang)), seq: Number(member.slice(bang + 1)) };
}

/** The erasures hash field of a tenancy. */
export function erasureField(tenancy: Tenancy): string {
  return `${hex(tenancy.appName)}:${hex(tenancy.userId)}`;
}

/** The tenancy an erasures hash field names. */
export function erasureTenancy(field: string): Tenancy {
  const [appName, userId] = field.split(":").map(unhex);
  return { appName, userId };
}
