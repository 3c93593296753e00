/** Long-term memory records -> wire messages. */
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { MemoryFactSchema, MemorySchema, MemorySourceSchema, ScoredMemorySchema, type Memory, type ScoredMemory } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import type { MemoryRecord } from "../../store/types.js";
import type { FusedMemory } from "./ranking.js";

/** Store record -> wire Memory. */
export function toWireMemory(m: MemoryRecord): Memory {
  return create(MemorySchema, {
    memoryId: m.memoryId,
    appName: m.appName,
    userId: m.userId,
    agentId: m.agentId,
    sessionId: m.sessionId,
    text: m.text,
    fact: m.fact ? create(MemoryFactSchema, m.fact) : undefined,
    key: m.key,
    topics: m.topics,
    importance: m.importance,
    pinned: m.pinned,
    metadata: m.metadata,
    source: m.source ? create(MemorySourceSchema, { sessionId: m.source.sessionId, fromSeq: BigInt(m.source.fromSeq), toSeq: BigInt(m.source.toSeq) }) : undefined,
    createdAt: timestampFromMs(m.createdAt),
    validFrom: timestampFromMs(m.validFrom),
    invalidAt: m.invalidAt === undefined ? undefined : timestampFromMs(m.invalidAt),
    supersededBy: m.supersededBy ?? "",
    embedding: m.embedding ?? [],
  });
}

/** The record without its embedding, as Recall answers by default (its answer is for a prompt). */
export function withoutEmbedding(m: MemoryRecord): MemoryRecord {
  return m.embedding === undefined ? m : { ...m, embedding: undefined };
}

/** A ranked memory -> wire ScoredMemory. */
export function toWireScored(r: FusedMemory): ScoredMemory {
  return create(ScoredMemorySchema, { memory: toWireMemory(r.memory), score: r.score, lexicalScore: r.lexicalScore, vectorScore: r.vectorScore });
}
