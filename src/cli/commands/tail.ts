/**
 * `engram tail <id>`: the newest events of a session, then every new one as it
 * is appended, like `tail -f`. A lost connection (a server restart, a
 * network cut) is reported on stderr and resumed after the last seq printed:
 * nothing is skipped or printed twice.
 */
import { Command } from "commander";
import type { MemoryEvent } from "@engram-memory/client";
import { connect, withConnectionOptions, type ConnectionOptions } from "../connection.js";
import { eventJson, iso, oneLine, positiveInt, printJson } from "../output.js";
import { collect } from "./events.js";

interface TailOptions extends ConnectionOptions {
  lines: number;
  type: string[];
  retries?: number;
}

function printEvent(e: MemoryEvent, json: boolean | undefined): void {
  if (json) printJson(eventJson(e), true);
  else process.stdout.write(`#${e.seq}  ${iso(e.timestamp)}  ${e.eventType}  ${oneLine(e.content, 200)}\n`);
}

/** Registers the subcommand. */
export function register(program: Command): void {
  withConnectionOptions(
    program
      .command("tail")
      .description("print a session's newest events, then follow new ones live (JSON lines with --json)")
      .argument("<session-id>", "the session")
      .option("-n, --lines <n>", "newest events to print first", positiveInt("--lines"), 10)
      .option("--type <event-type>", "only this event type (repeatable)", collect, [])
      .option(
        "--retries <n>",
        "consecutive failed reconnections before giving up (default: never give up)",
        positiveInt("--retries"),
      ),
  ).action(async (sessionId: string, opts: TailOptions) => {
    const memory = await connect(opts, {
      reconnect: { maxRetries: opts.retries ?? Number.MAX_SAFE_INTEGER, maxBackoffMs: 2000 },
    });
    const stop = new AbortController();
    const onSignal = () => stop.abort();
    process.once("SIGINT", onSignal);
    process.once("SIGTERM", onSignal);
    try {
      // The backlog and the head seq come from one read, so following starts exactly after it.
      let after: bigint;
      if (opts.lines > 0) {
        const res = await memory.rpc.getSessionEvents(
          { sessionId, eventTypes: opts.type, tail: opts.lines },
          { timeoutMs: opts.timeout },
        );
        const { eventFromPb } = await import("../wire.js");
        for (const e of res.events) printEvent(eventFromPb(e), opts.json);
        after = res.headSeq;
      } else {
        after = BigInt((await memory.getSession(sessionId, { timeoutMs: opts.timeout })).headSeq);
      }
      const events = memory.streamSessionEvents(sessionId, {
        afterSeq: after,
        eventTypes: opts.type,
        signal: stop.signal,
        onReconnect: (err, attempt) => {
          process.stderr.write(
            `engram: connection lost (${err.rawMessage || err.message}); reconnecting (attempt ${attempt})\n`,
          );
        },
      });
      for await (const e of events) printEvent(e, opts.json);
    } finally {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      memory.close();
    }
  });
}
