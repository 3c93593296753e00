/**
 * `engram export`: sessions with their events as JSON Lines (see ../jsonl.ts),
 * to a file or stdout, with progress on stderr.
 */
import { createWriteStream } from "node:fs";
import { once } from "node:events";
import type { Writable } from "node:stream";
import { Command } from "commander";
import type { MemoryClient, MemoryEvent, Session } from "@engram-memory/client";
import { connect, pagesFrom, withConnectionOptions, type ConnectionOptions } from "../connection.js";
import { toSessionLine } from "../jsonl.js";
import { Progress, printJson } from "../output.js";
import { collect } from "./events.js";

interface ExportOptions extends ConnectionOptions {
  app?: string;
  user?: string;
  session: string[];
  output?: string;
  quiet?: boolean;
}

const PAGE_SIZE = 200;

/** The sessions to export, page by page (or the named ones). */
async function* sessionsToExport(memory: MemoryClient, opts: ExportOptions): AsyncGenerator<Session> {
  if (opts.session.length > 0) {
    for (const id of opts.session) yield await memory.getSession(id);
    return;
  }
  const { sessionFromPb } = await import("../wire.js");
  const filter = { appName: opts.app, userId: opts.user, pageSize: PAGE_SIZE };
  for await (const page of pagesFrom("", true, (pageToken) => memory.rpc.listSessions({ ...filter, pageToken }))) {
    for (const s of page.sessions) yield sessionFromPb(s);
  }
}

/**
 * Every retained event of a session; undefined when the session went away
 * meanwhile. Appends that evict events while we page make the cursor fall
 * behind (OUT_OF_RANGE): read again from the start, a bounded number of times.
 */
async function readEvents(memory: MemoryClient, sessionId: string): Promise<MemoryEvent[] | undefined> {
  const { Code, ConnectError } = await import("@engram-memory/client");
  for (let attempt = 1; ; attempt++) {
    try {
      return await memory.getSessionEvents(sessionId);
    } catch (err) {
      const code = ConnectError.from(err).code;
      if (code === Code.NotFound) return undefined;
      if (code !== Code.OutOfRange || attempt >= 3) throw err;
    }
  }
}

async function write(out: Writable, text: string): Promise<void> {
  if (!out.write(text)) await once(out, "drain");
}

/** Registers the subcommand. */
export function register(program: Command): void {
  withConnectionOptions(
    program
      .command("export")
      .description("write sessions and their events as JSON Lines (one KAOS session dict per line)")
      .option("-o, --output <file>", "write to this file instead of stdout")
      .option("--app <name>", "only sessions of this app_name")
      .option("--user <id>", "only sessions of this user_id")
      .option("--session <id>", "only this session (repeatable)", collect, [])
      .option("-q, --quiet", "no progress on stderr"),
  ).action(async (opts: ExportOptions) => {
    const memory = await connect(opts);
    const out: Writable = opts.output ? createWriteStream(opts.output) : process.stdout;
    const progress = new Progress(!opts.quiet);
    let sessions = 0;
    let events = 0;
    try {
      const total = opts.session.length || (await memory.getMemoryStats()).totalSessions;
      const of = opts.app || opts.user ? "" : `/${total}`;
      for await (const session of sessionsToExport(memory, opts)) {
        const list = await readEvents(memory, session.sessionId);
        if (list === undefined) {
          process.stderr.write(`engram: session ${session.sessionId} was deleted during the export; skipped\n`);
          continue;
        }
        await write(out, `${JSON.stringify(toSessionLine(session, list))}\n`);
        sessions++;
        events += list.length;
        progress.update(`exporting: ${sessions}${of} sessions, ${events} events`);
      }
      progress.done(`exported ${sessions} sessions, ${events} events${opts.output ? ` to ${opts.output}` : ""}`);
    } finally {
      memory.close();
      if (opts.output) {
        out.end();
        await once(out, "close");
      }
    }
    if (opts.json && opts.output) printJson({ sessions, events, output: opts.output });
  });
}
