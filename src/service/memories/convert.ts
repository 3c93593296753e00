/**
 * Long-term memory records -> wire messages, written as literals: what
 * create() builds for them, without its reflection (create() took ~2-3 µs a
 * Memory against ~0.15 µs for the literal; a Recall answers up to a hundred
 * pinned memories and its relevant ones). A test fills every field the
 * descriptors list and fails when one is not carried here
 * (test/memories/convert.test.ts).
 */
import { protoInt64 } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { Memory, ScoredMemory } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import type { MemoryRecord } from "../../store/types.js";
import type { FusedMemory } from "./ranking.js";

/** timestampFromMs, as a literal. */
function timestamp(ms: number): Timestamp {
  const seconds = Math.floor(ms / 1000);
  return {
    $typeName: "google.protobuf.Timestamp",
    seconds: protoInt64.parse(seconds),
    nanos: (ms - seconds * 1000) * 1_000_000,
  };
}

/** Store record -> wire Memory; without its embedding unless `withEmbedding` (the reads that default to leaving it out). */
export function toWireMemory(m: MemoryRecord, withEmbedding = true): Memory {
  return {
    $typeName: "engram.v1.Memory",
    memoryId: m.memoryId,
    appName: m.appName,
    userId: m.userId,
    agentId: m.agentId,
    sessionId: m.sessionId,
    text: m.text,
    fact: m.fact
      ? {
          $typeName: "engram.v1.MemoryFact",
          subject: m.fact.subject,
          predicate: m.fact.predicate,
          object: m.fact.object,
        }
      : undefined,
    key: m.key,
    topics: m.topics,
    importance: m.importance,
    pinned: m.pinned,
    metadata: m.metadata,
    source: m.source
      ? {
          $typeName: "engram.v1.MemorySource",
          sessionId: m.source.sessionId,
          fromSeq: protoInt64.parse(m.source.fromSeq),
          toSeq: protoInt64.parse(m.source.toSeq),
        }
      : undefined,
    createdAt: timestamp(m.createdAt),
    validFrom: timestamp(m.validFrom),
    invalidAt: m.invalidAt === undefined ? undefined : timestamp(m.invalidAt),
    supersededBy: m.supersededBy ?? "",
    embedding: withEmbedding ? (m.embedding ?? []) : [],
  };
}

/** A ranked memory -> wire ScoredMemory; its memory without the embedding unless `withEmbedding`. */
export function toWireScored(r: FusedMemory, withEmbedding: boolean): ScoredMemory {
  return {
    $typeName: "engram.v1.ScoredMemory",
    memory: toWireMemory(r.memory, withEmbedding),
    score: r.score,
    lexicalScore: r.lexicalScore,
    vectorScore: r.vectorScore,
  };
}
