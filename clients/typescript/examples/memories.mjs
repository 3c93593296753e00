import { createMemoryClient } from "@engram-memory/client";

const memory = createMemoryClient({ baseUrl: "http://127.0.0.1:8000" });
const app = "readme-memories";
// Alice's drink, then a newer one under the same key: the first stops holding (it is kept, not deleted).
await memory.writeMemories([{ memoryId: "drink-1", appName: app, userId: "alice", key: "drink", text: "Alice drinks coffee" }]);
const { superseded } = await memory.writeMemories([
  { memoryId: "drink-2", appName: app, userId: "alice", key: "drink", text: "Alice switched to green tea", topics: ["drinks"] },
]);
console.log("superseded", superseded.map((m) => m.memoryId));
await memory.writeMemories([{ memoryId: "hours", appName: app, text: "The shop opens at nine", pinned: true }]);

// What alice may recall: hers and the app-wide memories, best first.
for (const r of await memory.searchMemories({ appName: app, userId: "alice", query: "what does alice drink", topK: 5 })) {
  console.log("found", r.memory.memoryId, r.memory.text);
}
// Every version of her memories, newest first, page by page.
for await (const m of memory.listMemories({ appName: app, userId: "alice", includeInvalid: true })) {
  console.log("listed", m.memoryId, m.invalidAt ? "until " + m.invalidAt.toISOString() : "holds");
}

// Everything her agent should know in a session, within 1000 tokens.
const { sessionId } = await memory.getOrCreateSession("readme-memories-chat", app, "alice");
await memory.addEvent(sessionId, "user_message", "Can I order a drink?");
const recall = await memory.recall(sessionId, { query: "order a drink", tokenBudget: 1000 });
console.log(recall.text);
console.log("tokens", recall.tokensUsed, "of 1000");

console.log("forgot", await memory.deleteMemories({ appName: app, userId: "alice" }));
memory.close();
