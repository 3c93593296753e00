/**
 * MCP at /mcp over real HTTP with the official Python client (the `mcp`
 * package, pinned in test/support/mcp-requirements.txt, installed into a
 * cached venv under .tmp): test/mcp/python_client.py drives the tools and the
 * transcript resource with two users' keys and none, and reports what it saw.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, expect, it } from "vitest";
import { generateApiKey } from "../../src/auth/api-keys.js";
import { FileKeyStore } from "../../src/auth/file-key-store.js";
import { REPO_ROOT, startTestServer, type TestServer } from "../support/engram.js";
import { venvPython } from "../support/python-venv.js";
import { sid } from "../rpc/suite.js";

let dir: string;
let server: TestServer;
let python: string;
const keys: Record<string, string> = {};
const APP = `mcp-py-${process.pid}`;
/**
 * How long the Python client may take: about 10 s on an idle 2-core box, most
 * of it importing the mcp package; several times that under a load of 10-22.
 */
const PYTHON_CLIENT_MS = 240_000;

beforeAll(async () => {
  // A first run installs the client's Python environment (about 20 s; see test/support/python-venv.sh).
  python = await venvPython("mcp");
  dir = mkdtempSync(path.join(tmpdir(), "engram-mcp-py-"));
  const keyFile = new FileKeyStore(path.join(dir, "keys.json"));
  for (const user of ["alice", "bob"]) {
    const { key, record } = generateApiKey({ role: "write", apps: [APP], userId: user });
    await keyFile.create(record);
    keys[user] = key;
  }
  server = await startTestServer({ config: { auth: true, authKeysFile: keyFile.path } });
}, 600_000);

afterAll(async () => {
  await server?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

it(
  "keeps sessions, memories and transcripts for the Python client, holds each key to its user, and names the field of a bad argument",
  async () => {
    const session = sid("py");
    const { stdout } = await promisify(execFile)(python, [path.join(REPO_ROOT, "test", "mcp", "python_client.py")], {
      cwd: REPO_ROOT,
      // Bounded below the test's own timeout, so a stuck client fails with its stderr rather than a bare timeout.
      timeout: PYTHON_CLIENT_MS,
      maxBuffer: 1 << 22,
      env: {
        ...process.env,
        ENGRAM_MCP_URL: `${server.baseUrl}/mcp`,
        ENGRAM_APP: APP,
        ENGRAM_SESSION: session,
        ENGRAM_KEY_ALICE: keys.alice,
        ENGRAM_KEY_BOB: keys.bob,
      },
    });
    const seen = JSON.parse(stdout);

    expect(seen.tools).toEqual([
      "append_events",
      "build_context",
      "create_session",
      "forget",
      "get_session",
      "get_state",
      "list_events",
      "list_sessions",
      "read_events",
      "recall",
      "remember",
      "search_memories",
      "update_session",
    ]);
    // Alice's key is bound to her app and user: both are filled in.
    expect(seen.created.session).toMatchObject({
      session_id: session,
      app_name: APP,
      user_id: "alice",
      metadata: { via: "python" },
    });
    expect(seen.appended_seqs).toEqual(["1", "2"]);
    expect(seen.state).toEqual({ session_id: session, state: { "user:milk": "oat" }, version: "1" });
    expect(seen.read_contents).toEqual(["I only drink oat milk.", "Oat milk it is."]);
    expect(seen.context_roles).toEqual(["user", "assistant"]);
    expect(seen.remembered_user).toBe("alice");
    expect(seen.recall_text).toContain("Alice drinks oat milk.");
    expect(seen.found_texts).toEqual(["Alice drinks oat milk."]);
    expect(seen.transcript).toBe(
      `session ${session} (app ${APP}, user alice): 2 events, head seq 2\n[seq 1] user_message: "I only drink oat milk."\n[seq 2] agent_response: "Oat milk it is."\n`,
    );
    expect(seen.listed_uris).toEqual([`engram://sessions/${session}/transcript`]);

    expect(seen.bad_input.missing_session_id).toEqual({
      is_error: true,
      text: expect.stringMatching(/expected string, received undefined at session_id/),
    });
    expect(seen.bad_input.limit_not_a_number).toEqual({ is_error: true, text: expect.stringMatching(/at limit/) });
    expect(seen.bad_input.bad_event_type).toEqual({
      is_error: true,
      text: expect.stringMatching(/^invalid_argument: events\[0\]\.event_type/),
    });
    expect(seen.bad_input.stale_expected_seq).toEqual({
      is_error: true,
      text: expect.stringMatching(/^failed_precondition: expected_seq: expected 99 but the session's current seq is 2/),
    });
    expect(seen.still_serving_head_seq).toBe("2");

    // Bob's key, same app, other user: Alice's session does not exist for him, nor do her memories.
    expect(seen.bob_read).toEqual({
      is_error: true,
      text: `not_found: session_id: session ${JSON.stringify(session)} not found`,
    });
    expect(seen.bob_transcript).toMatchObject({ code: -32002, message: expect.stringContaining("not_found") });
    expect(seen.bob_found).toEqual([]);

    // No key: refused before any MCP message.
    // (The client's "auto" mode may try twice: a discovery request, then the classic handshake.)
    expect(seen.unauthenticated.connected).toBe(false);
    expect(seen.unauthenticated.statuses.length).toBeGreaterThan(0);
    expect(new Set(seen.unauthenticated.statuses)).toEqual(new Set([401]));
  },
  PYTHON_CLIENT_MS + 60_000,
);
