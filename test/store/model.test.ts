/**
 * Model-based property test (fast-check commands): the same random sequences
 * of operations run against the local, Redis and PostgreSQL stores and a
 * small reference model of the contract; every answer (values and error
 * codes) must match the model, recent listings (ingest order, per app and
 * user) included. A tiny per-session cap (4 events) makes trimming, evicted
 * cursors and retries of trimmed events common (their ids are remembered:
 * the dedupe window outlasts every run). Each run gets its
 * own session ids and app names, so runs never see each other.
 */
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryError, type MemoryErrorCode } from "../../src/errors.js";
import { PostgresStore } from "../../src/store/postgres.js";
import { RedisStore } from "../../src/store/redis.js";
import { LocalStore } from "../../src/store/local.js";
import type { MemoryStore, StoreLimits } from "../../src/store/types.js";
import { newEvent } from "./conformance.js";

const LIMITS: StoreLimits = { maxSessions: 100_000, maxSessionEvents: 4 };
const RUNS = Number(process.env.ENGRAM_MODEL_RUNS ?? 25);

interface ModelEvent {
  seq: number;
  /** When it was stored, counted over the run: recent listings order by it. */
  ingest: number;
  eventId: string;
  eventType: string;
  content: string;
}
interface ModelSession {
  appName: string;
  userId: string;
  head: number;
  events: ModelEvent[]; // retained only, oldest first
  trimmed: ModelEvent[]; // trimmed with a client id: inside the dedupe window for the whole run
}
interface Model {
  run: string;
  sessions: Map<string, ModelSession>;
  /** Events stored so far in this run. */
  ingested: number;
}
interface Real {
  store: MemoryStore;
}

const SESSION_POOL = ["s1", "s2", "s3"];
const EVENT_ID_POOL = ["e1", "e2", "e3", "e4", "e5"];
const APPS = ["a", "b"];
const USERS = ["u", "v"];
const TYPES = ["user_message", "tool_call"];
const CONTENTS = ["x", "y"];

/** The error code of a call, or "ok" with its value. */
async function outcome<T>(p: Promise<T>): Promise<{ code: "ok"; value: T } | { code: MemoryErrorCode }> {
  try {
    return { code: "ok", value: await p };
  } catch (err) {
    if (err instanceof MemoryError) return { code: err.code };
    throw err;
  }
}

const first = (s: ModelSession) => (s.events.length ? s.events[0].seq : s.head + 1);

class CreateSession implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly id: string,
    readonly app: string,
    readonly user: string,
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const sessionId = `${m.run}-${this.id}`;
    const got = await outcome(
      r.store.createSession({
        sessionId,
        appName: `${m.run}-${this.app}`,
        userId: this.user,
        metadata: {},
        now: Date.now(),
      }),
    );
    if (m.sessions.has(sessionId)) {
      expect(got.code).toBe("ALREADY_EXISTS");
      return;
    }
    expect(got.code).toBe("ok");
    m.sessions.set(sessionId, { appName: `${m.run}-${this.app}`, userId: this.user, head: 0, events: [], trimmed: [] });
  }
  toString = () => `create(${this.id},${this.app},${this.user})`;
}

class GetOrCreate implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly id: string,
    readonly app: string,
    readonly user: string,
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const sessionId = `${m.run}-${this.id}`;
    const got = await r.store.getOrCreateSession({
      sessionId,
      appName: `${m.run}-${this.app}`,
      userId: this.user,
      metadata: {},
      now: Date.now(),
    });
    const known = m.sessions.get(sessionId);
    expect(got.created).toBe(!known);
    if (!known)
      m.sessions.set(sessionId, {
        appName: `${m.run}-${this.app}`,
        userId: this.user,
        head: 0,
        events: [],
        trimmed: [],
      });
    const s = m.sessions.get(sessionId)!;
    expect(got.session).toMatchObject({
      sessionId,
      appName: s.appName,
      userId: s.userId,
      headSeq: s.head,
      firstSeq: first(s),
    });
  }
  toString = () => `getOrCreate(${this.id},${this.app},${this.user})`;
}

interface BatchItem {
  eventId?: string;
  eventType: string;
  content: string;
}

class Append implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly id: string,
    readonly batch: BatchItem[],
    readonly expect: "none" | "head" | "stale",
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const sessionId = `${m.run}-${this.id}`;
    const s = m.sessions.get(sessionId);
    const expectedSeq = !s || this.expect === "none" ? undefined : this.expect === "head" ? s.head : s.head + 1;
    const events = this.batch.map((b) =>
      newEvent(b.eventType, b.content, b.eventId ? { eventId: `${m.run}-${b.eventId}` } : {}),
    );
    const got = await outcome(r.store.appendEvents(sessionId, events, expectedSeq));
    if (!s) return void expect(got.code).toBe("NOT_FOUND");
    // Idempotency: retained events' ids, and trimmed ones' inside the dedupe window.
    const known: (ModelEvent | undefined)[] = [];
    for (const e of events) {
      const old =
        s.events.find((x) => x.eventId === e.eventId) ??
        (e.fingerprint === "" ? undefined : s.trimmed.find((x) => x.eventId === e.eventId));
      if (old && (old.eventType !== e.eventType || old.content !== e.content))
        return void expect(got.code).toBe("ALREADY_EXISTS");
      known.push(old);
    }
    if (known.every((k) => k)) {
      expect(got.code).toBe("ok");
      if (got.code === "ok") {
        expect(got.value.replayed).toBe(true);
        expect(got.value.events.map((e) => [e.seq, e.eventId])).toEqual(known.map((k) => [k!.seq, k!.eventId]));
      }
      return;
    }
    if (expectedSeq !== undefined && expectedSeq !== s.head) return void expect(got.code).toBe("FAILED_PRECONDITION");
    expect(got.code).toBe("ok");
    const seqs: number[] = [];
    events.forEach((e, i) => {
      if (known[i]) return void seqs.push(known[i]!.seq);
      s.head++;
      s.events.push({
        seq: s.head,
        ingest: ++m.ingested,
        eventId: e.eventId,
        eventType: e.eventType,
        content: e.content as string,
      });
      seqs.push(s.head);
    });
    const kept = s.events.slice(-LIMITS.maxSessionEvents);
    s.trimmed.push(...s.events.slice(0, s.events.length - kept.length).filter((x) => !x.eventId.startsWith("gen-")));
    s.events = kept;
    if (got.code === "ok") {
      expect(got.value.replayed).toBe(false);
      expect(got.value.events.map((e) => e.seq)).toEqual(seqs);
    }
  }
  toString = () => `append(${this.id},${JSON.stringify(this.batch)},${this.expect})`;
}

class ReadEvents implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly id: string,
    readonly after: number | undefined,
    readonly limit: number,
    readonly type?: string,
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const sessionId = `${m.run}-${this.id}`;
    const s = m.sessions.get(sessionId);
    const got = await outcome(
      r.store.readEvents(sessionId, {
        afterSeq: this.after,
        limit: this.limit,
        eventTypes: this.type ? [this.type] : [],
      }),
    );
    if (!s) return void expect(got.code).toBe("NOT_FOUND");
    if (this.after !== undefined && (this.after < first(s) - 1 || this.after > s.head))
      return void expect(got.code).toBe("OUT_OF_RANGE");
    expect(got.code).toBe("ok");
    const want = s.events
      .filter((e) => (this.after === undefined || e.seq > this.after) && (!this.type || e.eventType === this.type))
      .slice(0, this.limit);
    if (got.code === "ok") {
      expect(got.value.events.map((e) => [e.seq, e.eventId, e.eventType, e.content])).toEqual(
        want.map((e) => [e.seq, e.eventId, e.eventType, e.content]),
      );
      expect([got.value.headSeq, got.value.firstSeq]).toEqual([s.head, first(s)]);
    }
  }
  toString = () => `read(${this.id},after=${this.after},limit=${this.limit},type=${this.type})`;
}

class ReadTail implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly id: string,
    readonly n: number,
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const sessionId = `${m.run}-${this.id}`;
    const s = m.sessions.get(sessionId);
    const got = await outcome(r.store.readTail(sessionId, this.n));
    if (!s) return void expect(got.code).toBe("NOT_FOUND");
    if (got.code === "ok")
      expect(got.value.events.map((e) => e.seq)).toEqual(s.events.slice(-this.n).map((e) => e.seq));
    else expect(got.code).toBe("ok");
  }
  toString = () => `tail(${this.id},${this.n})`;
}

class DeleteSession implements fc.AsyncCommand<Model, Real> {
  constructor(readonly id: string) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const sessionId = `${m.run}-${this.id}`;
    expect(await r.store.deleteSession(sessionId)).toBe(m.sessions.has(sessionId));
    m.sessions.delete(sessionId);
  }
  toString = () => `delete(${this.id})`;
}

class ListSessions implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly app: string,
    readonly user: string | undefined,
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    const appName = `${m.run}-${this.app}`;
    const got = await r.store.listSessions({ appName, userId: this.user, limit: 100 });
    const want = [...m.sessions.entries()]
      .filter(([, s]) => s.appName === appName && (this.user === undefined || s.userId === this.user))
      .map(([id]) => id)
      .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    expect(got.map((s) => s.sessionId)).toEqual(want);
  }
  toString = () => `list(${this.app},${this.user})`;
}

class ListRecent implements fc.AsyncCommand<Model, Real> {
  constructor(
    readonly apps: string[],
    readonly user: string | undefined,
    readonly limit: number,
  ) {}
  check = () => true;
  async run(m: Model, r: Real) {
    // Scoped to this run's apps: the store is shared by every run, and its users and store-wide view are too.
    const appNames = this.apps.map((app) => `${m.run}-${app}`);
    const got = await r.store.listRecentEvents(this.limit, { appNames, userId: this.user });
    const want = [...m.sessions.entries()]
      .filter(([, s]) => appNames.includes(s.appName) && (this.user === undefined || s.userId === this.user))
      .flatMap(([sessionId, s]) => s.events.map((e) => ({ sessionId, ...e })))
      .sort((a, b) => a.ingest - b.ingest)
      .slice(-this.limit);
    expect(got.map((e) => [e.sessionId, e.seq, e.eventId])).toEqual(want.map((e) => [e.sessionId, e.seq, e.eventId]));
  }
  toString = () => `recent(${this.apps},${this.user},${this.limit})`;
}

const id = fc.constantFrom(...SESSION_POOL);
const item: fc.Arbitrary<BatchItem> = fc.record({
  eventId: fc.option(fc.constantFrom(...EVENT_ID_POOL), { nil: undefined }),
  eventType: fc.constantFrom(...TYPES),
  content: fc.constantFrom(...CONTENTS),
});
/** A batch without repeated client ids (the service refuses those before the store sees them). */
const batch = fc.array(item, { minLength: 1, maxLength: 3 }).map((items) => {
  const seen = new Set<string>();
  return items.filter((i) => !i.eventId || (!seen.has(i.eventId) && seen.add(i.eventId)));
});
const commands = [
  fc.tuple(id, fc.constantFrom(...APPS), fc.constantFrom(...USERS)).map(([i, a, u]) => new CreateSession(i, a, u)),
  fc.tuple(id, fc.constantFrom(...APPS), fc.constantFrom(...USERS)).map(([i, a, u]) => new GetOrCreate(i, a, u)),
  fc
    .tuple(id, batch, fc.constantFrom("none" as const, "head" as const, "stale" as const))
    .map(([i, b, e]) => new Append(i, b, e)),
  fc.tuple(id, batch).map(([i, b]) => new Append(i, b, "none")),
  fc
    .tuple(
      id,
      fc.option(fc.integer({ min: 0, max: 14 }), { nil: undefined }),
      fc.integer({ min: 1, max: 5 }),
      fc.option(fc.constantFrom(...TYPES), { nil: undefined }),
    )
    .map(([i, a, l, t]) => new ReadEvents(i, a, l, t)),
  fc.tuple(id, fc.integer({ min: 1, max: 5 })).map(([i, n]) => new ReadTail(i, n)),
  id.map((i) => new DeleteSession(i)),
  fc
    .tuple(fc.constantFrom(...APPS), fc.option(fc.constantFrom(...USERS), { nil: undefined }))
    .map(([a, u]) => new ListSessions(a, u)),
  fc
    .tuple(
      fc.subarray(APPS, { minLength: 1 }),
      fc.option(fc.constantFrom(...USERS), { nil: undefined }),
      fc.integer({ min: 1, max: 8 }),
    )
    .map(([a, u, l]) => new ListRecent(a, u, l)),
];

const STORES: Array<[string, () => Promise<MemoryStore>]> = [
  ["local", async () => new LocalStore(LIMITS)],
  [
    "redis",
    () =>
      RedisStore.open({ url: process.env.MEMORY_TEST_REDIS_URL!, keyPrefix: `model${process.pid}`, limits: LIMITS }),
  ],
  [
    "postgres",
    () =>
      PostgresStore.open({ url: process.env.MEMORY_TEST_POSTGRES_URL!, schema: `model${process.pid}`, limits: LIMITS }),
  ],
];

describe.each(STORES)("the %s store behaves as the reference model", (_name, open) => {
  let store: MemoryStore;
  beforeAll(async () => {
    store = await open();
  });
  afterAll(async () => store?.close());

  it("over random operation sequences (values and error codes)", async () => {
    let runs = 0;
    await fc.assert(
      fc.asyncProperty(fc.commands(commands, { maxCommands: 60, size: "max" }), async (cmds) => {
        const model: Model = {
          run: `r${process.pid}-${++runs}-${Math.random().toString(36).slice(2, 8)}`,
          sessions: new Map(),
          ingested: 0,
        };
        await fc.asyncModelRun(() => ({ model, real: { store } }), cmds);
      }),
      { numRuns: RUNS },
    );
  }, 120_000);
});
