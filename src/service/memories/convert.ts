/** Long-term memory records -> wire messages. */
import { create } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import { MemoryFactSchema, MemorySchema, MemorySourceSchema, ScoredMemorySchema, type Memory, type ScoredMemory } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import type { MemoryRecord } from "../../store/types.js";
import type { FusedMemory } from "./ranking.js";

/** Store record -> wire Memory; without its embedding unless `withEmbedding` (the reads that default to leaving it out). */
export function toWireMemory(m: MemoryRecord, withEmbedding = true): Memory {
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
    embedding: withEmbedding ? (m.embedding ?? []) : [],
  });
}

/** A ranked memory -> wire ScoredMemory; its memory without the embedding unless `withEmbedding`. */
export function toWireScored(r: FusedMemory, withEmbedding: boolean): ScoredMemory {
  return create(ScoredMemorySchema, { memory: toWireMemory(r.memory, withEmbedding), score: r.score, lexicalScore: r.lexicalScore, vectorScore: r.vectorScore });
}
