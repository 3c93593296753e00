/**
 * An OpenAI-compatible chat completions endpoint (POST /v1/chat/completions)
 * on 127.0.0.1 whose answers are SCRIPTED by the test: no model runs here.
 * It exercises the plumbing of fact extraction (request shape, parsing,
 * failures), not the quality of any model's extraction.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** What the endpoint does with one request: the assistant message's content, or a fault. */
export type ScriptedAnswer = { content: string } | { status: number } | "hang";

/** A running scripted endpoint. */
export interface ScriptedChatServer {
  /** Base URL for MEMORY_EXTRACTION_URL (…/v1). */
  url: string;
  /** The user message (the transcript) of every request so far, in arrival order. */
  transcripts: string[];
  /** The authorization header of every request (undefined when absent). */
  authorizations: Array<string | undefined>;
  /** The request bodies as parsed JSON. */
  bodies: Array<Record<string, unknown>>;
  stop(): Promise<void>;
}

/** Starts the endpoint; `script` picks the answer from the request's user message (and may take its time: a promise). */
export async function startScriptedChatServer(
  script: (transcript: string) => ScriptedAnswer | Promise<ScriptedAnswer>,
): Promise<ScriptedChatServer> {
  const transcripts: string[] = [];
  const bodies: Array<Record<string, unknown>> = [];
  const authorizations: Array<string | undefined> = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let raw = "";
    req.on("data", (chunk) => (raw += chunk));
    req.on("end", async () => {
      if (req.method !== "POST" || req.url !== "/v1/chat/completions") {
        res
          .writeHead(404, { "content-type": "application/json" })
          .end(JSON.stringify({ error: { message: "no such path" } }));
        return;
      }
      const body = JSON.parse(raw) as { messages?: Array<{ role: string; content: string }> };
      bodies.push(body as Record<string, unknown>);
      authorizations.push(req.headers.authorization);
      const transcript = body.messages?.find((m) => m.role === "user")?.content ?? "";
      transcripts.push(transcript);
      const answer = await script(transcript);
      if (answer === "hang") return; // held open until stop()
      if ("status" in answer) {
        res
          .writeHead(answer.status, { "content-type": "application/json" })
          .end(JSON.stringify({ error: { message: "scripted failure" } }));
        return;
      }
      res.writeHead(200, { "content-type": "application/json" }).end(
        JSON.stringify({
          id: `chatcmpl-${transcripts.length}`,
          object: "chat.completion",
          created: Math.floor(Date.now() / 1000),
          model: "scripted",
          choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: answer.content } }],
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    transcripts,
    authorizations,
    bodies,
    stop: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
