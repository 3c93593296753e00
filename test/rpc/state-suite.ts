/**
 * Session state through the RPCs (part of describeRpcSuite: every store,
 * both protocols): merged state on the session, UpdateSession under an
 * expected version, deltas on appended, read and streamed events, retries,
 * sharing by user and app, erasure, and bad input naming its field.
 */
import { Code } from "@connectrpc/connect";
import { describe, expect, it } from "vitest";
import { MAX_STATE_DELTA_BYTES } from "../../src/service/state/validation.js";
import { MAX_STATE_KEYS } from "../../src/store/state.js";
import { errorOf, type MemoryClient } from "../support/clients.js";
import { collect, sid } from "./fixtures.js";

/** Registers the state cases; `client` answers the suite's client once its server runs. */
export function describeStateRpc(client: () => MemoryClient): void {
  describe("session state", () => {
    /** A session of its own user, so user state never leaks between cases. */
    const newSession = async (userId = sid("user"), appName = "app") => {
      const sessionId = sid("state");
      await client().createSession({ appName, userId, sessionId });
      return { sessionId, userId, appName };
    };

    it("GetSession returns the merged state: the session's keys, app: and user: prefixed ones; temp: keys are never kept", async () => {
      const { sessionId } = await newSession(undefined, sid("app"));
      const { event } = await client().addEvent({
        sessionId,
        event: {
          eventId: "e1",
          eventType: "agent_response",
          stateDelta: { topic: "cats", "user:name": "Ada", "app:tier": "gold", "temp:scratch": 1 },
        },
      });
      expect(event!.stateDelta).toEqual({ topic: "cats", "user:name": "Ada", "app:tier": "gold" });
      const { session } = await client().getSession({ sessionId });
      expect(session!.state).toEqual({ topic: "cats", "user:name": "Ada", "app:tier": "gold" });
      expect(session!.version).toBe(1n);
      const read = await client().getSessionEvents({ sessionId });
      expect(read.events[0].stateDelta).toEqual({ topic: "cats", "user:name": "Ada", "app:tier": "gold" });
    });

    it("a null value deletes a key; an event without a delta has none", async () => {
      const { sessionId } = await newSession();
      await client().addEvents({
        sessionId,
        events: [
          { eventType: "agent_response", stateDelta: { a: 1, b: 2, "user:c": 3 } },
          { eventType: "user_message" },
          { eventType: "agent_response", stateDelta: { a: null, "user:c": null } },
        ],
      });
      const { session } = await client().getSession({ sessionId });
      expect(session!.state).toEqual({ b: 2 });
      const { events } = await client().getSessionEvents({ sessionId });
      expect(events[1].stateDelta).toBeUndefined();
      expect(events[2].stateDelta).toEqual({ a: null, "user:c": null });
    });

    it("with state_nulls_are_values a null is stored as a value; state_removals deletes keys; both read and stream back", async () => {
      const { sessionId } = await newSession();
      const { event } = await client().addEvent({
        sessionId,
        event: {
          eventId: "e1",
          eventType: "agent_response",
          stateDelta: { a: null, b: 1, "user:c": null },
          stateNullsAreValues: true,
        },
      });
      expect(event).toMatchObject({ stateDelta: { a: null, b: 1, "user:c": null }, stateNullsAreValues: true });
      expect((await client().getSession({ sessionId })).session!.state).toEqual({ a: null, b: 1, "user:c": null });
      await client().addEvent({
        sessionId,
        event: { eventId: "e2", eventType: "agent_response", stateRemovals: ["b", "user:c", "temp:x"] },
      });
      const { session } = await client().getSession({ sessionId });
      expect(session).toMatchObject({ state: { a: null }, version: 2n });
      const { events } = await client().getSessionEvents({ sessionId });
      expect(events[0]).toMatchObject({ stateNullsAreValues: true, stateRemovals: [] });
      expect(events[1]).toMatchObject({ stateRemovals: ["b", "user:c"], stateNullsAreValues: false });
      expect(events[1].stateDelta).toBeUndefined();
      const controller = new AbortController();
      const streamed = await collect(
        client().streamSessionEvents({ sessionId }, { signal: controller.signal }),
        (frames) => frames.some((f) => f.frame.case === "caughtUp"),
        controller,
      );
      expect(streamed.filter((r) => r.frame.case === "event").map((r) => r.frame.value)).toMatchObject([
        { stateNullsAreValues: true },
        { stateRemovals: ["b", "user:c"] },
      ]);
      // The same event_id with other removals is another event.
      const reused = await errorOf(
        client().addEvent({ sessionId, event: { eventId: "e2", eventType: "agent_response", stateRemovals: ["a"] } }),
      );
      expect(reused.code).toBe(Code.AlreadyExists);
      const updated = await client().updateSession({
        sessionId,
        stateRemovals: ["a"],
        stateDelta: { d: null },
        stateNullsAreValues: true,
      });
      expect(updated.session!.state).toEqual({ d: null });
    });

    it("UpdateSession replaces the metadata and applies the delta; a stale expected_version is FAILED_PRECONDITION with the current version", async () => {
      const { sessionId } = await newSession();
      const first = await client().updateSession({
        sessionId,
        metadata: { title: "t" },
        stateDelta: { step: 1 },
        expectedVersion: 0n,
      });
      expect(first.session).toMatchObject({ metadata: { title: "t" }, state: { step: 1 }, version: 1n });
      const err = await errorOf(client().updateSession({ sessionId, stateDelta: { step: 2 }, expectedVersion: 0n }));
      expect(err.code).toBe(Code.FailedPrecondition);
      expect(err.rawMessage).toContain("expected_version");
      expect(err.metadata.get("engram-current-version")).toBe("1");
      const { session } = await client().getSession({ sessionId });
      expect(session).toMatchObject({ metadata: { title: "t" }, state: { step: 1 }, version: 1n });
      expect((await errorOf(client().updateSession({ sessionId: sid("nope"), stateDelta: { a: 1 } }))).code).toBe(
        Code.NotFound,
      );
    });

    it("a retried AddEvent (same event_id and delta) is stored once and does not apply its delta again", async () => {
      const { sessionId } = await newSession();
      const event = { eventId: "once", eventType: "agent_response", stateDelta: { n: 1 } };
      await client().addEvent({ sessionId, event });
      await client().addEvent({
        sessionId,
        event: { eventId: "two", eventType: "agent_response", stateDelta: { n: 2 } },
      });
      const retry = await client().addEvent({ sessionId, event });
      expect(retry.event!.seq).toBe(1n);
      const { session } = await client().getSession({ sessionId });
      expect(session).toMatchObject({ state: { n: 2 }, version: 2n, headSeq: 2n });
      // The same id with another delta is another event: ALREADY_EXISTS.
      expect((await errorOf(client().addEvent({ sessionId, event: { ...event, stateDelta: { n: 3 } } }))).code).toBe(
        Code.AlreadyExists,
      );
    });

    it("a refused append (expected_seq) changes no state", async () => {
      const { sessionId } = await newSession();
      await client().addEvent({ sessionId, event: { eventType: "agent_response", stateDelta: { n: 1, "user:n": 1 } } });
      const err = await errorOf(
        client().addEvent({
          sessionId,
          expectedSeq: 0n,
          event: { eventType: "agent_response", stateDelta: { n: 2, "user:n": 2 } },
        }),
      );
      expect(err.code).toBe(Code.FailedPrecondition);
      expect((await client().getSession({ sessionId })).session!.state).toEqual({ n: 1, "user:n": 1 });
    });

    it("StreamSessionEvents carries each event's delta, live and in replay", async () => {
      const { sessionId } = await newSession();
      await client().addEvent({ sessionId, event: { eventType: "agent_response", stateDelta: { replayed: true } } });
      const controller = new AbortController();
      const stream = client().streamSessionEvents({ sessionId }, { signal: controller.signal });
      const framesPromise = collect(
        stream,
        (frames) => frames.filter((f) => f.frame.case === "event").length >= 2,
        controller,
      );
      await client().addEvent({
        sessionId,
        event: { eventType: "agent_response", stateDelta: { live: 1, "user:x": "y" } },
      });
      const frames = await framesPromise;
      controller.abort();
      const deltas = frames.flatMap((f) => (f.frame.case === "event" ? [f.frame.value.stateDelta] : []));
      expect(deltas).toEqual([{ replayed: true }, { live: 1, "user:x": "y" }]);
    });

    it("user state is shared by the user's sessions and by nobody else; app state by the app's users; ListSessions merges too", async () => {
      const appName = sid("app");
      const ada = await newSession("ada", appName);
      const ada2 = await newSession("ada", appName);
      const bob = await newSession("bob", appName);
      await client().addEvent({
        sessionId: ada.sessionId,
        event: { eventType: "agent_response", stateDelta: { "user:lang": "en", "app:motd": "hi", own: 1 } },
      });
      expect((await client().getSession({ sessionId: ada2.sessionId })).session!.state).toEqual({
        "user:lang": "en",
        "app:motd": "hi",
      });
      expect((await client().getSession({ sessionId: bob.sessionId })).session!.state).toEqual({ "app:motd": "hi" });
      const { sessions } = await client().listSessions({ appName, userId: "ada" });
      expect(sessions.map((s) => s.state).sort((a, b) => Object.keys(b!).length - Object.keys(a!).length)).toEqual([
        { own: 1, "user:lang": "en", "app:motd": "hi" },
        { "user:lang": "en", "app:motd": "hi" },
      ]);
    });

    it("DeleteUserData removes the user's state and leaves the app's", async () => {
      const appName = sid("app");
      const erased = await newSession("erased", appName);
      const kept = await newSession("kept", appName);
      await client().addEvent({
        sessionId: erased.sessionId,
        event: { eventType: "agent_response", stateDelta: { "user:secret": 1, "app:shared": 2 } },
      });
      await client().deleteUserData({ appName, userId: "erased" });
      const again = await newSession("erased", appName);
      expect((await client().getSession({ sessionId: again.sessionId })).session!.state).toEqual({ "app:shared": 2 });
      expect((await client().getSession({ sessionId: kept.sessionId })).session!.state).toEqual({ "app:shared": 2 });
    });

    it("bad state input answers INVALID_ARGUMENT naming the field, and changes nothing", async () => {
      const { sessionId } = await newSession();
      const cases: Array<[() => Promise<unknown>, string]> = [
        [
          () => client().addEvent({ sessionId, event: { eventType: "x", stateDelta: { "app:": 1 } } }),
          "event.state_delta",
        ],
        [
          () => client().addEvent({ sessionId, event: { eventType: "x", stateDelta: { "user:__proto__": 1 } } }),
          "event.state_delta",
        ],
        [
          () =>
            client().addEvent({
              sessionId,
              event: { eventType: "x", stateDelta: { big: "x".repeat(MAX_STATE_DELTA_BYTES) } },
            }),
          "event.state_delta",
        ],
        [
          () =>
            client().addEvents({
              sessionId,
              events: [{ eventType: "x" }, { eventType: "x", stateDelta: { ["k".repeat(300)]: 1 } }],
            }),
          "events[1].state_delta",
        ],
        [() => client().updateSession({ sessionId, stateDelta: { "temp:": 1 } }), "state_delta"],
        [
          () => client().addEvent({ sessionId, event: { eventType: "x", stateRemovals: ["a", ""] } }),
          "event.state_removals[1]",
        ],
        [
          () =>
            client().addEvents({
              sessionId,
              events: [{ eventType: "x" }, { eventType: "x", stateRemovals: ["a", "a"] }],
            }),
          "events[1].state_removals[1]",
        ],
        [
          () => client().updateSession({ sessionId, stateDelta: { "user:a": 1 }, stateRemovals: ["user:a"] }),
          "state_removals[0]",
        ],
        [
          () =>
            client().updateSession({
              sessionId,
              stateRemovals: Array.from({ length: MAX_STATE_KEYS + 1 }, (_, i) => `k${i}`),
            }),
          "state_removals",
        ],
      ];
      for (const [call, field] of cases) {
        const err = await errorOf(call());
        expect(err.code, field).toBe(Code.InvalidArgument);
        expect(err.rawMessage.startsWith(`${field}: `), err.rawMessage).toBe(true);
      }
      // Past a state's key cap over several appends: refused by the store, named by the service.
      const keys = (from: number, count: number) =>
        Object.fromEntries(Array.from({ length: count }, (_, i) => [`k${from + i}`, i]));
      await client().addEvent({ sessionId, event: { eventType: "x", stateDelta: keys(0, MAX_STATE_KEYS) } });
      const tooMany = await errorOf(
        client().addEvent({ sessionId, event: { eventType: "x", stateDelta: keys(MAX_STATE_KEYS, 1) } }),
      );
      expect(tooMany.code).toBe(Code.InvalidArgument);
      expect(tooMany.rawMessage).toMatch(/^event\.state_delta: would make the session state hold 1001 keys/);
      const { session } = await client().getSession({ sessionId });
      expect(session).toMatchObject({ headSeq: 1n, version: 1n });
      expect(Object.keys(session!.state!)).toHaveLength(MAX_STATE_KEYS);
    });
  });
}
