/**
 * What both entry points export (index.ts for Node.js, web.ts for browsers and
 * edge runtimes): the client class, errors, types and generated messages.
 * Nothing here touches a platform API; the transports are the entry points' own.
 */
export { MemoryClient } from "./client.js";
export type {
  AddEventOptions,
  CleanupOptions,
  MemoryClientOptions,
  ReconnectOptions,
  StreamOptions,
  WatchOptions,
} from "./client.js";
export type { ClosableTransport, Protocol, TransportFactory, TransportOptions } from "./protocol.js";
export {
  Code,
  ConnectError,
  CURRENT_SEQ_TRAILER,
  CURRENT_VERSION_TRAILER,
  LAST_SEQ_TRAILER,
  codeOf,
  currentSeqOf,
  currentVersionOf,
  errorDetailsOf,
  fieldOf,
  lastSeqOf,
  reasonOf,
  retryDelayMsOf,
} from "./errors.js";
export type { ErrorDetails, FieldViolation } from "./errors.js";
export type {
  CallOptions,
  ChatMessage,
  ContentPart,
  ContextOptions,
  ContextSection,
  ConversationContext,
  EventHit,
  EventInput,
  EventSearch,
  JsonObject,
  JsonValue,
  MemoriesWritten,
  Memory,
  MemoryChange,
  MemoryDeletion,
  MemoryEvent,
  MemoryFact,
  MemoryFilter,
  MemoryInput,
  MemoryListing,
  MemoryPage,
  MemoryScope,
  MemorySearch,
  MemorySource,
  MemoryStats,
  Recall,
  RecallOptions,
  ScopeMatch,
  ScoredMemory,
  Session,
  SessionUpdate,
  UserDataErased,
} from "./types.js";
/** The generated protobuf-es messages and the MemoryService descriptor. */
export * as pb from "./gen/engram/v1/memory_pb.js";
/** The generated long-term memory messages (memories.proto). */
export * as pbMemories from "./gen/engram/v1/memories_pb.js";
