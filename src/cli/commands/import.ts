/**
 * `engram import <file>`: loads a JSON Lines export (see ../jsonl.ts) into a
 * server of any store type. Sessions are created when absent; events keep
 * their event_id and timestamp, so importing the same file again adds
 * nothing. A bad line or a refused session is reported and skipped; the exit
 * status is 1 when any was.
 */
import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";
import { Command } from "commander";
import type { EventInput } from "@engram-memory/client";
import { connect, withConnectionOptions, type ConnectionOptions } from "../connection.js";
import { LineError, parseSessionLine, toEventInput } from "../jsonl.js";
import { Progress, positiveInt, printJson } from "../output.js";

interface ImportOptions extends ConnectionOptions {
  batchSize: number;
  quiet?: boolean;
}

/** Request bytes per AddEvents call, well under the server's default 8 MiB message limit. */
const MAX_BATCH_BYTES = 2 * 1024 * 1024;

/** Splits events into AddEvents batches bounded by count and by JSON size. */
export function batches(events: EventInput[], maxCount: number, maxBytes = MAX_BATCH_BYTES): EventInput[][] {
  const out: EventInput[][] = [];
  let current: EventInput[] = [];
  let bytes = 0;
  for (const e of events) {
    const size = Buffer.byteLength(JSON.stringify(e));
    if (current.length > 0 && (current.length >= maxCount || bytes + size > maxBytes)) {
      out.push(current);
      current = [];
      bytes = 0;
    }
    current.push(e);
    bytes += size;
  }
  if (current.length > 0) out.push(current);
  return out;
}

/** Registers the subcommand. */
export function register(program: Command): void {
  withConnectionOptions(
    program
      .command("import")
      .description("load a JSON Lines export into the server (idempotent: event ids are kept)")
      .argument("<file>", "the export file, or - for stdin")
      .option(
        "--batch-size <n>",
        "events per AddEvents call (at most the server's MEMORY_MAX_BATCH_EVENTS)",
        positiveInt("--batch-size", 1),
        100,
      )
      .option("-q, --quiet", "no progress on stderr"),
  ).action(async (file: string, opts: ImportOptions) => {
    const memory = await connect(opts);
    const progress = new Progress(!opts.quiet);
    const input = file === "-" ? process.stdin : createReadStream(file);
    const totals = { sessions: 0, created_sessions: 0, events: 0, new_events: 0, failed_lines: 0 };
    const failures: string[] = [];
    try {
      const lines = createInterface({ input, crlfDelay: Infinity });
      let lineNo = 0;
      for await (const text of lines) {
        lineNo++;
        if (text.trim() === "") continue;
        let sessionId = "";
        try {
          const line = parseSessionLine(text, lineNo);
          sessionId = line.session_id;
          const { created, session } = await memory.getOrCreateSession(
            line.session_id,
            line.app_name,
            line.user_id,
            line.metadata,
          );
          if (!created && (session.appName !== line.app_name || session.userId !== line.user_id)) {
            process.stderr.write(
              `engram: line ${lineNo}: session ${line.session_id} exists with app ${session.appName}, user ${session.userId}; adding its events there\n`,
            );
          }
          const headBefore = session.headSeq;
          let fresh = 0;
          for (const batch of batches(line.events.map(toEventInput), opts.batchSize)) {
            const stored = await memory.addEvents(line.session_id, batch);
            // Events already there come back as their stored originals, with their old seqs.
            fresh += stored.filter((e) => e.seq > headBefore).length;
          }
          totals.sessions++;
          if (created) totals.created_sessions++;
          totals.events += line.events.length;
          totals.new_events += fresh;
        } catch (err) {
          totals.failed_lines++;
          const why =
            err instanceof LineError ? err.message : `line ${lineNo} (session ${sessionId}): ${describe(err)}`;
          failures.push(why);
          process.stderr.write(`engram: ${why}\n`);
        }
        progress.update(`importing: ${totals.sessions} sessions, ${totals.events} events (${totals.new_events} new)`);
      }
    } finally {
      memory.close();
    }
    progress.done(
      `imported ${totals.sessions} sessions (${totals.created_sessions} created), ${totals.events} events (${totals.new_events} new)` +
        (totals.failed_lines ? `; ${totals.failed_lines} lines failed` : ""),
    );
    if (opts.json) printJson({ ...totals, failures });
    if (totals.failed_lines > 0) process.exitCode = 1;
  });
}

function describe(err: unknown): string {
  // ConnectError's message reads "[code] message".
  return err instanceof Error ? err.message : String(err);
}
