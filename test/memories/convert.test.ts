/**
 * Wire memories are written as literals (src/service/memories/convert.ts),
 * not by create(): a field added to Memory, MemoryFact, MemorySource or
 * ScoredMemory would be left out silently. These fill a record completely
 * and check, against the descriptors, that every field comes out set and
 * that the literal is a message protobuf-es encodes and decodes as its own.
 */
import {
  create,
  equals,
  fromBinary,
  fromJsonString,
  isFieldSet,
  toBinary,
  toJsonString,
  type DescMessage,
  type Message,
} from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { MemorySchema, ScoredMemorySchema } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { toWireMemory, toWireScored } from "../../src/service/memories/convert.js";
import type { MemoryRecord } from "../../src/store/types.js";

/** A record with every field set to something other than its default. */
const FULL: MemoryRecord = {
  memoryId: "m-1",
  appName: "app",
  userId: "u",
  agentId: "a",
  sessionId: "s",
  text: "prefers tea ✓",
  fact: { subject: "user", predicate: "prefers", object: "tea" },
  key: "drink",
  topics: ["drinks", "food"],
  importance: 0.5,
  pinned: true,
  metadata: { origin: "test", nested: { n: 1 } },
  source: { sessionId: "s0", fromSeq: 3, toSeq: 9 },
  createdAt: 1_700_000_000_123,
  validFrom: 1_700_000_000_456,
  invalidAt: 1_700_000_999_789,
  supersededBy: "m-2",
  embedding: [0.25, -1, 0.5],
  fingerprint: "f",
};

/** Every field of the message and of the messages it holds (those of its own file) is set. */
function expectEveryFieldSet(desc: DescMessage, message: Message, path = desc.typeName): void {
  const keys = Object.keys(message).filter((k) => k !== "$typeName");
  expect(keys.sort(), `${path}: its keys are its fields`).toEqual(desc.fields.map((f) => f.localName).sort());
  for (const field of desc.fields) {
    expect(isFieldSet(message, field), `${path}.${field.name} is set`).toBe(true);
    const value = (message as Record<string, unknown>)[field.localName];
    if (field.fieldKind === "message" && field.message.file === desc.file)
      expectEveryFieldSet(field.message, value as Message, `${path}.${field.name}`);
  }
}

/** The literal round-trips through protobuf-es' binary and JSON forms unchanged, and equals what create() makes of it. */
function expectWellFormed(desc: DescMessage, message: Message): void {
  expect(equals(desc, create(desc, message as never), message)).toBe(true);
  expect(equals(desc, fromBinary(desc, toBinary(desc, message)), message)).toBe(true);
  expect(equals(desc, fromJsonString(desc, toJsonString(desc, message)), message)).toBe(true);
}

describe("wire memories written as literals", () => {
  it("carry every field of Memory and of the messages in it", () => {
    const wire = toWireMemory(FULL);
    expectEveryFieldSet(MemorySchema, wire);
    expectWellFormed(MemorySchema, wire);
    expect(wire.createdAt).toEqual(
      create(MemorySchema, { createdAt: { seconds: 1_700_000_000n, nanos: 123_000_000 } }).createdAt,
    );
    expect(wire.source?.toSeq).toBe(9n);
  });

  it("carry every field of ScoredMemory", () => {
    const wire = toWireScored({ memory: FULL, score: 0.9, lexicalScore: 0.8, vectorScore: 0.7 }, true);
    expectEveryFieldSet(ScoredMemorySchema, wire);
    expectWellFormed(ScoredMemorySchema, wire);
  });

  it("leave out what a record lacks, as create() does", () => {
    const bare: MemoryRecord = {
      memoryId: "m",
      appName: "app",
      text: "t",
      key: "",
      topics: [],
      importance: 0,
      pinned: false,
      metadata: {},
      createdAt: -1_500,
      validFrom: 0,
      fingerprint: "",
    };
    const wire = toWireMemory(bare);
    expectWellFormed(MemorySchema, wire);
    for (const name of ["userId", "agentId", "sessionId", "fact", "source", "invalidAt"] as const) {
      expect(isFieldSet(wire, MemorySchema.field[name]), name).toBe(false);
    }
    // Before the epoch: seconds floored, nanos non-negative, as timestampFromMs gives them.
    expect(wire.createdAt).toMatchObject({ seconds: -2n, nanos: 500_000_000 });
    expect(toWireMemory(FULL, false).embedding).toEqual([]);
  });
});
