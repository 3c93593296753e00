/**
 * The null store keeps nothing (MEMORY_ENABLED=false), so erasure and
 * cleanup find nothing to remove: they answer zero counts, never an error.
 */
import { describe, expect, it } from "vitest";
import { NullStore } from "../../src/store/null.js";
import type { MemoryStore } from "../../src/store/types.js";
import { makeSession, newEvent } from "./conformance.js";

describe("NullStore", () => {
  it("erases a user and cleans up with zero counts", async () => {
    const store: MemoryStore = new NullStore();
    await makeSession(store, "s1", "app", "user");
    expect(await store.deleteUserData("app", "user")).toEqual({ sessions: 0, events: 0 });
    expect(await store.cleanup(Date.now() + 1000, { appName: "app", userId: "user" })).toBe(0);
  });
});

describe("NullStore and incarnations", () => {
  it('keeps every session at incarnation "": a call expecting another one is NOT_FOUND', async () => {
    const store: MemoryStore = new NullStore();
    const call = { expectedIncarnation: "another" };
    await expect(store.appendEvents("s1", [newEvent("user_message", "hi")], undefined, call)).rejects.toMatchObject({
      code: "NOT_FOUND",
    });
    await expect(store.readTail("s1", 10, undefined, call)).rejects.toMatchObject({ code: "NOT_FOUND" });
    await expect(store.deleteSession("s1", call)).rejects.toMatchObject({ code: "NOT_FOUND" });
    expect(
      (await store.appendEvents("s1", [newEvent("user_message", "hi")], undefined, { expectedIncarnation: "" })).events,
    ).toHaveLength(1);
  });
});
