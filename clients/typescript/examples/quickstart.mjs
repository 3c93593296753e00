import { createMemoryClient } from "@engram-memory/client";

const memory = createMemoryClient({ baseUrl: "http://127.0.0.1:8000", protocol: "grpc" });
const { sessionId } = await memory.getOrCreateSession("readme-demo", "demo", "alice");
await memory.addEvent(sessionId, "user_message", "What is the weather in Paris?");
await memory.addEvent(sessionId, "agent_response", { text: "It is 18°C and sunny in Paris." });
for (const e of await memory.getSessionEvents(sessionId)) console.log(e.seq, e.eventType, e.content);
const { text, messages } = await memory.buildConversationContext(sessionId, 10);
console.log(text, messages);
memory.close();
