/**
 * The gRPC path decodes the append requests and encodes events by hand
 * (src/server/fastpath/request-decoding.ts, src/server/fastpath/event-encoding.ts), and the
 * Redis store keeps events in a format of its own (src/store/redis/codec.ts).
 * A field added to the proto would be dropped there silently. These tests
 * fill every field the descriptors list, so a new field is filled too, and
 * fail when the hand-written code does not carry it.
 */
import { Redis } from "ioredis";
import {
  create,
  fromBinary,
  fromJson,
  fromJsonString,
  isFieldSet,
  ScalarType,
  toBinary,
  toJsonString,
  type DescField,
  type DescMessage,
  type JsonObject,
} from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AddEventRequestSchema,
  AddEventsRequestSchema,
  EventInputSchema,
  EventSchema,
  file_engram_v1_memory,
  type Event,
} from "@engram-memory/client/gen/engram/v1/memory_pb.js";
import { encodeEvent } from "../../src/server/fastpath/event-encoding.js";
import { eventJson, jsonResponseEncoder } from "../../src/server/fastpath/event-json.js";
import { JSON_WRITE_OPTIONS } from "../../src/server/status.js";
import { JSON_READ_OPTIONS } from "../../src/server/parse-request.js";
import { FAST_REQUEST_DECODERS } from "../../src/server/fastpath/request-decoding.js";
import { FAST_JSON_REQUEST_DECODERS } from "../../src/server/fastpath/json-request-decoding.js";
import { RedisStore } from "../../src/store/redis.js";
import { LocalStore } from "../../src/store/local.js";
import { storeLimits } from "../../src/store/index.js";
import { loadConfig } from "../../src/config.js";
import type { MemoryStore } from "../../src/store/types.js";
import { grpcJsClient, type MemoryClient } from "../support/clients.js";
import { startTestServer, type TestServer } from "../support/engram.js";
import { sid } from "../rpc/suite.js";

/** A JSON value with every kind a google.protobuf.Value has, nested once. */
const EVERY_JSON_KIND: JsonObject = {
  text: "t",
  number: 1.5,
  bool: true,
  nothing: null,
  list: [1, "a", false],
  object: { k: "v" },
};

/** Values the service validates, by field name; every other field gets its type's non-default filler. */
type Overrides = Record<string, unknown>;

/** A non-default value for one field, by its descriptor. */
function fillField(field: DescField, overrides: Overrides, depth: number): unknown {
  if (field.localName in overrides) return overrides[field.localName];
  switch (field.fieldKind) {
    case "scalar":
      return scalarFiller(field.scalar, field.name);
    case "enum":
      return field.enum.values[field.enum.values.length - 1].number;
    case "message":
      return messageFiller(field.message, overrides, depth + 1);
    case "list": {
      const item = () =>
        field.listKind === "scalar"
          ? scalarFiller(field.scalar, field.name)
          : field.listKind === "enum"
            ? field.enum.values[field.enum.values.length - 1].number
            : messageFiller(field.message, overrides, depth + 1);
      return [item(), item()];
    }
    case "map":
      return {
        [String(scalarFiller(field.mapKey, "key"))]:
          field.mapKind === "scalar"
            ? scalarFiller(field.scalar, field.name)
            : field.mapKind === "enum"
              ? field.enum.values[field.enum.values.length - 1].number
              : messageFiller(field.message, overrides, depth + 1),
      };
  }
}

function scalarFiller(type: ScalarType, name: string): unknown {
  switch (type) {
    case ScalarType.STRING:
      return `${name}-filled`;
    case ScalarType.BYTES:
      return new Uint8Array([1, 2, 3]);
    case ScalarType.BOOL:
      return true;
    case ScalarType.DOUBLE:
    case ScalarType.FLOAT:
      return 1.5;
    case ScalarType.INT64:
    case ScalarType.UINT64:
    case ScalarType.SINT64:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return 7n;
    default:
      return 7;
  }
}

/** The init of a message with every field set (one member per oneof: the first). */
function messageFiller(desc: DescMessage, overrides: Overrides, depth = 0): unknown {
  switch (desc.typeName) {
    case "google.protobuf.Value":
      return fromJson(ValueSchema, EVERY_JSON_KIND);
    case "google.protobuf.Struct":
      // protobuf-es represents a Struct field as a JsonObject.
      return EVERY_JSON_KIND;
    case "google.protobuf.Timestamp":
      return { seconds: 1_700_000_000n, nanos: 123_000_000 };
  }
  if (depth > 8) throw new Error(`${desc.typeName}: too deep to fill`);
  const init: Record<string, unknown> = {};
  for (const field of desc.fields) {
    if (field.oneof) continue;
    init[field.localName] = fillField(field, overrides, depth);
  }
  for (const oneof of desc.oneofs) {
    const member = oneof.fields[0];
    init[oneof.localName] = { case: member.localName, value: fillField(member, overrides, depth) };
  }
  return init;
}

/** A message of `desc` with every field set. */
function filled<T extends DescMessage>(desc: T, overrides: Overrides = {}) {
  return create(desc, messageFiller(desc, overrides) as never);
}

/** The paths of fields not set in `message`, through nested messages (well-known types count as leaves). */
function unsetFields(desc: DescMessage, message: Record<string, unknown>, path = desc.name): string[] {
  const missing: string[] = [];
  for (const field of desc.fields) {
    if (field.oneof && (message[field.oneof.localName] as { case?: string })?.case !== field.localName) continue;
    if (!isFieldSet(message as never, field)) {
      missing.push(`${path}.${field.name}`);
      continue;
    }
    if (field.fieldKind === "message" && !field.message.typeName.startsWith("google.protobuf.")) {
      missing.push(
        ...unsetFields(field.message, message[field.localName] as Record<string, unknown>, `${path}.${field.name}`),
      );
    }
    if (
      field.fieldKind === "list" &&
      field.listKind === "message" &&
      !field.message.typeName.startsWith("google.protobuf.")
    ) {
      (message[field.localName] as Record<string, unknown>[]).forEach((item, i) =>
        missing.push(...unsetFields(field.message, item, `${path}.${field.name}[${i}]`)),
      );
    }
  }
  return missing;
}

/** The request messages the gRPC path decodes by hand, found through the proto's own descriptors. */
const handDecoded = Object.keys(FAST_REQUEST_DECODERS).map((typeName) => {
  const desc = file_engram_v1_memory.messages.find((m) => m.typeName === typeName);
  if (!desc) throw new Error(`${typeName} has a hand-written decoder but no descriptor in memory.proto`);
  return desc;
});

/** Every message with an Event field: the Connect JSON encoder writes those fields by hand (src/server/fastpath/event-json.ts). */
const carriesEvents = file_engram_v1_memory.messages.filter((m) =>
  m.fields.some((f) => f.message?.typeName === EventSchema.typeName),
);

describe("the hand-written codec, against the proto's descriptors", () => {
  it("the filler sets every field, so a field the codec drops shows", () => {
    for (const desc of [...handDecoded, EventSchema, EventInputSchema])
      expect(unsetFields(desc, filled(desc))).toEqual([]);
    expect(handDecoded.map((d) => d.typeName).sort()).toEqual([
      AddEventRequestSchema.typeName,
      AddEventsRequestSchema.typeName,
    ]);
  });

  it.each(handDecoded.map((d) => [d.typeName, d] as const))(
    "decodes every field of %s on the fast path, as fromBinary does",
    (_name, desc) => {
      const bytes = toBinary(desc, filled(desc));
      const decoded = FAST_REQUEST_DECODERS[desc.typeName](bytes);
      // undefined would mean the fast path declined a well-formed request, leaving the field to reflection.
      expect(decoded, `the fast decoder declined a filled ${desc.typeName}`).toBeDefined();
      expect(unsetFields(desc, decoded as Record<string, unknown>)).toEqual([]);
      expect(decoded).toStrictEqual(fromBinary(desc, bytes));
    },
  );

  it("the JSON fast path decodes the same requests as the binary one", () => {
    expect(Object.keys(FAST_JSON_REQUEST_DECODERS).sort()).toEqual(handDecoded.map((d) => d.typeName).sort());
  });

  it.each(handDecoded.map((d) => [d.typeName, d] as const))(
    "decodes every field of %s from Connect JSON on the fast path but the timestamp, which it declines",
    (_name, desc) => {
      // The JSON fast path leaves an event's timestamp (RFC 3339 text) to reflection: a filled request is declined whole...
      const withTimestamp = toJsonString(desc, filled(desc), JSON_WRITE_OPTIONS);
      expect(FAST_JSON_REQUEST_DECODERS[desc.typeName](withTimestamp)).toBeUndefined();
      // ...and one with every other field is decoded, each field carried.
      const message = filled(desc) as Record<string, unknown>;
      for (const event of [message.event, ...((message.events as unknown[]) ?? [])])
        if (event) delete (event as { timestamp?: unknown }).timestamp;
      const body = toJsonString(desc, message as never, JSON_WRITE_OPTIONS);
      const decoded = FAST_JSON_REQUEST_DECODERS[desc.typeName](body);
      expect(decoded, `the fast JSON decoder declined a filled ${desc.typeName}`).toBeDefined();
      expect(
        unsetFields(desc, decoded as Record<string, unknown>).filter((path) => !path.endsWith(".timestamp")),
      ).toEqual([]);
      expect(decoded).toStrictEqual(fromJsonString(desc, body, JSON_READ_OPTIONS));
    },
  );

  it("encodes every field of Event", () => {
    const event = filled(EventSchema);
    const decoded = fromBinary(EventSchema, encodeEvent(event));
    expect(unsetFields(EventSchema, decoded)).toEqual([]);
    expect(decoded).toEqual(event);
  });

  it("writes every field of Event as Connect JSON, as toJsonString does", () => {
    const event = filled(EventSchema);
    expect(eventJson(event)).toBe(toJsonString(EventSchema, event, JSON_WRITE_OPTIONS));
    expect(Object.keys(JSON.parse(eventJson(event)) as object).sort()).toEqual(
      EventSchema.fields.map((f) => f.name).sort(),
    );
  });

  it.each(carriesEvents.map((d) => [d.typeName, d] as const))(
    "writes every field of %s as Connect JSON, as toJsonString does",
    (_name, desc) => {
      const message = filled(desc);
      expect(Buffer.from(jsonResponseEncoder(desc)(message)).toString()).toBe(
        toJsonString(desc, message, JSON_WRITE_OPTIONS),
      );
    },
  );
});

/** An EventInput with every field set, with the values the service accepts where it validates. */
const eventInput = (eventId: string) =>
  messageFiller(EventInputSchema, { eventId, eventType: "user_message", stateRemovals: ["gone", "user:gone"] });

/** Each field an EventInput and an Event share must come back as it was sent. */
function expectCarried(event: Event, input: Record<string, unknown>, sessionId: string): void {
  expect(unsetFields(EventSchema, event)).toEqual([]);
  const sent = create(EventInputSchema, input as never) as unknown as Record<string, unknown>;
  for (const field of EventInputSchema.fields) {
    expect(
      EventSchema.fields.some((f) => f.localName === field.localName),
      `EventInput.${field.name} has no field in Event to come back in`,
    ).toBe(true);
    expect((event as unknown as Record<string, unknown>)[field.localName], `EventInput.${field.name}`).toEqual(
      sent[field.localName],
    );
  }
  expect(event.sessionId).toBe(sessionId);
}

const redisPrefix = `codec${process.pid}`;
afterAll(async () => {
  const admin = new Redis(process.env.MEMORY_TEST_REDIS_URL!);
  const keys = await admin.keys(`${redisPrefix}:*`);
  if (keys.length > 0) await admin.del(...keys);
  await admin.quit();
});

describe.each([
  ["local", async () => new LocalStore(storeLimits(loadConfig([], {})))],
  [
    "redis",
    async () =>
      RedisStore.open({
        url: process.env.MEMORY_TEST_REDIS_URL!,
        keyPrefix: redisPrefix,
        limits: storeLimits(loadConfig([], {})),
      }),
  ],
] as const)("every field, end to end over gRPC (%s store)", (_name, open) => {
  let server: TestServer;
  let client: MemoryClient;
  beforeAll(async () => {
    const store: MemoryStore = await open();
    server = await startTestServer({ store });
    client = grpcJsClient(server.address);
  });
  afterAll(async () => {
    client?.close();
    await server?.stop();
  });

  it("AddEvent and GetSessionEvents carry every field of the event", async () => {
    const sessionId = sid("codec");
    await client.createSession({ appName: "app", userId: "u", sessionId });
    const input = eventInput(`${sessionId}-e1`) as Record<string, unknown>;
    const request = messageFiller(AddEventRequestSchema, { sessionId, expectedSeq: 0n, event: input });
    const { event } = await client.addEvent(request as never);
    expectCarried(event!, input, sessionId);
    const { events } = await client.getSessionEvents({ sessionId, tail: 20 });
    expect(events).toEqual([event]);
  });

  it("AddEvents carries every field of each event", async () => {
    const sessionId = sid("codec");
    await client.createSession({ appName: "app", userId: "u", sessionId });
    const inputs = [eventInput(`${sessionId}-a`), eventInput(`${sessionId}-b`)] as Record<string, unknown>[];
    const request = messageFiller(AddEventsRequestSchema, { sessionId, expectedSeq: 0n, events: inputs });
    const { events } = await client.addEvents(request as never);
    expect(events).toHaveLength(2);
    events.forEach((event, i) => expectCarried(event, inputs[i], sessionId));
    expect((await client.getSessionEvents({ sessionId, tail: 20 })).events).toEqual(events);
  });
});
