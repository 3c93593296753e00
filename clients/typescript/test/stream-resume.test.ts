/**
 * streamSessionEvents survives a lost connection: after the server goes away
 * (graceful shutdown ending streams UNAVAILABLE, or a killed process) and a new
 * one listens on the same port, the iterator reconnects and resumes after the
 * last seq it yielded: no gap, no duplicate. Every wait is bounded.
 */
import { readFileSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { spawnServer, startTestServer, type ServerProcess, type TestServer } from "../../../test/support/engram.js";
import { Code, ConnectError, createMemoryClient, lastSeqOf, type MemoryClient, type MemoryEvent, type Protocol } from "../src/index.js";

const FAST_RECONNECT = { initialBackoffMs: 25, maxBackoffMs: 250, maxRetries: 40 };

/** Iterates a stream in the background, collecting events until `count` have arrived. */
function collect(stream: AsyncIterable<MemoryEvent>, count: number) {
  const seqs: number[] = [];
  const done = (async () => {
    for await (const e of stream) {
      seqs.push(e.seq);
      if (seqs.length >= count) break;
    }
  })();
  done.catch(() => {}); // awaited by the test; never an unhandled rejection meanwhile
  return { seqs, done };
}

async function until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Stops a spawned server: SIGTERM (graceful) or an abrupt SIGKILL of the node process under tsx. */
async function stopProcess(proc: ServerProcess | undefined, how: "SIGTERM" | "SIGKILL"): Promise<void> {
  if (!proc || proc.child.exitCode !== null || proc.child.signalCode !== null) return;
  // `tsx` runs the server in a child node process and forwards SIGTERM to it, but a
  // SIGKILL of the wrapper would orphan the server: kill the grandchild instead.
  let pids: number[] = [];
  if (how === "SIGKILL") {
    try {
      const pid = proc.child.pid!;
      pids = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
    } catch {
      pids = [];
    }
  }
  if (pids.length > 0) for (const pid of pids) process.kill(pid, "SIGKILL");
  else proc.child.kill("SIGTERM");
  const timeout = new Promise((r) => setTimeout(r, 15_000));
  await Promise.race([proc.exited, timeout]);
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

describe.each<[Protocol]>([["grpc"], ["connect"]])("stream resume over %s", (protocol) => {
  it("resumes after a graceful shutdown and restart on the same port (store kept)", async () => {
    const first: TestServer = await startTestServer();
    let second: TestServer | undefined;
    cleanups.push(() => first.stop(), () => second?.stop());
    const client: MemoryClient = createMemoryClient({ baseUrl: first.baseUrl, protocol, reconnect: FAST_RECONNECT });
    const writer: MemoryClient = createMemoryClient({ baseUrl: first.baseUrl, protocol: "connect" });
    cleanups.push(() => client.close(), () => writer.close());

    const sid = await writer.createSession("app", "u", `resume-${protocol}`);
    await writer.addEvents(sid, range(1, 3).map((i) => ({ eventType: "user_message", content: i })));
    const reconnects: Code[] = [];
    const lastSeqs: Array<number | undefined> = [];
    const onReconnect = (err: ConnectError) => {
      reconnects.push(err.code);
      lastSeqs.push(lastSeqOf(err));
    };
    const { seqs, done } = collect(client.streamSessionEvents(sid, { onReconnect }), 12);
    await until(() => seqs.length === 3, "the replay");
    await writer.addEvent(sid, "agent_response", 4);
    await writer.addEvent(sid, "agent_response", 5);
    await until(() => seqs.length === 5, "live events");

    // Graceful stop: the stream ends UNAVAILABLE. The store (and its data) lives on.
    await first.server.close();
    // While nothing listens, appends go straight into the store.
    const { store } = first;
    second = await startTestServer({ store, config: { port: first.port } });
    expect(second.port).toBe(first.port);
    await writer.addEvents(sid, range(6, 9).map((i) => ({ eventType: "user_message", content: i })));
    await until(() => seqs.length >= 9, "the resumed stream");
    await writer.addEvents(sid, range(10, 12).map((i) => ({ eventType: "user_message", content: i })));
    await done;

    expect(seqs).toEqual(range(1, 12));
    expect(reconnects.length).toBeGreaterThanOrEqual(1);
    expect(reconnects[0]).toBe(Code.Unavailable);
    expect(lastSeqs[0]).toBe(5); // the server's engram-last-seq trailer
  });

  it("a memory watch resumes after a restart from the last change it saw: changes made while it was away are replayed, none twice", async () => {
    const first: TestServer = await startTestServer();
    let second: TestServer | undefined;
    cleanups.push(() => first.stop(), () => second?.stop());
    const client: MemoryClient = createMemoryClient({ baseUrl: first.baseUrl, protocol, reconnect: FAST_RECONNECT });
    const writer: MemoryClient = createMemoryClient({ baseUrl: first.baseUrl, protocol: "connect" });
    cleanups.push(() => client.close(), () => writer.close());
    const appName = `watch-resume-${protocol}`;
    const write = (memoryId: string) => writer.writeMemories([{ memoryId, appName, text: memoryId }]);

    const seen: string[] = [];
    const cursors: number[] = [];
    const abort = new AbortController();
    const watching = (async () => {
      const onReconnect = async () => {
        if (second) return;
        // Reconnect only once a new server holds changes this watch has not seen.
        second = await startTestServer({ store: first.store, config: { port: first.port } });
        await write("m3");
        await write("m4");
      };
      for await (const change of client.watchMemories({ appName }, { signal: abort.signal, onReconnect })) {
        seen.push(change.type === "written" ? change.memory.memoryId : change.type);
        cursors.push(change.cursor);
        if (seen.length === 6) abort.abort();
      }
    })();
    watching.catch(() => {});
    await until(() => seen.length === 1, "started");
    await write("m1");
    await write("m2");
    await until(() => seen.length === 3, "live changes");
    // Graceful stop: the watch ends UNAVAILABLE; the store lives on.
    await first.server.close();
    await until(() => seen.length === 5, "the replayed changes", 20_000);
    await write("m5");
    await watching;
    expect(seen).toEqual(["started", "m1", "m2", "m3", "m4", "m5"]);
    expect(cursors).toEqual([0, 1, 2, 3, 4, 5]);
  });

  it("resumes after the server process is killed and a new one starts on the same port", async () => {
    const a: ServerProcess = await spawnServer({ MEMORY_SHUTDOWN_GRACE_MS: "500" });
    let b: ServerProcess | undefined;
    cleanups.push(() => stopProcess(a, "SIGTERM"), () => stopProcess(b, "SIGTERM"));
    const client = createMemoryClient({ baseUrl: a.baseUrl, protocol, reconnect: FAST_RECONNECT });
    const writer = createMemoryClient({ baseUrl: a.baseUrl, protocol: "connect" });
    cleanups.push(() => client.close(), () => writer.close());

    const sid = `killed-${protocol}`;
    const events = (from: number, to: number) => range(from, to).map((i) => ({ eventType: "user_message", content: i, eventId: `e${i}` }));
    await writer.createSession("app", "u", sid);
    await writer.addEvents(sid, events(1, 3));
    // The restarted server starts empty: hold reconnections until the log is rebuilt there
    // (otherwise the stream could see NOT_FOUND, a real error, in between).
    let rebuilt!: () => void;
    const gate = new Promise<void>((resolve) => (rebuilt = resolve));
    const reconnects: Code[] = [];
    const stream = client.streamSessionEvents(sid, {
      onReconnect: async (err) => {
        reconnects.push(err.code);
        await gate;
      },
    });
    const { seqs, done } = collect(stream, 8);
    await until(() => seqs.length === 3, "the replay");

    // SIGKILL for gRPC (an abrupt cut, no status), SIGTERM for Connect (UNAVAILABLE with a trailer).
    await stopProcess(a, protocol === "grpc" ? "SIGKILL" : "SIGTERM");
    b = await spawnServer({}, ["--port", String(a.port)]);
    expect(b.port).toBe(a.port);
    // The local store is in memory: rebuild the log past the last seq seen.
    await writer.createSession("app", "u", sid);
    await writer.addEvents(sid, events(1, 6));
    rebuilt();
    await until(() => seqs.length === 6, "the resumed stream");
    await writer.addEvents(sid, events(7, 8));
    await done;

    expect(seqs).toEqual(range(1, 8));
    expect(reconnects.length).toBeGreaterThanOrEqual(1);
  });
});

describe("stream reconnection limits", () => {
  it("gives up after maxRetries with UNAVAILABLE", async () => {
    // A port that was just free: nothing listens there.
    const s = await startTestServer();
    const url = s.baseUrl;
    await s.stop();
    for (const protocol of ["grpc", "connect"] as const) {
      const client = createMemoryClient({ baseUrl: url, protocol, retries: 1, reconnect: { initialBackoffMs: 10, maxBackoffMs: 20, maxRetries: 2 } });
      try {
        const attempts: number[] = [];
        let error: unknown;
        try {
          for await (const _ of client.streamSessionEvents("any", { onReconnect: (_e, n) => void attempts.push(n) })) void _;
        } catch (err) {
          error = err;
        }
        expect(error).toBeInstanceOf(ConnectError);
        expect((error as ConnectError).code).toBe(Code.Unavailable);
        expect(attempts).toEqual([1, 2]);
        await expect(client.getSession("any")).rejects.toMatchObject({ code: Code.Unavailable });
      } finally {
        client.close();
      }
    }
  });

  it("does not retry errors that a reconnect cannot fix", async () => {
    const s = await startTestServer();
    cleanups.push(() => s.stop());
    const client = createMemoryClient({ baseUrl: s.baseUrl, protocol: "grpc" });
    cleanups.push(() => client.close());
    const attempts: number[] = [];
    const it = client.streamSessionEvents("missing", { onReconnect: (_e, n) => void attempts.push(n) });
    await expect(it.next()).rejects.toMatchObject({ code: Code.NotFound });
    expect(attempts).toEqual([]);
  });
});
