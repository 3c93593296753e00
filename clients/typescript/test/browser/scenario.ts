/**
 * What the browser test runs inside Chromium, bundled by esbuild for the
 * browser platform: it imports the package by name, as an application would,
 * so the package's "browser" export condition decides which entry it gets.
 * Sets `globalThis.engramScenario`, which drives a real server and returns
 * what it saw.
 */
import { Code, ConnectError, createMemoryClient, type Protocol } from "@engram-memory/client";

/** What one run of the scenario saw, for the test to check. */
export interface ScenarioResult {
  replayed: string[];
  live: string[];
  contextText: string;
  grpcRefusal: string;
  afterClose: string;
}

async function scenario(baseUrl: string, protocol: Protocol, sessionId: string): Promise<ScenarioResult> {
  const memory = createMemoryClient({ baseUrl, protocol });
  await memory.createSession("browser-app", "alice", sessionId);
  await memory.addEvent(sessionId, "user_message", "What is the weather in Paris?");
  await memory.addEvent(sessionId, "agent_response", "Sunny, 18°C.");

  // Server streaming: replay the two events, then receive one appended live.
  const replayed: string[] = [];
  const live: string[] = [];
  const stop = new AbortController();
  let caughtUp: () => void = () => {};
  const hasCaughtUp = new Promise<void>((resolve) => (caughtUp = resolve));
  const streamed = (async () => {
    for await (const e of memory.streamSessionEvents(sessionId, { signal: stop.signal, onCaughtUp: () => caughtUp() })) {
      (live.length === 0 && replayed.length < 2 ? replayed : live).push(`${e.seq} ${e.eventType} ${String(e.content)}`);
      if (live.length === 1) stop.abort();
    }
  })();
  await hasCaughtUp;
  await memory.addEvent(sessionId, "user_message", "And tomorrow?");
  await streamed;

  const context = await memory.buildConversationContext(sessionId, 10);

  let grpcRefusal = "";
  try {
    createMemoryClient({ baseUrl, protocol: "grpc" });
  } catch (err) {
    grpcRefusal = String(err);
  }

  memory.close();
  let afterClose = "";
  try {
    await memory.getSession(sessionId);
  } catch (err) {
    afterClose = err instanceof ConnectError ? Code[err.code] : String(err);
  }
  return { replayed, live, contextText: context.text, grpcRefusal, afterClose };
}

(globalThis as { engramScenario?: typeof scenario }).engramScenario = scenario;
