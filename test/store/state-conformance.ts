/**
 * Session state (ADK's model) in the store conformance suite: every driver
 * applies state deltas inside its append and update steps, splits them by
 * prefix (session, "user:", "app:"), never stores "temp:" keys, deletes on
 * null, refuses states past the caps of src/store/state.ts without changing
 * anything, and erases a user's state with the user.
 */
import { describe, expect, it } from "vitest";
import { MAX_STATE_BYTES, MAX_STATE_KEYS } from "../../src/store/state.js";
import type { JsonObject, MemoryStore, SessionNotice, StateChange, StoreLimits } from "../../src/store/types.js";
import { makeSession, newEvent, rejection, waitFor } from "./fixtures.js";

/** Registers the state cases; `fresh` makes an empty store (closed by the caller's afterEach). */
export function describeStateConformance(fresh: (limits?: Partial<StoreLimits>) => Promise<MemoryStore>): void {
  /** An append of one event carrying `delta`, with a client id so it can be retried. */
  const withDelta = (eventId: string, stateDelta: JsonObject) =>
    newEvent("agent_response", eventId, { eventId, stateDelta });

  describe("9. session state", () => {
    it("a new session has an empty state at version 0", async () => {
      const store = await fresh();
      const created = await makeSession(store, "s1");
      expect(created).toMatchObject({ state: {}, version: 0 });
      expect(await store.getSession("s1")).toMatchObject({ state: {}, version: 0 });
      expect(await store.sharedState("app", "user")).toEqual({ app: {}, user: {} });
    });

    it("an append's delta goes to the session's, the user's and the app's state by prefix, and is stored with the event", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      const delta = { topic: "cats", "user:name": "Ada", "app:model": { name: "m", tries: [1, 2] } };
      const appended = await store.appendEvents("s1", [withDelta("e1", delta)]);
      expect(appended.events[0].stateDelta).toEqual(delta);
      expect(await store.getSession("s1")).toMatchObject({ state: { topic: "cats" }, version: 1, headSeq: 1 });
      expect(await store.sharedState("app", "user")).toEqual({
        app: { model: { name: "m", tries: [1, 2] } },
        user: { name: "Ada" },
      });
      const read = await store.readEvents("s1", { limit: 10 });
      expect(read.events[0].stateDelta).toEqual(delta);
      expect((await store.readTail("s1", 1)).events[0].stateDelta).toEqual(delta);
    });

    it("an event without a delta is stored without one and leaves the version alone", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [newEvent("user_message", "hi")]);
      expect((await store.readEvents("s1", { limit: 10 })).events[0].stateDelta).toBeUndefined();
      expect(await store.getSession("s1")).toMatchObject({ state: {}, version: 0 });
    });

    it("never stores temp: keys, even when a store is handed one", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [withDelta("e1", { "temp:scratch": 1, kept: true })]);
      expect((await store.getSession("s1"))!.state).toEqual({ kept: true });
      expect(await store.sharedState("app", "user")).toEqual({ app: {}, user: {} });
    });

    it("a null value deletes the key in each state", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [withDelta("e1", { a: 1, b: 2, "user:u": 1, "app:x": 1, "app:y": 2 })]);
      await store.appendEvents("s1", [withDelta("e2", { a: null, "user:u": null, "app:x": null, missing: null })]);
      expect((await store.getSession("s1"))!.state).toEqual({ b: 2 });
      expect(await store.sharedState("app", "user")).toEqual({ app: { y: 2 }, user: {} });
    });

    it("a batch applies its deltas in order, the later change of a key winning, and bumps the version once", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [
        withDelta("e1", { n: 1, gone: true }),
        newEvent("user_message", "plain"),
        withDelta("e3", { n: 3, gone: null }),
      ]);
      expect(await store.getSession("s1")).toMatchObject({ state: { n: 3 }, version: 1, headSeq: 3 });
    });

    it("a refused append changes no state: expected_seq conflict and a reused event id", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [withDelta("e1", { n: 1, "user:n": 1, "app:n": 1 })]);
      const conflict = await rejection(
        store.appendEvents("s1", [withDelta("e2", { n: 2, "user:n": 2, "app:n": 2 })], 0),
      );
      expect(conflict.code).toBe("FAILED_PRECONDITION");
      const reused = await rejection(
        store.appendEvents("s1", [withDelta("e3", { n: 3, "user:n": 3 }), withDelta("e1", { n: 9 })]),
      );
      expect(reused.code).toBe("ALREADY_EXISTS");
      expect(await store.getSession("s1")).toMatchObject({ state: { n: 1 }, version: 1, headSeq: 1 });
      expect(await store.sharedState("app", "user")).toEqual({ app: { n: 1 }, user: { n: 1 } });
    });

    it("a retried append does not apply its delta again", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [withDelta("e1", { step: 1, "user:step": 1 })]);
      await store.appendEvents("s1", [withDelta("e2", { step: 2, "user:step": 2 })]);
      const retry = await store.appendEvents("s1", [withDelta("e1", { step: 1, "user:step": 1 })]);
      expect(retry.replayed).toBe(true);
      expect(retry.events[0]).toMatchObject({ seq: 1, stateDelta: { step: 1, "user:step": 1 } });
      // A batch mixing a retry of an older event with a new event applies only the new one's delta.
      await store.appendEvents("s1", [withDelta("e1", { step: 1, "user:step": 1 }), withDelta("e4", { other: true })]);
      expect(await store.getSession("s1")).toMatchObject({ state: { step: 2, other: true }, version: 3, headSeq: 3 });
      expect((await store.sharedState("app", "user")).user).toEqual({ step: 2 });
    });

    it("updateSession replaces the metadata, applies the delta and bumps the version", async () => {
      const store = await fresh();
      await store.createSession({
        sessionId: "s1",
        appName: "app",
        userId: "user",
        metadata: { old: true },
        now: Date.now(),
      });
      const now = Date.now() + 1000;
      const updated = await store.updateSession("s1", {
        metadata: { fresh: 1 },
        stateDelta: { a: 1, "user:b": 2, "app:c": 3 },
        now,
      });
      expect(updated).toMatchObject({ metadata: { fresh: 1 }, state: { a: 1 }, version: 1, updatedAt: now });
      expect(await store.getSession("s1")).toEqual(updated);
      expect(await store.sharedState("app", "user")).toEqual({ app: { c: 3 }, user: { b: 2 } });
      // Absent fields stay as they are.
      const second = await store.updateSession("s1", { stateDelta: { a: null }, expectedVersion: 1, now });
      expect(second).toMatchObject({ metadata: { fresh: 1 }, state: {}, version: 2 });
      const third = await store.updateSession("s1", { metadata: { again: 1 }, now });
      expect(third).toMatchObject({ metadata: { again: 1 }, state: {}, version: 3 });
    });

    it("updateSession at a stale version answers FAILED_PRECONDITION with the current version and changes nothing", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.updateSession("s1", { stateDelta: { a: 1 }, now: Date.now() });
      const err = await rejection(
        store.updateSession("s1", {
          metadata: { lost: true },
          stateDelta: { a: 2, "user:a": 2 },
          expectedVersion: 0,
          now: Date.now(),
        }),
      );
      expect(err.code).toBe("FAILED_PRECONDITION");
      expect(err.reason).toBe("VERSION_CONFLICT");
      expect(err.info).toMatchObject({ current_version: "1", expected_version: "0" });
      expect(await store.getSession("s1")).toMatchObject({ metadata: {}, state: { a: 1 }, version: 1 });
      expect((await store.sharedState("app", "user")).user).toEqual({});
    });

    it("updateSession of an unknown session answers NOT_FOUND", async () => {
      const store = await fresh();
      expect((await rejection(store.updateSession("missing", { stateDelta: { a: 1 }, now: Date.now() }))).code).toBe(
        "NOT_FOUND",
      );
    });

    it("user state is shared by the user's sessions of one app and by nobody else; app state by the app's users", async () => {
      const store = await fresh();
      await makeSession(store, "ada-1", "app", "ada");
      await makeSession(store, "ada-2", "app", "ada");
      await makeSession(store, "bob-1", "app", "bob");
      await makeSession(store, "ada-other", "other", "ada");
      await store.appendEvents("ada-1", [withDelta("e1", { "user:lang": "en", "app:motd": "hi", own: 1 })]);
      expect(await store.sharedState("app", "ada")).toEqual({ app: { motd: "hi" }, user: { lang: "en" } });
      expect(await store.sharedState("app", "bob")).toEqual({ app: { motd: "hi" }, user: {} });
      expect(await store.sharedState("other", "ada")).toEqual({ app: {}, user: {} });
      expect((await store.getSession("ada-2"))!.state).toEqual({});
      await store.updateSession("ada-2", { stateDelta: { "user:lang": "fr" }, now: Date.now() });
      expect((await store.sharedState("app", "ada")).user).toEqual({ lang: "fr" });
    });

    it("refuses a change past the key or byte cap of a state with INVALID_ARGUMENT on state_delta, appending and changing nothing", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [withDelta("e1", { a: 1 })]);
      const manyKeys: JsonObject = {};
      for (let i = 0; i < MAX_STATE_KEYS; i++) manyKeys[`user:k${i}`] = i;
      const tooMany = await rejection(
        store.appendEvents("s1", [withDelta("e2", { b: 2, ...manyKeys, "user:one-more": 1 })]),
      );
      expect(tooMany).toMatchObject({ code: "INVALID_ARGUMENT", field: "state_delta" });
      expect(tooMany.message).toMatch(/user state/);
      const tooBig = await rejection(
        store.appendEvents("s1", [withDelta("e3", { "app:big": "x".repeat(MAX_STATE_BYTES) })]),
      );
      expect(tooBig).toMatchObject({ code: "INVALID_ARGUMENT", field: "state_delta" });
      const viaUpdate = await rejection(
        store.updateSession("s1", {
          metadata: { no: 1 },
          stateDelta: { big: "x".repeat(MAX_STATE_BYTES) },
          now: Date.now(),
        }),
      );
      expect(viaUpdate).toMatchObject({ code: "INVALID_ARGUMENT", field: "state_delta" });
      expect(await store.getSession("s1")).toMatchObject({ state: { a: 1 }, version: 1, headSeq: 1, metadata: {} });
      expect(await store.sharedState("app", "user")).toEqual({ app: {}, user: {} });
      // Exactly at the key cap is allowed, and deleting makes room again.
      await store.appendEvents("s1", [withDelta("e4", manyKeys)]);
      expect(Object.keys((await store.sharedState("app", "user")).user)).toHaveLength(MAX_STATE_KEYS);
      await store.appendEvents("s1", [withDelta("e5", { "user:k0": null, "user:new": 1 })]);
      expect((await store.sharedState("app", "user")).user).toMatchObject({ new: 1 });
    });

    it("deleteUserData removes the user's state; the app's state and other users' stay", async () => {
      const store = await fresh();
      await makeSession(store, "ada-1", "app", "ada");
      await makeSession(store, "bob-1", "app", "bob");
      await store.appendEvents("ada-1", [withDelta("e1", { "user:secret": "ada's", "app:shared": 1 })]);
      await store.appendEvents("bob-1", [withDelta("e1", { "user:secret": "bob's" })]);
      await store.deleteUserData("app", "ada");
      expect(await store.sharedState("app", "ada")).toEqual({ app: { shared: 1 }, user: {} });
      expect(await store.sharedState("app", "bob")).toEqual({ app: { shared: 1 }, user: { secret: "bob's" } });
    });

    it("deleting a session keeps the user's and the app's state (they outlive any one session)", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [withDelta("e1", { own: 1, "user:u": 1, "app:a": 1 })]);
      await store.deleteSession("s1");
      expect(await store.sharedState("app", "user")).toEqual({ app: { a: 1 }, user: { u: 1 } });
      const again = await makeSession(store, "s1");
      expect(again).toMatchObject({ state: {}, version: 0 });
    });

    it("notices that carry events carry their deltas", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      const notices: SessionNotice[] = [];
      const unsubscribe = store.subscribe("s1", (n) => notices.push(n));
      try {
        await store.noticesFlowing?.();
        await store.appendEvents("s1", [withDelta("e1", { a: 1, "app:b": 2 })]);
        await waitFor(() => notices.some((n) => n.headSeq === 1));
        for (const n of notices.filter((x) => x.events !== undefined))
          expect(n.events![0].stateDelta).toEqual({ a: 1, "app:b": 2 });
      } finally {
        unsubscribe();
      }
    });
  });

  describe("9b. state removals and stored nulls", () => {
    /** An event with a client id carrying a state change. */
    const withChange = (eventId: string, change: StateChange) =>
      newEvent("agent_response", eventId, { eventId, ...change });

    it("removals delete keys in each state before the delta applies, and are stored with the event", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [withDelta("e1", { a: 1, b: 2, "user:u": 1, "app:x": 1, "app:y": 2 })]);
      const removals = ["a", "user:u", "app:x", "missing"];
      const appended = await store.appendEvents("s1", [
        withChange("e2", { stateRemovals: removals, stateDelta: { c: 3 } }),
      ]);
      expect(appended.events[0]).toMatchObject({ stateRemovals: removals, stateDelta: { c: 3 } });
      expect(appended.events[0].stateNullsAreValues).toBeUndefined();
      expect(await store.getSession("s1")).toMatchObject({ state: { b: 2, c: 3 }, version: 2 });
      expect(await store.sharedState("app", "user")).toEqual({ app: { y: 2 }, user: {} });
      const read = (await store.readEvents("s1", { limit: 10 })).events;
      expect(read[0].stateRemovals).toBeUndefined();
      expect(read[1]).toMatchObject({ stateRemovals: removals, stateDelta: { c: 3 } });
      expect((await store.readTail("s1", 1)).events[0].stateRemovals).toEqual(removals);
    });

    it("with stateNullsAreValues a null is stored as the key's value in each state; without, it still deletes", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      const delta = { a: null, keep: 1, "user:u": null, "app:x": null };
      const appended = await store.appendEvents("s1", [
        withChange("e1", { stateDelta: delta, stateNullsAreValues: true }),
      ]);
      expect(appended.events[0]).toMatchObject({ stateDelta: delta, stateNullsAreValues: true });
      expect(await store.getSession("s1")).toMatchObject({ state: { a: null, keep: 1 }, version: 1 });
      expect(await store.sharedState("app", "user")).toEqual({ app: { x: null }, user: { u: null } });
      expect((await store.readEvents("s1", { limit: 10 })).events[0]).toMatchObject({
        stateDelta: delta,
        stateNullsAreValues: true,
      });
      await store.appendEvents("s1", [withDelta("e2", { a: null, "user:u": null })]);
      expect((await store.getSession("s1"))!.state).toEqual({ keep: 1 });
      expect(await store.sharedState("app", "user")).toEqual({ app: { x: null }, user: {} });
    });

    it("an append of removals alone bumps the version; a batch applies removals and deltas in event order", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [withDelta("e1", { gone: 1 })]);
      await store.appendEvents("s1", [withChange("e2", { stateRemovals: ["gone"] })]);
      expect(await store.getSession("s1")).toMatchObject({ state: {}, version: 2 });
      await store.appendEvents("s1", [
        withDelta("e3", { n: 1, m: 1 }),
        withChange("e4", { stateRemovals: ["n", "m"] }),
        withChange("e5", { stateDelta: { m: null }, stateNullsAreValues: true }),
      ]);
      expect(await store.getSession("s1")).toMatchObject({ state: { m: null }, version: 3, headSeq: 5 });
    });

    it("removals and the nulls flag are part of an event's identity: a retry replays, another change is ALREADY_EXISTS", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.appendEvents("s1", [withDelta("e0", { a: 1, b: 1 })]);
      await store.appendEvents("s1", [withChange("e1", { stateRemovals: ["a"] })]);
      await store.appendEvents("s1", [withChange("e2", { stateDelta: { n: null }, stateNullsAreValues: true })]);
      await store.appendEvents("s1", [withDelta("e3", { a: 2 })]);
      const retry = await store.appendEvents("s1", [withChange("e1", { stateRemovals: ["a"] })]);
      expect(retry.replayed).toBe(true);
      expect(retry.events[0]).toMatchObject({ seq: 2, stateRemovals: ["a"] });
      const nullRetry = await store.appendEvents("s1", [
        withChange("e2", { stateDelta: { n: null }, stateNullsAreValues: true }),
      ]);
      expect(nullRetry.events[0]).toMatchObject({ seq: 3, stateNullsAreValues: true });
      expect((await rejection(store.appendEvents("s1", [withChange("e1", { stateRemovals: ["b"] })]))).code).toBe(
        "ALREADY_EXISTS",
      );
      expect((await rejection(store.appendEvents("s1", [withDelta("e2", { n: null })]))).code).toBe("ALREADY_EXISTS");
      expect(await store.getSession("s1")).toMatchObject({ state: { a: 2, b: 1, n: null }, version: 4, headSeq: 4 });
    });

    it("updateSession applies removals, then the delta, storing nulls when asked", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      await store.updateSession("s1", { stateDelta: { a: 1, "user:b": 2, "app:c": 3 }, now: Date.now() });
      const updated = await store.updateSession("s1", {
        stateRemovals: ["a", "user:b", "app:c"],
        stateDelta: { d: null, "user:e": null },
        stateNullsAreValues: true,
        now: Date.now(),
      });
      expect(updated).toMatchObject({ state: { d: null }, version: 2 });
      expect(await store.sharedState("app", "user")).toEqual({ app: {}, user: { e: null } });
    });

    it("notices that carry events carry their removals and nulls flag", async () => {
      const store = await fresh();
      await makeSession(store, "s1");
      const notices: SessionNotice[] = [];
      const unsubscribe = store.subscribe("s1", (n) => notices.push(n));
      try {
        await store.noticesFlowing?.();
        const change = { stateDelta: { a: null }, stateRemovals: ["b"], stateNullsAreValues: true };
        await store.appendEvents("s1", [withChange("e1", change)]);
        await waitFor(() => notices.some((n) => n.headSeq === 1));
        for (const n of notices.filter((x) => x.events !== undefined)) expect(n.events![0]).toMatchObject(change);
      } finally {
        unsubscribe();
      }
    });
  });
}
