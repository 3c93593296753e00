/**
 * The server workloads: what each one seeds, and the serialized requests the
 * load generator sends. Every backend gets the same data and the same
 * requests, so their rows compare like with like.
 */
import * as grpc from "@grpc/grpc-js";
import { create, toBinary, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import {
  AddEventRequestSchema,
  AddEventsRequestSchema,
  BuildConversationContextRequestSchema,
  GetOrCreateSessionRequestSchema,
  GetSessionEventsRequestSchema,
  EventInputSchema,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { WriteMemoriesRequestSchema } from "@engram-memory/client/gen/engram/v1/memories_pb.js";
import { seededRandom } from "./lib/seeded-random.js";

/** Method path prefix of the memory service. */
export const SERVICE = "/engram.v1.MemoryService/";

/** Content of every appended event: 100 bytes of text. */
export const CONTENT_100B =
  "The quick brown fox jumps over the lazy dog while the agent remembers every single word it heard. ok";

/** Sizes of the data sets; the tiny profile (the harness test) shrinks them. */
export interface SeedSizes {
  /** Events in the sessions read by GetSessionEvents (last 20 of each). */
  readSessions: number[];
  /** Sessions paged through by ListSessions (and hit by GetOrCreateSession). */
  listSessions: number;
  /** Events in the session BuildConversationContext assembles from. */
  contextEvents: number;
}

/** One workload: the method, its requests, and how the load generator uses them. */
export interface Workload {
  /** Row name, e.g. "GetSessionEvents tail 20 of 1k". */
  name: string;
  method: string;
  requests: string[];
  cycle?: boolean;
  paging?: { appName: string; pageSize: number };
  /** A point of this workload lasts at least this long (calls slower than the profile's points). */
  minDurationMs?: number;
}

function encode<Desc extends DescMessage>(schema: Desc, init: MessageInitShape<Desc>): Buffer {
  return Buffer.from(toBinary(schema, create(schema, init)));
}

const b64 = (b: Buffer) => b.toString("base64");

/** Serialized AddEvent request of the benchmark's shape (100-byte user message, server-generated id). */
export function addEventRequest(sessionId: string): Buffer {
  return encode(AddEventRequestSchema, {
    sessionId,
    event: { eventType: "user_message", content: { kind: { case: "stringValue", value: CONTENT_100B } } },
  });
}

/** A conversation-shaped event for position i: user, tool call, tool result, answer. */
function conversationEvent(i: number): MessageInitShape<typeof EventInputSchema> {
  const text = (value: string) => ({ kind: { case: "stringValue" as const, value } });
  const callId = `call-${Math.floor(i / 4)}`;
  const struct = (fields: Record<string, string>) => ({
    kind: {
      case: "structValue" as const,
      value: { fields: Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, text(v)])) },
    },
  });
  switch (i % 4) {
    case 0:
      return { eventType: "user_message", content: text(CONTENT_100B) };
    case 1:
      return {
        eventType: "tool_call",
        content: struct({ tool: "search", arguments: '{"q":"fox"}', tool_call_id: callId }),
      };
    case 2:
      return {
        eventType: "tool_result",
        content: struct({ tool: "search", result: CONTENT_100B, tool_call_id: callId }),
      };
    default:
      return { eventType: "agent_response", content: text(CONTENT_100B) };
  }
}

/** A unary client sending serialized requests (seeding only; not the measured path). */
export class SeedClient {
  private readonly client: grpc.Client;

  constructor(address: string) {
    this.client = new grpc.Client(address, grpc.credentials.createInsecure(), {
      "grpc.max_receive_message_length": 64 * 1024 * 1024,
    });
  }

  /** One call; rejects with the gRPC error. */
  call(method: string, request: Buffer): Promise<Buffer> {
    const id = (b: Buffer) => b;
    return new Promise((resolve, reject) =>
      this.client.makeUnaryRequest(SERVICE + method, id, id, request, (err, res) =>
        err ? reject(err) : resolve(res!),
      ),
    );
  }

  /** Runs calls with bounded parallelism. */
  async all(method: string, requests: Buffer[], parallel = 32): Promise<void> {
    let next = 0;
    await Promise.all(
      Array.from({ length: parallel }, async () => {
        while (next < requests.length) await this.call(method, requests[next++]);
      }),
    );
  }

  close(): void {
    this.client.close();
  }
}

/** Session id of the AddEvent worker i. */
export const appendSessionId = (i: number) => `bench-append-${i}`;
/** Session id of the read session holding n events. */
export const readSessionId = (n: number) => `bench-read-${n}`;
/** Id of listed session i. */
export const listSessionId = (i: number) => `bench-list-${String(i).padStart(6, "0")}`;
/** app_name of the listed sessions. */
export const LIST_APP = "bench-list";

/** Creates the sessions and events every workload needs. */
export async function seed(address: string, sizes: SeedSizes, maxConcurrency: number): Promise<void> {
  const client = new SeedClient(address);
  try {
    const session = (sessionId: string, appName = "bench") =>
      encode(GetOrCreateSessionRequestSchema, { sessionId, appName, userId: "bench" });
    await client.all("GetOrCreateSession", [
      ...Array.from({ length: maxConcurrency }, (_, i) => session(appendSessionId(i))),
      ...sizes.readSessions.map((n) => session(readSessionId(n))),
      session("bench-context"),
    ]);
    const fill = async (sessionId: string, count: number) => {
      for (let done = 0; done < count; done += 500) {
        const events = Array.from({ length: Math.min(500, count - done) }, (_, i) => conversationEvent(done + i));
        await client.call("AddEvents", encode(AddEventsRequestSchema, { sessionId, events }));
      }
    };
    await Promise.all([
      ...sizes.readSessions.map((n) => fill(readSessionId(n), n)),
      fill("bench-context", sizes.contextEvents),
    ]);
    await client.all(
      "GetOrCreateSession",
      Array.from({ length: sizes.listSessions }, (_, i) => session(listSessionId(i), LIST_APP)),
      64,
    );
  } finally {
    client.close();
  }
}

/** The app the WriteMemories workloads write into. */
export const WRITE_APP = "bench-writes";
/** Memories per WriteMemories call: the server's largest batch. */
const WRITE_BATCH = 100;
/** Dimensions of the embedded workload's vectors: all-MiniLM-L6-v2's. */
const WRITE_DIMENSIONS = 384;

/**
 * One writer's WriteMemories request: 100 memories of its own user, ids
 * chosen by the server (so the same bytes write new memories every call).
 * `facts`: each memory a fact whose subject and predicate (its supersession
 * key) repeat every call, so each call closes the 100 its previous one wrote.
 */
function writeMemoriesRequest(writer: number, kind: "plain" | "facts" | "embedded"): Buffer {
  const random = seededRandom(writer + 1);
  return encode(WriteMemoriesRequestSchema, {
    memories: Array.from({ length: WRITE_BATCH }, (_, i) => ({
      appName: WRITE_APP,
      userId: `writer-${writer}`,
      text: `${CONTENT_100B} (${writer}.${i})`,
      importance: (i % 10) / 10,
      ...(kind === "facts" ? { fact: { subject: `item ${i}`, predicate: "is kept in", object: `box ${writer}` } } : {}),
      ...(kind === "embedded" ? { embedding: Array.from({ length: WRITE_DIMENSIONS }, () => random() - 0.5) } : {}),
    })),
  });
}

/** The workloads run against every backend (after seed()). */
export function serverWorkloads(sizes: SeedSizes, maxConcurrency: number): Workload[] {
  const label = (n: number) => (n >= 1000 ? `${n / 1000}k` : String(n));
  return [
    {
      name: "AddEvent",
      method: SERVICE + "AddEvent",
      requests: Array.from({ length: maxConcurrency }, (_, i) => b64(addEventRequest(appendSessionId(i)))),
    },
    ...sizes.readSessions.map((n) => ({
      name: `GetSessionEvents last 20 of ${label(n)}`,
      method: SERVICE + "GetSessionEvents",
      requests: [b64(encode(GetSessionEventsRequestSchema, { sessionId: readSessionId(n), tail: 20 }))],
    })),
    {
      name: "BuildConversationContext (20 events)",
      method: SERVICE + "BuildConversationContext",
      requests: [b64(encode(BuildConversationContextRequestSchema, { sessionId: "bench-context", maxEvents: 20 }))],
    },
    {
      name: "GetOrCreateSession (existing)",
      method: SERVICE + "GetOrCreateSession",
      cycle: true,
      requests: Array.from({ length: Math.min(sizes.listSessions, 1000) }, (_, i) =>
        b64(
          encode(GetOrCreateSessionRequestSchema, {
            sessionId: listSessionId(i * Math.max(1, Math.floor(sizes.listSessions / 1000))),
            appName: LIST_APP,
            userId: "bench",
          }),
        ),
      ),
    },
    {
      name: `ListSessions page of 100 (paging ${label(sizes.listSessions)})`,
      method: SERVICE + "ListSessions",
      requests: [],
      paging: { appName: LIST_APP, pageSize: 100 },
    },
    // One app, one user per writer (worker i sends request i): writers that share nothing but the app.
    {
      name: "WriteMemories 100 (one user per writer)",
      method: SERVICE + "WriteMemories",
      requests: Array.from({ length: maxConcurrency }, (_, i) => b64(writeMemoriesRequest(i, "plain"))),
    },
    {
      name: "WriteMemories 100 with 384-d embeddings",
      method: SERVICE + "WriteMemories",
      // 100 HNSW inserts per call on PostgreSQL: seconds a call at c=16 on this box.
      minDurationMs: 20_000,
      requests: Array.from({ length: maxConcurrency }, (_, i) => b64(writeMemoriesRequest(i, "embedded"))),
    },
    {
      name: "WriteMemories 100 facts superseding",
      method: SERVICE + "WriteMemories",
      requests: Array.from({ length: maxConcurrency }, (_, i) => b64(writeMemoriesRequest(i, "facts"))),
    },
  ];
}

/** Sends a workload's first request once (unmeasured), so one-time loading stays out of the figures. */
export async function prime(address: string, workload: Workload): Promise<void> {
  if (workload.requests.length === 0) return;
  const client = new SeedClient(address);
  try {
    await client.call(workload.method.slice(SERVICE.length), Buffer.from(workload.requests[0], "base64"));
  } finally {
    client.close();
  }
}
